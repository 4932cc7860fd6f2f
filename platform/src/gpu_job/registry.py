"""The champion rule: the version of the rule's `model_name` that holds its `alias` (the champion) is the one a
project's predict serves, and only a strictly better model takes its place. The project's config holds the rule
(`registry.*` of its train.yaml: model_name, metric, direction, alias); ChampionRule is what this module reads.

Training only reads the registry (issue 30, High 1): it compares its run's `registry.metric` with the champion's
for the job summary and the pull-request comment and tags its run (`champion.decision`: candidate / kept /
skipped (why)); it registers nothing and moves nothing. A training job runs branch code with the `ci` MLflow
credential, so nothing inside it can be trusted to decide what ships. The project's `promote` (promote.yml on
the default branch with its own credential) measures candidate and champion itself, calls `compare` on its own
figures and alone registers versions.
"""

from __future__ import annotations

import math
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from mlflow.entities import Metric
from mlflow.entities.model_registry import ModelVersion
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from gpu_job import tracking

# Model version tags (promote writes them): the same words as champion.decision / champion.reason.
VERSION_DECISION_TAG = "decision"
VERSION_REASON_TAG = "decision.reason"
# Outcomes that move the alias (promote only); training's word for "would win" is `candidate`.
MOVES_ALIAS = ("first", "promoted")


class ChampionRule(Protocol):
    """What the project's config says about its served model (the generated project's RegistryConfig has these
    fields, and checks them: a name MLflow accepts, a metric promote can measure, an alias that is not reserved)."""

    @property
    def model_name(self) -> str: ...
    @property
    def metric(self) -> str: ...
    @property
    def direction(self) -> Literal["maximize", "minimize"]: ...
    @property
    def alias(self) -> str: ...


@dataclass(frozen=True)
class ChampionDecision:
    """What became of one model. outcome: first / promoted (promote moved the alias) / candidate (training: better
    than the champion by its own figures, or no champion yet) / kept / skipped (<why>). `version` is the version
    promote registered (None for training, which registers nothing)."""

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

    def but(self, outcome: str, reason: str, **fields: object) -> ChampionDecision:
        """This decision with another outcome and reason (and fields)."""
        return ChampionDecision(**{**self.__dict__, "outcome": outcome, "reason": reason, **fields})


def skipped(cfg: ChampionRule, why: str, candidate_value: float | None = None) -> ChampionDecision:
    """A decision that moves nothing; `why` ends up in the tag, e.g. 'skipped (why)'."""
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


def alias_holder(client: MlflowClient, name: str, alias: str) -> ModelVersion | None:
    """The version that holds the alias now; None on the first run (no model or no alias yet)."""
    try:
        return client.get_model_version_by_alias(name, alias)
    except MlflowException as error:
        if error.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            return None
        raise


def run_metric(client: MlflowClient, run_id: str | None, metric: str) -> float | None:
    """A version's value of the metric, read from its run (for a promoted version: what promote measured on the
    held-out set); None when the run is gone or lacks it."""
    if not run_id:
        return None
    try:
        return client.get_run(run_id).data.metrics.get(metric)
    except MlflowException:
        return None


def compare(
    cfg: ChampionRule, value: float, holder: str | None, held: float | None, version: str | None = None
) -> ChampionDecision:
    """The decision alone, no side effects: first / promoted / kept, with the reason in words. `holder` is the
    champion's version number (None: no champion), `held` its value."""
    base = ChampionDecision("", "", cfg.metric, cfg.direction, cfg.model_name, cfg.alias, version, value)
    if holder is None:
        return base.but("first", f"no version holds '{cfg.alias}' yet")
    previous = {"previous_version": holder, "previous_value": held}
    if held is None:
        return base.but(
            "promoted", f"champion v{holder} has no {cfg.metric}, so it cannot be compared", **previous
        )
    sign = ">" if value > held else "<" if value < held else "="
    words = f"{cfg.metric} {value:.4f} {sign} {held:.4f} of v{holder} ({cfg.direction})"
    if beats(value, held, cfg.direction):
        return base.but("promoted", words, **previous)
    why = "a tie keeps the champion" if value == held else "not better"
    return base.but("kept", f"{words}: {why}", **previous)


