"""The pull-request comment jobs of train.yml and sweep.yml (issue 17): the only jobs with `pull-requests:
write`, never reachable from a pull request, holding no AWS credential of their own (only the MLflow tunnel role's,
as step outputs of the tunnel action), running the default branch's gpu-runner, and unable to fail the training's
result."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

from gpu_runner_testing.workflow_checks.workflow_files import (
    AWS_CREDENTIALS,
    PR_EVENTS,
    SETUP_ACTION,
    TUNNEL_ACTION,
    all_workflows,
    answers_of,
    as_expression,
    gpu_workflows,
    steps_by_uses,
    triggers,
)

COMMENT_JOBS = {("train", "comment"): "train", ("sweep", "comment"): "sweep"}
COMMENT_PERMISSIONS = {"contents": "read", "pull-requests": "write", "id-token": "write"}
# What the comment step may read: its token, the run to report, and MLflow (read-only use).
COMMENT_ENV = {
    "GITHUB_TOKEN", "MLFLOW_RUN_ID", "BRANCH", "COMMIT", "MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_USERNAME",
    "MLFLOW_TRACKING_PASSWORD",
}  # fmt: skip


def pull_request_write_problems(workflows: dict[str, dict[str, Any]]) -> list[str]:
    """Who holds a write permission on pull requests or issues other than the two comment jobs, and any
    workflow a pull request can trigger that holds one at all."""
    problems = []
    for name, doc in workflows.items():
        scopes = {"(workflow)": doc.get("permissions")} | {
            job_id: job.get("permissions") for job_id, job in doc.get("jobs", {}).items()
        }
        for job_id, permissions in scopes.items():
            writes = (
                {k for k, v in permissions.items() if k in ("pull-requests", "issues") and v == "write"}
                if isinstance(permissions, dict)
                else ({"(write-all)"} if permissions == "write-all" else set())
            )
            if not writes:
                continue
            if (name, job_id) not in COMMENT_JOBS:
                problems.append(f"{name}.{job_id} holds {sorted(writes)}")
            if triggers(doc) & set(PR_EVENTS):
                problems.append(
                    f"{name}.{job_id} holds {sorted(writes)} in a workflow a pull request triggers"
                )
    return problems


def test_only_the_comment_jobs_may_write_to_pull_requests(project: Path) -> None:
    workflows = all_workflows(project)
    assert pull_request_write_problems(workflows) == []
    for (name, job_id), _kind in COMMENT_JOBS.items():
        assert workflows[name]["jobs"][job_id]["permissions"] == COMMENT_PERMISSIONS, name


def test_the_write_check_catches_a_planted_grant(project: Path) -> None:
    """Negative control: the train job with `pull-requests: write`, and ci.yml (a pull_request trigger) with
    a comment job of its own, are both reported."""
    workflows = copy.deepcopy(all_workflows(project))
    workflows["train"]["jobs"]["train"]["permissions"]["pull-requests"] = "write"
    workflows["ci"]["jobs"]["comment"] = {"permissions": {"issues": "write"}}
    problems = pull_request_write_problems(workflows)
    assert "train.train holds ['pull-requests']" in problems
    assert "ci.comment holds ['issues']" in problems
    assert "ci.comment holds ['issues'] in a workflow a pull request triggers" in problems


def test_a_forks_pull_request_never_triggers_the_comment(project: Path) -> None:
    """train.yml and sweep.yml run on a push to their branches and on a dispatch, both of which need write
    access to this repository: a fork's pull request triggers neither (no pull_request, pull_request_target or
    workflow_run, which would run with the base repository's token)."""
    for name in ("train", "sweep"):
        assert triggers(gpu_workflows(project)[name]) == {"push", "workflow_dispatch"}, name


