"""The docs a newcomer navigates: a README of at most 150 lines whose links resolve, every page of docs/
reachable from it, a layout page (docs/layout.md) that lists exactly the files of the package, each with what
it holds, and every link to the platform's manual (or mention of it, `manual/<page>.md`) naming a page and
heading of the manual at the commit this project pins.

The link, table and manual checks are the platform's (gpu_runner_testing.docs_checks, with their planted
violations there); the README's length and the layout table are this project's, so their planted violations
are below.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from gpu_runner_testing.docs_checks import (
    CELL_SPLIT,
    MANUAL_DIR,
    broken_links,
    manual_link_problems,
    manual_mention_problems,
    mention_files,
    ragged_rows,
    unreachable_pages,
)
from gpu_runner_testing.platform_tree import platform_tree

from gpu_runner.pin.project_pin import read_pin

PROJECT = Path(__file__).resolve().parent.parent
README = PROJECT / "README.md"
DOCS = PROJECT / "docs"
LAYOUT = DOCS / "layout.md"
README_MAX_LINES = 150
# The distribution whose every file the layout page lists: the ML package under src/ (the platform, gpu_runner,
# is documented in the template repository's platform/).
PACKAGE_ROOTS = ("src",)
IGNORED = {"__pycache__"}


@pytest.fixture(scope="module")
def manual() -> Path:
    """The manual's folder in the tree of the platform commit pyproject.toml pins (fetched once per commit)."""
    return platform_tree(PROJECT, PROJECT / ".e2e-cache") / MANUAL_DIR


# ---------------------------------------------------------------------- tests
def test_the_readme_holds_at_most_150_lines() -> None:
    assert readme_too_long(README.read_text(encoding="utf-8")) == ""


def test_every_link_of_the_readme_and_docs_resolves() -> None:
    assert broken_links([README, *sorted(DOCS.glob("*.md"))]) == []


def test_every_docs_page_is_reachable_from_the_readme() -> None:
    assert unreachable_pages(README, DOCS) == []


def test_the_layout_table_lists_exactly_the_files_of_both_packages() -> None:
    assert layout_drift(LAYOUT, PROJECT) == ""


def test_every_layout_row_says_what_the_file_holds() -> None:
    rows = layout_rows(LAYOUT.read_text(encoding="utf-8"))
    assert len(rows) > 40, len(rows)  # the parser sees the tables (both packages hold more than 40 files)
    assert [path for path, holds in rows.items() if len(holds.split()) < 3] == []


def test_every_table_row_has_as_many_cells_as_its_header() -> None:
    assert [row for page in [README, *sorted(DOCS.glob("*.md"))] for row in ragged_rows(page)] == []


def test_every_link_to_the_manual_names_a_page_of_the_pinned_commit(manual: Path) -> None:
    pin = read_pin(PROJECT)
    pages = [README, *sorted(DOCS.glob("*.md"))]
    assert manual_link_problems(pages, manual, pin.repository, pin.commit) == []
    # The check sees the links: the README links the manual's index at the pin.
    assert (
        f"https://github.com/{pin.repository}/blob/{pin.commit}/{MANUAL_DIR}/README.md" in README.read_text()
    )


def test_every_mention_of_the_manual_names_a_page_it_has(manual: Path) -> None:
    assert manual_mention_problems(mention_files(PROJECT), manual, PROJECT) == []


def test_a_readme_over_the_limit_is_refused() -> None:
    assert readme_too_long("line\n" * README_MAX_LINES) == ""
    assert readme_too_long("line\n" * (README_MAX_LINES + 1)) == "README.md has 151 lines; at most 150"


def test_the_layout_check_names_the_missing_and_the_extra_rows(tmp_path: Path) -> None:
    package = tmp_path / "src" / "pkg"
    (package / "__pycache__").mkdir(parents=True)
    for name in ("__init__.py", "listed.py", "unlisted.py", "__pycache__/listed.cpython-311.pyc"):
        (package / name).write_text("", encoding="utf-8")
    (tmp_path / "runner" / "src" / "gpu_runner").mkdir(parents=True)
    (tmp_path / "runner" / "src" / "gpu_runner" / "hook.sh").write_text("", encoding="utf-8")
    layout = tmp_path / "layout.md"
    layout.write_text(
        "| path | what it holds |\n|---|---|\n"
        "| `src/pkg/__init__.py` | the package marker file |\n"
        "| `src/pkg/listed.py` | a listed module here |\n"
        "| `src/pkg/renamed.py` | a module that moved away |\n"
        "| `runner/src/gpu_runner/hook.sh` | a boot hook script |\n",
        encoding="utf-8",
    )
    assert layout_drift(layout, tmp_path) == (
        "docs/layout.md is out of date:\n"
        "  missing rows (on disk, not in the table): src/pkg/unlisted.py\n"
        "  extra rows (in the table, no such file): src/pkg/renamed.py"
    )


def test_layout_rows_read_escaped_pipes_and_skip_other_tables() -> None:
    text = (
        "| page | what |\n|---|---|\n| [x](x.md) | a link row, no path |\n\n"
        "| path | what it holds |\n|---|---|\n| `cli.py` | `run a\\|b\\|c` commands here |\n"
    )
    assert layout_rows(text) == {"cli.py": "`run a\\|b\\|c` commands here"}


# ---------------------------------------------------------------------- the checks
def readme_too_long(text: str) -> str:
    """Empty when the README is short enough, else what is wrong."""
    lines = len(text.splitlines())
    return f"README.md has {lines} lines; at most {README_MAX_LINES}" if lines > README_MAX_LINES else ""


def layout_rows(text: str) -> dict[str, str]:
    """path -> what it holds, from every table row whose first cell is one code span (a path)."""
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in CELL_SPLIT.split(line.strip())[1:-1]]
        if len(cells) == 2 and re.fullmatch(r"`[^`]+`", cells[0]):
            rows[cells[0].strip("`")] = cells[1]
    return rows


def package_files(project: Path) -> set[str]:
    """Every file of both distributions' packages, as project-relative paths (bytecode caches left out)."""
    files = set()
    for root in PACKAGE_ROOTS:
        for path in (project / root).rglob("*"):
            relative = path.relative_to(project)
            skipped = any(part in IGNORED or part.endswith(".egg-info") for part in relative.parts)
            if path.is_file() and not skipped:
                files.add(relative.as_posix())
    return files


def layout_drift(layout: Path, project: Path) -> str:
    """Empty when the layout table lists exactly the package files and every listed path exists; else which
    rows are missing and which are extra."""
    listed = set(layout_rows(layout.read_text(encoding="utf-8")))
    on_disk = package_files(project)
    missing = sorted(on_disk - listed)
    extra = sorted(path for path in listed if not (project / path).exists())
    if not missing and not extra:
        return ""
    return "\n".join(
        [
            "docs/layout.md is out of date:",
            f"  missing rows (on disk, not in the table): {', '.join(missing) or '-'}",
            f"  extra rows (in the table, no such file): {', '.join(extra) or '-'}",
        ]
    )
