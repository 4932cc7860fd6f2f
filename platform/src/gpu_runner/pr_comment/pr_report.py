"""The pull-request comment's body: a training (or sweep) run as MLflow holds it, in Markdown.

Read through MLflow's REST API (mlflow_rest, no mlflow package): the run's key metrics beside those of the
version that holds the champion alias, with the delta; the registered version and the registry's decision; the
billed cost the stop job logged (cost/record.py: cost_usd and billed_seconds per attempt, summed); links to the run
and the version on the tracking server, the commit and the workflow run.

Everything the run holds was written by the branch's code (the training job), so every value from MLflow is
shown inert: numbers are formatted from floats, ids are checked, and text (tags) goes into a code span with its
backticks, pipes, line breaks and HTML comment openers broken, so a tag cannot add a link, a mention, HTML, a
table row or a second marker to the comment.
"""

from __future__ import annotations

import math
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_runner.core.mlflow_rest import MlflowError, MlflowRest
from gpu_runner.cost.record import BILLED_SECONDS, COST_USD, TAG_INSTANCE_TYPE, TAG_MARKET, last_per_step

KINDS = ("train", "sweep")
# The hidden line the commenter finds its own comment by, one per workflow (a train and a sweep branch each
# keep theirs). An HTML comment: GitHub's Markdown renders nothing for it.
MARKERS = {kind: f"<!-- ml-project:{kind}-report -->" for kind in KINDS}
# "Body is too long (maximum is 65536 characters)": GitHub's 422 to a longer issue comment
# (peter-evans/create-or-update-comment#182, jmikedupont2/ai-ticket#51 quote it).
MAX_BODY_CHARS = 65536
TRUNCATED = (
    "\n\n_… cut here: GitHub keeps at most 65,536 characters in a comment; the MLflow run has the rest._\n"
)
# The metrics the project logs that a reviewer compares first (src/<package>/evaluate.py's test metrics, train.py's
# best validation figures); the registry's own metric (the run's champion.metric tag) is added when it is not one.
KEY_METRICS = (
    "test_accuracy",
    "test_macro_f1",
    "test_macro_precision",
    "test_macro_recall",
    "best_val_accuracy",
    "best_val_loss",
)
_HEX = re.compile(r"[0-9a-f]{1,64}")
_DIGITS = re.compile(r"[0-9]{1,20}")
_TEXT_MAX = 120


class ReportError(Exception):
    """The run could not be read (the message names what and why)."""


@dataclass(frozen=True)
class Context:
    """Where the comment comes from: the workflow run (GitHub's own values, not the run's tags)."""

    kind: str  # train | sweep
    branch: str
    commit: str  # 40 hex, or "" when unknown
    workflow_run_url: str
    alias: str = "champion"


def inert(value: object, limit: int = _TEXT_MAX) -> str:
    """A text value from MLflow as a code span that renders as itself: no backticks, pipes, line breaks or
    control characters inside, at most `limit` characters."""
    text = "".join(ch if ch.isprintable() else " " for ch in str(value))
    text = text.replace("`", "'").replace("|", "¦").strip()
    # Nor an HTML comment opener: the comment's marker stays the one the commenter wrote.
    text = text.replace("<!--", "<!-\u200b-")
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return f"`{text}`" if text else "`-`"


def server_url(uri: str) -> str | None:
    """The tracking server's base URL, None for a local store (sqlite, a file path: no UI to link to)."""
    return uri.rstrip("/") if uri.startswith(("http://", "https://")) else None


def run_link(base: str, experiment_id: str, run_id: str) -> str:
    return f"{base}/#/experiments/{experiment_id}/runs/{run_id}"


def version_link(base: str, name: str, version: str) -> str:
    return f"{base}/#/models/{urllib.parse.quote(name, safe='')}/versions/{version}"


def _pairs(items: Sequence[Mapping[str, Any]] | None, field: str) -> dict[str, Any]:
    return {item["key"]: item.get(field) for item in items or () if "key" in item}


@dataclass(frozen=True)
class RunView:
    """The parts of one MLflow run (REST shape) the comment shows."""

    run_id: str
    experiment_id: str
    name: str
    status: str
    metrics: dict[str, float]
    tags: dict[str, str]

    @classmethod
    def read(cls, client: MlflowRest, run_id: str) -> RunView:
        run = client.get_run(run_id)
        info, data = run.get("info", {}), run.get("data", {})
        metrics = {}
        for key, value in _pairs(data.get("metrics"), "value").items():
            try:
                metrics[key] = float(value)
            except (TypeError, ValueError):
                continue
        experiment = str(info.get("experiment_id", ""))
        return cls(
            run_id=run_id,
            experiment_id=experiment if _DIGITS.fullmatch(experiment) else "0",
            name=str(info.get("run_name") or ""),
            status=str(info.get("status") or ""),
            metrics=metrics,
            tags={k: str(v) for k, v in _pairs(data.get("tags"), "value").items()},
        )


