"""The generated project's pages and the platform's manual name some tests as template `path::test`: tests
that live in this repository, not in the bake (the platform's own, in platform/tests since issue 31). The
docs checks can only check that such a test is not in the project; this checks that each one exists here, in
the file named."""

from __future__ import annotations

import re
from pathlib import Path

from gpu_runner_testing.docs_checks import MANUAL_DIR, defined_tests, names_a_test

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "{{cookiecutter.project_slug}}" / "docs"
MANUAL = ROOT / MANUAL_DIR
REFERENCE = re.compile(r"template `([^`]+)`")


def template_references(text: str) -> list[str]:
    return REFERENCE.findall(text)


def missing_here(reference: str, root: Path) -> str | None:
    """Why `reference` (a path, or path::test, the test maybe a `test_x_*` family) names nothing in root."""
    path, _, name = reference.split()[0].partition("::")
    source = root / path
    if not source.is_file():
        return f"{path}: no such file in the template repository"
    found = not name or names_a_test(name, defined_tests(source))
    return None if found else f"{path}::{name}: no such test in that file"


def test_every_template_reference_of_the_generated_docs_exists_here() -> None:
    pages = [*sorted(DOCS.glob("*.md")), *sorted(MANUAL.glob("*.md"))]
    references = [ref for page in pages for ref in template_references(page.read_text())]
    assert len(references) >= 10, references  # the security page names the platform's tests this way
    assert [why for ref in references if (why := missing_here(ref, ROOT))] == []


def test_a_reference_to_a_gone_file_or_test_is_named(tmp_path: Path) -> None:
    (tmp_path / "platform" / "tests").mkdir(parents=True)
    (tmp_path / "platform" / "tests" / "test_a.py").write_text("def test_kept_when_early(): ...\n")
    page = (
        "| a | template `platform/tests/test_a.py::test_kept_*`, template `platform/tests/test_a.py` |\n"
        "| b | template `platform/tests/test_a.py::test_gone`, "
        "template `platform/tests/test_b.py::test_x` |\n"
    )
    assert [missing_here(ref, tmp_path) for ref in template_references(page)] == [
        None,
        None,
        "platform/tests/test_a.py::test_gone: no such test in that file",
        "platform/tests/test_b.py: no such file in the template repository",
    ]
