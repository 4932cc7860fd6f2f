import os
import subprocess
import sys
from pathlib import Path

import pytest

from {{ cookiecutter.package_name }}.cli import main
from {{ cookiecutter.package_name }}.errors import EXIT_INTERRUPTED, TrainingInterrupted

PROJECT = Path(__file__).resolve().parent.parent


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "{{ cookiecutter.package_name }}", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{cwd / 'mlflow.db'}"},
        timeout=300,
    )


def test_check_config_prints_the_resolved_config(tmp_path: Path) -> None:
    result = cli("check-config", "--config", str(PROJECT / "configs" / "train.yaml"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert '"source": "digits"' in result.stdout


def test_bad_config_names_the_field_and_exits_2(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("training:\n  epochs: -3\n  lr: 0.1\n")
    result = cli("train", "--config", "bad.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert "training.epochs: Input should be greater than 0 (got -3)" in result.stderr
    assert "training.lr: unknown key" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_bad_data_source_is_a_clear_error_and_no_run_is_started(tmp_path: Path) -> None:
    (tmp_path / "cfg.yaml").write_text(f"data:\n  source: {tmp_path / 'no-such-folder'}\n")
    result = cli("train", "--config", "cfg.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert "folder does not exist" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "outputs").exists()


def test_cli_exits_75_when_interrupted(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys) -> None:
    def interrupted(*_: object) -> None:
        raise TrainingInterrupted({"action": "terminate", "time": "2026-11-30T12:00:00Z"}, 3)

    monkeypatch.setattr("{{ cookiecutter.package_name }}.train.train", interrupted)
    config = tmp_path / "train.yaml"
    config.write_text("training:\n  epochs: 1\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    assert main(["train", "--config", str(config)]) == EXIT_INTERRUPTED
    assert "3 epoch(s) done" in capsys.readouterr().err
    assert "### Training interrupted" in (tmp_path / "summary.md").read_text()
