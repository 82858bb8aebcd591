"""Run a command inside a compose service's container (``docker: <service>``).

The compose file (``compose.yaml`` / ``docker-compose.yml``, nearest to the command) is the source
of truth for the service: image, build, mounts, working directory, environment, user, GPUs.
Two backends run it:

- ``compose`` — ``docker compose run --rm <service> bash -c <script>`` when the Compose CLI is
  installed: full fidelity, including interactive shells (``fdl shell``).
- ``sdk`` — the Docker SDK for Python when it is not: fdl reads the service itself (the common
  keys: ``image``, ``build``, ``volumes``, ``working_dir``, ``environment``, ``user``,
  ``shm_size``, ``network_mode``, GPU reservations), builds the image if it is missing, runs the
  container with the project mounted, streams its output, returns its exit code and always
  removes it. Keys it does not understand are named in an error rather than ignored.

``FDL_DOCKER_BACKEND=compose|sdk`` forces one. Containers get ``FDL_CONTAINER=<service>``: an
``fdl`` started inside one runs ``docker:`` commands directly instead of nesting containers (a
``/.dockerenv`` check would misfire in dev containers and Docker-in-Docker).

Semantics follow the Rust original, whose manifests rely on them:

- the script runs in the service's own ``working_dir`` (fdl adds no ``-w``); an ``entry:`` of a
  child manifest is preceded by ``cd <container project root>/<child dir> &&``;
- ``FDL_PROJECT_ROOT`` is the container path of the project root (the bind mount of the
  compose file's directory, ``/workspace`` by convention), so programs can re-anchor paths;
- the script runs under ``bash -c`` — under ``sh -c``, with a note on stderr, when the image has no
  bash;
- the compose process gets the active libtorch's ``LIBTORCH_CPU_PATH``, ``LIBTORCH_HOST_PATH``,
  ``CUDA_VERSION`` and ``CUDA_TAG`` (for ``${...}`` in the compose file).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from rich.markup import escape

from fdl import console
from fdl.errors import ExitCode, FdlError

COMPOSE_NAMES = ("compose.yaml", "compose.yml", "docker-compose.yaml", "docker-compose.yml")
CONTAINER_MARK = "FDL_CONTAINER"
DEFAULT_CONTAINER_ROOT = "/workspace"  # where 'fdl init' compose files mount the project
# bash when the image has it, else sh with a note; the script is "$1" (one argv word, unparsed)
SHELL_PICK = (
    'if command -v bash >/dev/null 2>&1; then exec bash -c "$1"; fi; '
    'echo "fdl: this image has no bash; running the command with sh" >&2; exec sh -c "$1"'
)


def shell_argv(script: str) -> list[str]:
    """The container command for ``script``: ``bash -c script``, falling back to ``sh -c``."""
    return ["sh", "-c", SHELL_PICK, "fdl-shell", script]


SDK_KEYS = {
    "image", "build", "volumes", "working_dir", "environment", "user", "shm_size",
    "network_mode", "deploy", "stdin_open", "tty", "container_name", "command", "env_file",
}  # fmt: skip
_INTERPOLATION = re.compile(r"\$(?:\$|\{(?P<braced>[^}]*)\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))")


@dataclass
class Mount:
    source: Path
    target: str
    read_only: bool = False


@dataclass
class Service:
    """What fdl needs to know about one compose service."""

    name: str
    compose_file: Path
    image: str
    build_context: Path | None = None
    dockerfile: str | None = None
    build_args: dict[str, str] = field(default_factory=dict)
    mounts: list[Mount] = field(default_factory=list)
    working_dir: str | None = None
    environment: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    shm_size: str | None = None
    network_mode: str | None = None
    gpus: bool = False
    unknown_keys: list[str] = field(default_factory=list)  # keys the SDK backend cannot honour

    def container_path(self, host_dir: Path) -> str | None:
        """Where ``host_dir`` appears inside the container (through the deepest bind mount)."""
        host_dir = host_dir.resolve()
        best: tuple[int, str] | None = None
        for mount in self.mounts:
            try:
                relative = host_dir.relative_to(mount.source)
            except ValueError:
                continue
            depth = len(mount.source.parts)
            if best is None or depth > best[0]:
                inside = PurePosixPath(mount.target) / PurePosixPath(*relative.parts)
                best = (depth, str(inside))
        return best[1] if best else None


def in_container() -> bool:
    """True inside a container fdl started (or a compose service that sets ``FDL_CONTAINER``)."""
    return bool(os.environ.get(CONTAINER_MARK))


def find_compose_file(start: Path) -> Path | None:
    for folder in (start.resolve(), *start.resolve().parents):
        for name in COMPOSE_NAMES:
            if (folder / name).is_file():
                return folder / name
    return None


def interpolation_env(compose_dir: Path) -> dict[str, str]:
    """Variables for ``${VAR}`` in the compose file: ``.env`` next to it, then the environment,
    then the active libtorch's variables (:func:`libtorch_env`), each later source winning.

    ``UID`` and ``GID`` are filled in (they are shell variables, rarely exported) so that
    ``user: "${UID:-1000}:${GID:-1000}"`` runs the container as you.
    """
    values: dict[str, str] = {}
    if hasattr(os, "getuid"):
        values |= {"UID": str(os.getuid()), "GID": str(os.getgid())}
    dotenv = compose_dir / ".env"
    if dotenv.is_file():
        for line in dotenv.read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                key, value = line.split("=", 1)
                values[key.strip()] = value.strip().strip("'\"")
    return values | dict(os.environ) | libtorch_env(compose_dir)


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose-style ``$VAR``, ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}``, ``$$``.

    >>> interpolate("${UID:-1000}:${NOPE-7} $$HOME", {"UID": "42"})
    '42:7 $HOME'
    """

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        expr = match.group("braced") if match.group("braced") is not None else match.group("bare")
        for op in (":-", "-"):
            if op in expr:
                name, default = expr.split(op, 1)
                value = env.get(name)
                return default if value is None or (op == ":-" and value == "") else value
        return env.get(expr, "")

    return _INTERPOLATION.sub(replace, text)


