"""The e2e report: each story adds its fault-table row, the happy story its timeline, the sweep story its
per-trial overhead; printed after the run (the project's tests/conftest.py), read by `make demo` and the benchmark.

`make e2e` runs its stories in two pytest-xdist workers: both write this one file, so a write holds an exclusive
flock (fcntl, POSIX; one process-wide lock on one local file needs nothing more), and the report carries the id of
the pytest run that wrote it (the controller sets it, its workers inherit it): a new run starts a new report, and
a run prints only what it wrote itself."""

from __future__ import annotations

import fcntl
import json
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpu_runner_testing.story.project import project_root

RUN = "E2E_REPORT_RUN"


def report_file() -> Path:
    """The project's .e2e-cache/report.json (gitignored), where `make demo` and the benchmark read it. Found when
    first written or read, not at import: the project's conftest imports this module in every test run."""
    return project_root() / ".e2e-cache" / "report.json"


def begin_run() -> None:
    """One id for this pytest run: called by the process that starts it (the xdist controller, or a serial run);
    the workers it starts inherit its environment."""
    os.environ.setdefault(RUN, uuid.uuid4().hex)


def load() -> dict[str, Any]:
    report = report_file()
    return json.loads(report.read_text()) if report.exists() else {}


def this_run() -> dict[str, Any]:
    """The report if this pytest run wrote it, else {} (a report left by an earlier run is not printed again)."""
    report = load()
    return report if report.get("run") == os.environ.get(RUN) else {}


@contextmanager
def _locked() -> Iterator[None]:
    report = report_file()
    report.parent.mkdir(exist_ok=True)
    with report.with_suffix(".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def record(section: str, value: Any) -> None:
    """Add to this run's report (fault rows are kept in scenario order, one per scenario)."""
    with _locked():
        report = this_run() or {"run": os.environ.get(RUN)}
        if section == "faults":
            rows = [r for r in report.get("faults", []) if r["scenario"] != value["scenario"]]
            report["faults"] = sorted([*rows, value], key=lambda r: int(r["scenario"].split()[0]))
        else:
            report[section] = value
        file = report_file()
        written = file.with_suffix(".tmp")
        written.write_text(json.dumps(report, indent=2))
        os.replace(written, file)  # whole: a reader beside this write (the leak scan) never sees half a file


def format_table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    headers = list(rows[0])
    widths = [max(len(h), *(len(str(r[h])) for r in rows)) for h in headers]
    line = " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "-+-".join("-" * w for w in widths)]
    out += [" | ".join(str(r[h]).ljust(w) for h, w in zip(headers, widths, strict=True)) for r in rows]
    return "\n".join(out)


def _story(story: dict[str, Any]) -> list[str]:
    lines = [
        "",
        f"MLflow run {story['mlflow_run']} (experiment {story['experiment']}, {story['params']} params):",
    ]
    lines += [f"  {name:30s} {value}" for name, value in story["metrics"].items()]
    lines += [f"  tag {name:26s} {value}" for name, value in story["tags"].items()]
    lines += [f"  artifact {path}" for path in story["artifacts"]]
    lines += [
        "",
        "job summary of the train job:",
        *[f"  {line}" for line in story["job_summary"].splitlines()],
    ]
    lines += ["", f"act log (JSON lines): {story['act_log']}",
              "(the tracking server and moto lived for the test session only; the figures above are what they held)"]  # fmt: skip
    return lines


def render(report: dict[str, Any]) -> str:
    lines = []
    if "timeline" in report:
        lines.append("timeline of the story (seconds):")
        lines += [f"  {what:42s} {seconds:7.1f}" for what, seconds in report["timeline"].items()]
    if "phases (from MLflow)" in report:
        lines.append("phases the stop job logged to the MLflow run (s; target: project overhead <= 60):")
        lines += [f"  {what:52s} {seconds:7.1f}" for what, seconds in report["phases (from MLflow)"].items()]
    if "sweep overhead (seconds)" in report:
        lines.append(
            "the sweep story (test_sweep_workflow; per trial from its child run's phases, per wave from act):"
        )
        lines += [
            f"  {what:52s} {seconds:7.1f}" for what, seconds in report["sweep overhead (seconds)"].items()
        ]
    if "story" in report:
        lines += _story(report["story"])
    if report.get("faults"):
        lines += ["", "fault injection:", format_table(report["faults"])]
    return "\n".join(lines)
