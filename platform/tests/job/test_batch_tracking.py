"""A batch prediction's MLflow run and job summary (gpu_job.batch_tracking) on the local sqlite store: the run in
the `-inference` twin of the training experiment, its id handed to the workflow before any shard, its tags back
to the served version, the figures without NaN, and a job summary whose table cells an input's key cannot break."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import mlflow
import pytest
from mlflow.tracking import MlflowClient

from gpu_job import batch_tracking
from gpu_job.batch_predict import Summary
from gpu_runner.mlflow_server import mlflow_server_project

BATCH = batch_tracking.Batch("s3://bucket/in/", "s3://bucket/predictions/b1/", "gpu", "saved_model", 512, 256)


@dataclass(frozen=True)
class Version:
    """A served version as the project's resolved --model holds it."""

    name: str = "digits"
    version: str = "7"
    run_id: str = "ab" * 16
    alias: str | None = "champion"

    @property
    def uri(self) -> str:
        return f"models:/{self.name}/{self.version}"


def test_the_inference_experiment_is_the_one_the_team_server_makes() -> None:
    assert batch_tracking.INFERENCE_SUFFIX == mlflow_server_project.INFERENCE_SUFFIX
    assert batch_tracking.experiment_name("digits") == "digits-inference"


def test_tags_lead_to_the_served_version_or_name_a_local_export() -> None:
    assert batch_tracking.model_tags("7", Version()) == {
        "model.name": "digits",
        "model.version": "7",
        "model.run_id": "ab" * 16,
        "model.uri": "models:/digits/7",
        "model.source": "registry",
        "model.alias": "champion",
    }
    assert "model.alias" not in batch_tracking.model_tags("7", Version(alias=None))
    assert batch_tracking.model_tags("sha256:0123", None) == {
        "model.version": "sha256:0123",
        "model.source": "local export",
    }


def test_the_run_is_open_and_named_to_the_workflow_before_the_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    client.create_experiment("digits-inference", artifact_location=(tmp_path / "artifacts").as_uri())
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("GITHUB_OUTPUT", str(tmp_path / "output"))
    summary = Summary(images=3, predicted=2, skipped={"in/x.png": "not a readable image"}, mean_confidence=0.9,
                      shards=1, predicted_now=2, batch_ms=[4.0], seconds=0.5)  # fmt: skip

    with batch_tracking.inference_run("digits", BATCH, "7", Version()) as info:
        assert (tmp_path / "output").read_text() == f"mlflow-run-id={info.run_id}\n"
        assert mlflow.active_run().info.status == "RUNNING"
        batch_tracking.log_summary(summary)

    run = client.get_run(info.run_id)
    assert (run.info.status, client.get_experiment(run.info.experiment_id).name) == (
        "FINISHED",
        "digits-inference",
    )
    assert run.data.params == BATCH.params()
    assert (run.data.tags["model.uri"], run.data.tags["model.alias"]) == ("models:/digits/7", "champion")
    assert run.data.metrics["images_per_second"] == 4.0 and run.data.metrics["skipped"] == 1.0
    # An empty batch's mean confidence is NaN, which is not logged.
    with batch_tracking.inference_run("digits", BATCH, "7", None) as empty:
        batch_tracking.log_summary(Summary())
    assert "mean_confidence" not in client.get_run(empty.run_id).data.metrics


def test_the_job_summary_escapes_what_the_inputs_named_and_lists_at_most_twenty() -> None:
    skipped = {f"in/{index:02d}.png": "not a readable image" for index in range(22)}
    # A key someone uploaded to break out of its cell and forge a row, and a reason with a newline.
    skipped["in/a|b`c\n| forged | row |.png"] = "could not be read (AccessDenied)\nsecond line"
    summary = Summary(images=30, predicted=7, skipped=dict(reversed(list(skipped.items()))), class_counts={"3": 7},
                      mean_confidence=0.8, shards=2, predicted_now=7, batch_ms=[2.0, 4.0], seconds=1.0)  # fmt: skip

    text = batch_tracking.job_summary("http://127.0.0.1:5000", "1", "cd" * 16, BATCH, "digits/7", summary)

    lines = text.splitlines()
    assert lines[0] == "### Batch prediction" and "- model: `digits/7` (saved_model, on gpu)" in lines
    assert "- 7 of 30 images predicted in 2 shards (0 kept from an earlier run), 23 skipped" in lines
    assert "7 images/s, batch latency p50 3.0 ms / p95 3.9 ms" in text
    assert "| 3 | 7 |" in lines
    assert (
        "| `in/a\\|b'c \\| forged \\| row \\|.png` | could not be read (AccessDenied) second line |" in lines
    )
    # Every row of the skipped table has its two cells: nothing a key held opened a third.
    table = lines[lines.index("| skipped | reason |") :]
    assert len(table) == 2 + 20 + 1 and all(line.replace("\\|", "").count("|") == 3 for line in table)
    assert table[-1] == "| ... | 3 more in `_summary.json` |"


def test_a_run_that_predicted_nothing_says_so() -> None:
    text = batch_tracking.job_summary("sqlite:///x", "1", "ef" * 16, BATCH, "7", Summary(images=4, shards=1))
    assert "no image predicted by this run" in text
