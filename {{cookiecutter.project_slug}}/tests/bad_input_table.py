"""The "Bad input" table of docs/bad-input.md, read as the single source of truth of tests/test_bad_input.py
and tests/runner/test_bad_input_runner.py, and the checks every row gets."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TABLE = Path(__file__).resolve().parent.parent / "docs" / "bad-input.md"
HEADING = "# Bad input: what you see and what is left running"
COLUMNS = ["id", "where", "input", "error message (exact)", "left running"]


@dataclass(frozen=True)
class Row:
    id: str
    where: str
    input: str
    message: str
    left: tuple[str, ...]


def table_rows(page: Path = TABLE) -> list[Row]:
    """The table under HEADING; the message cell is one code span, taken verbatim; "left running" is a list of
    claims separated by "; "."""
    section = page.read_text(encoding="utf-8").split(HEADING, 1)[1].split("\n## ", 1)[0]
    lines = [line.strip() for line in section.splitlines() if line.strip().startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    assert header == COLUMNS, header
    rows = []
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        assert len(cells) == len(COLUMNS), line
        message = cells[3]
        assert message.startswith("`") and message.endswith("`") and message.count("`") == 2, line
        rows.append(Row(cells[0], cells[1], cells[2], message[1:-1], tuple(cells[4].split("; "))))
    return rows


def check_row(
    row: Row, status: int, out: str, err: str, claims: Mapping[str, Callable[[Any], None]], case: Any
) -> None:
    """A failed command, the row's message verbatim on stderr without a traceback, and each claim checked."""
    assert status != 0, out + err
    assert row.message in err, err
    assert "Traceback" not in err
    unknown = [claim for claim in row.left if claim not in claims]
    assert not unknown, f"no check for {unknown}; known: {sorted(claims)}"
    for claim in row.left:
        claims[claim](case)
