"""check-jsonschema with its vendored GitHub workflow / action / Dependabot schemas accepts this project's
files and rejects invalid ones. (A bake has no composite action of its own: the platform's are checked where
they live, the template repository; an action a team adds is checked here.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from gpu_runner_testing.workflow_checks.planted_violations import BAD_DEPENDABOT, BAD_WORKFLOW
from gpu_runner_testing.workflow_checks.workflow_linters import check_jsonschema


def test_schemas_of_the_github_files(project_files: dict[str, list[Path]]) -> None:
    checks = [
        ("vendor.github-workflows", project_files["workflows"]),
        ("custom.github-workflows-require-timeout", project_files["workflows"]),
        ("vendor.dependabot", project_files["dependabot"]),
    ]
    if project_files["actions"]:  # an action a team adds
        checks.append(("vendor.github-actions", project_files["actions"]))
    for schema, files in checks:
        proc = check_jsonschema(schema, files)
        assert proc.returncode == 0, f"{schema}:\n{proc.stdout}{proc.stderr}"


@pytest.mark.parametrize(
    ("schema", "filename", "text"),
    [
        (
            "vendor.github-workflows",
            "wf.yml",
            "on: push\njobs:\n  a:\n    timeout-minutes: soon\n    steps: []\n",
        ),
        ("custom.github-workflows-require-timeout", "bad.yml", BAD_WORKFLOW),
        ("vendor.github-actions", "action.yml", "name: x\ndescription: no runs section\n"),
        ("vendor.dependabot", "dependabot.yml", BAD_DEPENDABOT.replace("weekly", "sometimes")),
    ],
)
def test_schemas_negative_control(tmp_path: Path, schema: str, filename: str, text: str) -> None:
    path = tmp_path / filename
    path.write_text(text, encoding="utf-8")
    proc = check_jsonschema(schema, [path])
    assert proc.returncode == 1, f"{schema} accepted an invalid file:\n{proc.stdout}{proc.stderr}"
    assert "Schema validation errors" in proc.stdout + proc.stderr
