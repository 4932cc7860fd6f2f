"""Smoke training on the embedded digits, logged to a real MLflow server whose artifacts live in (moto) S3."""

import json
from pathlib import Path

import boto3
import mlflow
import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from {{ cookiecutter.package_name }} import predict
from {{ cookiecutter.package_name }}.config import config_from_dict
from {{ cookiecutter.package_name }}.data import load_splits
from {{ cookiecutter.package_name }}.errors import ExportError
from {{ cookiecutter.package_name }}.export import TFLitePredictor, check_agreement, tflite_predict
from {{ cookiecutter.package_name }}.train import train

pytestmark = pytest.mark.slow

GITHUB_ENV = {
    "GITHUB_ACTIONS": "true",
    "GITHUB_SHA": "0123456789abcdef0123456789abcdef01234567",
    "GITHUB_REF_NAME": "train/smoke",
    "GITHUB_SERVER_URL": "https://github.com",
    "GITHUB_REPOSITORY": "org/repo",
    "GITHUB_RUN_ID": "4242",
    "GITHUB_RUN_ATTEMPT": "1",
    "GPU_INSTANCE_TYPE": "g4dn.xlarge",
    "GPU_MARKET": "spot",
    # As train.yml passes the allow-cpu dispatch input: this CPU machine plays the GPU runner.
    "GPU_ALLOW_CPU": "true",
}


