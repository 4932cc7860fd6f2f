"""The batch backend's workflow wiring (issue 18): who may run the default branch's batch.yml, in which order its
steps hold what, and how train.yml and sweep.yml hand their GPU work to it. The stories that run it under act are
tests/e2e/test_batch_train_workflow.py and test_batch_sweep_workflow.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from step_scripts import PAYLOAD, run_bash
from workflow_files import (
    AWS_CREDENTIALS,
    TUNNEL_CREDENTIALS,
    answers_of,
    as_expression,
    load_yaml,
    platform_call,
    step_uses,
    workflow_path,
)

CALLER_GUARD = "Refuse callers other than train.yml and sweep.yml on their branches"
TRAIN, SWEEP = "refs/heads/train/x", "refs/heads/sweep/y"


def _workflow(project: Path, name: str) -> dict[str, Any]:
    return load_yaml(workflow_path(project, name))


def _batch_job(project: Path) -> dict[str, Any]:
    (job,) = _workflow(project, "batch")["jobs"].values()
    return job


def _guard(
    project: Path,
    tmp_path: Path,
    kind: str,
    event: str,
    ref: str,
    caller: str,
    backend: str = "batch",
    package: str = "ml_project",
) -> tuple[int, str, str]:
    """The caller step's exit code, what it wrote to GITHUB_OUTPUT and printed, for one run's context."""
    (step,) = [s for s in _batch_job(project)["steps"] if s.get("name") == CALLER_GUARD]
    workdir = tmp_path / f"guard-{len(list(tmp_path.iterdir()))}"
    env = {
        "TRAIN_BRANCH_PREFIX": "train/", "SWEEP_BRANCH_PREFIX": "sweep/", "BACKEND": backend, "KIND": kind,
        "GITHUB_EVENT_NAME": event, "GITHUB_REF": ref, "GITHUB_REPOSITORY": "o/r",
        "GITHUB_WORKFLOW_REF": f"o/r/.github/workflows/{caller}", "DEFAULT_BRANCH": "main", "PACKAGE": package,
    }  # fmt: skip
    code, calls = run_bash(step["run"], env, workdir)
    assert calls == []  # the check calls nothing
    output = workdir / "github_output"
    printed = (workdir / "stdout").read_text() if (workdir / "stdout").exists() else ""
    return code, output.read_text() if output.exists() else "", printed


def test_only_train_yml_and_sweep_yml_on_their_branches_may_submit(project: Path, tmp_path: Path) -> None:
    rows = [
        # (kind, event, ref, the caller's file@ref, accepted)
        ("train", "push", TRAIN, f"train.yml@{TRAIN}", True),
        ("train", "workflow_dispatch", TRAIN, f"train.yml@{TRAIN}", True),
        ("sweep", "push", SWEEP, f"sweep.yml@{SWEEP}", True),
        ("sweep", "workflow_dispatch", SWEEP, f"sweep.yml@{SWEEP}", True),
        # A branch's workflow naming the other kind, or the other file.
        ("sweep", "push", TRAIN, f"train.yml@{TRAIN}", False),
        ("train", "push", SWEEP, f"sweep.yml@{SWEEP}", False),
        ("train", "push", TRAIN, f"evil.yml@{TRAIN}", False),
        ("train", "push", TRAIN, f"sweep.yml@{TRAIN}", False),
        # The caller's file read at another ref than the run's, or a run outside both prefixes.
        ("train", "push", TRAIN, "train.yml@refs/heads/main", False),
        ("train", "push", "refs/heads/main", "train.yml@refs/heads/main", False),
        ("sweep", "push", "refs/heads/feature", "sweep.yml@refs/heads/feature", False),
        ("train", "push", "refs/tags/train/v1", "train.yml@refs/tags/train/v1", False),
        # Events outside train.yml's and sweep.yml's triggers.
        ("train", "pull_request", TRAIN, f"train.yml@{TRAIN}", False),
        ("train", "pull_request_target", TRAIN, f"train.yml@{TRAIN}", False),
        ("sweep", "schedule", SWEEP, f"sweep.yml@{SWEEP}", False),
        ("train", "workflow_run", TRAIN, f"train.yml@{TRAIN}", False),
    ]
    for kind, event, ref, caller, accepted in rows:
        code, output, _ = _guard(project, tmp_path, kind, event, ref, caller)
        row = (kind, event, ref, caller)
        if accepted:
            assert code == 0 and output == f"kind={kind}\npackage=ml_project\n", row
        else:
            assert code != 0 and output == "", row


def test_the_default_branch_must_say_batch_and_a_hostile_kind_is_not_printed(
    project: Path, tmp_path: Path
) -> None:
    code, output, printed = _guard(project, tmp_path, "train", "push", TRAIN, f"train.yml@{TRAIN}", "runner")
    assert (
        code != 0
        and output == ""
        and "configs/gpu-runner.yaml on main says backend: runner, not batch" in printed
    )
    # The package the job runs `python -m <package>` on: a Python name, never a word the shell would split.
    for package in ("ml project", "ml;id", "-m", f"x\n::error::{PAYLOAD}", ""):
        code, output, printed = _guard(
            project, tmp_path, "train", "push", TRAIN, f"train.yml@{TRAIN}", package=package
        )
        assert code != 0 and output == "" and "input package is not a Python package name" in printed, package
        assert PAYLOAD not in printed
    hostile = f"train\n::error::{PAYLOAD}"
    code, output, printed = _guard(project, tmp_path, hostile, "push", TRAIN, f"train.yml@{TRAIN}")
    assert code != 0 and output == "" and "input kind is neither train nor sweep" in printed
    assert PAYLOAD not in printed  # a caller's text never reaches the log as a workflow command


def test_batch_yml_holds_the_submit_role_only_after_every_third_party_step(project: Path) -> None:
    """The commit is checked out (as data) and the MLflow tunnel opened before the submit role's credentials; after
    them only this project's own commands run; the last step ends the Batch job on failure, timeout or cancel."""
    job = _batch_job(project)
    steps = job["steps"]
    # The submit role's; the tunnel role's credentials (its own step) are outputs for the connect step alone.
    (aws,) = [s for s in steps if step_uses(s) == AWS_CREDENTIALS and s.get("id") != TUNNEL_CREDENTIALS]
    index = steps.index(aws)
    assert aws["with"]["role-to-assume"] == as_expression("vars.AWS_BATCH_ROLE_ARN")
    assert all("run" in s for s in steps[index + 1 :]), "only our own commands hold the submit role"
    (commit,) = [s for s in steps if s.get("with", {}).get("path") == "job-source"]
    assert steps.index(commit) < index and commit["with"]["persist-credentials"] is False
    assert job["permissions"] == {"contents": "read", "id-token": "write"}
    last = steps[-1]
    assert last["if"] == as_expression("(failure() || cancelled()) && steps.submit.outputs.job-id != ''")
    assert "batch cancel" in last["run"]


