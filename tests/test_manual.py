"""The platform's manual (platform/manual/), which every bake links at its pinned commit (issue 31): its
links and headings resolve, every page is reachable from its index, its tables are whole, it holds no template
syntax (nobody renders it), every test its threat model names exists (a project's in the template's project
folder), and every link or mention of it in the template, the platform and this repository's workflows names a
page and heading it has.

Its setup page's "Secrets and variables" table names what the template's workflows and the platform's read
(the platform's tests/test_manual_setup.py holds the page to doctor). The checks are
gpu_runner_testing.docs_checks, whose planted violations the platform's tests/test_docs_checks.py runs.
"""

from __future__ import annotations

import re
from pathlib import Path

from gpu_runner_testing.docs_checks import (
    MANUAL_DIR,
    broken_links,
    manual_link_problems,
    manual_mention_problems,
    mention_files,
    missing_test_references,
    ragged_rows,
    unreachable_pages,
)

ROOT = Path(__file__).resolve().parents[1]
MANUAL = ROOT / MANUAL_DIR
PAGES = sorted(MANUAL.glob("*.md"))
PROJECT = ROOT / "{{cookiecutter.project_slug}}"
SETUP = MANUAL / "setup.md"
# The placeholders the post-generation hook fills with the pin (hooks/post_gen_project.py).
PIN_TOKENS = ("__platform_repository__", "__platform_commit__")
# Where a comment or message may mention a manual page: the template's project, the platform, the workflows
# and actions every bake calls, the hooks.
MENTION_ROOTS = (
    PROJECT,
    ROOT / "platform" / "src",
    ROOT / "platform" / "tests",
    ROOT / ".github",
    ROOT / "hooks",
)
PLANTED = ROOT / "platform" / "tests" / "test_docs_checks.py"  # mentions of missing pages, on purpose


def test_every_link_and_heading_of_the_manual_resolves() -> None:
    assert len(PAGES) >= 15, PAGES
    assert broken_links(PAGES) == []


def test_every_link_of_this_repositorys_own_pages_resolves() -> None:
    """The README, the contributor guide and the platform's changelog and layout link into the manual too."""
    pages = [
        ROOT / "README.md",
        ROOT / "CONTRIBUTING.md",
        ROOT / "platform" / "CHANGELOG.md",
        ROOT / "platform" / "LAYOUT.md",
    ]
    assert broken_links(pages) == []


def test_every_page_of_the_manual_is_reachable_from_its_index() -> None:
    assert unreachable_pages(MANUAL / "README.md", MANUAL) == []


def test_every_table_row_of_the_manual_has_as_many_cells_as_its_header() -> None:
    assert [row for page in PAGES for row in ragged_rows(page)] == []


def test_the_manual_holds_no_template_syntax() -> None:
    """Nobody renders the manual: a `{{ cookiecutter.x }}` left in it would reach the reader as written."""
    pattern = re.compile(r"(?<!\$)\{\{|\{%")
    assert [f"{page.name}:{n}" for page in PAGES for n, line in enumerate(page.read_text().splitlines(), 1)
            if pattern.search(line)] == []  # fmt: skip


def test_every_test_the_threat_model_names_exists() -> None:
    """The project's tests as the template holds them (`template` ones: tests/test_template_references.py)."""
    assert missing_test_references(MANUAL / "security.md", PROJECT) == []


def test_every_link_of_the_template_to_the_manual_names_a_page_it_has() -> None:
    pages = [PROJECT / "README.md", *sorted((PROJECT / "docs").glob("*.md"))]
    assert manual_link_problems(pages, MANUAL, *PIN_TOKENS) == []
    linked = "\n".join(page.read_text(encoding="utf-8") for page in pages)
    # Every page of the manual but the index is linked from the project's README or docs.
    assert {page.name for page in PAGES} - {"README.md"} <= set(
        re.findall(r"/platform/manual/([\w-]+\.md)", linked)
    )


def test_every_mention_of_the_manual_names_a_page_it_has() -> None:
    files = [path for root in MENTION_ROOTS for path in mention_files(root) if path != PLANTED]
    assert manual_mention_problems(files, MANUAL, ROOT) == []
    # The check sees the mentions: the doctor's fixes and the workflows name pages this way.
    assert sum("manual/" in path.read_text(encoding="utf-8") for path in files) >= 20


# ---------------------------------------------------------------------- setup.md against the workflows
def setup_table() -> dict[str, str]:
    """name -> kind from the "Secrets and variables" table of the manual's setup.md."""
    section = SETUP.read_text(encoding="utf-8").split("## Secrets and variables", 1)[1].split("\n#", 1)[0]
    table: dict[str, str] = {}
    for row in re.findall(r"^\| (`.+?) \| (\w+) \|", section, flags=re.MULTILINE):
        for name in re.findall(r"`([A-Z_]+)`", row[0]):
            table[name] = row[1].rstrip("s")
    return table


def workflow_uses() -> dict[str, str]:
    """The `vars.` and `secrets.` of the template's workflows and the platform's start, stop, batch.yml."""
    uses: dict[str, str] = {}
    platform = ROOT / ".github" / "workflows"
    called = [platform / f"{name}.yml" for name in ("gpu-runner-start", "gpu-runner-stop", "batch")]
    for workflow in [*(PROJECT / ".github" / "workflows").glob("*.yml"), *called]:
        text = workflow.read_text(encoding="utf-8")
        uses |= {name: "variable" for name in re.findall(r"\bvars\.([A-Z_]+)", text)}
        uses |= {
            name: "secret" for name in re.findall(r"\bsecrets\.([A-Z_]+)", text) if name != "GITHUB_TOKEN"
        }
    # promote.yml's MLflow credentials are secrets of the `production` environment, not of the repository.
    return {name: kind for name, kind in uses.items() if not name.startswith("MLFLOW_PROMOTE_")}


def test_the_settings_table_names_what_the_workflows_read() -> None:
    assert setup_table() == workflow_uses()
    # The parser is not vacuous: it sees every row (the roles, the MLflow tunnel role, the Batch submit role).
    assert len(setup_table()) == 12
