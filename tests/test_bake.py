"""Bake the template for the defaults and for every option combination that cookiecutter.json offers.

Each bake must render completely (no `{{`, `{%`, `{#` left in a path or file, GitHub's `${{` excepted), every
YAML/TOML/JSON file must parse, every Python file must compile, optional paths must follow the removal table
of hooks/post_gen_project.py, and `.cookiecutter.json` must give back the answers.
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import json
import re
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    ANSWERS_FILE,
    TEMPLATE_ROOT,
    Bake,
    bake_template,
    iter_files,
    load_hook,
    parse_structured,
    public,
    structured_files,
    template_config,
    text_files,
    write_config,
)
from cookiecutter.main import cookiecutter
from gpu_runner_testing.workflow_checks.workflow_files import platform_call_problems

CONFIG = template_config()
# Choice questions (lists) and yes/no questions (JSON booleans), read from cookiecutter.json.
CHOICES: dict[str, list[str]] = {
    key: value for key, value in CONFIG.items() if isinstance(value, list) and not key.startswith("_")
}
FLAGS: list[str] = [key for key, value in CONFIG.items() if isinstance(value, bool)]

# Jinja left in the output. `${{ ... }}` (GitHub Actions) and `${#var}` (bash) are legitimate.
UNRENDERED = re.compile(r"(?<!\$)\{[{%#]")
# The post-generation hook's placeholders for the platform pin (hooks/post_gen_project.py PLATFORM_TOKENS).
UNFILLED_PIN = re.compile(r"__platform_(?:repository|commit)__")


def matrix() -> list[Any]:
    """Every value of every choice question, each with every combination of the yes/no questions."""
    params = []
    for key, values in CHOICES.items():
        for value in values:
            for flags in itertools.product((True, False), repeat=len(FLAGS)):
                opts = {key: value, **dict(zip(FLAGS, flags, strict=True))}
                params.append(pytest.param(opts, id="-".join(f"{k}={v}" for k, v in opts.items())))
    return params


# Free-text answers the non-default bake also changes: a repository whose default branch is not `main`.
NON_DEFAULT_TEXT = {"default_branch": "develop"}


def non_default() -> dict[str, Any]:
    """The last choice of every choice question, the opposite of every yes/no default, NON_DEFAULT_TEXT."""
    choices = {key: values[-1] for key, values in CHOICES.items()}
    return choices | {flag: not CONFIG[flag] for flag in FLAGS} | NON_DEFAULT_TEXT


def unrendered_spots(root: Path) -> list[str]:
    spots = [f"path {path}" for path in iter_files(root) if UNRENDERED.search(str(path.relative_to(root)))]
    for path, text in text_files(root).items():
        for number, line in enumerate(text.splitlines(), start=1):
            if UNRENDERED.search(line):
                spots.append(f"{path}:{number}: {line.strip()}")
    return spots


def check_bake(result: Any) -> tuple[Path, dict[str, Any]]:
    """Everything every bake must satisfy; returns the project path and the answers it was baked with."""
    assert result.exception is None, repr(result.exception)
    assert result.exit_code == 0
    root: Path = result.project_path
    answers = public(result.context)
    assert root.is_dir()
    assert root.name == answers["project_slug"]

    assert unrendered_spots(root) == []
    assert [
        f"{path}: unfilled pin" for path, text in text_files(root).items() if UNFILLED_PIN.search(text)
    ] == []
    assert platform_call_problems(root, f"{answers['github_owner']}/{answers['github_repo']}") == []

    files = structured_files(root)
    assert any(path.name == "pyproject.toml" for path in files)
    for path in files:
        try:
            parse_structured(path)
        except Exception as error:  # pragma: no cover - the message is the point
            pytest.fail(f"{path.relative_to(root)} does not parse: {error}")

    for path, text in text_files(root).items():
        if path.suffix == ".py":
            ast.parse(text, filename=str(path))

    remove_when = load_hook("post_gen_project", result.context)["REMOVE_WHEN"]
    for (question, answer), paths in remove_when.items():
        for relative in paths:
            expected = answers[question] != answer
            assert (root / relative).exists() == expected, f"{relative} with {question}={answers[question]!r}"

    recorded = json.loads((root / ANSWERS_FILE).read_text(encoding="utf-8"))
    assert recorded == {"cookiecutter": answers}
    # .cruft.json exists when the template is a clean git checkout (tests/test_template_update.py builds one);
    # when it does, it holds the same answers as given (cruft re-renders with them).
    cruft = root / ".cruft.json"
    if cruft.exists():
        context = json.loads(cruft.read_text(encoding="utf-8"))["context"]["cookiecutter"]
        assert public(context) == answers
    return root, answers


def test_bake_defaults(bake: Bake) -> None:
    root, answers = check_bake(bake())

    assert answers["license"] == CHOICES["license"][0]
    assert (root / "LICENSE").is_file()


def test_bake_non_default_combination(bake: Bake) -> None:
    opts = non_default()
    _, answers = check_bake(bake(**opts))

    assert {key: answers[key] for key in opts} == opts


@pytest.mark.matrix
@pytest.mark.parametrize("opts", matrix())
def test_bake_matrix(bake: Bake, opts: dict[str, Any]) -> None:
    _, answers = check_bake(bake(**opts))

    assert {key: answers[key] for key in opts} == opts


def test_replaying_recorded_answers_rebuilds_the_same_project(bake: Bake, tmp_path: Path) -> None:
    """`.cookiecutter.json` is a replay file: the template update path for generated projects."""
    opts = non_default() | {"project_name": "Round Trip", "aws_region": "us-gov-west-1", "use_spot": False}
    first, _ = check_bake(bake(**opts))

    again = cookiecutter(
        str(bake_template()),
        replay=str(first / ANSWERS_FILE),
        output_dir=str(tmp_path / "again"),
        config_file=str(write_config(tmp_path / "user")),
    )
    second = Path(again)

    def tree(root: Path) -> dict[str, bytes]:
        return {str(path.relative_to(root)): path.read_bytes() for path in iter_files(root)}

    assert tree(second) == tree(first)


# sha256 of https://www.apache.org/licenses/LICENSE-2.0.txt (the appendix keeps its placeholders).
APACHE_2_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"
LICENSE_FIRST_LINES = {"MIT": "MIT License", "BSD-3-Clause": "BSD 3-Clause License", "Apache-2.0": ""}


@pytest.mark.parametrize("license_id", [value for value in CHOICES["license"] if value != "Proprietary"])
def test_license_text(bake: Bake, license_id: str) -> None:
    author = "Zoë O'Brien & Co"
    root, _ = check_bake(bake(license=license_id, author_name=author))
    text = (root / "LICENSE").read_text(encoding="utf-8")
    year = datetime.now(UTC).year
    pyproject = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))

    assert text.splitlines()[0] == LICENSE_FIRST_LINES[license_id]
    assert text.endswith(".\n") and not text.endswith("\n\n")
    if license_id == "Apache-2.0":
        assert text.count(f"   Copyright {year} {author}\n") == 1
        canonical = text.replace(f"Copyright {year} {author}", "Copyright [yyyy] [name of copyright owner]")
        assert hashlib.sha256(canonical.encode()).hexdigest() == APACHE_2_SHA256
    else:
        separator = "," if license_id == "BSD-3-Clause" else ""
        assert f"Copyright (c) {year}{separator} {author}\n" in text
    assert pyproject["project"].get("license") == license_id


def test_proprietary_has_no_license(bake: Bake) -> None:
    root, _ = check_bake(bake(license="Proprietary"))
    pyproject = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))

    assert not (root / "LICENSE").exists()
    assert "license" not in pyproject["project"]


def test_removal_table_paths_exist_in_the_template() -> None:
    """A stale entry in REMOVE_WHEN would fail every bake that selects it; catch it by name here."""
    remove_when = load_hook("post_gen_project", {})["REMOVE_WHEN"]
    template_dir = TEMPLATE_ROOT / "{{cookiecutter.project_slug}}"

    assert remove_when
    for (question, answer), paths in remove_when.items():
        assert question in CONFIG, question
        if question in CHOICES:
            assert answer in CHOICES[question], (question, answer)
        for relative in paths:
            assert (template_dir / relative).exists(), relative
