"""promote.yml (issue 30, High 1 and 3): the only workflow that serves a model. A dispatch on the default branch in
the `production` environment, with the promote MLflow user of that environment and the promote role (the held-out
set): no branch's code, no training credential, no input that chooses the code it runs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from gpu_runner_testing.workflow_checks.workflow_files import (
    AWS_CREDENTIALS,
    PR_EVENTS,
    SETUP_ACTION,
    iter_strings,
    load_yaml,
    steps_by_uses,
    triggers,
)

from gpu_runner.doctor.doctor_repository import PROMOTE_ENVIRONMENT


def promote_job(project: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    doc = load_yaml(project / ".github" / "workflows" / "promote.yml")
    (job,) = doc["jobs"].values()
    return doc, job


def test_a_dispatch_on_the_default_branch_in_production_and_nothing_else(project: Path) -> None:
    doc, job = promote_job(project)
    assert triggers(doc) == {"workflow_dispatch"}
    assert not triggers(doc) & {*PR_EVENTS, "workflow_run", "workflow_call", "push", "schedule"}
    assert set(doc["on"]["workflow_dispatch"]["inputs"]) == {"run-id"}
    assert doc["permissions"] == {}
    # The role's trust names this environment (gpu_runner/setup/gpu-runner.yaml PromoteRole): the same word here.
    assert job["environment"] == "production"
    assert job["environment"] == PROMOTE_ENVIRONMENT  # the environment `make doctor` checks
    assert (
        job["if"] == "${{ github.ref == format('refs/heads/{0}', github.event.repository.default_branch) }}"
    )
    assert job["permissions"] == {"contents": "read", "id-token": "write"}
    assert job["runs-on"] == "ubuntu-latest"  # a CPU runner measures the small model (docs/training.md)


def test_the_code_is_the_default_branchs_and_no_input_picks_another(project: Path) -> None:
    _, job = promote_job(project)
    (checkout,) = steps_by_uses(job, "actions/checkout")
    assert set(checkout["with"]) == {"persist-credentials"}  # no `ref:`: the dispatched default-branch commit
    for step in job["steps"]:
        # The run id reaches the command through env only, never pasted into a script.
        assert "inputs." not in step.get("run", ""), step.get("name")


def test_only_the_promote_credentials_and_the_promote_role(project: Path) -> None:
    _, job = promote_job(project)
    secrets = set(re.findall(r"secrets\.(\w+)", " ".join(iter_strings(job))))
    assert secrets == {"MLFLOW_PROMOTE_USERNAME", "MLFLOW_PROMOTE_PASSWORD"}  # never the `ci` user's
    (credentials,) = steps_by_uses(job, AWS_CREDENTIALS)
    assert credentials["with"]["role-to-assume"] == "${{ vars.AWS_PROMOTE_ROLE_ARN }}"
    assert credentials["if"] == "${{ vars.AWS_PROMOTE_ROLE_ARN != '' }}"  # the packaged digits need no AWS
    (promote,) = [s for s in job["steps"] if s.get("name") == "Promote"]
    assert promote["env"]["MLFLOW_TRACKING_USERNAME"] == "${{ secrets.MLFLOW_PROMOTE_USERNAME }}"
    assert promote["env"]["RUN_ID"] == "${{ inputs.run-id }}"
    assert 'promote --run-id="${RUN_ID}"' in promote["run"]
    setups = steps_by_uses(job, SETUP_ACTION)
    assert [s["with"]["enable-cache"] for s in setups] == ["false"]  # credentials in the job: no shared cache
