"""Promote (issue 30, High 1 to 3) against a real MLflow server whose artifacts live in moto's S3: candidate and
champion measured on the held-out set with this checkout's code, the run's own metrics ignored, only a strict
improvement served, the served files copied into the promotions experiment with the SHA-256 of every one recorded
on the version. The models are real TensorFlow exports: a briefly trained digits model (conftest `exports`) and
an untrained one (about chance). The server here has no authentication: what `ci` and `promote` may do on the
team server is proven by the platform's tests of the server's auth bootstrap
(platform/tests/runner/test_mlflow_server*.py); the permissions promote needs are proven by
tests/test_promote_auth.py."""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path

import boto3
import pytest
from gpu_job import manifest, registry
from mlflow.entities.model_registry import ModelVersion
from mlflow.tracking import MlflowClient
from PIL import Image

from {{ cookiecutter.package_name }} import cli, promote
from {{ cookiecutter.package_name }}.config import Config, DataConfig, config_from_dict
from {{ cookiecutter.package_name }}.data import load_digits_images

pytestmark = pytest.mark.slow

HOLDOUT_BUCKET = "promote-holdout"


@pytest.fixture
def world(mlflow_server: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> World:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    return World(MlflowClient(mlflow_server), tmp_path)


class World:
    """One served model of its own (the server is shared by the session), its config file and a training
    experiment the candidates are logged to as train.py logs them."""

    def __init__(self, client: MlflowClient, tmp: Path) -> None:
        self.client, self.tmp = client, tmp
        self.name = f"promote-{uuid.uuid4().hex[:8]}"
        self.experiment = client.create_experiment(f"{self.name}-training")
        self.config = tmp / "train.yaml"
        self.configure()

    def configure(self, **registry_values: object) -> Config:
        raw = {"registry": {"model_name": self.name, **registry_values}}
        self.config.write_text(json.dumps(raw), encoding="utf-8")
        return config_from_dict(raw)

    def candidate(
        self, files: Path, metrics: dict[str, float] | None = None, swap: dict[str, Path] | None = None
    ) -> str:
        """A finished run whose exports/ are `files`, that logged `metrics`, with exports/<name> replaced by
        `swap[name]` afterwards (what a training job that may write to the artifacts can do)."""
        run_id = self.client.create_run(self.experiment).info.run_id
        self.client.log_artifacts(run_id, str(files), "exports")
        for name, value in (metrics or {}).items():
            self.client.log_metric(run_id, name, value)
        self.client.set_terminated(run_id)
        for name, replacement in (swap or {}).items():
            if replacement.is_dir():
                self.client.log_artifacts(run_id, str(replacement), f"exports/{name}")
            else:
                put_artifact(self.client, run_id, f"exports/{name}", replacement.read_bytes())
        return run_id

    def promote(self, run_id: str) -> int:
        return cli.main(["promote", f"--run-id={run_id}", f"--config={self.config}"])

    def champion(self) -> str | None:
        holder = registry.alias_holder(self.client, self.name, "champion")
        return None if holder is None else str(holder.version)

    def promotions(self) -> list:
        experiment = self.client.get_experiment_by_name(promote.promotions_experiment(self.name))
        return (
            self.client.search_runs([experiment.experiment_id], order_by=["start_time ASC"])
            if experiment
            else []
        )


def artifact_key(client: MlflowClient, run_id: str, path: str) -> str:
    """The S3 key the server keeps a run's artifact under (conftest: --artifacts-destination s3://<bucket>/mlartifacts)."""
    uri = client.get_run(run_id).info.artifact_uri
    return uri.replace("mlflow-artifacts:/", "mlartifacts/", 1) + "/" + path


def put_artifact(client: MlflowClient, run_id: str, path: str, body: bytes) -> None:
    """Overwrite a run's artifact in the bucket, as anything with S3 write access there can."""
    # The session server's bucket (conftest: mlflow_server, --artifacts-destination s3://mlflow-artifacts/...).
    boto3.client("s3").put_object(
        Bucket="mlflow-artifacts", Key=artifact_key(client, run_id, path), Body=body
    )


# ---------------------------------------------------------------------- the attacks of High 3
def test_a_candidate_that_logged_a_perfect_score_for_a_worse_model_is_not_promoted(
    world: World, exports: Path, untrained_exports: Path
) -> None:
    assert world.promote(world.candidate(exports, {"test_accuracy": 0.5})) == 0
    liar = world.candidate(untrained_exports, {"test_accuracy": 1.0, "test_macro_f1": 1.0})

    assert world.promote(liar) == 0

    assert world.champion() == "1"
    record = world.promotions()[-1]
    assert record.data.tags[promote.CANDIDATE_TAG] == liar and record.data.tags["champion.decision"] == "kept"
    assert record.data.metrics["test_accuracy"] < 0.3 < 0.8 < record.data.metrics["champion.test_accuracy"]
    assert (
        "registry.version" not in record.data.tags
        and len(world.client.search_model_versions(f"name='{world.name}'")) == 1
    )


def test_a_candidate_whose_files_changed_after_training_is_judged_on_what_it_is(
    world: World, exports: Path, untrained_exports: Path
) -> None:
    assert world.promote(world.candidate(exports)) == 0
    swapped = world.candidate(
        exports, {"test_accuracy": 0.99}, {"saved_model": untrained_exports / "saved_model"}
    )

    assert world.promote(swapped) == 0

    assert world.champion() == "1"
    assert world.promotions()[-1].data.metrics["test_accuracy"] < 0.3


def test_every_served_file_is_one_promote_measured_and_a_disagreeing_export_is_left_out(
    world: World, exports: Path, untrained_exports: Path
) -> None:
    """The CPU path serves a TFLite file: one swapped for another model's is measured too, and not served."""
    assert world.promote(world.candidate(untrained_exports)) == 0  # a weak champion, so the next one wins
    good = world.candidate(exports, swap={"model_int8.tflite": untrained_exports / "model_int8.tflite"})

    assert world.promote(good) == 0

    assert world.champion() == "2"
    version = world.client.get_model_version(world.name, "2")
    recorded = served_manifest(world, version)
    assert "exports/model_int8.tflite" not in recorded and "exports/saved_model/saved_model.pb" in recorded
    record = world.client.get_run(version.run_id)
    assert record.data.tags["export.tflite_int8"].startswith("not promoted: agrees with the SavedModel on")


# ---------------------------------------------------------------------- what promote registers (High 1 and 2)
def test_the_first_promotion_serves_a_copy_of_the_measured_files_with_their_digests(
    world: World, exports: Path
) -> None:
    run_id = world.candidate(exports)  # no metric logged at all: promote never reads them

    assert world.promote(run_id) == 0

    version = world.client.get_model_version_by_alias(world.name, "champion")
    assert str(version.version) == "1" and version.tags[promote.CANDIDATE_TAG] == run_id
    assert version.tags["promote.holdout"] == "digits" and float(version.tags["promote.test_accuracy"]) > 0.8
    served_run = world.client.get_run(version.run_id)
    promotions = world.client.get_experiment_by_name(promote.promotions_experiment(world.name))
    assert served_run.info.experiment_id == promotions.experiment_id and version.run_id != run_id
    recorded = served_manifest(world, version)
    local = {
        f"exports/{path.relative_to(exports).as_posix()}": manifest.sha256_file(path)
        for path in exports.rglob("*")
        if path.is_file()
    }
    assert recorded == local  # every file the run exported, byte for byte
    assert (
        served_run.data.metrics["test_accuracy"] > 0.8
        and served_run.data.tags["champion.decision"] == "first"
    )
    assert served_run.data.tags["promote.holdout"] == "digits"
    summary = (world.tmp / "summary.md").read_text()
    assert "Decision: **first**" in summary and "the candidate run's own metrics were not read" in summary


def test_a_tie_keeps_the_champion(world: World, exports: Path) -> None:
    assert world.promote(world.candidate(exports)) == 0
    assert world.promote(world.candidate(exports, {"test_accuracy": 1.0})) == 0
    assert world.champion() == "1"
    assert "a tie keeps the champion" in world.promotions()[-1].data.tags["champion.reason"]


def test_a_champion_whose_files_changed_stops_promote_with_the_file_named(
    world: World, exports: Path, untrained_exports: Path, capsys: pytest.CaptureFixture
) -> None:
    assert world.promote(world.candidate(untrained_exports)) == 0
    served = world.client.get_model_version(world.name, "1").run_id
    put_artifact(
        world.client, served, "exports/class_names.json", b'["9","8","7","6","5","4","3","2","1","0"]'
    )
    capsys.readouterr()

    assert world.promote(world.candidate(exports)) == 1

    said = capsys.readouterr().err
    assert "champion v1: exports/class_names.json does not match its recorded SHA-256" in said
    assert "restore the file's earlier version in the bucket" in said
    assert world.champion() == "1" and len(world.client.search_model_versions(f"name='{world.name}'")) == 1


def test_a_champion_registered_before_digests_is_not_compared_with(world: World, exports: Path) -> None:
    legacy = world.candidate(exports, {"test_accuracy": 1.0})
    world.client.create_registered_model(world.name)
    world.client.create_model_version(
        world.name, f"{world.client.get_run(legacy).info.artifact_uri}/exports", legacy
    )
    world.client.set_registered_model_alias(world.name, "champion", "1")

    assert world.promote(world.candidate(exports)) == 0

    assert world.champion() == "2"
    assert (
        "registered before promote recorded the SHA-256"
        in world.promotions()[-1].data.tags["champion.reason"]
    )


def test_a_run_that_is_not_finished_or_has_no_savedmodel_is_refused(
    world: World, exports: Path, capsys: pytest.CaptureFixture
) -> None:
    running = world.client.create_run(world.experiment).info.run_id
    assert world.promote(running) == 1
    assert (
        f"--run-id {running}: the run is RUNNING; promote a run that finished training"
        in capsys.readouterr().err
    )
    empty = world.client.create_run(world.experiment).info.run_id
    world.client.set_terminated(empty)
    assert world.promote(empty) == 1
    assert "the run has no exports/saved_model/saved_model.pb" in capsys.readouterr().err
    assert world.champion() is None and world.promotions() == []


# ---------------------------------------------------------------------- the held-out set
def test_an_s3_holdout_is_what_both_are_measured_on(world: World, exports: Path, moto_endpoint: str) -> None:
    """Two images per class in s3://<bucket>/holdout/digits/<class>/: promote measures on those 20."""
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=HOLDOUT_BUCKET)
    images, labels, _ = load_digits_images(DataConfig())
    for label in range(10):
        for index in [i for i, y in enumerate(labels) if y == label][:2]:
            body = io.BytesIO()
            Image.fromarray((images[index, :, :, 0] * 255).astype("uint8")).save(body, format="PNG")
            s3.put_object(
                Bucket=HOLDOUT_BUCKET, Key=f"holdout/digits/{label}/{index}.png", Body=body.getvalue()
            )
    world.configure(holdout=f"s3://{HOLDOUT_BUCKET}/holdout/digits/")

    assert world.promote(world.candidate(exports)) == 0

    record = world.promotions()[-1]
    assert record.data.tags["promote.holdout"] == f"s3://{HOLDOUT_BUCKET}/holdout/digits/"
    assert record.data.tags["promote.holdout_images"] == "20"