def _error_reason(error: MlflowException) -> str:
    # First line only, and bounded: it becomes a tag value, and server errors can carry whole pages.
    return "registry error: " + (str(error).splitlines() or [type(error).__name__])[0][:300]


def decide(
    client: MlflowClient, cfg: ChampionRule, run_id: str, metrics: Mapping[str, float]
) -> ChampionDecision:
    """Training's view: this run's value against the champion's, read-only. A run that would win by its own
    figures is a `candidate` for promote, which measures both again on the held-out set before anything moves.

    Registry failures become a skipped decision: the run is logged already and is worth more than the comparison;
    the reason says what went wrong.
    """
    value = metrics.get(cfg.metric)
    if value is None:
        return skipped(
            cfg, f"registry.metric {cfg.metric!r} not computed by this run; computed: {', '.join(metrics)}"
        )
    try:
        holder = alias_holder(client, cfg.model_name, cfg.alias)
        held = run_metric(client, holder.run_id, cfg.metric) if holder else None
    except MlflowException as error:
        return skipped(cfg, _error_reason(error), value)
    decision = compare(cfg, value, version_number(holder) if holder else None, held)
    if decision.outcome not in MOVES_ALIAS:
        return decision
    return decision.but(
        "candidate",
        f"{decision.reason}; promote measures both on the held-out set and alone moves '{cfg.alias}' "
        f"(promote --run-id={run_id})",
    )


def log_decision(client: MlflowClient, run_id: str, decision: ChampionDecision) -> None:
    """Tags and metrics on the run (training: its own run; promote: its run in the promotions experiment)."""
    now = int(time.time() * 1000)
    client.log_batch(
        run_id,
        metrics=[Metric(name, value, now, 0) for name, value in decision.run_metrics().items()],
        tags=tracking.run_tag_entities(decision.run_tags()),
    )


def version_link(uri: str, name: str, version: str) -> str:
    """The registry page of a version on a server; `name vN` for a local store (no UI to link to)."""
    if uri.startswith(("http://", "https://")):
        return f"[{name} v{version}]({uri.rstrip('/')}/#/models/{urllib.parse.quote(name, safe='')}/versions/{version})"
    return f"`{name}` v{version}"


def _value(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def job_summary(uri: str, decision: ChampionDecision, candidate: str = "this run") -> str:
    """Markdown for the GitHub job summary: candidate vs champion, the delta with its sign, the decision."""
    head = f"### Champion model (`{decision.alias}`)\n\n"
    if decision.candidate_value is None:
        return f"{head}Decision: **{decision.outcome}**\n"
    previous = (
        version_link(uri, decision.model_name, decision.previous_version)
        if decision.previous_version
        else "none"
    )
    mine = version_link(uri, decision.model_name, decision.version) if decision.version else candidate
    delta = "-" if decision.delta is None else f"{decision.delta:+.4f}"
    moved = (
        f"; `{decision.alias}` now points at v{decision.version}"
        if decision.outcome in MOVES_ALIAS
        else "; run the promote workflow with this run id: it measures both on the held-out set and decides"
        if decision.outcome == "candidate"
        else ""
    )
    rows = [
        f"| candidate ({candidate}) | {mine} | {_value(decision.candidate_value)} |",
        f"| champion | {previous} | {_value(decision.previous_value)} |",
        f"| delta | | {delta} |",
    ]
    return (
        f"{head}| | model version | {decision.metric} ({decision.direction}) |\n|---|---|---|\n"
        + "\n".join(rows)
        + f"\n\nDecision: **{decision.outcome}**: {decision.reason}{moved}\n"
    )
