"""The champion rule as training sees it (read-only: it compares, registers nothing), on runs and versions made with
MlflowClient (fast, deterministic values) against both stores a user has, a real MLflow server and the local sqlite
store that `make train` uses by default; then two real trainings through train() and the command promote.yml runs
(promote's own rules: tests/test_promote.py)."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import mlflow
import pytest
from mlflow.tracking import MlflowClient

from {{ cookiecutter.package_name }} import cli, promote, registry
from {{ cookiecutter.package_name }}.config import (
    HEADLINE_METRICS,
    ConfigError,
    RegistryConfig,
    config_from_dict,
)
from {{ cookiecutter.package_name }}.train import train

_names = itertools.count(1)


# ---------------------------------------------------------------------- training's view, read-only
def test_no_champion_yet_then_better_worse_and_a_tie(client: MlflowClient, experiment_id: str) -> None:
    cfg = registry_cfg()
    assert proposal(client, experiment_id, cfg, 0.90).outcome == "candidate"  # nothing to compare with
    crown(client, experiment_id, cfg, 0.90)

    better = proposal(client, experiment_id, cfg, 0.95)
    assert (better.outcome, better.version, better.previous_version) == ("candidate", None, "1")
    assert better.previous_value == pytest.approx(0.90) and better.delta == pytest.approx(0.05)
    assert "promote measures both on the held-out set and alone moves 'champion'" in better.reason

    worse = proposal(client, experiment_id, cfg, 0.87)
    assert (worse.outcome, worse.delta) == ("kept", pytest.approx(-0.03))
    tie = proposal(client, experiment_id, cfg, 0.90)
    assert tie.outcome == "kept" and "tie" in tie.reason
    assert alias_version(client, cfg) == "1"


def test_a_branch_training_registers_nothing_and_moves_nothing(
    client: MlflowClient, experiment_id: str
) -> None:
    """Issue 30, High 1: a far better model from a branch is proposed; the served model is not touched."""
    cfg = registry_cfg()
    crown(client, experiment_id, cfg, 0.50)
    decision = proposal(client, experiment_id, cfg, 0.99)
    assert (decision.outcome, alias_version(client, cfg)) == ("candidate", "1")
    assert [str(v.version) for v in client.search_model_versions(f"name = '{cfg.model_name}'")] == ["1"]


def test_the_decision_and_both_values_are_logged_on_the_run(client: MlflowClient, experiment_id: str) -> None:
    cfg = registry_cfg()
    crown(client, experiment_id, cfg, 0.80)
    run_id = finished_run(client, experiment_id, {"test_accuracy": 0.85})
    registry.log_decision(client, run_id, registry.decide(client, cfg, run_id, {"test_accuracy": 0.85}))

    run = client.get_run(run_id)
    tags = {key: value for key, value in run.data.tags.items() if key.startswith(("champion.", "registry."))}
    assert tags == {
        "champion.decision": "candidate",
        "champion.reason": "test_accuracy 0.8500 > 0.8000 of v1 (maximize); promote measures both on the held-out "
        f"set and alone moves 'champion' (promote --run-id={run_id})",
        "champion.metric": "test_accuracy",
        "champion.direction": "maximize",
        "registry.model_name": cfg.model_name,
        "champion.previous_version": "1",
    }
    assert run.data.metrics["champion.candidate_value"] == pytest.approx(0.85)
    assert run.data.metrics["champion.previous_value"] == pytest.approx(0.80)
    assert run.data.metrics["champion.delta"] == pytest.approx(0.05)


def test_minimize_reads_the_other_way(client: MlflowClient, experiment_id: str) -> None:
    cfg = registry_cfg(direction="minimize")
    crown(client, experiment_id, cfg, 0.50)
    outcomes = [proposal(client, experiment_id, cfg, v).outcome for v in (0.40, 0.60, 0.50)]
    assert outcomes == ["candidate", "kept", "kept"]


def test_a_champion_without_the_metric_cannot_be_compared(client: MlflowClient, experiment_id: str) -> None:
    """The metric was changed in the config: the champion's run never had it."""
    cfg = registry_cfg()
    crown(client, experiment_id, cfg, 0.9)
    switched = RegistryConfig(**{**cfg.model_dump(), "metric": "test_macro_f1"})
    decision = proposal(client, experiment_id, switched, 0.7)
    assert (decision.outcome, decision.previous_version, decision.previous_value) == ("candidate", "1", None)
    assert "has no test_macro_f1" in decision.reason


def test_a_metric_the_run_did_not_compute_skips(client: MlflowClient, experiment_id: str) -> None:
    cfg = registry_cfg(metric="test_macro_f1")
    run_id = finished_run(client, experiment_id, {"test_accuracy": 0.9})
    decision = registry.decide(client, cfg, run_id, {"test_accuracy": 0.9})
    registry.log_decision(client, run_id, decision)

    assert decision.outcome.startswith("skipped (registry.metric 'test_macro_f1' not computed by this run")
    assert "computed: test_accuracy" in decision.outcome
    assert client.get_run(run_id).data.tags["champion.decision"] == decision.outcome


