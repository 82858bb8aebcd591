"""``fdl check``: the static name check, then the smoke run, as one report.

The report is written for an AI assistant to act on: one line per finding in the compiler-like
``file:line:col: severity[code]: message — did you mean `x`?`` form, then the smoke run's
outcome with the exception, its notes (flodl adds the graph node that failed) and the line of
the script it came from. ``--json`` gives the same as one document.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from fdl.apiref.model import ApiReference
from fdl.errors import FdlError
from fdl.porting.smoke import SmokeResult, run_smoke
from fdl.porting.static import Finding, check_source


@dataclass
class CheckReport:
    script: str
    package_version: str
    api_hash: str
    findings: list[Finding] = field(default_factory=list)
    used: list[str] = field(default_factory=list)
    smoke: SmokeResult | None = None
    smoke_skipped: str | None = None  # why the smoke run did not happen

    @property
    def errors(self) -> int:
        return sum(f.severity == "error" for f in self.findings)

    @property
    def warnings(self) -> int:
        return sum(f.severity == "warning" for f in self.findings)

    @property
    def ok(self) -> bool:
        return self.errors == 0 and (self.smoke is None or self.smoke.status == "passed")

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
            "smoke": self.smoke.to_dict() if self.smoke else None,
            "smoke_skipped": self.smoke_skipped,
        }


def check_script(
    script: Path, ref: ApiReference, *, run: bool = True, timeout: float = 120.0
) -> CheckReport:
    try:
        source = script.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise FdlError(
            f"cannot read {script}: {err.strerror or err}", "check the file's permissions"
        ) from err
    findings, used = check_source(source, str(script), ref)
    report = CheckReport(str(script), ref.version, ref.api_hash, findings, sorted(used))
    if not run:
        report.smoke_skipped = "--no-run"
    elif report.errors:
        report.smoke_skipped = "fix the errors above first"
    else:
        report.smoke = run_smoke(script, timeout=timeout)
    return report


def render_report(report: CheckReport, *, timeout: float) -> str:
    lines = [f.render() for f in report.findings]
    smoke = report.smoke
    if smoke is None:
        lines.append(f"smoke run: skipped ({report.smoke_skipped})")
    elif smoke.status == "passed":
        stopped = f" ({smoke.budget_stop['message']})" if smoke.budget_stop else ""
        lines.append(f"smoke run (FLODL_SMOKE=1): passed in {smoke.seconds:.1f}s{stopped}")
    elif smoke.status == "timeout":
        lines.append(
            f"{report.script}: error[smoke-timeout]: the smoke run did not finish in {timeout:g}s "
            "— train through fl.Trainer / fl.Monitor / fl.data.DataLoader (they honour "
            "FLODL_SMOKE=1), cap your own loops when FLODL_SMOKE is set, or raise --timeout"
        )
        lines += [f"  | {line}" for line in smoke.output_tail[-5:]]
    else:
        lines += _render_failure(report, smoke)
    counts = f"{report.errors} error(s), {report.warnings} warning(s)"
    if report.ok:
        verdict = f"check ok: {counts}"
    elif report.errors:
        verdict = f"check failed: {counts}"
    else:  # the names are right; the script itself did not run through
        outcome = "timed out" if smoke is not None and smoke.status == "timeout" else "failed"
        verdict = f"check failed: the smoke run {outcome} ({counts})"
    lines.append(f"{verdict} (flodl {report.package_version}, api {report.api_hash})")
    return "\n".join(lines)


def _render_failure(report: CheckReport, smoke: SmokeResult) -> list[str]:
    exc = smoke.exception
    if exc is None:  # died without a Python exception (a signal, os._exit)
        lines = [
            f"{report.script}: error[smoke-failed]: the smoke run exited with code "
            f"{smoke.returncode} after {smoke.seconds:.1f}s"
        ]
        return lines + [f"  | {line}" for line in smoke.output_tail[-8:]]
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
