"""The training CLI applies the platform's job contract (gpu_job.job_contract) before anything runs: a config or
sweep file outside the checkout, or a forged attempt, handed to the GPU job is refused with exit 2 naming the
field, before TensorFlow or MLflow load. The contract itself is the platform's test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

IN_ACTIONS = {"GITHUB_ACTIONS": "true", "GITHUB_JOB": "train"}


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
