"""What passes between a project's workflows and its jobs' code (gpu_job.job_contract): the values train.yml's
and sweep-trial.yml's GPU job hands in, checked in GitHub Actions (issue 13, item 5: the config must be a file
of the checkout, the commit a full SHA, the attempt a number from 1), and the step outputs and job summary the
project's commands write back. A project's tests/test_workflow_contract.py runs its CLI against the same
refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_job.errors import JobInputError
from gpu_job.job_contract import MLFLOW_RUN_ID_OUTPUT, append_job_summary, attempt, check, write_step_output
from gpu_job.tracking import job_summary

IN_ACTIONS = {"GITHUB_ACTIONS": "true", "GITHUB_JOB": "train"}


def test_a_real_dispatch_passes(tmp_path: Path) -> None:
    env = {**IN_ACTIONS, "TRAIN_COMMIT": "0123456789abcdef0123456789abcdef01234567", "TRAIN_ATTEMPT": "2"}
    check(Path("configs/train.yaml"), env, repository=tmp_path)


@pytest.mark.parametrize(
    ("config", "env", "message"),
    [
        ("/etc/passwd", {}, "--config: '/etc/passwd' is not a path inside the repository"),
        ("../../etc/passwd", {}, "--config: '../../etc/passwd' is not a path inside the repository"),
        ("configs/train.yaml", {"TRAIN_COMMIT": "--x"}, "TRAIN_COMMIT: '--x' is not a commit"),
        ("configs/train.yaml", {"TRAIN_COMMIT": "HEAD~1"}, "TRAIN_COMMIT: 'HEAD~1' is not a commit"),
        ("configs/train.yaml", {"TRAIN_ATTEMPT": "0"}, "TRAIN_ATTEMPT: '0' is not an attempt number"),
        ("configs/train.yaml", {"TRAIN_ATTEMPT": "--x"}, "TRAIN_ATTEMPT: '--x' is not an attempt number"),
    ],
)  # fmt: skip
def test_bad_values_are_named(tmp_path: Path, config: str, env: dict[str, str], message: str) -> None:
    with pytest.raises(JobInputError, match="^" + message.replace("(", r"\(")):
        check(Path(config), {**IN_ACTIONS, **env}, repository=tmp_path)


def test_outside_the_gpu_job_any_config_file_may_be_used(tmp_path: Path) -> None:
    """By hand, and in the CI's test job (GITHUB_ACTIONS=true too), whose tests train on temporary configs."""
    check(Path("/elsewhere/train.yaml"), {"TRAIN_COMMIT": "not-checked"}, repository=tmp_path)
    check(
        Path("/elsewhere/train.yaml"), {"GITHUB_ACTIONS": "true", "GITHUB_JOB": "test"}, repository=tmp_path
    )


def test_job_summary_is_appended_in_github_actions_only(tmp_path: Path) -> None:
    text = job_summary("http://mlflow:5000", "3", "abc", {"test_accuracy": 0.9812})
    summary = tmp_path / "summary.md"
    assert append_job_summary(text, {"GITHUB_STEP_SUMMARY": str(summary)})
    assert append_job_summary(text, {"GITHUB_STEP_SUMMARY": str(summary)})
    assert summary.read_text().count("### Training run") == 2
    assert not append_job_summary(text, {})


def test_step_output_for_the_stop_job(tmp_path: Path) -> None:
    """train.yml's stop job reads the run id from the train step's $GITHUB_OUTPUT to log the cost there."""
    out = tmp_path / "github_output"
    out.write_text("interrupted=true\n")
    assert write_step_output(MLFLOW_RUN_ID_OUTPUT, "0123abcd", {"GITHUB_OUTPUT": str(out)})
    assert out.read_text().splitlines() == ["interrupted=true", "mlflow-run-id=0123abcd"]
    assert not write_step_output(MLFLOW_RUN_ID_OUTPUT, "0123abcd", {})
    with pytest.raises(ValueError, match="single line"):
        write_step_output(MLFLOW_RUN_ID_OUTPUT, "a\nb=c", {"GITHUB_OUTPUT": str(out)})


@pytest.mark.parametrize(("value", "expected"), [("", 1), ("3", 3), ("0", 1), ("--x", 1), (" 2 ", 2)])
def test_attempt_is_the_step_of_per_attempt_metrics(value: str, expected: int) -> None:
    assert attempt({"TRAIN_ATTEMPT": value}) == expected
