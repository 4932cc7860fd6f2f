"""Issue 30, High 2 on a laptop: the CLI a user types (`python -m {{ cookiecutter.package_name }} ...`, fresh
interpreters) against the default local store (sqlite:///mlflow.db, artifacts under ./mlruns). A run is promoted
and predicts; then its served files are overwritten on disk, as a training job that may write the artifacts could,
and predict refuses with the file and the fix: nothing predicted, no output written. predict.yml's CPU and GPU jobs
run the same command (tests/e2e/test_predict_story.py tells it under act)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from {{ cookiecutter.package_name }}.config import DEFAULT_MODEL_NAME

pytestmark = pytest.mark.slow

PACKAGE = "{{ cookiecutter.package_name }}"
PROJECT = Path(__file__).resolve().parents[1]


def cli(cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "GITHUB_STEP_SUMMARY")}
    return subprocess.run(
        [sys.executable, "-m", PACKAGE, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def test_a_promoted_model_whose_files_changed_on_disk_predicts_nothing(exports: Path, in_tmp: Path) -> None:
    # The project's own config, as in a checkout: registry and held-out set as shipped.
    (in_tmp / "configs").mkdir()
    shutil.copy(PROJECT / "configs" / "train.yaml", in_tmp / "configs" / "train.yaml")
    # The store `make train` logs to (gpu_job.tracking.DEFAULT_TRACKING_URI, sqlite:///mlflow.db in the CLI's cwd), named
    # by its absolute path: MLflow caches a SQLAlchemy store per URI, so the relative URI would reach the file of
    # whichever earlier test of this worker opened it first, in its own cwd (seen under random order: "no such run").
    client = MlflowClient(f"sqlite:///{in_tmp / 'mlflow.db'}")
    experiment = client.create_experiment("local-story", artifact_location=(in_tmp / "mlruns" / "1").as_uri())
    run_id = client.create_run(experiment).info.run_id
    client.log_artifacts(run_id, str(exports), "exports")
    client.set_terminated(run_id)

    promoted = cli(in_tmp, "promote", f"--run-id={run_id}")
    assert promoted.returncode == 0, promoted.stderr[-3000:]
    first = cli(in_tmp, "predict", "--model=champion", "--input=digits", "--output=before", "--device=cpu")
    assert first.returncode == 0, first.stderr[-3000:]
    assert sorted(p.name for p in (in_tmp / "before").glob("part-*.parquet"))

    served = client.get_model_version_by_alias(DEFAULT_MODEL_NAME, "champion")
    int8 = (
        Path(client.get_run(served.run_id).info.artifact_uri.removeprefix("file://"))
        / "exports"
        / "model_int8.tflite"
    )
    body = int8.read_bytes()
    int8.write_bytes(body[:-1] + bytes([body[-1] ^ 1]))  # one bit of the file the CPU path runs

    refused = cli(in_tmp, "predict", "--model=champion", "--input=digits", "--output=after", "--device=cpu")

    assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert "exports/model_int8.tflite does not match its recorded SHA-256" in refused.stderr
    assert "so nothing was loaded or predicted. Fix: restore the file's earlier version" in refused.stderr
    # Not a file: the writability probe (gpu_job.batch_io, before the model) leaves the folder it made, empty.
    assert not [p for p in (in_tmp / "after").rglob("*") if p.is_file()]
