"""``docker: <service>`` commands: the compose service model, both backends, a real engine.

Tests marked ``docker`` need a running engine. They skip when none is reachable, unless
``FDL_REQUIRE=all`` (set by CI), which turns the skip into a failure.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import tarfile
import uuid
from pathlib import Path

import pytest

from fdl.errors import FdlError
from fdl.tasks.docker import interpolate, load_service, shell_argv
from tests.conftest import require

IMAGE = "fdl-test/busybox:1"
COMPOSE = """
services:
  dev:
    image: {image}
    volumes:
      - .:/workspace
      - cache:/cache
      - type: bind
        source: ./data
        target: /data/
        read_only: true
    working_dir: /workspace
    environment:
      GREETING: ${{GREETING:-hi}}
      FROM_LIST: x
  gpu:
    build:
      context: ./docker
      dockerfile: Dockerfile.cuda
      args: [TORCH_INDEX=cu128]
    environment: [A=1, B]
    deploy:
      resources:
        reservations:
          devices: [{{driver: nvidia, count: all, capabilities: [gpu]}}]
  odd:
    image: x
    cap_add: [SYS_ADMIN]
"""


def write(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_interpolation():
    env = {"SET": "v", "EMPTY": ""}
    assert (
        interpolate("${SET} $SET ${SET:-d} ${NOPE:-d} ${NOPE-d} ${EMPTY:-d} ${EMPTY-d}|", env)
        == "v v v d d d |"
    )
    assert interpolate("$$SET ${NOPE}", env) == "$SET "


def test_service_model(tmp_path, monkeypatch):
    monkeypatch.setenv("GREETING", "hello")
    write(tmp_path, {"docker-compose.yml": COMPOSE.format(image=IMAGE)})
    dev = load_service(tmp_path / "docker-compose.yml", "dev")
    assert dev.image == IMAGE
    assert [(m.source, m.target, m.read_only) for m in dev.mounts] == [
        (tmp_path.resolve(), "/workspace", False),
        (tmp_path.resolve() / "data", "/data", True),
    ]  # the named volume is not a host mount
    assert dev.environment == {"GREETING": "hello", "FROM_LIST": "x"}
    assert dev.container_path(tmp_path / "src" / "pkg") == "/workspace/src/pkg"
    assert dev.container_path(tmp_path / "data" / "x") == "/data/x"  # the deepest mount wins
    assert dev.container_path(Path("/elsewhere")) is None
    assert not dev.gpus and dev.unknown_keys == []

    gpu = load_service(tmp_path / "docker-compose.yml", "gpu")
    assert gpu.gpus
    assert gpu.build_context == (tmp_path / "docker").resolve()
    assert gpu.dockerfile == "Dockerfile.cuda"
    assert gpu.build_args == {"TORCH_INDEX": "cu128"}
    assert gpu.image == f"{tmp_path.name.lower()}-gpu".replace(".", "")  # compose's default name
    assert gpu.environment["A"] == "1"
    assert load_service(tmp_path / "docker-compose.yml", "odd").unknown_keys == ["cap_add"]


def test_unknown_service_lists_the_known_ones(tmp_path):
    write(tmp_path, {"docker-compose.yml": COMPOSE.format(image=IMAGE)})
    with pytest.raises(FdlError) as info:
        load_service(tmp_path / "docker-compose.yml", "cpu")
    assert "no service 'cpu'" in info.value.what
    assert info.value.hint == "services defined here: dev, gpu, odd"


@pytest.fixture
def docker_project(tmp_path):
    return write(
        tmp_path / "proj",
        {
            "fdl.yml": (
                "commands:\n"
                "  inside:\n"
                '    run: echo "in $FDL_CONTAINER at $(pwd)"; cat marker.txt; touch made-inside; exit 3\n'
                "    docker: dev\n"
                "  args:\n"
                "    run: printf '[%s]'\n"
                "    docker: dev\n"
                "  weird:\n"
                "    run: 'true'\n"
                "    docker: odd\n"
                "  sub:\n"
            ),
            "sub/fdl.yml": "entry: sh -c 'echo entry in $(pwd) \"$@\"' entry\ndocker: dev\n",
            "docker-compose.yml": COMPOSE.format(image=IMAGE),
            "marker.txt": "the project is mounted\n",
            "data/.keep": "",
        },
    )


def test_missing_compose_file_is_a_clear_error(run_fdl, project):
    root = project({"fdl.yml": "commands:\n  t: {run: 'true', docker: dev}\n"})
    result = run_fdl("t", cwd=root)
    assert result.returncode == 1
    assert "'docker: dev' needs a compose file" in result.stderr


def test_unreachable_daemon_is_a_clear_error(run_fdl, docker_project):
    env = {"DOCKER_HOST": "unix:///nonexistent/docker.sock", "FDL_DOCKER_BACKEND": "sdk"}
    result = run_fdl("inside", cwd=docker_project, env=env)
    assert result.returncode == 3, result.stderr
    assert (
        "error: cannot reach the Docker daemon at unix:///nonexistent/docker.sock" in result.stderr
    )
    assert "Traceback" not in result.stderr


def test_inside_a_container_commands_run_directly(run_fdl, docker_project):
    result = run_fdl("inside", cwd=docker_project, env={"FDL_CONTAINER": "dev"})
    assert result.returncode == 3
    assert result.stdout.splitlines()[:2] == [
        f"in dev at {docker_project.resolve()}",
        "the project is mounted",
    ]


def test_sdk_backend_refuses_compose_keys_it_cannot_honour(run_fdl, docker_project):
    result = run_fdl("weird", cwd=docker_project, env={"FDL_DOCKER_BACKEND": "sdk"})
    assert result.returncode == 3
    assert "uses cap_add" in result.stderr and "docker compose" in result.stderr


FAKE_DOCKER = """#!/bin/sh
if [ "$1" = compose ] && [ "$2" = version ]; then echo "Docker Compose version v2.99.0"; exit 0; fi
if [ "$1" = version ]; then echo "28.2.2"; exit 0; fi
for arg in "$@"; do printf '%s\\n' "$arg"; done > "$FAKE_DOCKER_LOG"
exit 5
"""


def fake_docker_env(tmp_path, script: str, log) -> dict[str, str]:
    """PATH with a `docker` that runs ``script`` first, and where it logs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "docker"
    fake.write_text(script)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_DOCKER_LOG": str(log)}


