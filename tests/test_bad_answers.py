"""The README's "Bad answers" table, row by row, through the real cookiecutter CLI.

The README is the single source of truth: each row's answer is given by the trigger of the same id, the
message cell must appear verbatim on stderr, and the "left running" claim is checked on the output directory.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import TEMPLATE_ROOT, cli_no_input

README = TEMPLATE_ROOT / "README.md"
HEADING = "## Bad answers: what you see and what is left behind"
COLUMNS = ["id", "where", "input", "error message (exact)", "left running"]
MIN_ROWS = 4


@dataclass(frozen=True)
class Row:
    id: str
    message: str
    left: tuple[str, ...]


def readme_rows() -> list[Row]:
    """The table under HEADING; the message cell is one code span, taken verbatim."""
    section = README.read_text(encoding="utf-8").split(HEADING, 1)[1].split("\n## ", 1)[0]
    lines = [line.strip() for line in section.splitlines() if line.strip().startswith("|")]
    assert [cell.strip() for cell in lines[0].strip("|").split("|")] == COLUMNS, lines[0]
    rows = []
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        assert len(cells) == len(COLUMNS), line
        assert cells[3].startswith("`") and cells[3].endswith("`") and cells[3].count("`") == 2, line
        rows.append(Row(cells[0], cells[3][1:-1], tuple(cells[4].split("; "))))
    return rows


Run = subprocess.CompletedProcess[str]

TRIGGERS: dict[str, Callable[[Path], Run]] = {
    "answer-project-slug": lambda workdir: cli_no_input(workdir, project_slug="My-Project"),
    "answer-package-name": lambda workdir: cli_no_input(workdir, package_name="my-package"),
    "answer-aws-region": lambda workdir: cli_no_input(workdir, aws_region="mars-east-1"),
    "answer-instance-types": lambda workdir: cli_no_input(
        workdir, gpu_instance_types="g4dn.xlarge,,g5.xlarge"
    ),
    "answer-s3-bucket": lambda workdir: cli_no_input(workdir, s3_bucket="My_Bucket"),
    "answer-idle-timeout": lambda workdir: cli_no_input(workdir, idle_timeout_minutes="200"),
    "answer-default-branch": lambda workdir: cli_no_input(workdir, default_branch="my main"),
    "answer-default-branch-under-train-prefix": lambda workdir: cli_no_input(
        workdir, default_branch="train/main"
    ),
    "answer-sweep-prefix-overlaps-train": lambda workdir: cli_no_input(
        workdir, sweep_branch_prefix="train/hpo/"
    ),
}


def nothing_left(workdir: Path) -> None:
    assert list((workdir / "out").iterdir()) == []


CLAIMS: dict[str, Callable[[Path], None]] = {"no project directory left behind": nothing_left}


def test_every_row_has_one_trigger_and_there_are_enough() -> None:
    ids = [row.id for row in readme_rows()]
    assert len(ids) >= MIN_ROWS
    assert len(ids) == len(set(ids)), ids
    assert set(ids) == set(TRIGGERS)


@pytest.mark.parametrize("row", readme_rows(), ids=lambda row: row.id)
def test_bad_answer_row(row: Row, tmp_path: Path) -> None:
    result = TRIGGERS[row.id](tmp_path)
    assert result.returncode != 0, result.stdout
    assert row.message in result.stderr.splitlines(), result.stderr
    unknown = [claim for claim in row.left if claim not in CLAIMS]
    assert not unknown, f"no check for {unknown}; known: {sorted(CLAIMS)}"
    for claim in row.left:
        CLAIMS[claim](tmp_path)
