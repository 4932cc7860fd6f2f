"""actionlint (with shellcheck on every `run:` and the local setup action resolved) finds nothing in this
project's workflows, and shellcheck nothing in its composite actions; each catches the planted violations."""

from __future__ import annotations

from pathlib import Path

from workflow_linters import actionlint, describe_actionlint, shellcheck_action


def test_actionlint_clean_on_the_workflows(project: Path, project_files: dict[str, list[Path]]) -> None:
    code, errors = actionlint(project_files["workflows"], project)
    assert (code, errors) == (0, []), describe_actionlint(errors)


def test_actionlint_negative_control(bad_project: Path) -> None:
    code, errors = actionlint([bad_project / ".github" / "workflows" / "bad.yml"], bad_project)
    assert code == 1
    kinds = {e["kind"] for e in errors}
    messages = "\n".join(e["message"] for e in errors)
    # Untrusted context in a script, a shellcheck finding (proves shellcheck ran), and an unknown input to the
    # local setup action (proves local actions are resolved).
    assert {"expression", "shellcheck", "action"} <= kinds, describe_actionlint(errors)
    assert "github.head_ref" in messages
    assert "SC2086" in messages
    assert 'input "bogus" is not defined' in messages


def test_shellcheck_clean_on_composite_actions(project_files: dict[str, list[Path]]) -> None:
    problems = [p for action in project_files["actions"] for p in shellcheck_action(action)]
    assert not problems, "\n".join(problems)


def test_shellcheck_composite_negative_control(bad_project: Path) -> None:
    problems = shellcheck_action(bad_project / ".github" / "actions" / "bad" / "action.yml")
    assert any("SC2086" in p for p in problems), problems