def test_compose_backend_command_line(run_fdl, docker_project, tmp_path):
    log = tmp_path / "argv.txt"
    env = fake_docker_env(tmp_path, FAKE_DOCKER, log)
    result = run_fdl("args", "--", "a b", cwd=docker_project, env=env)
    assert result.returncode == 5  # the compose process's exit code
    argv = log.read_text().splitlines()
    compose_file = str(docker_project.resolve() / "docker-compose.yml")
    assert argv[:6] == ["compose", "-f", compose_file, "run", "--rm", "-T"]
    assert "-w" not in argv  # the script runs in the service's own working_dir
    assert "FDL_CONTAINER=dev" in argv
    assert "FDL_PROJECT_ROOT=/workspace" in argv  # the container path of the project root
    assert argv[-6:] == ["dev", *shell_argv("printf '[%s]' 'a b'")]


FAKE_DOCKER_NO_DAEMON = """#!/bin/sh
if [ "$1" = compose ] && [ "$2" = version ]; then echo "Docker Compose version v2.99.0"; exit 0; fi
if [ "$1" = version ]; then
  echo "Cannot connect to the Docker daemon at unix:///gone.sock. Is the docker daemon running?" >&2
  exit 1
fi
echo "compose ran" > "$FAKE_DOCKER_LOG"
echo "compose's own error output" >&2
exit 14
"""


def test_compose_backend_unreachable_daemon_is_fdls_error(run_fdl, docker_project, tmp_path):
    log = tmp_path / "ran.txt"
    env = fake_docker_env(tmp_path, FAKE_DOCKER_NO_DAEMON, log)
    env["DOCKER_HOST"] = "unix:///gone.sock"
    result = run_fdl("args", cwd=docker_project, env=env)
    assert result.returncode == 3, result.stderr  # fdl's "unavailable", not compose's 14
    assert result.stderr.startswith(
        "error: cannot reach the Docker daemon at unix:///gone.sock (Cannot connect to the Docker"
    )
    assert "compose's own error output" not in result.stderr and not log.exists()


