"""Model registry and champion alias: the decision rules on runs and versions made with MlflowClient (fast,
deterministic values) against both stores a user has, a real MLflow server and the local sqlite store that `make
train` uses by default; then two real trainings through train()."""

from __future__ import annotations

import itertools

import mlflow
import pytest
from mlflow.tracking import MlflowClient

from {{ cookiecutter.package_name }} import cli, registry, tracking
from {{ cookiecutter.package_name }}.config import (
    HEADLINE_METRICS,
    ConfigError,
    RegistryConfig,
    config_from_dict,
)
from {{ cookiecutter.package_name }}.train import train

_names = itertools.count(1)


# ---------------------------------------------------------------------- decisions on real runs and versions
def test_first_then_better_then_worse_then_tie(client: MlflowClient, experiment_id: str) -> None:
    cfg = registry_cfg()

    first = train_and_decide(client, experiment_id, cfg, 0.90)
    assert (first.outcome, first.version, first.previous_version) == ("first", "1", None)
    assert alias_version(client, cfg) == "1"

    better = train_and_decide(client, experiment_id, cfg, 0.95)
    assert (better.outcome, better.version, better.previous_version) == ("promoted", "2", "1")
    assert better.previous_value == pytest.approx(0.90)
    assert better.delta == pytest.approx(0.05)
    assert alias_version(client, cfg) == "2"

    worse = train_and_decide(client, experiment_id, cfg, 0.93)
    assert (worse.outcome, worse.version, worse.previous_version) == ("kept", "3", "2")
    assert worse.delta == pytest.approx(-0.02)
    assert alias_version(client, cfg) == "2"

    tie = train_and_decide(client, experiment_id, cfg, 0.95)
    assert (tie.outcome, tie.version) == ("kept", "4")
    assert "tie" in tie.reason
    assert alias_version(client, cfg) == "2"


def test_the_decision_and_both_values_are_logged(client: MlflowClient, experiment_id: str) -> None:
    cfg = registry_cfg()
    train_and_decide(client, experiment_id, cfg, 0.80)
    run_id, model_id = finished_run(client, experiment_id, {"test_accuracy": 0.85})
    registry.log_decision(
        client, run_id, registry.decide(client, cfg, run_id, model_id, {"test_accuracy": 0.85})
    )
    decision = registry.promote(client, cfg, run_id)
    registry.log_decision(client, run_id, decision)

    run = client.get_run(run_id)
    assert {
        key: value for key, value in run.data.tags.items() if key.startswith(("champion.", "registry."))
    } == {
        "champion.decision": "promoted",
        "champion.reason": "test_accuracy 0.8500 > 0.8000 of v1 (maximize)",
        "champion.metric": "test_accuracy",
        "champion.direction": "maximize",
        "registry.model_name": cfg.model_name,
        "registry.version": "2",
        "champion.previous_version": "1",
    }
    assert run.data.metrics["champion.candidate_value"] == pytest.approx(0.85)
    assert run.data.metrics["champion.previous_value"] == pytest.approx(0.80)
    assert run.data.metrics["champion.delta"] == pytest.approx(0.05)
    version = client.get_model_version(cfg.model_name, "2")
    assert version.run_id == run_id
    assert version.tags[registry.VERSION_DECISION_TAG] == "promoted"


def test_minimize_promotes_the_lower_loss(client: MlflowClient, experiment_id: str) -> None:
    cfg = registry_cfg(metric="best_val_loss", direction="minimize")
    outcomes = [train_and_decide(client, experiment_id, cfg, v).outcome for v in (0.50, 0.40, 0.45, 0.40)]
    assert outcomes == ["first", "promoted", "kept", "kept"]
    assert alias_version(client, cfg) == "2"


def test_a_finish_repeated_by_the_same_run_registers_once(client: MlflowClient, experiment_id: str) -> None:
    cfg = registry_cfg()
    run_id, model_id = finished_run(client, experiment_id, {"test_accuracy": 0.9})
    once = registry.decide(client, cfg, run_id, model_id, {"test_accuracy": 0.9})
    registry.log_decision(client, run_id, once)
    again = registry.decide(client, cfg, run_id, model_id, {"test_accuracy": 0.9})

    assert [str(v.version) for v in client.search_model_versions(f"name = '{cfg.model_name}'")] == ["1"]
    assert (again.outcome, again.version) == ("candidate", "1")
    assert holder_version(client, cfg) is None, "training never sets the alias, not even the first one"
    promoted = registry.promote(client, cfg, run_id)
    assert (promoted.outcome, alias_version(client, cfg)) == ("first", "1")
    assert registry.promote(client, cfg, run_id).outcome == "promoted", "a repeated promote is idempotent"
    assert alias_version(client, cfg) == "1"


