"""zizmor --offline (workflow security) finds nothing in this project's GitHub files, with the regular persona (what
`make lint` runs) and the auditor persona (every audit, pedantic ones included), catches the planted violations, and
every inline `# zizmor: ignore[...]` is expected, reasoned and needed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from gpu_runner_testing.workflow_checks.workflow_linters import (
    describe_zizmor,
    inline_zizmor_ignores,
    zizmor,
    zizmor_location,
)

# Every inline `# zizmor: ignore[...]` in the project, per file, in order. Each must carry a reason,
# and test_zizmor_ignores_are_needed proves each suppresses a real finding on its own line and nothing else.
# self-repository: zizmor prefers `uses: $/.github/workflows/sweep-trial.yml` for sweep.yml's call of its own
# trial workflow, which act (the workflow tests) and GitHub Enterprise Server do not understand; `./` is equivalent.
# (The platform's actions and reusable workflows are called pinned, `<owner>/<template>/.github/<path>@<commit>`:
# nothing to ignore. train.yml and predict.yml carry `secrets-outside-env` ignores only, checked below.)
EXPECTED_ZIZMOR_IGNORES = {
    ".github/workflows/train.yml": [],
    ".github/workflows/sweep.yml": ["self-repository"],
    ".github/workflows/predict.yml": [],
}


# The auditor persona's `secrets-outside-env`: the MLflow `ci` credential (repository secrets MLFLOW_TRACKING_USERNAME and
# MLFLOW_TRACKING_PASSWORD) in the jobs that reach MLflow outside a reusable workflow (zizmor does not audit those:
# environments and reusable workflows do not mix). Per file, the jobs, each with both lines and this reason; no
# other secret. docs/workflow-permissions.md "The MLflow ci credential" says why no environment holds it: a job that names an
# environment gets the OIDC subject `environment:<name>` instead of its branch, which every role's trust is keyed on.
SECRETS_OUTSIDE_ENV = {
    ".github/workflows/train.yml": ["train", "comment"],
    ".github/workflows/sweep.yml": ["plan", "collect", "comment"],
    ".github/workflows/predict.yml": ["resolve", "predict", "train"],
}
SECRETS_OUTSIDE_ENV_REASON = "why no environment: docs/workflow-permissions.md#the-mlflow-ci-credential"
CI_CREDENTIAL_LINE = re.compile(
    r"^\s+(MLFLOW_TRACKING_(?:USERNAME|PASSWORD)): \$\{\{ secrets\.\1 \}\}  # zizmor"
)
JOB_KEY = re.compile(r"^  ([\w-]+):\s*$")


def test_zizmor_clean_on_the_github_files(project: Path, project_files: dict[str, list[Path]]) -> None:
    files = [p for group in project_files.values() for p in group]
    code, findings = zizmor(files, project)
    assert (code, findings) == (0, []), describe_zizmor(findings)


def test_zizmor_auditor_clean_on_the_github_files(
    project: Path, project_files: dict[str, list[Path]]
) -> None:
    """The auditor persona runs every audit, the pedantic and auditor-only ones too (zizmor's docs, "Usage" >
    "Using personas"): nothing but what an inline ignore explains. The train job runs in host mode, so there is
    no container image to pin (its wheels are sha256-pinned in uv.lock); a user's `container:` must be pinned by
    digest (the pedantic `unpinned-images` audit flags it)."""
    files = [p for group in project_files.values() for p in group]
    code, findings = zizmor(files, project, persona="auditor")
    assert (code, findings) == (0, []), describe_zizmor(findings)


@pytest.mark.parametrize(
    ("relpath", "expected"),
    [
        (
            ".github/workflows/bad.yml",
            {
                "unpinned-uses",
                "template-injection",
                "artipacked",
                "excessive-permissions",
                "dangerous-triggers",
            },
        ),
        (".github/actions/bad/action.yml", {"template-injection"}),
        (".github/dependabot.yml", {"dependabot-execution", "dependabot-cooldown"}),
    ],
)
def test_zizmor_negative_control(bad_project: Path, relpath: str, expected: set[str]) -> None:
    code, findings = zizmor([bad_project / relpath], bad_project)
    assert code != 0
    assert expected <= {f["ident"] for f in findings}, describe_zizmor(findings)


def test_zizmor_ignores_are_exactly_the_expected_ones(project: Path) -> None:
    found = inline_zizmor_ignores(project)
    other = {rel: [r for _, r, _, _ in items if r != "secrets-outside-env"] for rel, items in found.items()}
    assert other == EXPECTED_ZIZMOR_IGNORES
    for items in found.values():
        for number, _rule, reason, line in items:
            assert len(reason) >= 20, f"line {number}: an ignore needs its reason on the same line"
            if (
                _rule == "secrets-outside-env"
            ):  # test_the_secrets_outside_an_environment_are_the_ci_credential
                continue
            # self-repository: sweep.yml's call of its own trial workflow, nothing else.
            assert re.match(r"^\s*uses: \./\.github/workflows/sweep-trial\.yml #", line), line


def test_zizmor_ignores_are_needed(project: Path, project_files: dict[str, list[Path]]) -> None:
    """With ignore comments switched off, zizmor's auditor persona (every audit) reports exactly one finding per
    ignore, on that line, of that audit: each ignore is needed and covers nothing else."""
    files = [p for group in project_files.values() for p in group]
    _, findings = zizmor(files, project, persona="auditor", ignores=False)
    reported = sorted((*zizmor_location(f, project), f["ident"]) for f in findings)
    expected = sorted(
        (rel, number, rule)
        for rel, items in inline_zizmor_ignores(project).items()
        for number, rule, _, _ in items
    )
    assert reported == expected, describe_zizmor(findings)


def test_the_secrets_outside_an_environment_are_the_ci_credential(project: Path) -> None:
    """Every `secrets-outside-env` ignore sits on a line handing a step the MLflow ci username or password, in the
    expected jobs, with the one reason; the section that reason points to exists. A new secret (the promote
    credential, a token) cannot be silenced by copying the comment."""
    found: dict[str, list[str]] = {}
    for rel, items in inline_zizmor_ignores(project).items():
        lines = (project / rel).read_text(encoding="utf-8").splitlines()
        for number, rule, reason, line in items:
            if rule != "secrets-outside-env":
                continue
            assert reason == SECRETS_OUTSIDE_ENV_REASON, f"{rel}:{number}: {reason!r}"
            assert CI_CREDENTIAL_LINE.match(line), (
                f"{rel}:{number}: not the MLflow ci credential: {line.strip()}"
            )
            job = next(m[1] for text in reversed(lines[:number]) if (m := JOB_KEY.match(text)))
            found.setdefault(rel, []).append(job)
    assert found == {
        rel: [job for job in jobs for _ in range(2)] for rel, jobs in SECRETS_OUTSIDE_ENV.items()
    }
    security = (project / "docs" / "workflow-permissions.md").read_text(encoding="utf-8")
    assert re.search(r"^## The MLflow ci credential$", security, flags=re.MULTILINE)