# --- a real engine ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine():
    """A reachable Docker engine with the small test image, or a skip (a failure in CI)."""
    try:
        import docker

        client = docker.from_env()
        client.ping()
    except Exception as err:
        require("docker", f"no Docker engine is reachable ({type(err).__name__}: {err})")
    try:
        client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        busybox = shutil.which("busybox")
        if busybox is None:
            require("docker", "busybox (busybox-static) is needed to build the test image")
        client.api.import_image_from_data(
            _busybox_rootfs(Path(busybox)), repository=IMAGE.split(":")[0], tag="1"
        )
    return client


def _busybox_rootfs(busybox: Path) -> bytes:
    """A minimal root filesystem: a static busybox and its applet links (no registry needed)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for folder in ("bin", "tmp", "workspace"):
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if folder == "tmp" else 0o755
            tar.addfile(info)
        tar.add(busybox.resolve(), "bin/busybox")
        for applet in ("sh", "echo", "cat", "touch", "pwd", "printf", "true", "ls", "env", "id"):
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
    return buffer.getvalue()


def _leftover_containers(client, project: Path) -> list:
    """fdl's containers still there that mount ``project``: this test's own (a docker test on
    another xdist worker may have one running at the same moment)."""
    ours = client.containers.list(all=True, filters={"label": "org.flodl.fdl.service"})
    return [
        c
        for c in ours
        if any(str(m.get("Source", "")).startswith(str(project)) for m in c.attrs["Mounts"])
    ]


@pytest.mark.docker
def test_run_command_in_a_real_container(run_fdl, engine, docker_project):
    result = run_fdl("inside", cwd=docker_project, env={"FDL_DOCKER_BACKEND": "sdk"})
    assert result.returncode == 3, result.stderr  # the container's exit code
    assert result.stdout.splitlines() == ["in dev at /workspace", "the project is mounted"]
    assert (docker_project / "made-inside").exists()  # written through the mount
    assert _leftover_containers(engine, docker_project) == []


@pytest.mark.docker
def test_arguments_and_entries_in_a_real_container(run_fdl, engine, docker_project):
    args = run_fdl(
        "args", "--", "a b", "$HOME", cwd=docker_project, env={"FDL_DOCKER_BACKEND": "sdk"}
    )
    assert args.returncode == 0, args.stderr
    assert args.stdout == "[a b][$HOME]"
    entry = run_fdl("sub", "--x", cwd=docker_project, env={"FDL_DOCKER_BACKEND": "sdk"})
    assert entry.returncode == 0, entry.stderr
    assert entry.stdout == "entry in /workspace/sub --x\n"
    assert "fdl: [dev] sh -c" in entry.stderr


@pytest.mark.docker
def test_missing_image_is_built_from_the_service_build_section(run_fdl, engine, tmp_path):
    tag = f"fdl-test/built-{uuid.uuid4().hex[:8]}"
    root = write(
        tmp_path / "built",
        {
            "fdl.yml": "commands:\n  t: {run: 'ls /built-marker && echo built', docker: app}\n",
            "docker-compose.yml": f"services:\n  app:\n    build: .\n    image: {tag}\n    volumes: ['.:/w']\n",
            "Dockerfile": f"FROM {IMAGE}\nRUN touch /built-marker\n",
        },
    )
    try:
        result = run_fdl("t", cwd=root, env={"FDL_DOCKER_BACKEND": "sdk"})
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == ["/built-marker", "built"]
        assert f"fdl: building {tag}" in result.stderr
        broken = root / "Dockerfile"
        broken.write_text(f"FROM {IMAGE}\nRUN exit 9\n")
        engine.images.remove(tag, force=True)
        failed = run_fdl("t", cwd=root, env={"FDL_DOCKER_BACKEND": "sdk"})
        assert failed.returncode == 1
        assert f"building image '{tag}' failed" in failed.stderr
        assert engine.containers.list(all=True, filters={"ancestor": IMAGE}) == []  # no debris
    finally:
        for image in engine.images.list(name=tag):
            engine.images.remove(image.id, force=True)


@pytest.mark.docker
def test_the_generated_compose_file_runs_under_the_sdk_backend(run_fdl, engine, tmp_path):
    # `fdl init --docker`'s dev service, with the small test image standing in for the real one
    # (building that needs a package registry): user mapping, mount, workdir, env, shm size.
    assert run_fdl("init", "demo", "--docker", cwd=tmp_path).returncode == 0
    root = tmp_path / "demo"
    engine.images.get(IMAGE).tag("demo-dev", "latest")
    try:
        (root / "fdl.yml").write_text(
            "commands:\n"
            "  probe:\n"
            "    run: id -u; echo $HOME $FDL_CONTAINER; pwd; ls pyproject.toml\n"
            "    docker: dev\n"
        )
        result = run_fdl("probe", cwd=root / "src", env={"FDL_DOCKER_BACKEND": "sdk"})
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == [
            str(os.getuid()),
            "/tmp dev",
            "/workspace",
            "pyproject.toml",
        ]
    finally:
        engine.images.remove("demo-dev:latest")


@pytest.fixture(scope="module")
def compose(engine):
    """The Compose CLI fdl's compose backend runs (a skip locally, a failure in CI)."""
    from fdl.tasks.docker import compose_cli

    cli = compose_cli()
    if cli is None:
        require(
            "docker", "no Compose CLI: neither 'docker compose' nor 'docker-compose' is installed"
        )
    return cli