def test_a_branch_training_never_moves_the_alias(client: MlflowClient, experiment_id: str) -> None:
    """Issue 13, item 7: a far better model from a branch is registered and proposed; the champion stays."""
    cfg = registry_cfg()
    train_and_decide(client, experiment_id, cfg, 0.50)
    run_id, model_id = finished_run(client, experiment_id, {"test_accuracy": 0.99})
    decision = registry.decide(client, cfg, run_id, model_id, {"test_accuracy": 0.99})
    assert (decision.outcome, decision.version, alias_version(client, cfg)) == ("candidate", "2", "1")
    assert "only the promote workflow moves 'champion'" in decision.reason


def test_promote_recomputes_instead_of_trusting_the_candidate(
    client: MlflowClient, experiment_id: str
) -> None:
    """A branch can write any tag on its own run or version: promote compares the logged metrics again."""
    cfg = registry_cfg()
    train_and_decide(client, experiment_id, cfg, 0.90)
    run_id, model_id = finished_run(client, experiment_id, {"test_accuracy": 0.10})
    registry.decide(client, cfg, run_id, model_id, {"test_accuracy": 0.10})
    client.set_model_version_tag(cfg.model_name, "2", registry.VERSION_DECISION_TAG, "promoted")
    client.set_tag(run_id, "champion.decision", "promoted")
    assert registry.promote(client, cfg, run_id).outcome == "kept"
    assert alias_version(client, cfg) == "1"
    unregistered = client.create_run(experiment_id).info.run_id
    assert registry.promote(client, cfg, unregistered).outcome.startswith("skipped (run ")


def test_a_champion_without_the_metric_is_replaced(client: MlflowClient, experiment_id: str) -> None:
    """The metric was changed in the config: the old champion's run never logged it, so it cannot win."""
    cfg = registry_cfg()
    train_and_decide(client, experiment_id, cfg, 0.9)
    switched = RegistryConfig(**{**cfg.model_dump(), "metric": "test_macro_f1"})
    decision = train_and_decide(client, experiment_id, switched, 0.7)
    assert (decision.outcome, decision.previous_version, decision.previous_value) == ("promoted", "1", None)
    assert "has no test_macro_f1" in decision.reason
    assert alias_version(client, cfg) == "2"


def test_a_metric_the_run_did_not_compute_skips_without_registering(
    client: MlflowClient, experiment_id: str
) -> None:
    cfg = registry_cfg(metric="tflite_agreement")  # known, but this run exported no TFLite model
    run_id, model_id = finished_run(client, experiment_id, {"test_accuracy": 0.9})
    decision = registry.decide(client, cfg, run_id, model_id, {"test_accuracy": 0.9})
    registry.log_decision(client, run_id, decision)

    assert decision.outcome.startswith("skipped (registry.metric 'tflite_agreement' not computed by this run")
    assert "computed: test_accuracy" in decision.outcome
    assert client.search_model_versions(f"name = '{cfg.model_name}'") == []
    assert client.get_run(run_id).data.tags["champion.decision"] == decision.outcome


def test_a_registry_error_skips_the_decision_and_keeps_the_run(
    client: MlflowClient, experiment_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The server answers 500 for a model id it does not know; MLflow's client would retry that for minutes.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    cfg = registry_cfg()
    run_id, _ = finished_run(client, experiment_id, {"test_accuracy": 0.9})
    decision = registry.decide(client, cfg, run_id, "m-" + "0" * 32, {"test_accuracy": 0.9})
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
            "not a metric train logs; use one of test_accuracy, test_macro_precision",
        ),
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
        "kept", "not better", "best_val_loss", "minimize", "demo", "champion", "7", 0.25, "5", 0.2
    )
    text = registry.job_summary("http://mlflow.example:5000", decision)
    assert (
        "| candidate (this run) | [demo v7](http://mlflow.example:5000/#/models/demo/versions/7) | 0.2500 |"
        in text
    )
    assert (
        "| champion before this run | [demo v5](http://mlflow.example:5000/#/models/demo/versions/5) | 0.2000 |"
        in text
    )
    assert "| delta | | +0.0500 |" in text
    assert "Decision: **kept**: not better" in text


@pytest.mark.slow
def test_a_real_branch_run_leaves_the_champion_and_the_promote_path_moves_it(
    trained: dict, monkeypatch: pytest.MonkeyPatch, mlflow_server: str
) -> None:
    """Issue 13, item 7 on a real server: the training registers v2 and proposes it; the champion stays v1 until
    the command promote.yml runs moves it."""
    client, result = trained["client"], trained["logged"]
    assert result.metrics["test_accuracy"] > 0.5  # chance is 0.1; two epochs reach ~0.9
    assert result.champion.outcome == "candidate"
    assert client.get_model_version_by_alias(trained["model_name"], "champion").version == "1"

    config = trained["workdir"] / "promote.yaml"
    config.write_text(f"registry:\n  model_name: {trained['model_name']}\n", encoding="utf-8")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(trained["workdir"] / "promote.md"))
    for hostile in ("--x", "' or name = 'x", result.run_id.upper()):  # a workflow input: validated first
        assert cli.main(["promote", f"--run-id={hostile}", "--config", str(config)]) == 2
    assert client.get_model_version_by_alias(trained["model_name"], "champion").version == "1"
    assert cli.main(["promote", f"--run-id={result.run_id}", "--config", str(config)]) == 0
    holder = client.get_model_version_by_alias(trained["model_name"], "champion")
    assert (holder.version, holder.run_id) == ("2", result.run_id)
    tags = client.get_run(result.run_id).data.tags
    assert (tags["champion.decision"], tags["registry.version"], tags["champion.previous_version"]) == (
        "promoted",
        "2",
        "1",
    )
    # The registered version is the model this run logged, and it loads.
    model = mlflow.tensorflow.load_model(f"models:/{trained['model_name']}@champion")
    assert model.output_shape[-1] == 10