@pytest.mark.parametrize(
    ("holdout", "data", "message"),
    [
        (f"s3://{HOLDOUT_BUCKET}/holdout/none/", {}, f"registry.holdout 's3://{HOLDOUT_BUCKET}/holdout/none/': no objects under this prefix"),
        ("digits", {"source": "s3://images/train/"}, "registry.holdout 'digits' holds out part of the packaged digits, but data.source is"),
    ],
)  # fmt: skip
def test_a_holdout_that_cannot_be_used_is_named_and_nothing_is_promoted(
    world: World, exports: Path, moto_endpoint: str, holdout: str, data: dict, message: str,
    capsys: pytest.CaptureFixture,
) -> None:  # fmt: skip
    boto3.client("s3").create_bucket(Bucket=HOLDOUT_BUCKET)
    raw = {"registry": {"model_name": world.name, "holdout": holdout}, "data": data}
    world.config.write_text(json.dumps(raw), encoding="utf-8")

    assert world.promote(world.candidate(exports)) == 2

    assert message in capsys.readouterr().err
    assert world.champion() is None and world.promotions() == []


def served_manifest(world: World, version: ModelVersion) -> dict[str, str]:
    """The manifest of a served version, checked against its tag."""
    body = Path(
        world.client.download_artifacts(version.run_id, manifest.MANIFEST_PATH, str(world.tmp))
    ).read_bytes()
    return manifest.read_manifest(body, version.tags[manifest.MANIFEST_TAG])
