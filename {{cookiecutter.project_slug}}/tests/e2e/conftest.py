"""Prints the e2e report (timeline and fault table) at the end of a run that produced one."""

from __future__ import annotations

import pytest
from e2e_report import REPORT, load, render, reset
from harness import PROJECT, image_python
from stories import Stack, make_stack

# Set by the stack fixture: only a run that told stories prints (and owns) the report.
_STORIES_RAN: list[bool] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    report = load()
    if report and _STORIES_RAN:
        terminalreporter.section("e2e report")
        terminalreporter.write_line(render(report))
        terminalreporter.write_line(f"(saved in {REPORT})")


@pytest.fixture(scope="session")
def stack(moto_endpoint: str, mlflow_server: str) -> Stack:
    """The servers, the GPU-image stand-in and the AWS set-up every story shares; a fresh report."""
    reset()
    _STORIES_RAN.append(True)
    return make_stack(moto_endpoint, mlflow_server, image_python(PROJECT / ".e2e-cache"))