@pytest.mark.slow
def test_the_job_summary_has_the_delta_line(trained: dict) -> None:
    result = trained["logged"]
    summary = (trained["workdir"] / "logged.md").read_text()
    assert f"| test_accuracy | {result.metrics['test_accuracy']:.4f} |" in summary  # the metrics table stays
    assert f"| delta | | {result.metrics['test_accuracy'] - 0.5:+.4f} |" in summary
    assert "| champion before this run | [registry-real v1](" in summary
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
def test_no_logged_model_skips_registration(trained: dict) -> None:
    client, result = trained["client"], trained["no-model"]
    assert (
        client.get_run(result.run_id).data.tags["champion.decision"]
        == "skipped (tracking.log_model is false)"
    )
    assert client.search_model_versions(f"run_id = '{result.run_id}'") == []
    versions = client.search_model_versions(f"name = '{trained['model_name']}'")
    assert sorted(v.version for v in versions) == ["1", "2"]
    assert (
        "Decision: **skipped (tracking.log_model is false)**"
        in (trained["workdir"] / "no-model.md").read_text()
    )


def test_tag_values_are_converted_once_and_none_is_refused() -> None:
    tags = tracking.run_tag_entities({"registry.version": 3, "a": "b"})
    assert [(t.key, t.value) for t in tags] == [("registry.version", "3"), ("a", "b")]
    with pytest.raises(ValueError, match=r"'champion\.previous_version' has no value"):
        tracking.tag_value("champion.previous_version", None)


@pytest.fixture(scope="module")
def local_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The store `make train` logs to without MLFLOW_TRACKING_URI (tracking.DEFAULT_TRACKING_URI), in tmp.

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


def finished_run(client: MlflowClient, experiment_id: str, metrics: dict[str, float]) -> tuple[str, str]:
    """A run that logged `metrics` and a model, as train() leaves it: (run id, logged model id)."""
    run_id = client.create_run(experiment_id).info.run_id
    for name, value in metrics.items():
        client.log_metric(run_id, name, value)
    model = client.create_logged_model(experiment_id, name="model", source_run_id=run_id)
    client.set_terminated(run_id)
    return run_id, model.model_id


def alias_version(client: MlflowClient, cfg: RegistryConfig) -> str:
    # str(): MLflow's own entity says int for the local store and str behind REST.
    return str(client.get_model_version_by_alias(cfg.model_name, cfg.alias).version)


def holder_version(client: MlflowClient, cfg: RegistryConfig) -> str | None:
    holder = registry.alias_holder(client, cfg.model_name, cfg.alias)
    return None if holder is None else str(holder.version)


def train_and_decide(
    client: MlflowClient, experiment_id: str, cfg: RegistryConfig, value: float
) -> registry.ChampionDecision:
    """A training (registers its version, proposes it) and then the promote workflow (moves the alias if it wins)."""
    run_id, model_id = finished_run(client, experiment_id, {cfg.metric: value})
    before = holder_version(client, cfg)
    proposed = registry.decide(client, cfg, run_id, model_id, {cfg.metric: value})
    registry.log_decision(client, run_id, proposed)
    assert proposed.outcome in ("candidate", "kept"), proposed
    assert holder_version(client, cfg) == before, "a training moved the alias"
    decision = registry.promote(client, cfg, run_id)
    registry.log_decision(client, run_id, decision)
    return decision


# ---------------------------------------------------------------------- real training
@pytest.fixture(scope="module")
def trained(mlflow_server: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A champion worth 0.5 test accuracy exists; a real training beats it; a second one logs no model."""
    workdir = tmp_path_factory.mktemp("registry-train")
    model_name = "registry-real"
    mlflow.set_tracking_uri(mlflow_server)
    client = MlflowClient(mlflow_server)
    experiment_id = client.create_experiment("registry-train")
    seed_run, seed_model = finished_run(client, experiment_id, {"test_accuracy": 0.5})
    seed_cfg = RegistryConfig(model_name=model_name)
    assert (
        registry.decide(client, seed_cfg, seed_run, seed_model, {"test_accuracy": 0.5}).outcome == "candidate"
    )
    assert registry.promote(client, seed_cfg, seed_run).outcome == "first"

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
