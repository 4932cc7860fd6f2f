"""The champion rule (gpu_job.registry) as a training sees it, read-only: it compares, registers nothing. On runs
and versions made with MlflowClient (fast, deterministic values) against both stores a user has, a real MLflow
server and the local sqlite store a project's `make train` logs to by default. The project's own tests train for
real through its train() and run its promote (which alone registers and moves the alias)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any, Literal

import mlflow
import pytest
from mlflow.tracking import MlflowClient

from gpu_job import registry
from gpu_job.registry import ChampionRule

_names = itertools.count(1)


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
    switched = replace(cfg, metric="test_macro_f1")
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


def test_job_summary_shows_both_values_the_signed_delta_and_links() -> None:
    decision = registry.ChampionDecision(
        "kept", "not better", "test_accuracy", "maximize", "demo", "champion", None, 0.2, "5", 0.25
    )
    text = registry.job_summary("http://mlflow.example:5000", decision)
    assert "| candidate (this run) | this run | 0.2000 |" in text
    assert "| champion | [demo v5](http://mlflow.example:5000/#/models/demo/versions/5) | 0.2500 |" in text
    assert "| delta | | -0.0500 |" in text
    assert "Decision: **kept**: not better" in text


@pytest.fixture(scope="module")
def local_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The store `make train` logs to without MLFLOW_TRACKING_URI (gpu_job.tracking.DEFAULT_TRACKING_URI), in tmp.

    It is not the server's store behind REST: its ModelVersion.version is an int where the server's is a str,
    and it checks tag values with len(), so an unconverted int fails here and nowhere else."""
    return f"sqlite:///{tmp_path_factory.mktemp('local-store') / 'mlflow.db'}"


# The server's variants are in the slow tier with every test that needs the tracking server (SLOW_FIXTURES).
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


@dataclass(frozen=True)
class Rule:
    """A project's champion rule (the generated project's RegistryConfig, whose defaults these are)."""

    model_name: str
    metric: str = "test_accuracy"
    direction: Literal["maximize", "minimize"] = "maximize"
    alias: str = "champion"


def registry_cfg(**values: Any) -> Rule:
    """A fresh model name per call: the server is shared by the whole session."""
    return Rule(**{"model_name": f"decisions-{next(_names)}", **values})


def finished_run(client: MlflowClient, experiment_id: str, metrics: dict[str, float]) -> str:
    """A run that logged `metrics`, as a project's training leaves it."""
    run_id = client.create_run(experiment_id).info.run_id
    for name, value in metrics.items():
        client.log_metric(run_id, name, value)
    client.set_terminated(run_id)
    return run_id


def crown(client: MlflowClient, experiment_id: str, cfg: ChampionRule, value: float) -> None:
    """A champion whose run holds `value` (what promote's run holds: its own measure), as version 1."""
    run_id = finished_run(client, experiment_id, {cfg.metric: value})
    if not client.search_registered_models(f"name = '{cfg.model_name}'"):
        client.create_registered_model(cfg.model_name)
    version = client.create_model_version(cfg.model_name, "s3://bucket/served", run_id=run_id)
    client.set_registered_model_alias(cfg.model_name, cfg.alias, str(version.version))


def alias_version(client: MlflowClient, cfg: ChampionRule) -> str:
    # str(): MLflow's own entity says int for the local store and str behind REST.
    return str(client.get_model_version_by_alias(cfg.model_name, cfg.alias).version)


def proposal(
    client: MlflowClient, experiment_id: str, cfg: ChampionRule, value: float
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