def _interpolate_all(value: Any, env: dict[str, str]) -> Any:
    if isinstance(value, str):
        return interpolate(value, env)
    if isinstance(value, list):
        return [_interpolate_all(v, env) for v in value]
    if isinstance(value, dict):
        return {k: _interpolate_all(v, env) for k, v in value.items()}
    return value


def load_service(compose_file: Path, name: str) -> Service:
    """Read service ``name`` from ``compose_file`` (variables interpolated)."""
    from fdl.tasks.source import ManifestError, read_source

    source = read_source(compose_file)
    services = source.data.get("services") if isinstance(source.data, dict) else None
    if not isinstance(services, dict) or name not in services:
        known = ", ".join(services) if isinstance(services, dict) else "(none)"
        raise ManifestError(
            source, ("services",), f"no service '{name}'", f"services defined here: {known}"
        )
    base = compose_file.parent.resolve()
    raw = _interpolate_all(services[name] or {}, interpolation_env(base))
    project = re.sub(r"[^a-z0-9_-]", "", base.name.lower()) or "project"
    service = Service(name, compose_file, raw.get("image") or f"{project}-{name}")
    build = raw.get("build")
    if isinstance(build, str):
        build = {"context": build}
    if isinstance(build, dict):
        service.build_context = (base / str(build.get("context", "."))).resolve()
        service.dockerfile = build.get("dockerfile")
        args = build.get("args") or {}
        if isinstance(args, list):
            args = dict(item.split("=", 1) for item in args if "=" in item)
        service.build_args = {str(k): str(v) for k, v in args.items() if v is not None}
    for volume in raw.get("volumes") or []:
        mount = _mount(volume, base)
        if mount is not None:
            service.mounts.append(mount)
    service.working_dir = raw.get("working_dir")
    environment = raw.get("environment") or {}
    if isinstance(environment, list):
        environment = dict(
            item.split("=", 1) if "=" in item else (item, os.environ.get(item, ""))
            for item in environment
        )
    service.environment = {str(k): "" if v is None else str(v) for k, v in environment.items()}
    service.user = None if raw.get("user") is None else str(raw["user"])
    service.shm_size = None if raw.get("shm_size") is None else str(raw["shm_size"])
    service.network_mode = raw.get("network_mode")
    devices = (((raw.get("deploy") or {}).get("resources") or {}).get("reservations") or {}).get(
        "devices"
    ) or []
    service.gpus = any(
        "gpu" in (d.get("capabilities") or []) for d in devices if isinstance(d, dict)
    )
    service.unknown_keys = sorted(set(raw) - SDK_KEYS)
    return service


