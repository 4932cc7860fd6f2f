"""This project's champion rule (`registry.*` of its config): bad values named by field; then two real trainings
through train(), compared with the champion read-only (gpu_job.registry, tested in the platform's own suite on
both MLflow stores), and the command promote.yml runs (promote's own rules: tests/test_promote.py)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import mlflow
import pytest
from mlflow.tracking import MlflowClient

from {{ cookiecutter.package_name }} import cli, promote
from {{ cookiecutter.package_name }}.config import HEADLINE_METRICS, ConfigError, config_from_dict
from {{ cookiecutter.package_name }}.train import train


# ---------------------------------------------------------------------- configuration
@pytest.mark.parametrize(
    ("raw", "field", "hint"),
    [
        ({"direction": "sideways"}, "registry.direction", "'maximize' or 'minimize'"),
        (
            {"metric": "f1"},
            "registry.metric",
            "not a metric promote measures on the held-out set; use one of test_accuracy, test_macro_precision",
        ),
        # A training's own figure: promote cannot measure it, so it cannot decide by it.
        ({"metric": "best_val_loss"}, "registry.metric", "use one of test_accuracy, test_macro_precision, "),
        ({"holdout": "s3://bucket/data/"}, "registry.holdout", "must be 'digits' or an image folder"),
        ({"model_name": "team/model"}, "registry.model_name", "only letters, digits"),
        ({"model_name": ""}, "registry.model_name", "must start with a letter or digit"),
        ({"alias": "latest"}, "registry.alias", "reserved"),
        ({"alias": "v2"}, "registry.alias", "reserved"),
        ({"alias": "best model"}, "registry.alias", "only letters, digits"),
        ({"enabled": "maybe"}, "registry.enabled", "valid boolean"),
        ({"metrc": "test_accuracy"}, "registry.metrc", "unknown key"),
    ],
)
def test_bad_registry_values_name_the_field(raw: dict, field: str, hint: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_dict({"registry": raw}, "train.yaml")
    assert f"  {field}: " in str(info.value)
    assert hint in str(info.value)


@pytest.mark.slow
def test_a_training_registers_nothing_in_the_served_model(trained: dict) -> None:
    """Issue 30, High 1: the training job holds the `ci` credential; it must not create versions of the model
    predict.yml serves (nor, as their creator, own them). Seen failing before: the run had registered v2."""
    client, result = trained["client"], trained["logged"]
    assert result.metrics["test_accuracy"] > 0.5  # chance is 0.1; two epochs reach ~0.9
    assert result.champion.outcome == "candidate"
    assert client.search_model_versions(f"run_id = '{result.run_id}'") == []
    served = client.get_experiment_by_name(promote.promotions_experiment(trained["model_name"])).experiment_id
    for version in client.search_model_versions(f"name = '{trained['model_name']}'"):
        assert client.get_run(version.run_id).info.experiment_id == served, version


@pytest.mark.slow
def test_the_command_promote_yml_runs_serves_the_trained_run(
    trained: dict, monkeypatch: pytest.MonkeyPatch, mlflow_server: str
) -> None:
    client, result = trained["client"], trained["logged"]
    config = trained["workdir"] / "promote.yaml"
    config.write_text(f"registry:\n  model_name: {trained['model_name']}\n", encoding="utf-8")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(trained["workdir"] / "promote.md"))
    for hostile in ("--x", "' or name = 'x", result.run_id.upper()):  # a workflow input: validated first
        assert cli.main(["promote", f"--run-id={hostile}", "--config", str(config)]) == 2
    assert client.get_model_version_by_alias(trained["model_name"], "champion").version == "1"
    assert cli.main(["promote", f"--run-id={result.run_id}", "--config", str(config)]) == 0
    holder = client.get_model_version_by_alias(trained["model_name"], "champion")
    assert holder.version == "2" and holder.tags[promote.CANDIDATE_TAG] == result.run_id
    served = client.get_run(holder.run_id)
    assert served.data.tags["champion.decision"] == "promoted" and served.data.tags["registry.version"] == "2"
    # What the training logged on its own run stays as it was: promote may not write there.
    assert client.get_run(result.run_id).data.tags["champion.decision"] == "candidate"


@pytest.mark.slow
def test_the_job_summary_has_the_delta_line(trained: dict) -> None:
    result = trained["logged"]
    summary = (trained["workdir"] / "logged.md").read_text()
    champion = result.champion.previous_value
    assert f"| test_accuracy | {result.metrics['test_accuracy']:.4f} |" in summary  # the metrics table stays
    assert f"| delta | | {result.metrics['test_accuracy'] - champion:+.4f} |" in summary
    assert "| champion | [registry-real v1](" in summary
    assert "Decision: **candidate**" in summary and "run the promote workflow" in summary


@pytest.mark.slow
def test_every_headline_metric_is_known_to_the_config_and_on_the_run(trained: dict) -> None:
    result = trained["logged"]
    assert set(result.metrics) == set(HEADLINE_METRICS)
    assert set(HEADLINE_METRICS) <= set(trained["client"].get_run(result.run_id).data.metrics)


@pytest.mark.slow
def test_training_seconds_is_logged_at_the_attempt_step(trained: dict) -> None:
    history = trained["client"].get_metric_history(trained["logged"].run_id, "training_seconds")
    assert [(m.step, m.value > 0) for m in history] == [(3, True)]


@pytest.mark.slow
def test_a_run_without_a_logged_model_is_compared_all_the_same(trained: dict) -> None:
    """Promote takes a run's exports/, not MLflow's logged model: tracking.log_model changes nothing here."""
    client, result = trained["client"], trained["no-model"]
    assert client.get_run(result.run_id).data.tags["champion.decision"] in ("candidate", "kept")
    assert client.search_model_versions(f"run_id = '{result.run_id}'") == []


# ---------------------------------------------------------------------- real training
@pytest.fixture(scope="module")
def trained(mlflow_server: str, untrained_exports: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A weak champion (an untrained model, promoted: v1) exists; a real training beats it; a second one logs no
    model."""
    workdir = tmp_path_factory.mktemp("registry-train")
    model_name = "registry-real"
    mlflow.set_tracking_uri(mlflow_server)
    client = MlflowClient(mlflow_server)
    experiment_id = client.create_experiment("registry-train")
    seed_run = client.create_run(experiment_id).info.run_id
    client.log_artifacts(seed_run, str(untrained_exports), "exports")
    client.set_terminated(seed_run)
    with tempfile.TemporaryDirectory() as scratch:
        seeded = promote.promote(
            client, config_from_dict({"registry": {"model_name": model_name}}), seed_run, Path(scratch)
        )
    assert seeded.decision.outcome == "first"

    def config(name: str, **tracking: object) -> dict:
        return {
            "training": {"epochs": 2, "checkpoint_dir": str(workdir / name / "ckpt")},
            "export": {
                "output_dir": str(workdir / name / "out"),
                "tflite": name == "logged",
                "tflite_int8": name == "logged",
            },
            "tracking": {"experiment_name": "registry-train", "log_system_metrics": False, **tracking},
            "registry": {"model_name": model_name},
        }

    results = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
        patch.setenv("TRAIN_ATTEMPT", "3")
        for name, tracking in (("logged", {}), ("no-model", {"log_model": False})):
            patch.setenv("GITHUB_STEP_SUMMARY", str(workdir / f"{name}.md"))
            results[name] = train(config_from_dict(config(name, **tracking)))
    return {"client": client, "model_name": model_name, "workdir": workdir, **results}