def test_no_password_goes_to_the_job_in_its_request(project: Path) -> None:
    """SubmitJob's environment is readable by anyone allowed batch:DescribeJobs: the password comes from the job
    definition's secrets (gpu_runner/batch/batch.yaml), never from a workflow secret passed with --env."""
    (submit,) = [s for s in _batch_job(project)["steps"] if s.get("id") == "submit"]
    assert not [value for value in submit["env"].values() if "secrets." in value], submit["env"]
    assert "PASSWORD" not in submit["run"] and "USERNAME" not in submit["run"]


def test_train_and_sweep_hand_their_gpu_work_to_the_default_branchs_batch_yml(project: Path) -> None:
    train, sweep = _workflow(project, "train")["jobs"], _workflow(project, "sweep")["jobs"]
    for jobs, needs, condition in (
        (train, "start", "needs.start.outputs.backend == 'batch'"),
        (
            sweep,
            "plan",
            as_expression("needs.plan.outputs.trials != '0' && needs.plan.outputs.backend == 'batch'"),
        ),
    ):
        batch = jobs["batch"]
        assert batch["uses"] == platform_call(project, "batch")
        assert batch["needs"] == needs and batch["if"] == condition
        assert batch["permissions"] == {"contents": "read", "id-token": "write"}
        # Secrets by name, never `inherit`: the called workflow gets the MLflow login and nothing else.
        assert set(batch["secrets"]) == {"MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"}
    # The runner backend's jobs run only when the batch job does not, and the other way round.
    assert train["train"]["if"] == "needs.start.outputs.backend != 'batch'"
    assert sweep["trial"]["if"] == as_expression(
        "needs.plan.outputs.trials != '0' && needs.plan.outputs.backend != 'batch'"
    )
    assert sweep["batch"]["with"]["kind"] == "sweep" and "kind" not in train["batch"]["with"]
    # batch.yml takes nothing from the project's answers: the package it runs comes from the caller.
    package = answers_of(project)["package_name"]
    assert train["batch"]["with"]["package"] == sweep["batch"]["with"]["package"] == package
    assert package not in workflow_path(project, "batch").read_text(encoding="utf-8")
    # The job runs the package the caller check passed on, never the input as given.
    (submit,) = [s for s in _batch_job(project)["steps"] if s.get("id") == "submit"]
    assert submit["env"]["PACKAGE"] == as_expression("steps.caller.outputs.package")
    assert sweep["collect"]["needs"] == ["plan", "trial", "batch"]