def _mount(volume: Any, base: Path) -> Mount | None:
    if isinstance(volume, dict):
        if volume.get("type", "bind") != "bind" or "source" not in volume:
            return None
        source, target, read_only = (
            str(volume["source"]),
            str(volume["target"]),
            bool(volume.get("read_only")),
        )
    else:
        parts = str(volume).split(":")
        if len(parts) < 2:
            return None  # an anonymous volume: nothing of the host is mounted
        source, target = parts[0], parts[1]
        read_only = len(parts) > 2 and "ro" in parts[2].split(",")
    if not source.startswith((".", "/", "~")):
        return None  # a named volume
    return Mount((base / Path(source).expanduser()).resolve(), target.rstrip("/") or "/", read_only)


def choose_backend() -> str:
    """``compose`` when a Compose CLI is installed, else ``sdk`` (``FDL_DOCKER_BACKEND`` forces one)."""
    forced = os.environ.get("FDL_DOCKER_BACKEND", "").strip().lower()
    if forced in ("compose", "sdk"):
        return forced
    if forced:
        raise FdlError(
            f"FDL_DOCKER_BACKEND={forced!r} is not a backend", "use 'compose' or 'sdk', or unset it"
        )
    return "compose" if compose_cli() else "sdk"


def compose_cli() -> list[str] | None:
    """The Compose command line: ``docker compose`` (v2 plugin) or ``docker-compose``."""
    docker = shutil.which("docker")
    if docker:
        probe = subprocess.run(
            [docker, "compose", "version"], capture_output=True, text=True, check=False
        )
        if probe.returncode == 0:
            return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy else None


def container_root(service: Service, project_root: Path) -> str:
    """The container path of the project root (its bind mount), ``/workspace`` when unmounted."""
    return service.container_path(project_root) or DEFAULT_CONTAINER_ROOT


def libtorch_env(project_root: Path) -> dict[str, str]:
    """The active libtorch's variables for the compose process (compose files use them in ``${}``).

    Paths are relative (``./libtorch/...``) when the libtorch home is the project's own, else
    absolute; ``CUDA_VERSION`` is padded to three parts and ``CUDA_TAG`` is its first two.
    """
    from fdl.libtorch_home.layout import find_home, read_arch

    home = find_home(cwd=project_root)
    try:
        shown = "./" + str(home.path.relative_to(project_root.resolve()))
    except ValueError:
        shown = str(home.path)
    env = {"LIBTORCH_CPU_PATH": f"{shown}/precompiled/cpu"}
    active = home.active()
    if active:
        env["LIBTORCH_HOST_PATH"] = f"{shown}/{active}"
        cuda = read_arch(home.variant_dir(active)).get("cuda")
        if cuda and cuda != "none":
            version = cuda if cuda.count(".") >= 2 else f"{cuda}.0"
            env["CUDA_VERSION"] = version
            env["CUDA_TAG"] = ".".join(version.split(".")[:2])
    return env