def test_a_registry_that_does_not_answer_skips_the_decision_and_keeps_the_run(
    client: MlflowClient, experiment_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A tracking server nobody listens on: MLflow's client would retry it for minutes.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    cfg = registry_cfg()
    run_id = finished_run(client, experiment_id, {"test_accuracy": 0.9})
    decision = registry.decide(MlflowClient("http://127.0.0.1:9"), cfg, run_id, {"test_accuracy": 0.9})
    registry.log_decision(client, run_id, decision)

    assert decision.outcome.startswith("skipped (registry error: ")
    assert decision.candidate_value == pytest.approx(0.9)
    run = client.get_run(run_id)
    assert (run.info.status, run.data.tags["champion.decision"]) == ("FINISHED", decision.outcome)


@pytest.mark.parametrize(
    ("candidate", "champion", "direction", "expected"),
    [
        (0.9, 0.8, "maximize", True),
        (0.8, 0.8, "maximize", False),
        (0.7, 0.8, "maximize", False),
        (0.7, 0.8, "minimize", True),
        (0.8, 0.8, "minimize", False),
        (float("nan"), 0.8, "maximize", False),
        (0.1, float("nan"), "minimize", True),
    ],
)
def test_beats_is_strict(candidate: float, champion: float, direction: str, expected: bool) -> None:
    assert registry.beats(candidate, champion, direction) is expected


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


def test_job_summary_shows_both_values_the_signed_delta_and_links() -> None:
    decision = registry.ChampionDecision(
        "kept", "not better", "test_accuracy", "maximize", "demo", "champion", None, 0.2, "5", 0.25
    )
    text = registry.job_summary("http://mlflow.example:5000", decision)
    assert "| candidate (this run) | this run | 0.2000 |" in text
    assert "| champion | [demo v5](http://mlflow.example:5000/#/models/demo/versions/5) | 0.2500 |" in text
    assert "| delta | | -0.0500 |" in text
    assert "Decision: **kept**: not better" in text


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


@pytest.fixture(scope="module")
def local_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The store `make train` logs to without MLFLOW_TRACKING_URI (gpu_job.tracking.DEFAULT_TRACKING_URI), in tmp.

    It is not the server's store behind REST: its ModelVersion.version is an int where the server's is a str,
    and it checks tag values with len(), so an unconverted int fails here and nowhere else."""
    return f"sqlite:///{tmp_path_factory.mktemp('local-store') / 'mlflow.db'}"


# The server's variants are in the slow tier with every test that needs the tracking server (tests/conftest.py).
@pytest.fixture(params=[pytest.param("server", marks=pytest.mark.slow), "local sqlite"])
def store(request: pytest.FixtureRequest) -> str:
    return request.getfixturevalue("mlflow_server" if request.param == "server" else "local_store")


@pytest.fixture
def client(store: str) -> MlflowClient:
    # mlflow.register_model talks to the global tracking URI.
    mlflow.set_tracking_uri(store)
    return MlflowClient(store)


@pytest.fixture
def experiment_id(client: MlflowClient, store: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    experiment = client.get_experiment_by_name("registry-decisions")
    if experiment:
        return experiment.experiment_id
    # The local store would put artifacts under ./mlruns of the working directory; the server has its own root.
    local = store.startswith("sqlite:")
    artifacts = tmp_path_factory.mktemp("local-artifacts").as_uri() if local else None
    return client.create_experiment("registry-decisions", artifact_location=artifacts)


def registry_cfg(**values: object) -> RegistryConfig:
    """A fresh model name per call: the server is shared by the whole session."""
    return RegistryConfig(**{"model_name": f"decisions-{next(_names)}", **values})


def finished_run(client: MlflowClient, experiment_id: str, metrics: dict[str, float]) -> str:
    """A run that logged `metrics`, as train() leaves it."""
    run_id = client.create_run(experiment_id).info.run_id
    for name, value in metrics.items():
        client.log_metric(run_id, name, value)
    client.set_terminated(run_id)
    return run_id


def crown(client: MlflowClient, experiment_id: str, cfg: RegistryConfig, value: float) -> None:
    """A champion whose run holds `value` (what promote's run holds: its own measure), as version 1."""
    run_id = finished_run(client, experiment_id, {cfg.metric: value})
    if not client.search_registered_models(f"name = '{cfg.model_name}'"):
        client.create_registered_model(cfg.model_name)
    version = client.create_model_version(cfg.model_name, "s3://bucket/served", run_id=run_id)
    client.set_registered_model_alias(cfg.model_name, cfg.alias, str(version.version))


def alias_version(client: MlflowClient, cfg: RegistryConfig) -> str:
    # str(): MLflow's own entity says int for the local store and str behind REST.
    return str(client.get_model_version_by_alias(cfg.model_name, cfg.alias).version)


def proposal(
    client: MlflowClient, experiment_id: str, cfg: RegistryConfig, value: float
) -> registry.ChampionDecision:
    """A training's decision, logged on its run; it never changes the registry."""
    versions = len(client.search_model_versions(f"name = '{cfg.model_name}'"))
    run_id = finished_run(client, experiment_id, {cfg.metric: value})
    decision = registry.decide(client, cfg, run_id, {cfg.metric: value})
    registry.log_decision(client, run_id, decision)
    assert len(client.search_model_versions(f"name = '{cfg.model_name}'")) == versions, (
        "a training registered"
    )
    return decision


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
