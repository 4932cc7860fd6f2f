"""`predict` with a registry model on a real MLflow server (artifacts in moto S3): a real training run is promoted
(version 1), then the champion alias, a pinned version and each export predict from it, each batch an MLflow run in
the inference experiment linked to that version; names that the registry does not hold fail with what it does
hold; files that are not the ones promote recorded, and a version promote never recorded, predict nothing."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import boto3
import mlflow
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from gpu_job import batch_tracking, manifest
from mlflow.tracking import MlflowClient

from {{ cookiecutter.package_name }} import cli, promote
from {{ cookiecutter.package_name }}.config import config_from_dict
from {{ cookiecutter.package_name }}.train import train

pytestmark = pytest.mark.slow

MODEL = "predict-digits"
EXPERIMENT = "predict-registry"
BUCKET = "predict-registry"
DIGITS = 1797


@pytest.fixture(scope="module")
def trained(mlflow_server: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """One real training run (2 epochs), promoted: version 1 of MODEL holds the champion alias; the config file
    predict reads the registry's name from."""
    workdir = tmp_path_factory.mktemp("predict-registry")
    settings = {
        "registry": {"model_name": MODEL},
        "tracking": {"experiment_name": EXPERIMENT, "log_system_metrics": False},
    }
    cfg = config_from_dict(
        {
            **settings,
            "training": {"epochs": 2, "checkpoint_dir": str(workdir / "ckpt")},
            "export": {"output_dir": str(workdir / "out")},
        }
    )
    config_file = workdir / "predict.yaml"
    config_file.write_text(yaml.safe_dump(settings))
    boto3.client("s3").create_bucket(Bucket=BUCKET)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
        result = train(cfg)
        # train only proposes; the promote workflow measures, registers and moves the alias (docs/training.md).
        with tempfile.TemporaryDirectory() as scratch:
            promoted = promote.promote(
                MlflowClient(mlflow_server), cfg, result.run_id, Path(scratch)
            ).decision
    assert promoted.outcome == "first" and promoted.version == "1"
    return promoted_run(mlflow_server, MODEL), config_file


def promoted_run(uri: str, name: str, version: str = "1") -> str:
    """The run of a served version: promote's copy in the promotions experiment, not the training run."""
    return MlflowClient(uri).get_model_version(name, version).run_id


@pytest.fixture
def workflow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mlflow_server: str) -> dict[str, Path]:
    """The files a GitHub Actions step writes its outputs and its job summary to."""
    files = {"GITHUB_OUTPUT": tmp_path / "output", "GITHUB_STEP_SUMMARY": tmp_path / "summary.md"}
    for name, path in files.items():
        path.write_text("")
        monkeypatch.setenv(name, str(path))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    return files


def test_the_champion_predicts_on_cpu_with_tflite_into_s3_as_a_run_linked_to_its_version(
    trained: tuple[str, Path], workflow: dict[str, Path], mlflow_server: str
) -> None:
    served, config = trained
    out = f"s3://{BUCKET}/predictions/champion/"

    code = cli.main(
        ["predict", "--model=champion", f"--config={config}", "--input=digits", f"--output={out}",
         "--device=cpu", "--shard-size=1000"]
    )  # fmt: skip

    assert code == 0
    outputs = _outputs(workflow["GITHUB_OUTPUT"])
    assert outputs["model"] == f"models:/{MODEL}/1" and outputs["export"] == "tflite"
    assert outputs["images"] == str(DIGITS)
    rows = _rows("predictions/champion/")
    assert len(rows["key"]) == DIGITS and set(rows["model_version"]) == {f"{MODEL}/1"}
    client = MlflowClient(mlflow_server)
    run = client.get_run(outputs["mlflow-run-id"])
    experiment = client.get_experiment(run.info.experiment_id)
    assert experiment.name == batch_tracking.experiment_name(EXPERIMENT)
    assert run.data.tags["model.run_id"] == served and run.data.tags["model.alias"] == "champion"
    assert (run.data.tags["model.version"], run.data.tags["model.uri"]) == ("1", f"models:/{MODEL}/1")
    assert run.data.params["export"] == "tflite" and run.data.params["input"] == "digits"
    figures = run.data.metrics
    assert figures["predicted"] == DIGITS and figures["images_per_second"] > 0
    assert figures["batch_latency_ms_p95"] >= figures["batch_latency_ms_p50"] > 0
    logged = mlflow.artifacts.load_dict(f"{run.info.artifact_uri}/predictions/_summary.json")
    assert sum(logged["class_counts"].values()) == DIGITS
    summary = workflow["GITHUB_STEP_SUMMARY"].read_text()
    assert "### Batch prediction" in summary and f"`{MODEL}/1` (tflite, on cpu)" in summary
    assert outputs["mlflow-run-id"] in summary