def run_in_service(
    service_name: str,
    script: str,
    cwd: Path,
    project_root: Path,
    extra_env: dict[str, str] | None = None,
    *,
    enter: Path | None = None,
) -> int:
    """Run ``script`` in ``service_name`` from the service's ``working_dir``.

    ``enter``: a host directory to ``cd`` into first (its container path, under the project
    root's mount), so a child manifest's ``entry:`` runs in its own directory.
    ``FDL_PROJECT_ROOT`` is the container path of ``project_root``.
    """
    compose_file = find_compose_file(cwd)
    if compose_file is None:
        raise FdlError(
            f"'docker: {service_name}' needs a compose file, and none was found at or above {cwd}",
            "add a docker-compose.yml defining the service (fdl init --docker writes one)",
        )
    service = load_service(compose_file, service_name)
    root = container_root(service, project_root)
    if enter is not None:
        try:
            relative = enter.resolve().relative_to(project_root.resolve()).as_posix()
        except ValueError:
            relative = ""
        if relative and relative != ".":
            script = f"cd {root}/{relative} && {script}"
    env = {"FDL_PROJECT_ROOT": root, **(extra_env or {})}
    backend = choose_backend()
    console.detail(escape(f"fdl: [{service_name}] {script}  (backend: {backend})"))
    if backend == "compose":
        return _run_compose(service, script, env)
    return _run_sdk(service, script, service.working_dir, env)


def probe_command(service_name: str, script: str, cwd: Path) -> tuple[list[str], Path]:
    """argv and cwd that run ``script`` once in the service (``--fdl-schema`` probing)."""
    compose_file = find_compose_file(cwd)
    cli = compose_cli()
    if compose_file is None or cli is None:
        return ["sh", "-c", "echo 'no compose file or Compose CLI to probe with' >&2; exit 3"], cwd
    argv = [*cli, "-f", str(compose_file), "run", "--rm", "-T", "-e", f"{CONTAINER_MARK}=probe"]
    return [*argv, service_name, *shell_argv(script)], compose_file.parent


def _run_compose(service: Service, script: str, extra_env: dict[str, str]) -> int:
    cli = compose_cli()
    if cli is None:
        raise FdlError(
            "FDL_DOCKER_BACKEND=compose, but neither 'docker compose' nor 'docker-compose' is installed",
            "install the Docker Compose plugin, or unset FDL_DOCKER_BACKEND to use the Docker SDK",
            ExitCode.UNAVAILABLE,
        )
    require_daemon()
    argv = [*cli, "-f", str(service.compose_file), "run", "--rm"]
    if not sys.stdin.isatty():
        argv.append("-T")
    for key, value in {CONTAINER_MARK: service.name, **extra_env}.items():
        argv += ["-e", f"{key}={value}"]
    argv += [service.name, *shell_argv(script)]
    env = interpolation_env(service.compose_file.parent)
    from fdl.tasks.child import spawn

    return wait_child(spawn(argv, cwd=service.compose_file.parent, env=env))


def wait_child(child: subprocess.Popen[Any]) -> int:
    """Wait for ``child`` (started by ``fdl.tasks.child.spawn``), forwarding fdl's signals to its
    process group; returns its exit code (128 + N when signal N ended it)."""
    from fdl.tasks.child import wait

    return wait(child)


def require_daemon() -> None:
    """Fail with fdl's error (exit 3) when the daemon does not answer, before Compose runs.

    Asked through the docker CLI when there is one, so Docker contexts count as Compose sees
    them; a lone legacy ``docker-compose`` is checked through the SDK.
    """
    from fdl.hardware.tools import run_tool

    docker = shutil.which("docker")
    if docker is None:
        docker_client()
        return
    probe = run_tool([docker, "version", "--format", "{{.Server.Version}}"], timeout=30)
    if probe.ok and probe.stdout.strip():
        return
    said = (probe.stderr.strip() or probe.stdout.strip()).splitlines()
    detail = said[-1] if said else probe.reason or "no server version"
    host = os.environ.get("DOCKER_HOST") or "the current Docker context"
    raise FdlError(
        f"cannot reach the Docker daemon at {host} ({detail[:200]})",
        "start Docker (e.g. 'sudo systemctl start docker') and check 'docker info' works",
        ExitCode.UNAVAILABLE,
    )


