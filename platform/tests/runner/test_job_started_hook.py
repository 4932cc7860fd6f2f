"""The runner's job-started hook, rendered as launch renders it and run as the actions runner runs it.

actions/runner's JobHookProvider.cs runs the file as `bash -e <path>` with the default GITHUB_* variables of the
job (ScriptHandler.cs, GitHubContext.cs): so does this test, with a matrix of jobs. Only this run's train job
passes; every other job is refused with a "runner was taken" line and a refusal file, on which the boot script
halts the instance (test_user_data.py: test_refused_job_halts_the_instance_and_runs_no_step).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpu_runner.core import naming
from gpu_runner.core.errors import SettingsError
from gpu_runner.core.naming import RunContext
from gpu_runner.ec2_runner.user_data import render_job_started_hook

REPOSITORY = "octo-org/octo-repo"
WORKFLOW_REF = f"{REPOSITORY}/.github/workflows/train.yml@refs/heads/train/demo"
CTX = RunContext(
    REPOSITORY, "4242", "2", "train/demo", "a" * 40, workflow_ref=WORKFLOW_REF, event_name="push"
)
# What GitHub gives this run's train job (the hook's environment, GITHUB_* only).
TRAIN_JOB = {
    "GITHUB_REPOSITORY": REPOSITORY,
    "GITHUB_RUN_ID": "4242",
    "GITHUB_RUN_ATTEMPT": "2",
    "GITHUB_JOB": "train",
    "GITHUB_WORKFLOW_REF": WORKFLOW_REF,
    "GITHUB_EVENT_NAME": "push",
}

# Each a job that named the label while the instance booted (or later): one field differs from the train job.
HIJACKERS: dict[str, dict[str, str | None]] = {
    "other-repository": {"GITHUB_REPOSITORY": "octo-org/other-repo"},
    "fork-repository-same-name": {"GITHUB_REPOSITORY": "mallory/octo-repo"},
    "other-run": {"GITHUB_RUN_ID": "4243"},
    "run-id-prefix": {"GITHUB_RUN_ID": "42420"},
    "run-id-glob": {"GITHUB_RUN_ID": "*"},
    "other-attempt": {"GITHUB_RUN_ATTEMPT": "1"},
    "start-job-of-the-same-run": {"GITHUB_JOB": "start"},
    "stop-job-of-the-same-run": {"GITHUB_JOB": "stop"},
    "other-workflow-file": {"GITHUB_WORKFLOW_REF": f"{REPOSITORY}/.github/workflows/steal.yml@refs/heads/x"},
    "same-file-other-branch": {"GITHUB_WORKFLOW_REF": f"{REPOSITORY}/.github/workflows/train.yml@refs/pull/7/merge"},
    "workflow-ref-glob": {"GITHUB_WORKFLOW_REF": f"{REPOSITORY}/.github/workflows/*"},
    "pull-request": {"GITHUB_EVENT_NAME": "pull_request"},
    "pull-request-target": {"GITHUB_EVENT_NAME": "pull_request_target"},
    "workflow-run": {"GITHUB_EVENT_NAME": "workflow_run"},
    "event-list-injection": {"GITHUB_EVENT_NAME": "push workflow_dispatch"},
    "no-repository": {"GITHUB_REPOSITORY": None},
    "no-run-id": {"GITHUB_RUN_ID": None},
    "empty-job": {"GITHUB_JOB": ""},
    "no-event": {"GITHUB_EVENT_NAME": None},
}  # fmt: skip


@pytest.mark.parametrize("event", ["push", "workflow_dispatch", "schedule"])
def test_this_runs_train_job_is_accepted(hook: Path, event: str) -> None:
    done, refusal = run_hook(hook, {**TRAIN_JOB, "GITHUB_EVENT_NAME": event})
    assert done.returncode == 0, done.stdout + done.stderr
    assert refusal is None
    assert f"accepted job 'train' of run 4242 (attempt 2), {WORKFLOW_REF}, event {event}" in done.stdout


@pytest.mark.parametrize("change", HIJACKERS.values(), ids=HIJACKERS.keys())
def test_every_other_job_is_refused_and_halts_the_instance(hook: Path, change: dict[str, str | None]) -> None:
    done, refusal = run_hook(hook, {**TRAIN_JOB, **change})
    assert done.returncode != 0, done.stdout
    (field,) = change
    # The job's log: one error annotation naming the field; the boot script halts on the refusal file.
    assert done.stdout.startswith("::error title=GPU runner refused this job::runner was taken: "), (
        done.stdout
    )
    assert field in done.stdout
    assert "accepted" not in done.stdout
    assert refusal is not None and field in refusal


def test_hostile_values_in_the_job_stay_data(hook: Path, tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    done, refusal = run_hook(hook, {**TRAIN_JOB, "GITHUB_JOB": f"$(touch {marker})", "GITHUB_RUN_ID": "`id`"})
    assert done.returncode != 0 and refusal is not None
    assert not marker.exists()


def test_hostile_launch_values_stay_data(tmp_path: Path) -> None:
    # The branch is in the workflow ref: a branch name is chosen by whoever pushes it.
    marker = tmp_path / "PWNED"
    ref = f"{REPOSITORY}/.github/workflows/train.yml@refs/heads/train/'$(touch {marker})'"
    ctx = RunContext(REPOSITORY, "1", "1", "train/x", "a" * 40, workflow_ref=ref, event_name="push")
    (tmp_path / "hooks").mkdir()
    (tmp_path / "refusals").mkdir()
    hook = tmp_path / "hooks" / "job-started.sh"
    hook.write_text(render_job_started_hook(ctx), encoding="utf-8")
    done, refusal = run_hook(
        hook, {**TRAIN_JOB, "GITHUB_RUN_ID": "1", "GITHUB_RUN_ATTEMPT": "1", "GITHUB_WORKFLOW_REF": ref}
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert refusal is None and not marker.exists()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("workflow_ref", "", "GITHUB_WORKFLOW_REF is empty"),
        ("run_id", "", "GITHUB_RUN_ID is empty"),
        ("repository", " ", "GITHUB_REPOSITORY is empty"),
        ("event_name", "pull_request", "GITHUB_EVENT_NAME is 'pull_request'"),
        ("event_name", "", "GITHUB_EVENT_NAME is ''"),
    ],
)
def test_launch_refuses_a_hook_that_could_not_tell_jobs_apart(field: str, value: str, message: str) -> None:
    ctx = RunContext(**{**CTX.__dict__, field: value})
    with pytest.raises(SettingsError, match=message):
        render_job_started_hook(ctx)


def test_the_hook_checks_the_job_train_yml_names() -> None:
    # The job key the hook expects is the one train.yml (and predict.yml, issue 16) runs on the GPU runner.
    assert naming.TRAIN_JOB == "train"
    assert naming.TRAIN_EVENTS == ("push", "workflow_dispatch", "schedule")


# predict.yml's GPU job (issue 16): a dispatch of, or the schedule of, the default branch's predict.yml. The start
# job launched it with its own GITHUB_WORKFLOW_REF (a called workflow sees its caller's: predict.yml@main), so the
# hook takes exactly that run's job `train`, and nothing that differs from it.
PREDICT_REF = f"{REPOSITORY}/.github/workflows/predict.yml@refs/heads/main"
PREDICT_JOB = {
    **TRAIN_JOB,
    "GITHUB_RUN_ID": "5151",
    "GITHUB_RUN_ATTEMPT": "1",
    "GITHUB_WORKFLOW_REF": PREDICT_REF,
}
PREDICT_HIJACKERS: dict[str, dict[str, str]] = {
    "the-predict-job-of-the-cpu-device": {"GITHUB_JOB": "predict"},
    "the-resolve-job": {"GITHUB_JOB": "resolve"},
    "predict-yml-of-another-branch": {"GITHUB_WORKFLOW_REF": f"{REPOSITORY}/.github/workflows/predict.yml@refs/heads/x"},
    "train-yml-on-main": {"GITHUB_WORKFLOW_REF": f"{REPOSITORY}/.github/workflows/train.yml@refs/heads/main"},
    "a-pull-request": {"GITHUB_EVENT_NAME": "pull_request"},
}  # fmt: skip


@pytest.mark.parametrize("event", ["workflow_dispatch", "schedule"])
def test_predict_yml_gpu_job_is_accepted_and_nothing_else(tmp_path: Path, event: str) -> None:
    ctx = RunContext(REPOSITORY, "5151", "1", "main", "b" * 40, workflow_ref=PREDICT_REF, event_name=event)
    (tmp_path / "hooks").mkdir()
    (tmp_path / "refusals").mkdir()
    hook = tmp_path / "hooks" / "job-started.sh"
    hook.write_text(render_job_started_hook(ctx), encoding="utf-8")
    done, refusal = run_hook(hook, {**PREDICT_JOB, "GITHUB_EVENT_NAME": event})
    assert done.returncode == 0 and refusal is None, done.stdout + done.stderr
    assert f"accepted job 'train' of run 5151 (attempt 1), {PREDICT_REF}, event {event}" in done.stdout
    for why, change in PREDICT_HIJACKERS.items():
        done, refusal = run_hook(hook, {**PREDICT_JOB, "GITHUB_EVENT_NAME": event, **change})
        assert done.returncode != 0 and refusal is not None, why


@pytest.fixture(scope="module")
def hook(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The hook where the boot script installs it: <root>/hooks/job-started.sh, refusals in <root>/refusals."""
    root = tmp_path_factory.mktemp("root")
    (root / "hooks").mkdir()
    (root / "refusals").mkdir()
    path = root / "hooks" / "job-started.sh"
    path.write_text(render_job_started_hook(CTX), encoding="utf-8")
    return path


def run_hook(hook: Path, job: dict[str, str | None]) -> tuple[subprocess.CompletedProcess[str], str | None]:
    refusal = hook.parent.parent / "refusals" / "refused"
    refusal.unlink(missing_ok=True)
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}
    env.update({key: value for key, value in job.items() if value is not None})
    done = subprocess.run(
        ["bash", "-e", str(hook)], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    return done, refusal.read_text(encoding="utf-8") if refusal.exists() else None
