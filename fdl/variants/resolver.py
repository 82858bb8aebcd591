"""Choose the torch build for a machine: driver AND every GPU's compute capability AND the archs
each build was compiled for — and say why.

>>> gtx1060 = GpuTarget(0, "NVIDIA GeForce GTX 1060 6GB", (6, 1))
>>> plan = resolve(Target(os_family="linux", platform="linux-x86_64", driver="535.183.01",
...                       gpus=(gtx1060,)))
>>> plan.status, plan.tag
('ok', 'cu126')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fdl.variants.archs import ComputeCapability, coverage, format_cc, sm_name
from fdl.variants.table import Build, Release, VariantTable, load_table, version_key


@dataclass(frozen=True)
class GpuTarget:
    index: int
    name: str
    cc: ComputeCapability | None  # None: unknown (the resolver says it cannot check)


@dataclass(frozen=True)
class Target:
    """What the resolver needs to know about a machine."""

    os_family: str = "linux"  # linux | windows | macos — also picks the driver floors
    platform: str = "linux-x86_64"
    driver: str | None = None
    gpus: tuple[GpuTarget, ...] = ()
    python: str | None = None  # "3.12"; None: do not filter releases by Python
    # Why an NVIDIA driver that is there lists no GPU (fdl.hardware.nvidia.broken_driver): the
    # GPUs are unknown, not absent.
    driver_problem: str | None = None


@dataclass
class GpuFit:
    index: int
    name: str
    sm: str | None
    coverage: str  # sass | ptx | none | unknown | driver-too-old
    via: str | None = None

    @property
    def usable(self) -> bool:
        return self.coverage in ("sass", "ptx", "unknown")


@dataclass
class Candidate:
    build: Build
    driver_floor: str | None
    driver_ok: bool | None  # None: driver unknown
    fits: list[GpuFit]

    @property
    def usable(self) -> list[GpuFit]:
        return [f for f in self.fits if f.usable]

    @property
    def fits_all(self) -> bool:
        return self.driver_ok is not False and len(self.usable) == len(self.fits)

    def rank(self) -> tuple:
        cuda = version_key(self.build.cuda or "0")
        return (
            self.fits_all,
            len(self.usable),
            sum(f.coverage == "sass" for f in self.fits),
            self.build.stable,
            cuda,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "torch": self.build.torch,
            "tag": self.build.tag,
            "cuda": self.build.cuda,
            "stable": self.build.stable,
            "archs": self.build.arch_list,
            "driver_floor": self.driver_floor,
            "driver_ok": self.driver_ok,
            "fits_all": self.fits_all,
            "gpus": [{"index": f.index, "coverage": f.coverage, "via": f.via} for f in self.fits],
        }


@dataclass
class Plan:
    """The chosen build, how sure we are, and the reasons in plain words."""

    status: str  # ok | compromise | cpu | no-build
    torch: str
    tag: str
    index_url: str | None  # None: the default PyPI index (macOS)
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    alternatives: list[str] = field(default_factory=list)
    considered: list[Candidate] = field(default_factory=list)
    visible_devices: str | None = None
    source_build: str | None = None
    chosen: Candidate | None = None

    @property
    def requirement(self) -> str:
        """``torch==2.14.0+cu126``: the local label pins the build, not only the release.

        ``torch==2.14.0`` is already satisfied by an installed ``2.14.0+cpu``, so a switch to
        a CUDA build of the same release would silently install nothing. PyPI's default wheels
        (macOS: no explicit index) carry no label.
        """
        if self.index_url is None:
            return f"torch=={self.torch}"
        return f"torch=={self.torch}+{self.tag}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "torch": self.torch,
            "tag": self.tag,
            "index_url": self.index_url,
            "reasons": self.reasons,
            "warnings": self.warnings,
            "alternatives": self.alternatives,
            "visible_devices": self.visible_devices,
            "source_build": self.source_build,
            "considered": [c.to_dict() for c in self.considered],
        }


def _driver_at_least(driver: str | None, floor: str | None) -> bool | None:
    if floor is None:
        return True
    if driver is None:
        return None
    return version_key(driver) >= version_key(floor)


def evaluate(build: Build, target: Target, table: VariantTable) -> Candidate:
    """How ``build`` fares on ``target``: driver floor and per-GPU coverage."""
    if not build.is_cuda:
        fits = [GpuFit(g.index, g.name, g.cc and sm_name(g.cc), "none") for g in target.gpus]
        return Candidate(build, None, True, fits)
    floor = table.cuda_driver_floor(build.cuda_major or 0, target.os_family)
    fits = []
    for gpu in target.gpus:
        if gpu.cc is None:
            fits.append(GpuFit(gpu.index, gpu.name, None, "unknown"))
            continue
        kind, via = coverage(gpu.cc, build.sass, build.ptx)
        arch_floor = table.arch_driver_floor(gpu.cc[0], target.os_family)
        if kind != "none" and _driver_at_least(target.driver, arch_floor) is False:
            kind = "driver-too-old"
        fits.append(GpuFit(gpu.index, gpu.name, sm_name(gpu.cc), kind, via and sm_name(via)))
    return Candidate(build, floor, _driver_at_least(target.driver, floor), fits)


def _describe_gpus(target: Target) -> str:
    return ", ".join(
        f"[{g.index}] {g.name} ({sm_name(g.cc) if g.cc else 'sm unknown'})" for g in target.gpus
    )


def _why_not(c: Candidate, target: Target) -> str:
    parts = []
    if c.driver_ok is False:
        parts.append(f"needs driver ≥ {c.driver_floor} (have {target.driver})")
    missing = [f for f in c.fits if not f.usable]
    for f in missing:
        if f.coverage == "driver-too-old":
            parts.append(f"GPU {f.index} ({f.sm}) needs a newer driver for its architecture")
        else:
            parts.append(f"no kernels for GPU {f.index} ({f.sm}); compiled: {c.build.arch_list}")
    return "; ".join(parts)


def _explain_choice(c: Candidate, target: Target) -> list[str]:
    lines = []
    if c.driver_floor:
        state = {True: "meets", None: "cannot check", False: "does NOT meet"}[c.driver_ok]
        have = target.driver or "unknown"
        lines.append(
            f"driver {have} {state} the CUDA {c.build.cuda_major} floor (≥ {c.driver_floor})"
        )
    for f in c.fits:
        if f.coverage == "sass":
            exact = "exact" if f.via == f.sm else "binary-compatible"
            lines.append(f"GPU {f.index} {f.name} ({f.sm}): native kernels {f.via} ({exact})")
        elif f.coverage == "ptx":
            lines.append(
                f"GPU {f.index} {f.name} ({f.sm}): PTX {f.via} JIT-compiled by the driver "
                "(works; slow first launch)"
            )
        elif f.coverage == "unknown":
            lines.append(f"GPU {f.index} {f.name}: compute capability unknown, cannot check archs")
    return lines


def _consider(release: Release, target: Target, table: VariantTable) -> list[Candidate]:
    return [
        evaluate(b, target, table)
        for b in release.builds
        if b.is_cuda and b.available_on(target.platform)
    ]


def _source_build(target: Target) -> str:
    archs = sorted({g.cc for g in target.gpus if g.cc})
    arch_list = ";".join(format_cc(a) for a in archs)
    return f'TORCH_CUDA_ARCH_LIST="{arch_list}" python setup.py bdist_wheel  (2–6 h)'


def resolve(
    target: Target,
    *,
    torch: str | None = None,
    tag: str | None = None,
    table: VariantTable | None = None,
    mirror: str | None = None,
) -> Plan:
    """The build to install on ``target``.

    ``torch`` pins a release ("2.9" or "2.9.1"; default: the newest that fits, preferring the
    newest release); ``tag`` forces a build ("cpu", "cu128") and only checks it.

    The cases, in order: a forced build is checked and explained; macOS and machines without an
    NVIDIA GPU get the CPU build; a build of the newest release that fits every GPU is chosen;
    else (no release pinned) the newest older release with such a build; else the CPU build when
    no CUDA build can run at all, or the build usable on the most GPUs (a compromise).
    """
    search = _search(target, torch, table or load_table(), mirror)
    if tag:
        return _forced(search, tag)
    if target.os_family == "macos":
        return _cpu(search, "macOS: the default PyPI wheel (CPU, and MPS on Apple silicon)")
    if not target.gpus and target.driver_problem:
        plan = _cpu(
            search,
            "the NVIDIA driver lists no GPU: the GPUs are unknown until it answers, and only the "
            "CPU build can be chosen without them",
        )
        plan.warnings.append(target.driver_problem)
        return plan
    if not target.gpus:
        return _cpu(search, "no NVIDIA GPU detected: the CPU build (smaller, no CUDA libraries)")
    considered = _consider(search.newest, target, search.table)
    best = max(considered, key=Candidate.rank) if considered else None
    if best and best.fits_all:
        return _fits(search, best, considered)
    # Nothing in the wanted release fits every GPU: an older release may.
    why_newest = [f"{c.build.tag}: {_why_not(c, target)}" for c in considered]
    if not search.pinned:
        older = _older_release(search, considered, why_newest)
        if older is not None:
            return older
    # A compromise may come from an older release too (a CUDA 12 build with the newest GPU's
    # kernels when the driver is too old for CUDA 13), as a single GPU's build does.
    runnable = [
        c
        for release in search.releases
        for c in (
            considered if release is search.newest else _consider(release, target, search.table)
        )
        if c.driver_ok is not False and c.usable
    ]
    if not runnable:
        return _no_build(search, considered, why_newest)
    return _compromise(search, considered, runnable, why_newest)


@dataclass
class _Search:
    """What each case of ``resolve`` works from: the machine, the table, and the releases in play
    (newest first; only those with wheels for the target's Python)."""

    target: Target
    table: VariantTable
    mirror: str | None
    releases: list[Release]
    pinned: Release | None  # the release --torch asked for
    too_new_python: list[Release]  # releases left out: no wheels for this Python

    @property
    def newest(self) -> Release:
        return self.releases[0]

    def plan(self, status: str, cand: Candidate | None, release: Release, build_tag: str) -> Plan:
        """A plan installing ``build_tag`` of ``release`` (macOS installs from PyPI: no index)."""
        index = (
            None
            if self.target.os_family == "macos"
            else self.table.wheel_index_url(build_tag, self.mirror)
        )
        return Plan(status, release.torch, build_tag, index, chosen=cand)

    def python_note(self) -> tuple[str, str] | None:
        """(reason, alternative) when a release left out for its Python would fit every GPU."""
        if self.pinned:
            return None
        return _python_filtered(self.too_new_python, self.target, self.table)


def _search(target: Target, torch: str | None, table: VariantTable, mirror: str | None) -> _Search:
    """The releases to consider: ``torch``'s alone when pinned, each with wheels for the target's
    Python (none at all is an error naming the supported range)."""
    pinned = table.release(torch) if torch else None
    releases = [pinned] if pinned else list(table.releases)
    too_new_python: list[Release] = []
    if target.python:
        fitting = [r for r in releases if r.supports_python(target.python)]
        if not fitting:
            raise _python_error(releases[0], target.python)
        too_new_python = [r for r in releases if r not in fitting]
        releases = fitting
    return _Search(target, table, mirror, releases, pinned, too_new_python)


def _forced(search: _Search, tag: str) -> Plan:
    """``--variant TAG``: the user chose; check it and say what we see."""
    target, newest = search.target, search.newest
    build = newest.build(tag)
    if build is None:
        tags = ", ".join(b.tag for b in newest.builds)
        from fdl.errors import FdlUsageError

        raise FdlUsageError(f"torch {newest.torch} has no '{tag}' build", f"choose: {tags}")
    cand = evaluate(build, target, search.table)
    runs_somewhere = cand.driver_ok is not False and bool(cand.usable)
    if cand.fits_all or not build.is_cuda:
        status = "ok"
    else:
        status = "compromise" if runs_somewhere else "unusable"
    plan = search.plan(status, cand, newest, tag)
    plan.reasons.append(f"{tag} was requested")
    plan.reasons.extend(_explain_choice(cand, target))
    if build.is_cuda and not cand.fits_all:
        if runs_somewhere:
            plan.warnings.append(f"{tag} will not run everywhere here: {_why_not(cand, target)}")
            plan.visible_devices = ",".join(str(f.index) for f in cand.usable)
            plan.warnings.append(
                f"run with {device_env(plan.visible_devices)} so torch never touches the other "
                "GPU(s)"
            )
        else:
            plan.warnings.append(
                f"{tag} runs on no GPU here (torch will see no CUDA device): "
                + _why_not(cand, target)
            )
    plan.considered = [cand]
    return plan


def _cpu(search: _Search, reason: str) -> Plan:
    """The CPU build of the newest release, for ``reason``."""
    plan = search.plan("cpu", None, search.newest, "cpu")
    plan.reasons.append(reason)
    return plan


def _fits(search: _Search, best: Candidate, considered: list[Candidate]) -> Plan:
    """``best``, a build of the newest release that runs on every GPU; the other such builds are
    the alternatives."""
    target = search.target
    plan = search.plan("ok", best, search.newest, best.build.tag)
    plan.reasons.append(f"GPUs: {_describe_gpus(target)}")
    plan.reasons.extend(_explain_choice(best, target))
    _note_pypi_default(plan, search.newest, target)
    plan.considered = considered
    plan.alternatives = [
        f"torch {c.build.torch} + {c.build.tag}" for c in considered if c.fits_all and c is not best
    ]
    _note_unknowns(plan, target)
    return plan


def _older_release(
    search: _Search, considered: list[Candidate], why_newest: list[str]
) -> Plan | None:
    """The best build of the newest older release that fits every GPU, or None."""
    target, newest = search.target, search.newest
    for release in search.releases[1:]:
        older = _consider(release, target, search.table)
        fit = [c for c in older if c.fits_all]
        if fit:
            chosen = max(fit, key=Candidate.rank)
            plan = search.plan("ok", chosen, release, chosen.build.tag)
            plan.reasons.append(f"GPUs: {_describe_gpus(target)}")
            plan.reasons.append(
                f"torch {newest.torch} has no build for this machine ("
                + "; ".join(why_newest)
                + f"); torch {release.torch} is the newest that fits"
            )
            plan.reasons.extend(_explain_choice(chosen, target))
            plan.considered = older
            plan.alternatives = _upgrade_paths(considered, target)
            _note_unknowns(plan, target)
            return plan
    return None


def _pinned_alternative(search: _Search) -> str | None:
    """With ``--torch`` pinned to a release that does not fit: another release that fits every
    GPU, as an alternative (None when no release does, or nothing is pinned)."""
    if not search.pinned:
        return None
    for release in search.table.releases:
        if release is search.pinned:
            continue
        candidates = _consider(release, search.target, search.table)
        if any(c.fits_all for c in candidates):
            best = max(candidates, key=Candidate.rank)
            return f"torch {release.torch} + {best.build.tag} fits every GPU"
    return None


def _no_build(search: _Search, considered: list[Candidate], why_newest: list[str]) -> Plan:
    """No CUDA build can run here (driver too old, GPUs not covered): the CPU build, and what
    would change that."""
    target, newest = search.target, search.newest
    plan = search.plan("no-build", None, newest, "cpu")
    plan.reasons.append(f"GPUs: {_describe_gpus(target)}")
    plan.reasons.append(
        f"no CUDA build of torch {newest.torch} can run here (" + "; ".join(why_newest) + ")"
    )
    python_note = search.python_note()
    if python_note:
        plan.reasons.append(python_note[0])
        plan.alternatives.append(python_note[1])
    unsupported = _unsupported_gpus(search)
    if unsupported:
        plan.reasons.append(unsupported)
    plan.warnings.append("installing the CPU build; GPUs stay unused until this is fixed")
    plan.alternatives += _upgrade_paths(considered, target)
    smaller = _smaller_upgrade(search, considered)
    if smaller:
        plan.alternatives.append(smaller)
    if unsupported:
        plan.alternatives.append(f"a source build for these GPUs: {_source_build(target)}")
    pinned_alt = _pinned_alternative(search)
    if pinned_alt:
        plan.alternatives.append(pinned_alt)
    plan.considered = considered
    return plan


def _compromise(
    search: _Search,
    considered: list[Candidate],
    runnable: list[Candidate],
    why_newest: list[str],
) -> Plan:
    """No single pre-built wheel fits: the build usable on the most GPUs, the newest GPU breaking
    a tie (then native kernels, the newer release, a stable build, the newer CUDA), restricted to
    those GPUs with CUDA_VISIBLE_DEVICES. ``runnable``: the builds of every release in play that
    this driver can load and that run on at least one GPU, newest release first."""
    target, newest = search.target, search.newest

    def compromise_rank(c: Candidate) -> tuple:
        newest_gpu = max(
            (g.cc or (0, 0)) for g, f in zip(target.gpus, c.fits, strict=True) if f.usable
        )
        fits = c.rank()
        return (len(c.usable), newest_gpu, fits[2], version_key(c.build.torch), *fits[3:])

    chosen = max(runnable, key=compromise_rank)
    release = next(r for r in search.releases if r.torch == chosen.build.torch)
    plan = search.plan("compromise", chosen, release, chosen.build.tag)
    usable = ", ".join(str(f.index) for f in chosen.usable)
    plan.reasons.append(f"GPUs: {_describe_gpus(target)}")
    plan.reasons.append(
        f"no single pre-built torch {newest.torch} runs on every GPU here ("
        + "; ".join(why_newest)
        + ")"
        + ("" if search.pinned else ", nor does any older release")
    )
    plan.reasons.append(
        f"best compromise: torch {chosen.build.torch} + {chosen.build.tag}, usable on GPU "
        f"{usable} (the most GPUs any build runs on here; on a tie, the newest GPU)"
    )
    plan.reasons.extend(_explain_choice(chosen, target))
    unsupported = _unsupported_gpus(search)
    if unsupported:
        plan.reasons.append(unsupported)
    plan.visible_devices = ",".join(str(f.index) for f in chosen.usable)
    plan.warnings.append(
        f"run with {device_env(plan.visible_devices)} so torch never touches the other GPU(s)"
    )
    plan.alternatives = _compromise_alternatives(chosen, runnable, target, compromise_rank)
    plan.alternatives += _upgrade_for(considered, chosen, target)
    plan.source_build = _source_build(target)
    plan.alternatives.append(f"a source build for every GPU: {plan.source_build}")
    pinned_alt = _pinned_alternative(search)
    if pinned_alt:
        plan.alternatives.insert(0, pinned_alt)
    python_note = search.python_note()
    if python_note:
        plan.reasons.append(python_note[0])
        plan.alternatives.insert(0, python_note[1])
    # the builds of the newest release, and those of the chosen one: what the user may pick from
    plan.considered = considered + [
        c for c in runnable if c.build.torch == release.torch and release is not newest
    ]
    return plan


def device_env(visible: str) -> str:
    """``CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=1``: the indices are nvidia-smi's,
    which count GPUs in PCI bus order; CUDA's own default order is fastest first, so without the
    first variable the same index can name another GPU on a mixed machine."""
    return f"CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES={visible}"


def _label(c: Candidate) -> str:
    return f"torch {c.build.torch} + {c.build.tag}"


def _gpu_list(c: Candidate) -> str:
    return ", ".join(str(f.index) for f in c.usable)


def _compromise_alternatives(
    chosen: Candidate, runnable: list[Candidate], target: Target, rank: Any
) -> list[str]:
    """The other GPU sets a runnable build serves (the best build for each), and one
    environment per GPU generation — only builds this driver can load."""
    best: dict[tuple[int, ...], Candidate] = {}
    for c in runnable:
        key = tuple(f.index for f in c.usable)
        if key not in best or rank(c) > rank(best[key]):
            best[key] = c
    chosen_key = tuple(f.index for f in chosen.usable)
    lines = [
        f"{_label(c)} instead: usable on GPU {_gpu_list(c)}"
        for key, c in best.items()
        if key != chosen_key
    ]
    per_env: dict[str, list[int]] = {}
    for gpu, fit in zip(target.gpus, chosen.fits, strict=True):
        serving = [c for c in runnable if any(f.index == gpu.index for f in c.usable)]
        if not serving:
            continue
        top = chosen if fit.usable else max(serving, key=rank)
        per_env.setdefault(_label(top), []).append(gpu.index)
    if len(per_env) > 1:
        envs = [
            f"{label} for GPU {', '.join(map(str, gpus))} (e.g. .venvs/{label.rsplit(' ', 1)[1]})"
            for label, gpus in per_env.items()
        ]
        lines.append("one environment per GPU generation: " + "; ".join(envs))
    return lines


def _upgrade_for(considered: list[Candidate], chosen: Candidate, target: Target) -> list[str]:
    """The driver upgrade that would let a build of the newest release serve more GPUs, or the
    same ones with a newer torch, than the compromise."""
    unlocked: dict[str, list[tuple[Candidate, list[int]]]] = {}
    for c in considered:
        too_old = c.driver_ok is False or any(f.coverage == "driver-too-old" for f in c.fits)
        if not too_old:
            continue
        would = [
            f.index for f in c.fits if f.coverage in ("sass", "ptx", "unknown", "driver-too-old")
        ]
        if not would:
            continue
        newer = version_key(c.build.torch) > version_key(chosen.build.torch)
        if len(would) > len(chosen.usable) or (newer and len(would) >= len(chosen.usable)):
            floor = c.driver_floor or "?"
            unlocked.setdefault(floor, []).append((c, would))
    return [
        f"upgrade the NVIDIA driver to ≥ {floor} for torch {builds[0][0].build.torch} + "
        + " / ".join(c.build.tag for c, _ in builds)
        + f" (usable on GPU {', '.join(map(str, builds[0][1]))})"
        for floor, builds in unlocked.items()
    ]


def _unsupported_gpus(search: _Search) -> str | None:
    """A sentence naming the GPUs that no build in fdl's table has kernels for, whatever the
    driver (e.g. a Tesla K40, sm_35: the oldest listed build starts at sm_37); None if none."""
    target, table = search.target, search.table
    builds = [b for r in table.releases for b in r.builds if b.is_cuda]
    lost = [
        g
        for g in target.gpus
        if g.cc is not None and all(coverage(g.cc, b.sass, b.ptx)[0] == "none" for b in builds)
    ]
    if not lost:
        return None
    oldest = min((min(b.sass) for b in builds if b.sass), default=None)
    names = ", ".join(f"GPU {g.index} {g.name} ({sm_name(g.cc)})" for g in lost if g.cc)
    floor = (
        f" (the oldest architecture any of them supports is {sm_name(oldest)})" if oldest else ""
    )
    return (
        f"no build in fdl's release table has kernels for {names}{floor}: a driver upgrade "
        "cannot change that; only a source build (or an older torch outside the table) can"
    )


def _python_filtered(
    left_out: list[Release], target: Target, table: VariantTable
) -> tuple[str, str] | None:
    """(reason, alternative) when a release left out for its Python range would fit every GPU.

    An old driver or GPU often needs an older torch, and older torches stop at an older Python:
    on Python 3.14 with a 470 driver nothing fits, on 3.13 torch 2.7.1 + cu118 does.
    """
    for release in left_out:  # newest first
        fit = [c for c in _consider(release, target, table) if c.fits_all]
        if fit:
            best = max(fit, key=Candidate.rank)
            lo, hi = release.python
            return (
                f"torch {release.torch} + {best.build.tag} would run on every GPU here, but has "
                f"no wheels for Python {target.python} (supports {lo}–{hi}), so it was left out",
                f"use Python {hi} (e.g. uv venv --python {hi}) for torch {release.torch} + "
                f"{best.build.tag}",
            )
    return None


def _upgrade_paths(considered: list[Candidate], target: Target) -> list[str]:
    """What a driver upgrade would unlock in the newest release."""
    unlocked: dict[str, list[Build]] = {}
    for c in considered:
        arch_ok = all(f.coverage in ("sass", "ptx", "unknown", "driver-too-old") for f in c.fits)
        too_old = c.driver_ok is False or any(f.coverage == "driver-too-old" for f in c.fits)
        if arch_ok and too_old:
            unlocked.setdefault(c.driver_floor or "?", []).append(c.build)
    return [
        f"upgrade the NVIDIA driver to ≥ {floor} for torch {builds[0].torch} + "
        + " / ".join(b.tag for b in builds)
        for floor, builds in unlocked.items()
    ]


def _unlocked_by_upgrade(c: Candidate) -> bool:
    """A build whose kernels fit every GPU and that only the driver keeps from loading."""
    arch_ok = all(f.coverage in ("sass", "ptx", "unknown", "driver-too-old") for f in c.fits)
    too_old = c.driver_ok is False or any(f.coverage == "driver-too-old" for f in c.fits)
    return arch_ok and too_old and bool(c.driver_floor)


def _smaller_upgrade(search: _Search, considered: list[Candidate]) -> str | None:
    """The smallest driver upgrade, when an older release needs less of one than the newest:
    a GTX 1080 on driver 390 gets torch 2.7.1 + cu118 from 450.80.02, where the newest release
    needs 525.60.13. The newest release at that floor; None if the newest needs no more."""
    if search.pinned:
        return None
    floors = [version_key(c.driver_floor or "0") for c in considered if _unlocked_by_upgrade(c)]
    best: tuple[tuple[int, ...], Candidate, Release] | None = None
    for release in search.releases[1:]:  # newest first: a tie keeps the newer release
        fitting = [
            (version_key(c.driver_floor or "0"), c)
            for c in _consider(release, search.target, search.table)
            if _unlocked_by_upgrade(c)
        ]
        fitting = [(f, c) for f, c in fitting if not floors or f < min(floors)]
        if not fitting:
            continue
        low = min(f for f, _ in fitting)
        if best is None or low < best[0]:
            top = max((c for f, c in fitting if f == low), key=Candidate.rank)
            best = (low, top, release)
    if best is None:
        return None
    _, c, release = best
    return (
        f"a smaller upgrade: the NVIDIA driver to ≥ {c.driver_floor} for torch {release.torch} "
        f"+ {c.build.tag} (an older torch)"
    )


def _note_pypi_default(plan: Plan, release: Release, target: Target) -> None:
    """Say when a plain ``pip install torch`` would have installed something else."""
    default = release.pypi_default
    if target.platform == "linux-x86_64" and default and default != plan.tag:
        plan.reasons.append(
            f"a plain 'pip install torch' would install the {default} build from PyPI, "
            "hence the explicit index"
        )


def _note_unknowns(plan: Plan, target: Target) -> None:
    if target.driver is None:
        plan.warnings.append("driver version unknown: make sure it meets the floor above")
    if any(g.cc is None for g in target.gpus):
        plan.warnings.append(
            "a GPU's compute capability is unknown, so this build's kernels cannot be checked "
            "for it in advance: fdl setup's verification launches a kernel on it after the "
            "install (pip install nvidia-ml-py lets fdl read the capability)"
        )


def _python_error(release: Release, python: str):
    from fdl.errors import ExitCode, FdlError

    lo, hi = release.python
    return FdlError(
        f"torch {release.torch} has no wheels for Python {python} (supports {lo}–{hi})",
        "use a supported Python, or pin another torch with --torch",
        ExitCode.UNAVAILABLE,
    )