def docker_client() -> Any:
    """A connected Docker SDK client, or a clear error when the daemon is not reachable."""
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as err:
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise FdlError(
            f"cannot reach the Docker daemon at {host} ({_short(err)})",
            "start Docker (e.g. 'sudo systemctl start docker') and check 'docker info' works",
            ExitCode.UNAVAILABLE,
        ) from err
    return client


def _short(err: Exception) -> str:
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    return text[:160]


def _run_sdk(service: Service, script: str, workdir: str | None, extra_env: dict[str, str]) -> int:
    if service.unknown_keys:
        raise FdlError(
            f"service '{service.name}' in {service.compose_file.name} uses "
            f"{', '.join(service.unknown_keys)}, "
            "which fdl's built-in Docker runner does not support",
            "install the Docker Compose plugin ('docker compose'), which fdl then uses instead",
            ExitCode.UNAVAILABLE,
        )
    import docker

    client = docker_client()
    if sys.stdin.isatty():
        console.warn(
            "fdl's built-in Docker runner does not forward keyboard input; for an interactive "
            "session install the Docker Compose plugin, which fdl then uses"
        )
    _ensure_image(client, service)
    volumes = {
        str(m.source): {"bind": m.target, "mode": "ro" if m.read_only else "rw"}
        for m in service.mounts
    }
    device_requests = (
        [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])] if service.gpus else None
    )
    container = client.containers.create(
        service.image,
        command=shell_argv(script),
        working_dir=workdir,
        environment={**service.environment, CONTAINER_MARK: service.name, **extra_env},
        user=service.user,
        volumes=volumes,
        device_requests=device_requests,
        shm_size=service.shm_size,
        network_mode=service.network_mode,
        labels={"org.flodl.fdl.service": service.name},
    )
    try:
        stream = container.attach(stdout=True, stderr=True, stream=True, logs=True, demux=True)
        container.start()
        for out, err in stream:
            if out:
                sys.stdout.buffer.write(out)
                sys.stdout.flush()
            if err:
                sys.stderr.buffer.write(err)
                sys.stderr.flush()
        return int(container.wait()["StatusCode"])
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    finally:
        try:
            container.remove(force=True)
        except docker.errors.DockerException as err:
            console.warn(escape(f"could not remove container {container.short_id}: {_short(err)}"))


def _ensure_image(client: Any, service: Service) -> None:
    import docker

    try:
        client.images.get(service.image)
        return
    except docker.errors.ImageNotFound:
        pass
    if service.build_context is None:
        try:
            console.info(escape(f"fdl: pulling {service.image}"))
            client.images.pull(service.image)
            return
        except docker.errors.DockerException as err:
            raise FdlError(
                f"image '{service.image}' of service '{service.name}' is not available ({_short(err)})",
                "build or pull it first, or give the service a 'build:' section",
                ExitCode.UNAVAILABLE,
            ) from err
    console.info(escape(f"fdl: building {service.image} from {service.build_context}"))
    failed = None
    for chunk in client.api.build(
        path=str(service.build_context),
        dockerfile=service.dockerfile,
        buildargs=service.build_args or None,
        tag=service.image,
        rm=True,
        forcerm=True,  # also remove intermediate containers of a failed build
        decode=True,
    ):
        if "stream" in chunk:
            console.detail(escape(chunk["stream"].rstrip()))
        if "error" in chunk:
            failed = chunk["error"].strip()
    if failed:
        raise FdlError(
            f"building image '{service.image}' failed: {failed}",
            "fix the Dockerfile (run with -v to see the build log)",
        )