def _remove_compose_networks(engine, project: str) -> None:
    for network in engine.networks.list(filters={"label": f"com.docker.compose.project={project}"}):
        network.remove()


@pytest.mark.docker
def test_compose_backend_runs_in_a_real_container(run_fdl, engine, compose, tmp_path):
    root = write(
        tmp_path / f"cproj{uuid.uuid4().hex[:6]}",
        {
            "fdl.yml": (
                "commands:\n"
                "  inside:\n"
                '    run: echo "in $FDL_CONTAINER at $(pwd)"; cat marker.txt; touch made-inside; exit 3\n'
                "    docker: dev\n"
                "  args:\n"
                "    run: printf '[%s]'\n"
                "    docker: dev\n"
            ),
            "docker-compose.yml": (
                f"services:\n  dev:\n    image: {IMAGE}\n    volumes: ['.:/workspace']\n"
                "    working_dir: /workspace\n"
            ),
            "marker.txt": "the project is mounted\n",
            "sub/.keep": "",
        },
    )
    env = {"FDL_DOCKER_BACKEND": "compose"}
    try:
        result = run_fdl("inside", cwd=root / "sub", env=env, timeout=300)  # run: at fdl.yml
        assert result.returncode == 3, result.stderr  # the container's exit code
        assert result.stdout.splitlines() == ["in dev at /workspace", "the project is mounted"]
        assert (root / "made-inside").exists()  # written through the mount
        args = run_fdl("args", "--", "a b", "$HOME", cwd=root, env=env, timeout=300)
        assert args.returncode == 0, args.stderr
        assert args.stdout == "[a b][$HOME]"
        leftovers = engine.containers.list(
            all=True, filters={"label": f"com.docker.compose.project={root.name}"}
        )
        assert leftovers == []  # run --rm
    finally:
        _remove_compose_networks(engine, root.name)


@pytest.mark.docker
def test_the_generated_compose_file_runs_under_the_compose_backend(
    run_fdl, engine, compose, tmp_path
):
    name = f"gen{uuid.uuid4().hex[:6]}"
    assert run_fdl("init", name, "--docker", "--cuda", "12.6", cwd=tmp_path).returncode == 0
    root = tmp_path / name
    engine.images.get(IMAGE).tag(f"{name}-dev", "latest")  # stands in for the real image
    try:
        (root / "fdl.yml").write_text(
            "commands:\n  probe:\n    run: id -u; echo $HOME $FDL_CONTAINER; pwd\n    docker: dev\n"
        )
        result = run_fdl(
            "probe", cwd=root / "src", env={"FDL_DOCKER_BACKEND": "compose"}, timeout=300
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == [str(os.getuid()), "/tmp dev", "/workspace"]
    finally:
        engine.images.remove(f"{name}-dev:latest")
        _remove_compose_networks(engine, name)


@pytest.mark.docker
def test_compose_backend_with_a_real_cli_and_no_daemon(run_fdl, compose, docker_project):
    env = {"FDL_DOCKER_BACKEND": "compose", "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    result = run_fdl("args", cwd=docker_project, env=env)
    assert result.returncode == 3, result.stderr
    assert (
        "error: cannot reach the Docker daemon at unix:///nonexistent/docker.sock" in result.stderr
    )
    assert "Traceback" not in result.stderr  # docker-compose v1 printed its own