def test_check_resolves_and_checks_without_predicting(
    trained: tuple[str, Path], workflow: dict[str, Path], mlflow_server: str
) -> None:
    _, config = trained
    out = f"s3://{BUCKET}/predictions/checked/"
    runs_before = _inference_runs(mlflow_server)

    code = cli.main(["predict", "--check", "--model=champion", f"--config={config}", f"--output={out}",
                     "--device=gpu"])  # fmt: skip

    assert code == 0
    outputs = _outputs(workflow["GITHUB_OUTPUT"])
    assert (outputs["model"], outputs["export"], outputs["images"]) == (
        f"models:/{MODEL}/1",
        "saved_model",
        "1797",
    )
    assert "mlflow-run-id" not in outputs and _inference_runs(mlflow_server) == runs_before
    assert _keys("predictions/checked/") == []  # the write probe was removed again


def test_a_pinned_version_predicts_with_the_saved_model_on_gpu(
    trained: tuple[str, Path], workflow: dict[str, Path]
) -> None:
    _, config = trained
    out = f"s3://{BUCKET}/predictions/pinned/"

    code = cli.main(["predict", f"--model=models:/{MODEL}/1", f"--config={config}", f"--output={out}",
                     "--device=gpu", "--shard-size=900"])  # fmt: skip

    assert code == 0
    assert _outputs(workflow["GITHUB_OUTPUT"])["export"] == "saved_model"
    assert sorted(_keys("predictions/pinned/")) == [
        "_manifest.json", "_summary.json", "part-00000.parquet", "part-00001.parquet"
    ]  # fmt: skip
    assert set(_rows("predictions/pinned/")["model_version"]) == {f"{MODEL}/1"}


@pytest.fixture(scope="module")
def partial_version(
    mlflow_server: str, exports: Path, untrained_exports: Path, tmp_path_factory: pytest.TempPathFactory
) -> str:
    """A version served without its int8 TFLite copy: the candidate's was another model's (swapped in after
    training), so promote measured it, found it disagreeing with the SavedModel and left it out, with a tag."""
    client = MlflowClient(mlflow_server)
    experiment = client.get_experiment_by_name(EXPERIMENT) or client.get_experiment(
        client.create_experiment(EXPERIMENT)
    )
    run_id = client.create_run(experiment.experiment_id).info.run_id
    client.log_artifacts(run_id, str(exports), "exports")
    client.log_artifact(run_id, str(untrained_exports / "model_int8.tflite"), "exports")
    client.set_terminated(run_id)
    cfg = config_from_dict({"registry": {"model_name": "predict-partial"}})
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
        decision = promote.promote(client, cfg, run_id, tmp_path_factory.mktemp("partial")).decision
    assert decision.version == "1"
    return decision.version


def test_auto_takes_the_export_the_run_kept_and_a_dropped_one_is_named_with_why(
    trained: tuple[str, Path], partial_version: str, workflow: dict[str, Path], capsys: pytest.CaptureFixture
) -> None:
    _, config = trained
    model = f"--model=models:/predict-partial/{partial_version}"
    args = ["predict", "--check", model, f"--config={config}", f"--output=s3://{BUCKET}/predictions/partial/"]

    assert cli.main([*args, "--device=cpu"]) == 0  # no TFLite copy kept: the CPU job runs the SavedModel
    assert _outputs(workflow["GITHUB_OUTPUT"])["export"] == "saved_model"
    capsys.readouterr()
    assert cli.main([*args, "--export=tflite_int8"]) == 2
    assert (
        f"--export tflite_int8: version {partial_version}'s run" in (said := capsys.readouterr().err)
        and "kept saved_model (the run's tag export.tflite_int8: not promoted: agrees with the SavedModel on"
        in said
    )


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("staging", rf"--model 'models:/{MODEL}@staging': alias 'staging' does not exist \(aliases: champion=1; "
                    r"latest version: 1\); promote a version"),
        ("9", rf"--model 'models:/{MODEL}/9': version 9 does not exist"),
        ("models:/nobody@champion", r"no registered model 'nobody'; promote a training run \(promote.yml; registry.model_name"),
        ("models:/bad", r"--model 'models:/bad': use models:/<name>@<alias> or models:/<name>/<version>"),
    ],
)  # fmt: skip
def test_a_model_the_registry_does_not_hold_is_named_with_what_it_holds(
    trained: tuple[str, Path],
    workflow: dict[str, Path],
    capsys: pytest.CaptureFixture,
    model: str,
    message: str,
) -> None:
    _, config = trained

    code = cli.main(["predict", "--check", f"--model={model}", f"--config={config}",
                     f"--output=s3://{BUCKET}/predictions/bad/"])  # fmt: skip

    assert code == 2
    assert re.search(message, capsys.readouterr().err)
    assert "model" not in _outputs(workflow["GITHUB_OUTPUT"])  # nothing for a GPU job to start with