def _number(value: float | None, signed: bool = False) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:+.4f}" if signed else f"{value:.4f}"


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {rest:02d} s"


# The model version tag promote writes: the training run it measured and served (the project's promote.py).
CANDIDATE_TAG = "promote.candidate_run_id"


@dataclass(frozen=True)
class Champion:
    version: str
    run_id: str
    metrics: dict[str, float]
    # The training run promote served this version from ("" for a version registered another way).
    from_run: str = ""


def champion(client: MlflowRest, model_name: str, alias: str) -> Champion | None:
    """The version holding `alias` and its source run's metrics; None when no version holds it yet."""
    held = client.model_version_by_alias(model_name, alias)
    if not held:
        return None
    version, run_id = str(held.get("version", "")), str(held.get("run_id") or "")
    metrics: dict[str, float] = {}
    if _HEX.fullmatch(run_id):
        try:
            metrics = RunView.read(client, run_id).metrics
        except MlflowError:
            metrics = {}  # the champion's run was deleted: its version still shows, its numbers do not
    tags = {t.get("key"): t.get("value") for t in held.get("tags") or [] if isinstance(t, dict)}
    from_run = str(tags.get(CANDIDATE_TAG) or "")
    return Champion(
        version if _DIGITS.fullmatch(version) else "?",
        run_id,
        metrics,
        from_run if _HEX.fullmatch(from_run) else "",
    )


def _cost_line(client: MlflowRest, run: RunView) -> str:
    """The stop job's record: cost_usd and billed_seconds per attempt (step), the last point at each counting."""
    costs = last_per_step(client.metric_history(run.run_id, COST_USD))
    if not costs:
        return (
            "**Billed GPU cost**: none logged on this run yet (the stop job logs it to MLflow once the instance is "
            "gone; see its job summary)"
        )
    billed = last_per_step(client.metric_history(run.run_id, BILLED_SECONDS))
    total, seconds = math.fsum(costs.values()), math.fsum(billed.values())
    where = " ".join(inert(run.tags[tag], 40) for tag in (TAG_INSTANCE_TYPE, TAG_MARKET) if run.tags.get(tag))
    attempts = f"{len(costs)} attempt{'s' if len(costs) != 1 else ''}"
    return f"**Billed GPU cost**: ${total:.4f} for {_duration(seconds)} billed ({attempts}{', ' + where if where else ''})"


def _sweep_cost_line(parent: RunView) -> str:
    cost, hours = parent.metrics.get("sweep_cost_usd"), parent.metrics.get("sweep_gpu_hours")
    if cost is None:
        return "**Billed GPU cost**: none logged on the sweep yet (each trial's stop job logs its own)"
    counts = ", ".join(
        f"{int(parent.metrics[f'trials_{state}'])} {state}"
        for state in ("complete", "pruned", "fail", "running")
        if f"trials_{state}" in parent.metrics
    )
    gpu = f" for {hours:.2f} GPU hours" if hours is not None else ""
    return (
        f"**Billed GPU cost (all trials so far)**: ${cost:.4f}{gpu}{f'; trials: {counts}' if counts else ''}"
    )


def metric_table(run: RunView, registry_metric: str, held: Champion | None) -> str:
    names = [m for m in KEY_METRICS if m in run.metrics]
    if registry_metric and registry_metric in run.metrics and registry_metric not in names:
        names.insert(0, registry_metric)
    if not names:
        return "_This run logged none of the key metrics (it may have stopped before the evaluation)._\n"
    head = f"champion v{held.version}" if held else "champion"
    lines = [f"| metric | this run | {head} | delta |", "|---|---:|---:|---:|"]
    for name in names:
        value = run.metrics[name]
        theirs = held.metrics.get(name) if held else None
        delta = value - theirs if theirs is not None else None
        label = f"**{name}**" if name == registry_metric else name
        lines.append(f"| {label} | {_number(value)} | {_number(theirs)} | {_number(delta, signed=True)} |")
    return "\n".join(lines) + "\n"


def _links(
    base: str | None, run: RunView, ctx: Context, model: tuple[str, str] | None, what: str = "MLflow run"
) -> list[str]:
    links = []
    if base:
        links.append(f"{what}: [{run.run_id[:12]}]({run_link(base, run.experiment_id, run.run_id)})")
        if model:
            links.append(f"model version: [{inert(model[0], 80)} v{model[1]}]({version_link(base, *model)})")
    if ctx.commit:
        links.append(f"commit `{ctx.commit[:12]}`")
    if ctx.workflow_run_url:
        links.append(f"[workflow run]({ctx.workflow_run_url})")
    return links