@pytest.fixture(scope="module")
def smoke_run(mlflow_server: str, tmp_path_factory: pytest.TempPathFactory):
    workdir = tmp_path_factory.mktemp("smoke")
    cfg = config_from_dict(
        {
            "training": {"epochs": 2, "checkpoint_dir": str(workdir / "ckpt")},
            "export": {"output_dir": str(workdir / "out")},
            "tracking": {"experiment_name": "smoke", "system_metrics_interval_seconds": 1},
        }
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
        for key, value in GITHUB_ENV.items():
            patch.setenv(key, value)
        patch.setenv("GITHUB_STEP_SUMMARY", str(workdir / "summary.md"))
        result = train(cfg)
    return cfg, result, workdir


def test_training_beats_chance_by_far(smoke_run) -> None:
    _, result, _ = smoke_run
    assert result.epochs_run == 2
    assert result.metrics["test_accuracy"] > 0.5  # chance is 0.1


def test_run_has_params_metrics_and_tags(smoke_run, mlflow_server: str) -> None:
    cfg, result, _ = smoke_run
    client = MlflowClient(mlflow_server)
    run = client.get_run(result.run_id)
    assert run.info.status == "FINISHED"
    for key, value in cfg.flat_params().items():
        assert run.data.params[key] == value[:6000]
    assert run.data.params["runtime.gpus"] == "0"
    assert run.data.tags["git.commit"] == GITHUB_ENV["GITHUB_SHA"]
    assert run.data.tags["git.branch"] == "train/smoke"
    assert run.data.tags["github.run_url"] == "https://github.com/org/repo/actions/runs/4242/attempts/1"
    assert (run.data.tags["gpu.instance_type"], run.data.tags["gpu.market"]) == ("g4dn.xlarge", "spot")
    for metric in ("loss", "accuracy", "val_loss", "val_accuracy"):
        history = client.get_metric_history(result.run_id, metric)
        assert [m.step for m in history] == [0, 1], metric
    assert run.data.metrics["test_accuracy"] == pytest.approx(result.metrics["test_accuracy"])
    assert run.data.metrics["tflite_agreement"] >= 0.95
    assert any(name.startswith("system/cpu_utilization") for name in run.data.metrics)


def test_run_says_it_had_no_gpu(smoke_run, mlflow_server: str) -> None:
    _, result, _ = smoke_run
    run = MlflowClient(mlflow_server).get_run(result.run_id)
    tags = {k: v for k, v in run.data.tags.items() if k.startswith(("gpu.", "tf."))}
    assert tags == {
        "gpu.instance_type": "g4dn.xlarge",
        "gpu.market": "spot",
        "gpu.count": "0",
        "gpu.name": "none",
        "gpu.memory_mib": "0",
        "gpu.driver": "none",
        "gpu.driver_cuda": "none",
        "tf.build_cuda": "none (CPU build)",
        "tf.build_cudnn": "none (CPU build)",
        "gpu.allow_cpu": "true",
    }
    # No GPU, no GPU system metrics (MLflow's NVML monitor found none); the CPU ones are there.
    assert not [name for name in run.data.metrics if name.startswith("system/gpu_")]


def test_artifacts_are_logged_and_stored_in_s3(smoke_run, mlflow_server: str, artifact_bucket: str) -> None:
    _, result, _ = smoke_run
    client = MlflowClient(mlflow_server)

    def listing(path: str = "") -> set[str]:
        return {item.path for item in client.list_artifacts(result.run_id, path)}

    assert {"plots/confusion_matrix.png", "plots/learning_curves.png"} <= listing("plots")
    assert {"exports/model.tflite", "exports/saved_model"} <= listing("exports")
    assert "exports/saved_model/saved_model.pb" in listing("exports/saved_model")
    assert "evaluation/classification_report.json" in listing("evaluation")
    local = Path(client.download_artifacts(result.run_id, "plots/confusion_matrix.png"))
    assert local.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    keys = [
        obj["Key"]
        for page in boto3.client("s3").get_paginator("list_objects_v2").paginate(Bucket=artifact_bucket)
        for obj in page.get("Contents", [])
    ]
    assert any(key.endswith(f"{result.run_id}/artifacts/plots/confusion_matrix.png") for key in keys)


def test_logged_model_loads_back_and_predicts_like_the_run(smoke_run, mlflow_server: str) -> None:
    cfg, result, _ = smoke_run
    mlflow.set_tracking_uri(mlflow_server)
    models = mlflow.search_logged_models(
        filter_string=f"source_run_id = '{result.run_id}'", output_format="list"
    )
    assert len(models) == 1
    model = mlflow.tensorflow.load_model(models[0].model_uri)
    splits = load_splits(cfg.data, cfg.training.seed)
    accuracy = float(np.mean(np.argmax(model.predict(splits.x_test, verbose=0), axis=-1) == splits.y_test))
    assert accuracy == pytest.approx(result.metrics["test_accuracy"], abs=1e-6)


def test_job_summary_links_the_run(smoke_run, mlflow_server: str) -> None:
    _, result, workdir = smoke_run
    summary = (workdir / "summary.md").read_text()
    assert f"({mlflow_server}/#/experiments/{result.experiment_id}/runs/{result.run_id})" in summary
    assert f"| test_accuracy | {result.metrics['test_accuracy']:.4f} |" in summary


def test_each_export_is_measured_and_the_int8_model_is_integer_only(smoke_run, mlflow_server: str) -> None:
    cfg, result, workdir = smoke_run
    client = MlflowClient(mlflow_server)
    metrics = client.get_run(result.run_id).data.metrics
    for name in ("saved_model", "tflite", "tflite_int8"):
        assert metrics[f"{name}_agreement"] >= cfg.export.tflite_min_agreement, name
        assert metrics[f"{name}_latency_ms"] > 0, name
    int8_path = workdir / "out" / "model_int8.tflite"
    assert metrics["tflite_int8_size_bytes"] == int8_path.stat().st_size
    # int8 weights against the SavedModel's float32 variables (and its graph).
    assert metrics["tflite_int8_size_bytes"] < metrics["saved_model_size_bytes"] / 2
    assert "exports/model_int8.tflite" in {a.path for a in client.list_artifacts(result.run_id, "exports")}
    predictor = TFLitePredictor(int8_path)
    assert (predictor.input["dtype"], predictor.output["dtype"]) == (np.int8, np.int8)
    splits = load_splits(cfg.data, cfg.training.seed)
    everything = predictor(splits.x_test)
    # One image, then the whole test set, on one interpreter: it resizes, and the scores do not depend on the batch.
    assert np.array_equal(predictor(splits.x_test[:1])[0], everything[0])
    int8_accuracy = float(np.mean(np.argmax(everything, axis=-1) == splits.y_test))
    assert int8_accuracy == pytest.approx(result.metrics["test_accuracy"], abs=0.05)


def test_the_exports_predict_with_their_class_names(smoke_run, tmp_path: Path) -> None:
    _, _, workdir = smoke_run
    assert json.loads((workdir / "out" / "class_names.json").read_text()) == [str(d) for d in range(10)]
    model = predict.load_model(workdir / "out" / "model_int8.tflite")
    summary = predict.run(model, "digits", tmp_path, progress=False)
    assert summary.predicted == 1797 and set(summary.class_counts) <= {str(d) for d in range(10)}


def test_exports_on_disk_agree(smoke_run) -> None:
    cfg, result, workdir = smoke_run
    splits = load_splits(cfg.data, cfg.training.seed)
    tflite_pred = tflite_predict(workdir / "out" / "model.tflite", splits.x_test)
    tflite_accuracy = float(np.mean(tflite_pred == splits.y_test))
    assert tflite_accuracy == pytest.approx(result.metrics["test_accuracy"], abs=0.05)
    assert (workdir / "out" / "resolved_config.yaml").exists()
    # BackupAndRestore removes its backup once training finished cleanly.
    assert not any((workdir / "ckpt").rglob("*.index"))


def test_agreement_check_rejects_a_disagreeing_export() -> None:
    keras_pred = np.arange(100) % 10
    tflite_pred = keras_pred.copy()
    tflite_pred[:6] = (tflite_pred[:6] + 1) % 10
    assert check_agreement(keras_pred, tflite_pred, 0.94) == pytest.approx(0.94)
    with pytest.raises(ExportError, match=r"94\.0% of the test set, below export.tflite_min_agreement=95%"):
        check_agreement(keras_pred, tflite_pred, 0.95)


def test_a_quantisation_that_disagrees_drops_that_export_not_the_run(
    mlflow_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Calibrated on one image and held to 100% agreement: the int8 copy cannot pass (a sweep trial of a few
    # epochs landed at 94.8% against 95%). The trained model, its SavedModel and the run are kept all the same.
    cfg = config_from_dict(
        {
            "training": {"epochs": 2, "checkpoint_dir": str(tmp_path / "ckpt")},
            "export": {"output_dir": str(tmp_path / "out"), "tflite": False, "representative_samples": 1,
                       "tflite_min_agreement": 1.0},
            "tracking": {"experiment_name": "rejected-export", "log_system_metrics": False, "log_model": False},
        }
    )  # fmt: skip
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    result = train(cfg)
    client = MlflowClient(mlflow_server)
    run = client.get_run(result.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["export.tflite_int8"].startswith("rejected: the tflite_int8 model agrees")
    assert run.data.metrics["tflite_int8_agreement"] < 1.0
    assert "tflite_int8_size_bytes" not in run.data.metrics
    exports = {a.path for a in client.list_artifacts(result.run_id, "exports")}
    assert "exports/saved_model" in exports and "exports/model_int8.tflite" not in exports
    assert not (tmp_path / "out" / "model_int8.tflite").exists()
    assert run.data.metrics["saved_model_agreement"] == 1.0