def _outputs(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def _keys(prefix: str) -> list[str]:
    listed = boto3.client("s3").list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    return [item["Key"][len(prefix) :] for item in listed]


def _rows(prefix: str) -> dict[str, list]:
    s3 = boto3.client("s3")
    parts = sorted(key for key in _keys(prefix) if key.startswith("part-"))
    tables = [
        pq.read_table(pa.BufferReader(s3.get_object(Bucket=BUCKET, Key=prefix + k)["Body"].read()))
        for k in parts
    ]
    return pa.concat_tables(tables).to_pydict()


def _inference_runs(uri: str) -> int:
    experiment = MlflowClient(uri).get_experiment_by_name(batch_tracking.experiment_name(EXPERIMENT))
    return 0 if experiment is None else len(MlflowClient(uri).search_runs([experiment.experiment_id]))


# ---------------------------------------------------------------------- issue 30, High 2: only what promote recorded
SWAPS = {
    # what a training job with write access to the artifacts replaces, adds or deletes; the device that loads it
    "the TFLite copy the CPU path runs": ("exports/model.tflite", "replace", "cpu"),
    "the SavedModel's weights the GPU path runs": (
        "exports/saved_model/variables/variables.index",
        "replace",
        "gpu",
    ),
    "a file added to the SavedModel": ("exports/saved_model/assets/extra.txt", "add", "gpu"),
    "the labels": ("exports/class_names.json", "replace", "cpu"),
    "the labels deleted": ("exports/class_names.json", "delete", "cpu"),
    "the manifest itself": (manifest.MANIFEST_PATH, "replace", "cpu"),
}


@pytest.mark.parametrize("what", SWAPS)
@pytest.mark.parametrize("check", [False, True], ids=["the predict job", "resolve (--check)"])
def test_files_of_the_champion_changed_after_promotion_predict_nothing(
    trained: tuple[str, Path], workflow: dict[str, Path], mlflow_server: str, artifact_bucket: str,
    capsys: pytest.CaptureFixture, what: str, check: bool,
) -> None:  # fmt: skip
    """The training job (or anything that may write the artifacts) overwrites the served version's files: predict
    refuses before it loads anything, names the file and the fix, writes nothing and opens no inference run.
    Seen failing before the digests: the swapped champion predicted (exit 0)."""
    served, config = trained
    path, how, device = SWAPS[what]
    key = artifact_key(mlflow_server, served, path)
    s3 = boto3.client("s3")
    original = s3.get_object(Bucket=artifact_bucket, Key=key)["Body"].read() if how != "add" else None
    if how == "delete":
        s3.delete_object(Bucket=artifact_bucket, Key=key)
    else:
        s3.put_object(Bucket=artifact_bucket, Key=key, Body=b"another model's bytes")
    runs_before = _inference_runs(mlflow_server)
    out = f"s3://{BUCKET}/predictions/swapped/"
    args = ["--model=champion", f"--config={config}", f"--output={out}", f"--device={device}"]
    try:
        code = cli.main(["predict", *(["--check"] if check else []), *args])
    finally:
        if original is None:
            s3.delete_object(Bucket=artifact_bucket, Key=key)
        else:
            s3.put_object(Bucket=artifact_bucket, Key=key, Body=original)

    said = capsys.readouterr().err
    assert code == 2, said
    assert f"--model 'models:/{MODEL}/1': {path} " in said, said
    assert (
        "changed after promotion, so nothing was loaded or predicted. Fix: restore the file's earlier version"
        in said
    )
    assert _keys("predictions/swapped/") == [] and _inference_runs(mlflow_server) == runs_before
    if check:
        assert "model" not in _outputs(workflow["GITHUB_OUTPUT"])  # no GPU job is handed a model


def test_a_version_registered_before_promote_recorded_digests_is_refused_with_the_fix(
    trained: tuple[str, Path], workflow: dict[str, Path], mlflow_server: str, capsys: pytest.CaptureFixture
) -> None:
    served, config = trained
    client = MlflowClient(mlflow_server)
    legacy = client.create_model_version(
        MODEL, f"{client.get_run(served).info.artifact_uri}/exports", run_id=served
    ).version

    code = cli.main(["predict", f"--model={legacy}", f"--config={config}",
                     f"--output=s3://{BUCKET}/predictions/legacy/"])  # fmt: skip

    assert code == 2
    said = capsys.readouterr().err
    assert f"version {legacy} has no tag {manifest.MANIFEST_TAG}: it was registered before promote" in said
    assert (
        f"Fix: promote again (promote.yml with run-id=<the training run>, e.g. this version's run {served})"
        in said
    )
    assert _keys("predictions/legacy/") == []


def artifact_key(uri: str, run_id: str, path: str) -> str:
    """The S3 key the server keeps a run's artifact under (conftest: --artifacts-destination .../mlartifacts)."""
    artifact_uri = MlflowClient(uri).get_run(run_id).info.artifact_uri
    return artifact_uri.replace("mlflow-artifacts:/", "mlartifacts/", 1) + "/" + path
