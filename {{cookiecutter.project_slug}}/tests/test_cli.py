import os
import subprocess
import sys
from pathlib import Path

import pytest

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
