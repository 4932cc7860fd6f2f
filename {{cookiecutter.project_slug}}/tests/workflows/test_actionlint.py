"""actionlint (with shellcheck on every `run:` and local actions resolved) finds nothing in this project's
workflows and catches the planted violations. (The platform's composite actions are shellchecked where they live,
the template repository's tests/test_platform_actions.py.)"""

from __future__ import annotations

from pathlib import Path

from gpu_runner_testing.workflow_checks.workflow_linters import actionlint, describe_actionlint


def test_actionlint_clean_on_the_workflows(project: Path, project_files: dict[str, list[Path]]) -> None:
    code, errors = actionlint(project_files["workflows"], project)
    assert (code, errors) == (0, []), describe_actionlint(errors)


def test_actionlint_negative_control(bad_project: Path) -> None:
    code, errors = actionlint([bad_project / ".github" / "workflows" / "bad.yml"], bad_project)
    assert code == 1
    kinds = {e["kind"] for e in errors}
    messages = "\n".join(e["message"] for e in errors)
    # Untrusted context in a script, a shellcheck finding (proves shellcheck ran), and an unknown input to the
    # planted local action (proves local actions are resolved).
    assert {"expression", "shellcheck", "action"} <= kinds, describe_actionlint(errors)
    assert "github.head_ref" in messages
    assert "SC2086" in messages
    assert 'input "bogus" is not defined' in messages
