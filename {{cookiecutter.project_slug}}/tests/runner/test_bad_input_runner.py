"""The "Bad input" rows (docs/bad-input.md) for `gpu-runner`, its settings file and the AWS / GitHub answers to a
launch.

Each row runs `gpu-runner` in-process (the `cli_env` of conftest.py: settings file, workflow environment) against
the moto server, with AWS errors injected by AwsFaults and GitHub's errors answered by the REST double, then checks
the table's message verbatim and every "left running" claim against those servers. The triggers and claims are in
tests/doubles/runner_bad_input_triggers.py; tests/test_bad_input.py checks that the table's ids and the TRIGGERS
of both sides match one to one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from bad_input_table import Row, check_row, table_rows
from doubles.runner_bad_input_triggers import CLAIMS, TRIGGERS, Case
from gpu_runner_testing.aws_faults import AwsFaults
from gpu_runner_testing.github_double import GitHubDouble

from gpu_runner import cli
from gpu_runner.core.aws import Aws


@pytest.mark.parametrize("row", [r for r in table_rows() if r.id in TRIGGERS], ids=lambda r: r.id)
def test_bad_input_row(
    row: Row,
    cli_env: Path,
    aws: Aws,
    faults: AwsFaults,
    github_double: GitHubDouble,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    # The CLI's own Aws() would open a fresh session, out of reach of the injected faults and the request count.
    monkeypatch.setattr(cli, "Aws", lambda: aws)
    case = Case(aws, faults, github_double, monkeypatch, count_requests(aws))
    try:
        status = TRIGGERS[row.id](case)
        captured = capsys.readouterr()
        check_row(row, status, captured.out, captured.err, CLAIMS, case)
    finally:
        for undo in reversed(case.stack):
            undo()


def count_requests(aws: Aws) -> list[str]:
    """Every request sent through `aws` from now on (clients created already included)."""
    sent: list[str] = []

    def record(request: Any, **kwargs: Any) -> None:
        sent.append(kwargs.get("event_name", ""))

    aws.session.events.register("before-send", record)
    for client in aws._clients.values():
        client.meta.events.register("before-send", record)
    return sent
