"""Model registry: every finished run's model becomes a version of `registry.model_name`, and the version whose
`registry.metric` is best holds `registry.alias` (the champion). The decision and both values are logged.

Training only registers and proposes: a version that would win is a "candidate". Only `promote` moves the alias,
and only the promote workflow (.github/workflows/promote.yml: the default branch, environment `production`, its
own MLflow credentials) runs it. A training job runs branch code, so nothing inside it can prove it may move the
champion (issue 13, item 7)."""

from __future__ import annotations

import math
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

import mlflow
from mlflow.entities import Metric
from mlflow.entities.model_registry import ModelVersion
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from . import tracking
from .config import RegistryConfig

# Model version tags: the same words as the run's champion.decision / champion.reason, readable in the registry.
VERSION_DECISION_TAG = "decision"
VERSION_REASON_TAG = "decision.reason"


@dataclass(frozen=True)
class ChampionDecision:
    """What became of one run's model. outcome: first / promoted (the alias moved: promote only) / candidate
    (would win; training never moves the alias) / kept / skipped (<why>)."""

    outcome: str
    reason: str
    metric: str
    direction: str
    model_name: str
    alias: str
    version: str | None = None
    candidate_value: float | None = None
    previous_version: str | None = None
    previous_value: float | None = None

    @property
    def delta(self) -> float | None:
        """Candidate minus champion, so its sign reads the same for both directions: + = larger."""
        if self.candidate_value is None or self.previous_value is None:
            return None
        return self.candidate_value - self.previous_value

    def run_tags(self) -> dict[str, str]:
        tags = {
            "champion.decision": self.outcome,
            "champion.reason": self.reason,
            "champion.metric": self.metric,
            "champion.direction": self.direction,
            "registry.model_name": self.model_name,
        }
        if self.version is not None:
            tags["registry.version"] = self.version
        if self.previous_version is not None:
            tags["champion.previous_version"] = self.previous_version
        return tags

    def run_metrics(self) -> dict[str, float]:
        values = {
            "champion.candidate_value": self.candidate_value,
            "champion.previous_value": self.previous_value,
            "champion.delta": self.delta,
        }
        return {name: value for name, value in values.items() if value is not None}

    def line(self) -> str:
        """One line for the job log."""
        where = f"{self.model_name} v{self.version}" if self.version else self.model_name
        return f"registry: {self.outcome} - {where} (alias {self.alias}): {self.reason}"


def skipped(cfg: RegistryConfig, why: str, candidate_value: float | None = None) -> ChampionDecision:
    """A decision that registers nothing and moves no alias; `why` ends up in the tag, e.g. 'skipped (why)'."""
    return ChampionDecision(
        f"skipped ({why})", why, cfg.metric, cfg.direction, cfg.model_name, cfg.alias, None, candidate_value
    )


def beats(candidate: float, champion: float, direction: str) -> bool:
    """Strictly better. A tie keeps the champion, so re-training the same thing does not churn the alias."""
    if math.isnan(candidate):
        return False
    if math.isnan(champion):
        return True
    return candidate > champion if direction == "maximize" else candidate < champion


def version_number(version: ModelVersion) -> str:
    """A version's number as a str, whatever the store: MLflow's local sqlite store answers an int, a tracking
    server (REST, protobuf) a str. The decision holds it as a str, so comparisons and tags do not depend on the store."""
    return str(version.version)


def version_of_run(client: MlflowClient, name: str, run_id: str) -> ModelVersion | None:
    """The version this run registered already, if any: a resumed or repeated finish must not add a second one."""
    versions = client.search_model_versions(f"name = '{name}' and run_id = '{run_id}'")
    return min(versions, key=lambda v: int(v.version)) if versions else None


def register(client: MlflowClient, name: str, model_id: str, run_id: str) -> ModelVersion:
    """A new version of `name` from the logged model, or the one this run registered before."""
    existing = version_of_run(client, name, run_id)
    if existing is not None:
        return existing
    # models:/<model_id> names the exact LoggedModel this run logged; MLflow fills in its source run id.
    return mlflow.register_model(f"models:/{model_id}", name)


def alias_holder(client: MlflowClient, name: str, alias: str) -> ModelVersion | None:
    """The version that holds the alias now; None on the first run (no model or no alias yet)."""
    try:
        return client.get_model_version_by_alias(name, alias)
    except MlflowException as error:
        if error.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            return None
        raise


def run_metric(client: MlflowClient, run_id: str | None, metric: str) -> float | None:
    """A version's value of the metric, read from its source run; None when the run is gone or lacks it."""
    if not run_id:
        return None
    try:
        return client.get_run(run_id).data.metrics.get(metric)
    except MlflowException:
        return None


def compare(
    cfg: RegistryConfig,
    candidate: ModelVersion,
    value: float,
    holder: ModelVersion | None,
    held: float | None,
) -> ChampionDecision:
    """The decision alone, no side effects: first / promoted / kept, with the reason in words."""
    number = version_number(candidate)
    base = ChampionDecision("", "", cfg.metric, cfg.direction, cfg.model_name, cfg.alias, number, value)
    if holder is None:
        return _with(base, "first", f"no version held '{cfg.alias}' yet")
    previous = {"previous_version": version_number(holder), "previous_value": held}
    if version_number(holder) == number:
        # Only when an earlier attempt of this run registered and promoted it already.
        outcome = (holder.tags or {}).get(VERSION_DECISION_TAG, "promoted")
        return _with(base, outcome, f"v{holder.version} (this run) holds '{cfg.alias}' already", **previous)
    if held is None:
        return _with(
            base,
            "promoted",
            f"champion v{holder.version} has no {cfg.metric} on its run, so it cannot be compared",
            **previous,
        )
    sign = ">" if value > held else "<" if value < held else "="
    words = f"{cfg.metric} {value:.4f} {sign} {held:.4f} of v{holder.version} ({cfg.direction})"
    if beats(value, held, cfg.direction):
        return _with(base, "promoted", words, **previous)
    why = "a tie keeps the champion" if value == held else "not better"
    return _with(base, "kept", f"{words}: {why}", **previous)