def test_the_comment_job_runs_the_default_branchs_gpu_runner_without_aws(project: Path) -> None:
    default_branch = answers_of(project)["default_branch"]
    for (name, job_id), kind in COMMENT_JOBS.items():
        job = gpu_workflows(project)[name]["jobs"][job_id]
        assert job["runs-on"] == "ubuntu-latest" and 0 < job["timeout-minutes"] <= 15
        checkout, setup, settings, tunnel, comment = job["steps"]
        assert checkout["uses"].startswith("actions/checkout@")
        assert checkout["with"] == {"persist-credentials": False, "ref": default_branch}, name
        assert steps_by_uses(job, SETUP_ACTION) == [setup]
        assert setup["with"] == {"install": "runner", "enable-cache": "false"}
        # id-token for the tunnel role only: no credentials step of the job's own, and the tunnel action keeps
        # its credentials out of the job's environment (tests/workflows/test_mlflow_tunnel_steps.py).
        assert not steps_by_uses(job, AWS_CREDENTIALS)
        assert "workflow-settings" in settings["run"]
        assert steps_by_uses(job, TUNNEL_ACTION) == [tunnel]
        assert tunnel["with"]["role-to-assume"] == as_expression("vars.MLFLOW_TUNNEL_ROLE_ARN")
        # A tunnel that fails leaves the comment step to report it; the run's result stays the training's.
        assert tunnel["continue-on-error"] is True
        assert comment["env"]["MLFLOW_TRACKING_URI"] == as_expression("steps.mlflow.outputs.tracking-uri")
        # A refused comment never turns the run red: an annotation and a summary line say it instead.
        assert comment["continue-on-error"] is True
        assert set(comment["env"]) == COMMENT_ENV, name
        assert comment["env"]["GITHUB_TOKEN"] == as_expression("github.token")
        assert comment["env"]["BRANCH"] == as_expression("github.ref_name")
        assert comment["run"].startswith(
            f"uv run --no-sync gpu-runner --settings configs/gpu-runner.yaml pr-comment --kind={kind} "
        )
        assert '--mlflow-run-id="${MLFLOW_RUN_ID}"' in comment["run"]


def test_the_comment_follows_the_run_it_reports(project: Path) -> None:
    jobs = gpu_workflows(project)["train"]["jobs"]
    # After stop (which logs the cost), also when training failed; not after a cancel, nor without a run. With
    # backend: batch, after the batch job (which logs the cost itself), with its run.
    assert jobs["comment"]["needs"] == ["start", "train", "stop", "batch"]
    run_id = (
        "needs.start.outputs.backend == 'batch' && needs.batch.outputs.mlflow-run-id "
        "|| needs.train.outputs.mlflow-run-id"
    )
    assert jobs["comment"]["if"] == as_expression(f"!cancelled() && ({run_id}) != ''")
    assert jobs["comment"]["steps"][-1]["env"]["MLFLOW_RUN_ID"] == as_expression(run_id)
    sweep = gpu_workflows(project)["sweep"]["jobs"]
    assert sweep["comment"]["needs"] == ["plan", "collect"]
    assert sweep["comment"]["if"] == as_expression(
        "!cancelled() && needs.collect.result == 'success' && needs.plan.outputs.parent-run-id != ''"
    )
    assert sweep["comment"]["steps"][-1]["env"]["MLFLOW_RUN_ID"] == as_expression(
        "needs.plan.outputs.parent-run-id"
    )


def permissions_table(project: Path) -> dict[tuple[str, str], dict[str, str]]:
    """docs/workflow-permissions.md's "workflow token's permissions" table: (file stem, job id) -> permissions."""
    text = (project / "docs" / "workflow-permissions.md").read_text(encoding="utf-8")
    section = text.split("## The workflow token's permissions, job by job", 1)[1]
    table: dict[tuple[str, str], dict[str, str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`"):
            continue
        names = re.findall(r"`([^`]+)`", cells[0])
        workflow, jobs = names[0].removesuffix(".yml"), names[1:]
        granted = dict(pair.split(": ") for pair in cells[1].split(", "))
        for job in jobs:
            assert (workflow, job) not in table, f"{workflow}.{job} twice in the table"
            table[(workflow, job)] = granted
    return table


def test_the_permissions_table_matches_the_workflows(project: Path) -> None:
    actual = {
        (name, job_id): job.get("permissions")
        for name, doc in all_workflows(project).items()
        for job_id, job in doc["jobs"].items()
    }
    assert permissions_table(project) == actual
