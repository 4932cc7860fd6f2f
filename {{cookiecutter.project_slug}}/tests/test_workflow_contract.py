"""What passes between train.yml's GPU job and the training CLI: the values it hands in, checked in GitHub Actions
(issue 13, item 5: the config must be a file of the checkout, the commit a full SHA, the attempt a number from
1), and the step outputs and job summary the CLI writes back."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from {{ cookiecutter.package_name }}.config import ConfigError
from {{ cookiecutter.package_name }}.tracking import job_summary
from {{ cookiecutter.package_name }}.workflow_contract import (
    MLFLOW_RUN_ID_OUTPUT,
    append_job_summary,
    attempt,
    check,
    write_step_output,
)

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
    with pytest.raises(ConfigError, match="^" + message.replace("(", r"\(")):
        check(Path(config), {**IN_ACTIONS, **env}, repository=tmp_path)


def test_outside_the_gpu_job_any_config_file_may_be_used(tmp_path: Path) -> None:
    """By hand, and in the CI's test job (GITHUB_ACTIONS=true too), whose tests train on temporary configs."""
    check(Path("/elsewhere/train.yaml"), {"TRAIN_COMMIT": "not-checked"}, repository=tmp_path)
    check(
        Path("/elsewhere/train.yaml"), {"GITHUB_ACTIONS": "true", "GITHUB_JOB": "test"}, repository=tmp_path
    )


@pytest.mark.parametrize("command", ["train", "gpu-preflight"])
def test_the_cli_refuses_a_config_outside_the_checkout_before_anything_runs(
    tmp_path: Path, command: str
) -> None:
    """As train.yml calls it (`--config=...`): exit 2 naming the field, before TensorFlow or MLflow load."""
    result = subprocess.run(
        [sys.executable, "-m", "{{ cookiecutter.package_name }}", command, "--config=/etc/passwd"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, **IN_ACTIONS, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"},
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "error: --config: '/etc/passwd' is not a path inside the repository" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "outputs").exists()


@pytest.mark.parametrize(
    ("flag", "extra"),
    [("--config", ["--sweep=configs/sweep.yaml"]), ("--sweep", ["--config=configs/train.yaml"])],
)
def test_a_sweep_trial_refuses_a_file_outside_the_checkout_before_anything_runs(
    tmp_path: Path,
    flag: str,
    extra: list[str],
    capsys: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """sweep-trial.yml's job `train` on the GPU runner: a dispatch input may not point either file at the host."""
    from {{ cookiecutter.package_name }}.cli import main

    monkeypatch.chdir(tmp_path)
    for key, value in IN_ACTIONS.items():
        monkeypatch.setenv(key, value)
    status = main(["sweep", "trial", f"{flag}=/etc/passwd", *extra, "--trial=0"])
    assert status == 2
    assert f"error: {flag}: '/etc/passwd' is not a path inside the repository" in capsys.readouterr().err
    assert not (tmp_path / "outputs").exists()


def test_a_sweep_trial_refuses_an_attempt_that_is_not_a_number(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sweep-trial.yml hands the matrix's attempt to the trial as TRAIN_ATTEMPT: a forged value (the plan's
    output comes from the study, which trial jobs append to) is refused before anything trains."""
    from {{ cookiecutter.package_name }}.cli import main

    monkeypatch.chdir(tmp_path)
    for key, value in {**IN_ACTIONS, "TRAIN_ATTEMPT": "--attempt=9"}.items():
        monkeypatch.setenv(key, value)
    (tmp_path / "configs").mkdir()
    project = Path(__file__).resolve().parent.parent / "configs"
    for name in ("train.yaml", "sweep.yaml"):
        (tmp_path / "configs" / name).write_text((project / name).read_text())
    status = main(["sweep", "trial", "--trial=0"])
    assert status == 2
    assert "TRAIN_ATTEMPT: '--attempt=9' is not an attempt number" in capsys.readouterr().err
    assert not (tmp_path / "outputs").exists()


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