def _registry_lines(
    client: MlflowRest, run: RunView, ctx: Context
) -> tuple[str, Champion | None, tuple[str, str] | None, str]:
    """The champion line, the champion, the (model, version) this run registered, and the registry's metric."""
    model_name = run.tags.get("registry.model_name", "")
    version = run.tags.get("registry.version", "")
    metric = run.tags.get("champion.metric", "")
    if not model_name:
        return (
            "**Champion**: the registry is off for this run (registry.enabled), nothing to compare with\n",
            None,
            None,
            metric,
        )
    held = champion(client, model_name, ctx.alias)
    model = (model_name, version) if _DIGITS.fullmatch(version) else None
    decision = run.tags.get("champion.decision", "")
    if held is None:
        line = (
            f"**Champion** (`{ctx.alias}` of {inert(model_name, 80)}): no champion yet; the promote workflow "
            "(promote.yml) makes the first one"
        )
    elif (model and held.version == model[1]) or held.from_run == run.run_id:
        line = f"**Champion** (`{ctx.alias}`): this run's v{held.version} holds it"
    else:
        line = f"**Champion** (`{ctx.alias}`): v{held.version} of {inert(model_name, 80)}"
    if decision:
        line += f"; registry decision: {inert(decision, 60)}"
        served = held is not None and held.from_run == run.run_id
        if decision == "candidate" and not served:
            line += f" (promote it: run promote.yml with run-id `{run.run_id}`)"
    return line + "\n", held, model, metric


def _head(ctx: Context) -> str:
    if ctx.kind not in KINDS:
        raise ReportError(f"--kind: '{ctx.kind}' is not one of {', '.join(KINDS)}")
    what = "Training" if ctx.kind == "train" else "Hyperparameter sweep"
    return f"{MARKERS[ctx.kind]}\n### {what} on {inert(ctx.branch)}\n\n"


def build_local(uri: str, run_id: str, ctx: Context) -> str:
    """The comment when MLFLOW_TRACKING_URI is no server: the run lived on the GPU instance, unreadable here."""
    where = "no MLFLOW_TRACKING_URI variable" if not uri else f"MLFLOW_TRACKING_URI {inert(uri, 80)}"
    links = " · ".join(_links(None, RunView(run_id, "0", "", "", {}, {}), ctx, None))
    return fit(
        _head(ctx)
        + f"The MLflow store is local ({where}): run `{run_id}` lived on the GPU instance and this job cannot "
        "read it, so there are no metrics, champion delta or cost here. They are in the train job's summary "
        "(and its `mlflow-local-store` artifact where kept). Set the repository variable MLFLOW_TRACKING_URI "
        f"to an MLflow server to get them here.\n\n{links}\n"
    )


def build(client: MlflowRest, uri: str, run_id: str, ctx: Context) -> str:
    """The comment for a training run (kind train) or a sweep's parent run (kind sweep), marker first; `uri`
    is the tracking server `client` talks to."""
    head = _head(ctx)
    base = server_url(uri)
    if base is None:
        return build_local(uri, run_id, ctx)
    try:
        run = RunView.read(client, run_id)
        parent = None
        if ctx.kind == "sweep":
            parent = run
            best = run.tags.get("sweep.best_run_id", "")
            if not _HEX.fullmatch(best):
                return fit(
                    head
                    + f"No trial has finished yet (sweep run [{run_id[:12]}]({run_link(base, run.experiment_id, run_id)})).\n\n"
                    + _sweep_cost_line(parent)
                    + "\n"
                )
            run = RunView.read(client, best)
        champion_line, held, model, metric = _registry_lines(client, run, ctx)
        cost = _sweep_cost_line(parent) if parent else _cost_line(client, run)
    except MlflowError as error:
        raise ReportError(f"MLflow at {base}: {error}") from None
    status = f" ({inert(run.status, 20)})" if run.status and run.status != "FINISHED" else ""
    title = (
        f"Best trial {inert(parent.tags.get('sweep.best_trial', '?'), 10)} of the sweep "
        f"[{parent.run_id[:12]}]({run_link(base, parent.experiment_id, parent.run_id)}){status}\n\n"
        if parent
        else f"Run {inert(run.name or run.run_id, 80)}{status}\n\n"
    )
    body = (
        head
        + title
        + " · ".join(_links(base, run, ctx, model, "best trial's MLflow run" if parent else "MLflow run"))
        + "\n\n"
        + metric_table(run, metric, held)
        + "\n"
        + champion_line
        + "\n"
        + cost
        + "\n\n<sub>Kept up to date by the "
        + ("train.yml" if ctx.kind == "train" else "sweep.yml")
        + " workflow: every run of this branch edits this comment.</sub>\n"
    )
    return fit(body)


def fit(body: str, limit: int = MAX_BODY_CHARS) -> str:
    """The body within GitHub's limit, with a line that says it was cut."""
    if len(body) <= limit:
        return body
    return body[: limit - len(TRUNCATED)] + TRUNCATED
