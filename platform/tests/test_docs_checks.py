"""The docs checks a project's docs test and the template's manual test run, each on a copy with one thing wrong:
a check that cannot fail would fail here."""

from __future__ import annotations

from pathlib import Path

from gpu_runner_testing.docs_checks import (
    broken_links,
    manual_link_problems,
    manual_mention_problems,
    mention_files,
    missing_test_references,
    ragged_rows,
    unreachable_pages,
)

REPOSITORY, COMMIT = "acme/mlops-template", "a" * 40
BASE = f"https://github.com/{REPOSITORY}/blob/{COMMIT}/platform/manual"


def manual_folder(root: Path) -> Path:
    manual = root / "manual"
    manual.mkdir()
    (manual / "setup.md").write_text("# Setup\n\n## Secrets and variables\n", encoding="utf-8")
    return manual


def test_a_broken_link_or_anchor_is_found(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# A page\n\n## Its section\n", encoding="utf-8")
    readme = tmp_path / "README.md"
    readme.write_text(
        "[ok](docs/page.md) [ok](docs/page.md#its-section) [web](https://example.com) `[code](docs/no.md)`\n"
        "[gone](docs/gone.md) [bad anchor](docs/page.md#no-such-section) [here](#nowhere)\n",
        encoding="utf-8",
    )
    assert broken_links([readme]) == [
        "README.md: docs/gone.md (no such file)",
        "README.md: docs/page.md#no-such-section (no such heading)",
        "README.md: #nowhere (no such heading)",
    ]


def test_a_row_pasted_into_the_wrong_table_is_found(tmp_path: Path) -> None:
    """What once happened in the README: a row of the docs table spliced into the middle of another table's row."""
    page = tmp_path / "README.md"
    page.write_text(
        "| to change | edit | read first |\n|---|---|---|\n| a | `b` | [c](c.md) |\n"
        "| hyper | `x` | [d](d.md) | the everyday mode \\| escaped |\n| [t](t.md) |\n\n"
        "```\n| a fenced | block |\n```\n",
        encoding="utf-8",
    )
    assert ragged_rows(page) == [
        "README.md:4: 4 cells, its table's header has 3",
        "README.md:5: 1 cells, its table's header has 3",
    ]


def test_a_page_nothing_links_to_is_found(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "linked.md").write_text("# Linked\n\n[next](next.md)\n", encoding="utf-8")
    (docs / "next.md").write_text("# Next, linked from a linked page\n", encoding="utf-8")
    (docs / "orphan.md").write_text("# Nobody links here\n", encoding="utf-8")
    (tmp_path / "README.md").write_text("[linked](docs/linked.md)\n", encoding="utf-8")
    assert unreachable_pages(tmp_path / "README.md", docs) == ["docs/orphan.md"]


def test_a_threat_row_naming_a_gone_test_is_found(tmp_path: Path) -> None:
    (tmp_path / "tests" / "runner").mkdir(parents=True)
    (tmp_path / "tests" / "runner" / "test_a.py").write_text(
        "def test_kept() -> None: ...\ndef test_taken_when_early() -> None: ...\n", encoding="utf-8"
    )
    (tmp_path / "tests" / "test_b.py").write_text("def test_moved_here() -> None: ...\n", encoding="utf-8")
    page = tmp_path / "security.md"
    page.write_text(
        "| attacker | test |\n|---|---|\n"
        "| a | `tests/runner/test_a.py::test_kept`, `::test_taken_*`, `test_a.py` (matrix), `None` |\n"
        "| b | `test_kept[a case ...]`, `tests/runner/test_a.py -k 15`, template `test_only_in_the_template` |\n"
        "| c | `tests/runner/test_a.py::test_moved_here`, `::test_gone`, `tests/test_gone.py`, `test_renamed` |\n"
        "| d | template `tests/test_workflows.py::test_moved_here` |\n"
        "| e | `tests/runner/test_a.py::test_kept`, template `platform/tests/test_x.py::test_y`, `::test_z` |\n",
        encoding="utf-8",
    )
    assert missing_test_references(page, tmp_path) == [
        "tests/runner/test_a.py::test_moved_here: no such test in that file",
        "tests/runner/test_a.py::test_gone: no such test in that file",
        "tests/test_gone.py: no such file",
        "test_renamed: no such test in tests/",
        "template test_moved_here: this project has it now (drop 'template', name its file)",
        "::test_z after a template reference: write it in full, template `<file>::test_z`",
    ]


def test_a_manual_link_to_another_commit_a_missing_page_or_heading_is_found(tmp_path: Path) -> None:
    manual = manual_folder(tmp_path)
    page = tmp_path / "README.md"
    page.write_text(
        f"[ok]({BASE}/setup.md#secrets-and-variables) [web](https://example.com) `[code]({BASE}/gone.md)`\n"
        f"[gone]({BASE}/gone.md) [anchor]({BASE}/setup.md#no-such-heading)\n"
        f"[old](https://github.com/{REPOSITORY}/blob/{'b' * 40}/platform/manual/setup.md)\n"
        f"[fork](https://github.com/someone/fork/blob/{COMMIT}/platform/manual/setup.md)\n",
        encoding="utf-8",
    )
    assert manual_link_problems([page], manual, REPOSITORY, COMMIT) == [
        f"README.md: {BASE}/gone.md (no page gone.md in the manual)",
        f"README.md: {BASE}/setup.md#no-such-heading (no such heading in setup.md)",
        f"README.md: https://github.com/{REPOSITORY}/blob/{'b' * 40}/platform/manual/setup.md "
        f"(not the pinned {REPOSITORY}@{COMMIT})",
        f"README.md: https://github.com/someone/fork/blob/{COMMIT}/platform/manual/setup.md "
        f"(not the pinned {REPOSITORY}@{COMMIT})",
    ]


def test_a_mention_of_a_missing_manual_page_or_heading_is_found(tmp_path: Path) -> None:
    manual = manual_folder(tmp_path)
    source = tmp_path / "train.yml"
    source.write_text(
        "# see manual/setup.md and manual/setup.md#secrets-and-variables (platform/manual/gone.md is a path)\n"
        "# manual/gone.md, manual/setup.md#no-such-heading\n",
        encoding="utf-8",
    )
    assert manual_mention_problems([source], manual, tmp_path) == [
        "train.yml: manual/gone.md (no page gone.md in the manual)",
        "train.yml: manual/setup.md#no-such-heading (no such heading in setup.md)",
    ]


def test_the_mention_search_reads_the_projects_text_files_and_no_environment(tmp_path: Path) -> None:
    for name in ("Makefile", "README.md", "src/pkg/cli.py", ".github/workflows/train.yml", "boot.sh",
                 ".venv/lib/site.py", "src/pkg/__pycache__/cli.md", "data/image.png", "uv.lock"):  # fmt: skip
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("manual/setup.md\n", encoding="utf-8")
    assert [path.relative_to(tmp_path).as_posix() for path in mention_files(tmp_path)] == [
        "Makefile",
        "README.md",
        "boot.sh",
        ".github/workflows/train.yml",
        "src/pkg/cli.py",
    ]
