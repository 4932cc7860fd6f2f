"""The checks a project's docs and the platform's manual are held to: every relative link and heading resolves,
every page is reachable from its index, every table row has its header's cells, every test a threat table names
exists, and every link to the manual (`https://github.com/<owner>/<name>/blob/<commit>/platform/manual/...`) or
mention of it (`manual/<page>.md` in a comment or message) names a page and heading the manual has.

Each check is a function of the text and the files on disk, so its planted-violation test runs it on a copy with
one thing wrong (platform/tests/test_docs_checks.py). Written by hand: no Markdown linter checks GitHub's anchors,
cells against their header or test names in a table.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from pathlib import Path

FENCE = re.compile(r"^```.*?^```", flags=re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")
# Inline links [text](target); images and autolinks (<https://...>) need no file.
LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} +(.+?) *$", flags=re.MULTILINE)
CELL_SPLIT = re.compile(r"(?<!\\)\|")
# The manual in the template repository, and a link into it at one commit of one repository.
MANUAL_DIR = "platform/manual"
MANUAL_LINK = re.compile(
    r"https://github\.com/(?P<repository>[^/\s)]+/[^/\s)]+)/blob/(?P<commit>[^/\s)]+)/platform/manual/"
    r"(?P<page>[^#\s)]*)(?:#(?P<anchor>[^\s)]+))?"
)
# A mention of a manual page where no link can be (a comment, a message): `manual/<page>.md[#anchor]`.
MANUAL_MENTION = re.compile(r"(?<![\w/.-])manual/(?P<page>[\w-]+\.md)(?:#(?P<anchor>[\w-]+))?")
# The files that may hold such a mention, and the folders never searched (environments, caches, history).
MENTION_SUFFIXES = (".md", ".py", ".yml", ".yaml", ".toml", ".sh")
MENTION_NAMES = ("Makefile",)
SKIPPED_DIRS = frozenset({".git", ".venv", ".e2e-cache", "__pycache__", "node_modules"})


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
    """What the "test" column (the last) of a threat table names that `project` does not hold: a file, a test in
    that file (`path::test`, or `::test` after a path in the same cell), or a bare test name anywhere in tests/.
    A name marked `template` is one of the template repository's tests and must not be in the project (when it
    moves there, the row should say where); the template's own tests check that it exists there."""
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


def manual_link_problems(pages: list[Path], manual: Path, repository: str, commit: str) -> list[str]:
    """`page: link (why)` for every link of `pages` into the manual that names another repository or commit
    than the pin (`repository`, `commit`), or a page or heading `manual` (the manual's folder) does not have."""
    problems = []
    for page in pages:
        for target in LINK.findall(prose(page.read_text(encoding="utf-8"))):
            found = MANUAL_LINK.fullmatch(target)
            if not found:
                continue
            if (found["repository"], found["commit"]) != (repository, commit):
                problems.append(f"{page.name}: {target} (not the pinned {repository}@{commit})")
            else:
                problems += [f"{page.name}: {target} ({why})" for why in manual_page_problems(found, manual)]
    return problems


def mention_files(root: Path, skipped: Collection[str] = SKIPPED_DIRS) -> list[Path]:
    """The files under `root` that may mention a manual page, in a stable order; `skipped` folders are not
    entered (a project's .venv alone holds some 20,000 files)."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(name for name in dirs if name not in skipped)
        found += [
            Path(folder) / name
            for name in sorted(files)
            if name.endswith(MENTION_SUFFIXES) or name in MENTION_NAMES
        ]
    return found


def manual_mention_problems(files: list[Path], manual: Path, root: Path) -> list[str]:
    """`file: manual/<page>.md#anchor (why)` for every mention in `files` of a page or heading the manual lacks."""
    problems = []
    for path in files:
        for found in MANUAL_MENTION.finditer(path.read_text(encoding="utf-8")):
            problems += [
                f"{path.relative_to(root).as_posix()}: {found[0]} ({why})"
                for why in manual_page_problems(found, manual)
            ]
    return problems


def manual_page_problems(found: re.Match[str], manual: Path) -> list[str]:
    page = manual / found["page"]
    if not page.is_file():
        return [f"no page {found['page']} in the manual"]
    if found["anchor"] and found["anchor"] not in anchors(page):
        return [f"no such heading in {found['page']}"]
    return []
