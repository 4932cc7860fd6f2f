"""platform/LAYOUT.md lists exactly the files of the gpu-runner distribution, each with what it holds.

The bake's own layout test covers only the team's package since the platform left the bake (issue 31); this
is the platform's. A row is a table line whose first cell is one code span (a path relative to platform/).
"""

from __future__ import annotations

import re
from pathlib import Path

PLATFORM = Path(__file__).resolve().parents[1] / "platform"
LAYOUT = PLATFORM / "LAYOUT.md"
IGNORED = ("__pycache__", ".egg-info")
ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|(.*)\|\s*$")


def layout_rows(text: str) -> dict[str, str]:
    """path -> what it holds."""
    return {match[1]: match[2].strip() for line in text.splitlines() if (match := ROW.match(line.strip()))}


def package_files(root: Path) -> set[str]:
    """Every file under root/src, as root-relative paths, bytecode caches and build metadata left out."""
    return {
        path.relative_to(root).as_posix()
        for path in (root / "src").rglob("*")
        if path.is_file() and not any(part.endswith(IGNORED) for part in path.relative_to(root).parts)
    }


def layout_drift(text: str, root: Path) -> list[str]:
    listed = set(layout_rows(text))
    on_disk = package_files(root)
    return [f"missing row: {path}" for path in sorted(on_disk - listed)] + [
        f"row for no file: {path}" for path in sorted(listed - on_disk)
    ]


def test_the_layout_lists_exactly_the_platforms_files() -> None:
    assert layout_drift(LAYOUT.read_text(encoding="utf-8"), PLATFORM) == []


def test_every_row_says_what_the_file_holds() -> None:
    rows = layout_rows(LAYOUT.read_text(encoding="utf-8"))
    assert len(rows) > 40, len(rows)  # the parser sees the table
    assert [path for path, holds in rows.items() if len(holds.split()) < 3] == []


def test_a_new_file_or_a_stale_row_is_named(tmp_path: Path) -> None:
    (tmp_path / "src" / "gpu_runner").mkdir(parents=True)
    (tmp_path / "src" / "gpu_runner" / "new.py").write_text("", encoding="utf-8")
    (tmp_path / "src" / "gpu_runner" / "__pycache__").mkdir()
    (tmp_path / "src" / "gpu_runner" / "__pycache__" / "new.cpython-311.pyc").write_bytes(b"")
    text = "| path | holds |\n|---|---|\n| `src/gpu_runner/gone.py` | a module that was removed |\n"
    assert layout_drift(text, tmp_path) == [
        "missing row: src/gpu_runner/new.py",
        "row for no file: src/gpu_runner/gone.py",
    ]
