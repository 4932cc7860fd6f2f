"""scripts/template_update.py (`make template-update`) on planted states of a real git repository: what it
refuses before cruft runs, and that every kind of trace a hunk that did not apply leaves is found and named.

The update itself (cruft baking two template commits and applying the difference) is tested where the template
lives: its tests/test_template_update.py bakes an older commit and updates it.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "template_update.py"
GIT_ID = ["-c", "user.name=test", "-c", "user.email=test@example.invalid"]


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("template_update", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


update = load_script()


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", *GIT_ID, *args], cwd=root, check=True, capture_output=True)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / ".cruft.json").write_text(json.dumps({"template": "x", "commit": "a" * 40}), encoding="utf-8")
    (root / "Makefile").write_text("TEST_WORKERS ?= 2\n", encoding="utf-8")
    (root / ".gitignore").write_text("ignored/\n", encoding="utf-8")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "bake")
    return root


def test_a_clean_tree_passes_and_reports_nothing(project: Path) -> None:
    update.require_clean_tree(project)

    assert update.conflict_report(project, "a" * 40, "b" * 40) == ""


@pytest.mark.parametrize(
    ("change", "shown"),
    [
        (lambda root: (root / "Makefile").write_text("TEST_WORKERS ?= 4\n", encoding="utf-8"), " M Makefile"),
        (lambda root: (root / "notes.txt").write_text("wip\n", encoding="utf-8"), "?? notes.txt"),
    ],
    ids=["modified", "untracked"],
)
def test_a_dirty_tree_is_refused_with_the_fix(project: Path, change, shown: str) -> None:
    change(project)

    with pytest.raises(update.UpdateError) as error:
        update.require_clean_tree(project)

    assert shown in str(error.value)
    assert "Commit or stash" in str(error.value)


def test_a_project_outside_git_is_refused_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "GIT_CEILING_DIRECTORIES", str(tmp_path.parent)
    )  # a tmp inside a checkout is outside too

    with pytest.raises(update.UpdateError, match=r"not a git work tree.*git init"):
        update.require_clean_tree(tmp_path)


@pytest.mark.parametrize("text", ["{}", '{"template": "", "commit": "abc"}', "[]", "not json"])
def test_a_cruft_json_without_template_or_commit_is_refused(project: Path, text: str) -> None:
    (project / ".cruft.json").write_text(text, encoding="utf-8")

    with pytest.raises(update.UpdateError, match=r"\.cruft\.json is not cruft's format"):
        update.recorded_state(project)


def test_a_project_without_cruft_json_is_told_how_to_link_it(project: Path) -> None:
    (project / ".cruft.json").unlink()

    with pytest.raises(update.UpdateError, match=r"\.cruft\.json is missing.*cruft link"):
        update.recorded_commit(project)


def test_conflict_markers_and_rejected_hunks_are_each_named_with_the_fix(project: Path) -> None:
    (project / "Makefile").write_text(
        "<<<<<<< ours\nTEST_WORKERS ?= 4\n=======\nTEST_WORKERS ?= 2\n>>>>>>> theirs\n", encoding="utf-8"
    )
    (project / "ignored").mkdir()
    # A .rej is found even where .gitignore hides it from `git status`.
    (project / "ignored" / "settings.yaml.rej").write_text("@@ -1 +1 @@\n-a\n+b\n", encoding="utf-8")
    (project / "uv.lock.rej").write_text("@@ -1 +1 @@\n-a\n+b\n", encoding="utf-8")

    report = update.conflict_report(project, "a" * 40, "b" * 40)

    assert report.startswith("ERROR: the template update aaaaaaaaaaaa -> bbbbbbbbbbbb did not apply cleanly")
    assert "  Makefile: conflict markers" in report
    assert (
        "  ignored/settings.yaml.rej: the template's hunks that did not apply to ignored/settings.yaml"
        in report
    )
    assert "  uv.lock.rej: " in report and "run `uv lock`" in report
    assert "delete the .rej" in report


def test_a_file_that_only_mentions_a_marker_mid_line_is_no_conflict(project: Path) -> None:
    (project / "Makefile").write_text("# git writes <<<<<<< at the start of a line\n", encoding="utf-8")

    assert update.conflict_report(project, "a" * 40, "b" * 40) == ""
