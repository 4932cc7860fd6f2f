"""The "Bad input" table (docs/bad-input.md), row by row: the input given for real, the message verbatim, what
is left.

That table is the single source of truth: rows are read from it by id, and every id has exactly one trigger, in
tests/bad_input_triggers.py (training CLI, train.yaml, data sources) or in
tests/doubles/runner_bad_input_triggers.py (gpu-runner, AWS, GitHub; run by tests/runner/test_bad_input_runner.py).
A row's "left running" cell is a list of claims separated by "; ", each one checked against the real servers.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from bad_input_table import Row, check_row, table_rows
from bad_input_triggers import CLAIMS, TRIGGERS, Case, mlflow_runs

PROJECT = Path(__file__).resolve().parent.parent
RUNNER_TRIGGERS = PROJECT / "tests" / "doubles" / "runner_bad_input_triggers.py"
MIN_ROWS = 22


def test_the_table_has_enough_unique_rows_and_every_id_one_trigger() -> None:
    rows = table_rows()
    ids = [row.id for row in rows]
    assert len(rows) >= MIN_ROWS
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    runner_ids = runner_trigger_ids()
    assert not set(TRIGGERS) & runner_ids, "an id has a trigger in both files"
    assert set(ids) == set(TRIGGERS) | runner_ids


def test_the_parser_reads_every_cell() -> None:
    # A row the parser silently dropped or mangled would escape its test: pin one row in full.
    row = next(r for r in table_rows() if r.id == "config-unknown-key")
    assert row.message == "training.epoch: unknown key (remove it or fix its spelling)"
    assert row.left == ("no MLflow run created", "checkpoint in S3 untouched")


@pytest.mark.parametrize("row", [r for r in table_rows() if r.id in TRIGGERS], ids=lambda r: r.id)
def test_bad_input_row(
    row: Row, in_tmp: Path, mlflow_server: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    case = Case(in_tmp, mlflow_server, monkeypatch, runs_before=mlflow_runs(mlflow_server))

    status = TRIGGERS[row.id](case)

    captured = capsys.readouterr()
    check_row(row, status, captured.out, captured.err, CLAIMS, case)


def runner_trigger_ids() -> set[str]:
    """TRIGGERS' keys in the runner side's module, read without importing it (the training tests do not import the runner)."""
    tree = ast.parse(RUNNER_TRIGGERS.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(isinstance(t, ast.Name) and t.id == "TRIGGERS" for t in targets):
                assert isinstance(node.value, ast.Dict)
                return {ast.literal_eval(key) for key in node.value.keys if key is not None}
    raise AssertionError(f"no TRIGGERS dict in {RUNNER_TRIGGERS}")
