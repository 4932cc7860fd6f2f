"""The docs a newcomer navigates: a README of at most 150 lines whose links resolve, every page of docs/
reachable from it, a layout page (docs/layout.md) that lists exactly the files of both packages, each with what
it holds, and a threat model (docs/security.md) whose every named test exists.

Each check is a function of the text and the files on disk, so the planted-violation tests below run the same
function on a copy with one thing wrong: a check that cannot fail would fail them.
"""

from __future__ import annotations

import re
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
README = PROJECT / "README.md"
DOCS = PROJECT / "docs"
LAYOUT = DOCS / "layout.md"
SECURITY = DOCS / "security.md"
README_MAX_LINES = 150
# The distribution whose every file the layout page lists: the ML package under src/ (the platform, gpu_runner,
# is documented in the template repository's platform/).
PACKAGE_ROOTS = ("src",)
IGNORED = {"__pycache__"}

FENCE = re.compile(r"^```.*?^```", flags=re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")
# Inline links [text](target); images and autolinks (<https://...>) need no file.
LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} +(.+?) *$", flags=re.MULTILINE)
CELL_SPLIT = re.compile(r"(?<!\\)\|")


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


def test_every_test_the_threat_model_names_exists() -> None:
    assert missing_test_references(SECURITY, PROJECT) == []


def test_a_readme_over_the_limit_is_refused() -> None:
    assert readme_too_long("line\n" * README_MAX_LINES) == ""
    assert readme_too_long("line\n" * (README_MAX_LINES + 1)) == "README.md has 151 lines; at most 150"


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


# ---------------------------------------------------------------------- the checks
def readme_too_long(text: str) -> str:
    """Empty when the README is short enough, else what is wrong."""
    lines = len(text.splitlines())
    return f"README.md has {lines} lines; at most {README_MAX_LINES}" if lines > README_MAX_LINES else ""


def prose(text: str) -> str:
    """The text without code blocks and code spans: a `[x](y)` in code is no link."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading (github-slugger, as github.com renders Markdown): lower case, code marks
    and punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(match) for match in HEADING.findall(FENCE.sub("", page.read_text(encoding="utf-8")))}


def links(page: Path) -> list[str]:
    """The relative targets of a page's links (web and mail links left out)."""
    targets = LINK.findall(prose(page.read_text(encoding="utf-8")))
    return [t for t in targets if not re.match(r"[a-z]+:", t)]


def broken_links(pages: list[Path]) -> list[str]:
    """`page: target (why)` for every relative link whose file or heading does not exist."""
    broken = []
    for page in pages:
        for target in links(page):
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{page.name}: {target} (no such heading)")
    return broken


def unreachable_pages(readme: Path, docs: Path) -> list[str]:
    """docs/*.md pages no chain of links from the README reaches, as paths relative to the project."""
    seen, todo = {readme.resolve()}, [readme.resolve()]
    while todo:
        page = todo.pop()
        for target in links(page):
            linked = (page.parent / target.partition("#")[0]).resolve()
            if linked.suffix == ".md" and linked.exists() and linked not in seen:
                seen.add(linked)
                todo.append(linked)
    root = readme.resolve().parent
    return sorted(str(p.resolve().relative_to(root)) for p in docs.glob("*.md") if p.resolve() not in seen)


def ragged_rows(page: Path) -> list[str]:
    """Table rows (outside code fences) whose cell count differs from their table's header row."""
    found, header = [], 0
    fenced = False
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        if line.startswith("```"):
            fenced = not fenced
        if fenced or not line.startswith("|"):
            header = 0
            continue
        cells = len(CELL_SPLIT.split(line.strip().strip("|")))
        if not header:
            header = cells
        elif cells != header:
            found.append(f"{page.name}:{number}: {cells} cells, its table's header has {header}")
    return found


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


def last_cells(text: str) -> list[str]:
    """The last cell of every table row but the separators."""
    cells = [CELL_SPLIT.split(line.strip())[1:-1] for line in text.splitlines() if line.startswith("|")]
    return [row[-1] for row in cells if len(row) > 1 and not set(row[0].strip()) <= {"-"}]


def defined_tests(source: Path) -> set[str]:
    return set(
        re.findall(r"^\s*(?:async )?def (test_\w+)", source.read_text(encoding="utf-8"), flags=re.MULTILINE)
    )


def names_a_test(wanted: str, defined: set[str]) -> bool:
    """`test_x`, `test_x[a case ...]` (a parametrized case) or `test_x_*` / `test_x_...` (a family)."""
    name = wanted.split("[", 1)[0]
    if name.endswith(("*", "...")):
        return any(test.startswith(name.rstrip("*.")) for test in defined)
    return name in defined


# `source` after a template reference: a file of the template repository, not of this project.
TEMPLATE_FILE = Path("<template>")


def missing_test_references(page: Path, project: Path) -> list[str]:
    """What the "test" column (the last) of a threat table names that this project does not hold: a file, a test in
    that file (`path::test`, or `::test` after a path in the same cell), or a bare test name anywhere in tests/.
    A name marked `template` must not be in this project (when it moves here, the row should say where); the
    template's own tests check that it exists there (tests/test_template_references.py)."""
    everywhere = set().union(*(defined_tests(f) for f in (project / "tests").rglob("*.py")))
    missing = []
    for cell in last_cells(page.read_text(encoding="utf-8")):
        source: Path | None = None
        for template, span in re.findall(r"(template )?`([^`]+)`", cell):
            path, _, name = span.split()[0].partition("::")
            if template:
                # A `::test` after it would name a test of the template's file, which nothing here can check.
                source = TEMPLATE_FILE
                if names_a_test(name or path, everywhere):
                    missing.append(
                        f"template {name or path}: this project has it now (drop 'template', name its file)"
                    )
            elif path.endswith(".py"):
                found = project / path if "/" in path else next((project / "tests").rglob(path), None)
                if found is None or not found.exists():
                    missing.append(f"{path}: no such file")
                    continue
                source = found
                if name and not names_a_test(name, defined_tests(found)):
                    missing.append(f"{path}::{name}: no such test in that file")
            elif not path and name and source is TEMPLATE_FILE:
                missing.append(
                    f"::{name} after a template reference: write it in full, template `<file>::{name}`"
                )
            elif not path and name and source is not None:
                if not names_a_test(name, defined_tests(source)):
                    missing.append(
                        f"{source.relative_to(project).as_posix()}::{name}: no such test in that file"
                    )
            elif path.startswith("test_") and not names_a_test(span, everywhere):
                missing.append(f"{span}: no such test in tests/")
    return missing