def _with(base: ChampionDecision, outcome: str, reason: str, **fields: object) -> ChampionDecision:
    return ChampionDecision(**{**base.__dict__, "outcome": outcome, "reason": reason, **fields})


MOVES_ALIAS = ("first", "promoted")


def _error_reason(error: MlflowException) -> str:
    # First line only, and bounded: it becomes a tag value, and server errors can carry whole pages.
    return "registry error: " + (str(error).splitlines() or [type(error).__name__])[0][:300]


def _as_candidate(decision: ChampionDecision) -> ChampionDecision:
    """What training reports instead of moving the alias: the same comparison, proposed for promotion."""
    if decision.outcome not in MOVES_ALIAS:
        return decision
    why = (
        f"{decision.reason}; only the promote workflow moves '{decision.alias}' (promote --run-id=<this run>)"
    )
    return _with(decision, "candidate", why)


def decide(
    client: MlflowClient, cfg: RegistryConfig, run_id: str, model_id: str, metrics: Mapping[str, float]
) -> ChampionDecision:
    """Register this run's model and compare it with the alias holder; never move the alias (see `promote`).

    Registry failures become a skipped decision: the run and its model are logged already and are worth more
    than the alias; the reason says what went wrong.
    """
    value = metrics.get(cfg.metric)
    if value is None:
        return skipped(
            cfg, f"registry.metric {cfg.metric!r} not computed by this run; computed: {', '.join(metrics)}"
        )
    try:
        candidate = register(client, cfg.model_name, model_id, run_id)
        holder = alias_holder(client, cfg.model_name, cfg.alias)
        held = run_metric(client, holder.run_id, cfg.metric) if holder else None
        return _as_candidate(compare(cfg, candidate, value, holder, held))
    except MlflowException as error:
        return skipped(cfg, _error_reason(error), value)


def promote(client: MlflowClient, cfg: RegistryConfig, run_id: str) -> ChampionDecision:
    """Move the alias to the version `run_id` registered when its metric strictly beats the holder's (or no
    version holds it yet). The comparison is made again here, from what the runs logged: the candidate's own
    claim (its decision tag) is not trusted."""
    try:
        candidate = version_of_run(client, cfg.model_name, run_id)
        if candidate is None:
            return skipped(cfg, f"run {run_id} registered no version of {cfg.model_name}")
        value = run_metric(client, run_id, cfg.metric)
        if value is None:
            return skipped(cfg, f"run {run_id} has no {cfg.metric} to compare")
        holder = alias_holder(client, cfg.model_name, cfg.alias)
        held = run_metric(client, holder.run_id, cfg.metric) if holder else None
        decision = compare(cfg, candidate, value, holder, held)
        if decision.outcome == "candidate":  # it holds the alias already (training tagged it a candidate)
            decision = _with(decision, "promoted", decision.reason)
        if decision.outcome in MOVES_ALIAS:
            client.set_registered_model_alias(cfg.model_name, cfg.alias, decision.version)
    except MlflowException as error:
        return skipped(cfg, _error_reason(error))
    return decision


def log_decision(client: MlflowClient, run_id: str, decision: ChampionDecision) -> None:
    """Tags and metrics on the run; the outcome also on the model version, where the registry UI shows it."""
    now = int(time.time() * 1000)
    client.log_batch(
        run_id,
        metrics=[Metric(name, value, now, 0) for name, value in decision.run_metrics().items()],
        tags=tracking.run_tag_entities(decision.run_tags()),
    )
    if decision.version is not None:
        for key, value in ((VERSION_DECISION_TAG, decision.outcome), (VERSION_REASON_TAG, decision.reason)):
            client.set_model_version_tag(
                decision.model_name, decision.version, key, tracking.tag_value(key, value)
            )


def version_link(uri: str, name: str, version: str) -> str:
    """The registry page of a version on a server; `name vN` for a local store (no UI to link to)."""
    if uri.startswith(("http://", "https://")):
        return f"[{name} v{version}]({uri.rstrip('/')}/#/models/{urllib.parse.quote(name, safe='')}/versions/{version})"
    return f"`{name}` v{version}"


def _value(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def job_summary(uri: str, decision: ChampionDecision) -> str:
    """Markdown for the GitHub job summary: candidate vs champion, the delta with its sign, the decision."""
    head = f"### Champion model (`{decision.alias}`)\n\n"
    if decision.version is None:
        return f"{head}Decision: **{decision.outcome}**\n"
    previous = (
        version_link(uri, decision.model_name, decision.previous_version)
        if decision.previous_version
        else "none"
    )
    delta = "-" if decision.delta is None else f"{decision.delta:+.4f}"
    moved = (
        f"; `{decision.alias}` now points at v{decision.version}"
        if decision.outcome in MOVES_ALIAS
        else f"; run the promote workflow with this run id to make it `{decision.alias}`"
        if decision.outcome == "candidate"
        else ""
    )
    rows = [
        f"| candidate (this run) | {version_link(uri, decision.model_name, decision.version)} | "
        f"{_value(decision.candidate_value)} |",
        f"| champion before this run | {previous} | {_value(decision.previous_value)} |",
        f"| delta | | {delta} |",
    ]
    return (
        f"{head}| | model version | {decision.metric} ({decision.direction}) |\n|---|---|---|\n"
        + "\n".join(rows)
        + f"\n\nDecision: **{decision.outcome}**: {decision.reason}{moved}\n"
    )
