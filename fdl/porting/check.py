"""``fdl check``: the static check, then the smoke run, as one report.

The report is written for an AI assistant to act on: one line per finding in the compiler-like
``file:line:col: severity[code]: message — did you mean `x`?`` form, then the smoke run's
outcome with the exception, its notes (flodl adds the graph node that failed) and the line of
the script it came from, then the coverage of the script's flodl call sites: how many the smoke
run executed, how many were verified statically against the real signatures, and each one
verified neither way. Such a call site makes the check fail unless ``allow_unverified``: "ok"
means every flodl call in the script was either run or checked. The smoke run runs the script for
real: the existing files it overwrote or deleted are put back (a note line), and the files it
left changed (created, or changed where they could not be kept) are a warning line, not a
finding: neither changes the counts.
``--json`` gives the same as one document.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from fdl.apiref.model import ApiReference
from fdl.errors import FdlError
from fdl.porting import leftovers
from fdl.porting.smoke import SmokeResult, run_smoke, smoke_roots
from fdl.porting.static import CallSite, Finding, analyse


@dataclass
class CheckReport:
    script: str
    package_version: str
    api_hash: str
    findings: list[Finding] = field(default_factory=list)
    used: list[str] = field(default_factory=list)
    smoke: SmokeResult | None = None
    smoke_skipped: str | None = None  # why the smoke run did not happen
    call_sites: list[CallSite] = field(default_factory=list)
    allow_unverified: bool = False
    args: list[str] = field(default_factory=list)
    # earlier checks killed before they put back what their smoke run overwrote
    interrupted: list[dict] = field(default_factory=list)

    def _ran_lines(self) -> set[int]:
        return set(self.smoke.lines) if self.smoke is not None else set()

    @property
    def ran(self) -> list[CallSite]:
        lines = self._ran_lines()
        return [c for c in self.call_sites if c.ran(lines)]

    @property
    def verified(self) -> list[CallSite]:
        return [c for c in self.call_sites if c.verified]

    @property
    def unverified(self) -> list[CallSite]:
        """Call sites the smoke run did not execute and the static pass could not bind."""
        lines = self._ran_lines()
        return [c for c in self.call_sites if not c.verified and not c.ran(lines)]

    @property
    def errors(self) -> int:
        return sum(f.severity == "error" for f in self.findings)

    @property
    def warnings(self) -> int:
        return sum(f.severity == "warning" for f in self.findings)

    @property
    def ok(self) -> bool:
        smoke_ok = self.smoke is None or self.smoke.status == "passed"
        covered = self.allow_unverified or not self.unverified
        return self.errors == 0 and smoke_ok and covered

    def to_dict(self) -> dict:
        return {
            "script": self.script,
            "flodl_version": self.package_version,
            "api_hash": self.api_hash,
            "ok": self.ok,
            "errors": self.errors,
            "warnings": self.warnings,
            "findings": [asdict(f) for f in self.findings],
            "used": self.used,
            "args": self.args,
            "smoke": self.smoke.to_dict() if self.smoke else None,
            "smoke_skipped": self.smoke_skipped,
            "interrupted_checks": self.interrupted,
            "call_sites": {
                "total": len(self.call_sites),
                "ran": len(self.ran),
                "verified_statically": len(self.verified),
                "unverified": [asdict(c) for c in self.unverified],
                "allowed": self.allow_unverified,
            },
        }


def check_script(
    script: Path,
    ref: ApiReference,
    *,
    run: bool = True,
    timeout: float = 120.0,
    args: list[str] | None = None,
    allow_unverified: bool = False,
    wall_timeout: float | None = None,
    on_smoke_start: Callable[[], None] | None = None,
) -> CheckReport:
    try:
        source = script.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise FdlError(
            f"cannot read {script}: {err.strerror or err}", "check the file's permissions"
        ) from err
    findings, used, sites = analyse(source, str(script), ref)
    report = CheckReport(
        str(script),
        ref.version,
        ref.api_hash,
        findings,
        sorted(used),
        call_sites=sites,
        allow_unverified=allow_unverified,
        args=list(args or []),
    )
    here = Path.cwd()
    report.interrupted = [
        leftover.to_dict(here)
        for leftover in leftovers.find(smoke_roots(here, script.resolve().parent))
    ]
    if not run:
        report.smoke_skipped = "--no-run"
    elif report.errors:
        report.smoke_skipped = "fix the errors above first"
    else:
        if on_smoke_start is not None:
            on_smoke_start()
        report.smoke = run_smoke(
            script, timeout=timeout, args=report.args, wall_timeout=wall_timeout
        )
    return report


def render_report(report: CheckReport, *, timeout: float) -> str:
    lines = [f.render() for f in report.findings]
    lines += [_render_interrupted(report.script, item) for item in report.interrupted]
    smoke = report.smoke
    if smoke is None:
        lines.append(f"smoke run: skipped ({report.smoke_skipped})")
    elif smoke.status == "passed":
        shortened = smoke.shortened_loops
        budget = (
            f"; the budget shortened the loop(s) at line(s) {', '.join(map(str, shortened))}"
            if shortened
            else ""
        )
        lines.append(
            f"smoke run (FLODL_SMOKE=1): ran to the end in {smoke.seconds:.1f}s "
            f"({smoke.cpu_seconds:.1f}s CPU){budget}"
        )
    elif smoke.status == "timeout":
        what = (
            f"used more than {timeout:g}s of CPU time"
            if smoke.limit == "cpu"
            else f"did not finish in {smoke.seconds:.0f}s of wall time (it used "
            f"{smoke.cpu_seconds:.1f}s of CPU: waiting on something?)"
        )
        lines.append(
            f"{report.script}: error[smoke-timeout]: the smoke run {what} — train through "
            "fl.Trainer / fl.data.DataLoader (they honour FLODL_SMOKE=1), shrink the data when "
            "fl.smoke_enabled(), or raise --timeout"
        )
        lines += [f"  | {line}" for line in smoke.output_tail[-5:]]
    else:
        lines += _render_failure(report, smoke)
    if smoke is not None:
        lines += _render_changed_files(report.script, smoke)
    lines += _render_coverage(report)
    counts = f"{report.errors} error(s), {report.warnings} warning(s)"
    unverified = len(report.unverified)
    if report.ok:
        allowed = f", {unverified} unverified call site(s) allowed" if unverified else ""
        verdict = f"check ok: {counts}{allowed}"
    elif report.errors:
        # the unverified-call lines printed above are errors too: count them, not silently
        also = (
            f", {unverified} unverified call site(s)"
            if unverified and not report.allow_unverified
            else ""
        )
        verdict = f"check failed: {counts}{also}"
    elif smoke is not None and smoke.status != "passed":
        outcome = "timed out" if smoke.status == "timeout" else "failed"
        verdict = f"check failed: the smoke run {outcome} ({counts})"
    else:
        verdict = (
            f"check failed: {unverified} flodl call site(s) verified neither by the smoke run "
            f"nor statically ({counts}); make the run reach them (pass the script's arguments "
            "after --) or pass --allow-unverified"
        )
    lines.append(f"{verdict} (flodl {report.package_version}, api {report.api_hash})")
    return "\n".join(lines)


def _render_changed_files(script: str, smoke: SmokeResult, shown: int = 10) -> list[str]:
    """What the smoke run changed: the files put back (a note), and what is still changed (a
    warning: files it created, and changes made where the run's guard cannot see)."""

    def listed(items: list[dict]) -> str:
        names = ", ".join(f"{c['path']} ({c['change']})" for c in items[:shown])
        return names + (f" and {len(items) - shown} more" if len(items) > shown else "")

    lines = []
    if smoke.restored_files:
        lines.append(
            f"  note: the smoke run overwrote or deleted {len(smoke.restored_files)} existing "
            f"file(s), put back as they were: {listed(smoke.restored_files)}"
        )
    if smoke.kept_in:
        lines.append(
            f"{script}: warning[smoke-wrote-files]: some files the smoke run changed could not "
            f"be put back; the originals are in {smoke.kept_in} (`fdl check --recover` tries "
            "again)"
        )
    if smoke.changed_files_skipped:
        lines.append(
            f"  note: the files the smoke run changed were not looked for: {smoke.changed_files_skipped}"
        )
        return lines
    changed = smoke.changed_files
    if not changed:
        return lines
    unseen = [c for c in changed if c["change"] != "created"]
    why = (
        " — the existing ones were changed where fdl check cannot keep them (a process that is "
        "not Python, a library writing files from C), so they stay changed"
        if unseen
        else ""
    )
    lines.append(
        f"{script}: warning[smoke-wrote-files]: the smoke run left {len(changed)} file(s) "
        f"changed: {listed(changed)}{why}; write elsewhere (a temp directory) when "
        "fl.smoke_enabled()"
    )
    return lines


def _render_interrupted(script: str, leftover: dict, shown: int = 10) -> str:
    files = leftover["files"]
    names = ", ".join(files[:shown]) + (
        f" and {len(files) - shown} more" if len(files) > shown else ""
    )
    who = f" (pid {leftover['pid']})" if leftover["pid"] else ""
    return (
        f"{script}: warning[interrupted-check]: an earlier fdl check{who} was stopped before it "
        f"put back {len(files)} file(s) its smoke run had overwritten: {names}; the originals "
        f"are in {', '.join(leftover['folders'])} — `fdl check --recover` puts them back (what "
        "is in their place now moves into that folder's replaced/)"
    )


def _render_coverage(report: CheckReport) -> list[str]:
    sites = report.call_sites
    if not sites:
        return []
    ran = "no smoke run" if report.smoke is None else f"{len(report.ran)} ran in the smoke run"
    lines = [
        f"flodl call sites: {len(sites)}; {ran}; {len(report.verified)} verified statically "
        f"against the real signatures; {len(report.unverified)} verified by neither"
    ]
    severity = "warning" if report.allow_unverified else "error"
    for site in report.unverified:
        lines.append(
            f"{report.script}:{site.line}: {severity}[unverified-call]: `{site.text}(...)` did "
            f"not run and cannot be checked statically ({site.why_not})"
        )
    return lines


def _render_failure(report: CheckReport, smoke: SmokeResult) -> list[str]:
    exc = smoke.exception
    if exc is None:  # died without a Python exception (a signal, os._exit)
        lines = [
            f"{report.script}: error[smoke-failed]: the smoke run exited with code "
            f"{smoke.returncode} after {smoke.seconds:.1f}s"
        ]
        return lines + [f"  | {line}" for line in smoke.output_tail[-8:]]
    if exc["type"] == "SystemExit":  # sys.exit(n) / argparse: its own message says why
        lines = [
            f"{report.script}:{smoke.location['line'] if smoke.location else 1}: "
            f"error[smoke-failed]: the script exited with code {exc['message'] or smoke.returncode}"
        ]
        lines += [f"  | {line}" for line in smoke.output_tail[-6:]]
        if any(line.startswith("usage:") for line in smoke.output_tail):
            given = " ".join(report.args) or "none"
            lines.append(
                f"  note: its command line was rejected (arguments given: {given}); pass the "
                "script's arguments after --: fdl check SCRIPT -- --flag value ..."
            )
        return lines
    where = smoke.location or (exc["frames"][-1] if exc["frames"] else None)
    place = f"{where['file']}:{where['line']}" if where else report.script
    if smoke.location:
        place = f"{report.script}:{smoke.location['line']}"
    lines = [f"{place}: error[smoke-failed]: {exc['type']}: {exc['message']}"]
    lines += [f"  note: {note}" for note in exc["notes"]]
    if where and where.get("code"):
        lines.append(f"  in {where['function']}: {where['code']}")
    inner = exc["frames"][-1] if exc["frames"] else None
    if inner and inner is not where and inner != where:
        lines.append(f"  raised at {inner['file']}:{inner['line']} in {inner['function']}")
    return lines
