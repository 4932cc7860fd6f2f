"""The end of a wave: the study's state onto the parent run, and whether another wave starts.

The parent run holds the best trial so far (params as tags, its metric, its child run), the sum of the
children's billed cost and GPU hours, the trial counts, Optuna's optimisation-history and parallel-coordinates
plots, and the trial table. When the sweep ends (`trials` asked and none left to resume, or the budget spent)
the best trial's run, and only it, is compared with the champion (registry.decide: read-only, it may become a
candidate; promote.yml alone measures, registers and moves the alias), and the parent run is ended.
"""

from __future__ import annotations

import math
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display on a runner: render to files only
import matplotlib.pyplot as plt
import optuna
from mlflow.tracking import MlflowClient
from optuna.trial import FrozenTrial, TrialState

from .. import registry, tracking
from . import runs as sweep_runs
from . import study as sweep_study
from .space import SweepConfig, decode_choice


@dataclass(frozen=True)
class Row:
    trial: int
    state: str
    value: float | None
    params: dict[str, object]
    cost_usd: float
    attempts: int
    run_id: str


@dataclass(frozen=True)
class Collected:
    study_name: str
    wave: int
    parent_run_id: str
    rows: tuple[Row, ...]
    totals: sweep_runs.Totals
    best: Row | None
    finished: bool
    why: str
    decision: registry.ChampionDecision | None = None

    @property
    def next_wave(self) -> bool:
        return not self.finished


def _rows(study: optuna.Study, costs: dict[int, float]) -> list[Row]:
    return [
        Row(
            t.number,
            t.state.name,
            t.value,
            {path: decode_choice(v) for path, v in t.params.items()},
            costs.get(t.number, 0.0),
            t.user_attrs.get(sweep_study.ATTEMPTS_ATTR, 0),
            t.user_attrs.get(sweep_study.RUN_ID_ATTR, ""),
        )
        for t in study.get_trials(deepcopy=False)
    ]


def _best(study: optuna.Study) -> FrozenTrial | None:
    complete = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    return study.best_trial if complete else None


def _finished(cfg: SweepConfig, study: optuna.Study, totals: sweep_runs.Totals) -> tuple[bool, str]:
    spent = totals.spent_line(cfg)
    if spent:
        return True, spent
    trials = study.get_trials(deepcopy=False)
    resumable, _ = sweep_study.resumable(trials, cfg.budget.max_attempts_per_trial)
    if len(trials) >= cfg.trials and not resumable:
        return True, f"all {cfg.trials} trials asked and none left to resume"
    return False, f"{len(trials)} of {cfg.trials} trials asked, {len(resumable)} to resume"


def _plots(study: optuna.Study, out: Path) -> list[Path]:
    """Optuna's own matplotlib plots (optuna.visualization.matplotlib): they need at least one finished trial."""
    if _best(study) is None:
        return []
    paths = []
    for name, draw in (
        ("optimization_history.png", optuna.visualization.matplotlib.plot_optimization_history),
        ("parallel_coordinates.png", optuna.visualization.matplotlib.plot_parallel_coordinate),
    ):
        with warnings.catch_warnings():
            # Both are marked experimental in Optuna 4.9 (since v2.2.0); the warning says nothing to a user.
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            # One finished trial gives an axis a single value; matplotlib widens it and says so.
            warnings.filterwarnings("ignore", "Attempting to set identical low and high", UserWarning)
            axes = draw(study)
        figure = axes.figure if hasattr(axes, "figure") else axes.flat[0].figure
        figure.savefig(out / name, dpi=100, bbox_inches="tight")
        plt.close(figure)
        paths.append(out / name)
    return paths


def _value(value: float | None) -> str:
    return "" if value is None or math.isnan(value) else f"{value:.4f}"


def _param(value: object) -> str:
    """A sampled value as a reader wants it: floats to 4 significant digits (0.006102, not 0.006102158429192254)."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def trial_table(rows: tuple[Row, ...], metric: str) -> str:
    paths = sorted({path for row in rows for path in row.params})
    head = ["trial", *paths, metric, "state", "attempts", "cost (USD)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [
            str(row.trial),
            *(_param(row.params.get(p, "")) for p in paths),
            _value(row.value),
            row.state,
        ]
        lines.append("| " + " | ".join([*cells, str(row.attempts), f"{row.cost_usd:.4f}"]) + " |")
    return "\n".join(lines) + "\n"


def summary(result: Collected, cfg: SweepConfig, uri: str, experiment_id: str) -> str:
    """The job summary: totals, the best trial, the champion decision once the sweep ends, the trial table."""
    lines = [
        f"### Sweep {result.study_name}: after wave {result.wave}",
        "",
        f"Parent run: {tracking.run_link(uri, experiment_id, result.parent_run_id)}",
        f"Billed: ${result.totals.cost_usd:.4f}, {result.totals.gpu_hours:.3f} GPU hours "
        f"({len(result.totals.children)} trial runs). {'Finished' if result.finished else 'Next wave'}: "
        f"{result.why}.",
        "",
    ]
    if result.best:
        params = ", ".join(f"{k}={_param(v)}" for k, v in sorted(result.best.params.items()))
        lines += [
            f"**Best trial {result.best.trial}**: {cfg.objective.metric} {_value(result.best.value)} ({params})",
            "",
        ]
    if result.decision:
        lines += [result.decision.line(), ""]
    return "\n".join(lines) + trial_table(result.rows, cfg.objective.metric)


def _log_parent(
    client: MlflowClient, parent: str, cfg: SweepConfig, result: Collected, study: optuna.Study
) -> None:
    counts = {
        state.name.lower(): 0
        for state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL, TrialState.RUNNING)
    }
    for row in result.rows:
        if row.state.lower() in counts:
            counts[row.state.lower()] += 1
    metrics = {
        # Sums of the children's billed cost and time, under names of their own: the cost report sums every
        # run's cost_usd, and the children's are in it already.
        "sweep_cost_usd": result.totals.cost_usd,
        "sweep_gpu_hours": result.totals.gpu_hours,
        **{f"trials_{state}": float(n) for state, n in counts.items()},
    }
    if result.best and result.best.value is not None:
        metrics[f"best_{cfg.objective.metric}"] = result.best.value
        metrics["best_trial"] = float(result.best.trial)
    for key, value in metrics.items():
        client.log_metric(parent, key, value, step=result.wave)
    if result.best:
        client.set_tag(parent, "sweep.best_trial", str(result.best.trial))
        client.set_tag(parent, "sweep.best_run_id", result.best.run_id)
        for path, value in result.best.params.items():
            client.set_tag(parent, f"sweep.best.{path}", tracking.tag_value(path, value))
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch)
        for plot in _plots(study, out):
            client.log_artifact(parent, str(plot), "plots")
        (out / "trials.md").write_text(trial_table(result.rows, cfg.objective.metric))
        client.log_artifact(parent, str(out / "trials.md"), "sweep")


def _decide_best(client: MlflowClient, rule: registry.ChampionRule, best: Row) -> registry.ChampionDecision:
    metrics = client.get_run(best.run_id).data.metrics
    decision = registry.decide(client, rule, best.run_id, metrics)
    registry.log_decision(client, best.run_id, decision)
    return decision


def collect_wave(
    cfg: SweepConfig, champion: registry.ChampionRule | None, root: str, client: MlflowClient, wave: int
) -> Collected:
    """The wave's results onto the parent run; when the sweep ends, its best trial compared with `champion`
    (None: the project has no champion rule) and the parent run ended."""
    study = sweep_study.open_study(cfg, root)
    parent = study.user_attrs[sweep_study.PARENT_RUN_ATTR]
    sweep_study.fail_exhausted(study, cfg.budget.max_attempts_per_trial)
    totals = sweep_runs.totals(client, parent)
    # Per trial, summed: a trial has one child run, but one opened by an older release (or a forged run id the
    # trial refused) would otherwise hide the other's cost from the table while the parent's total counts it.
    costs: dict[int, float] = {}
    for child in totals.children:
        costs[child.trial] = costs.get(child.trial, 0.0) + child.cost_usd
    rows = tuple(_rows(study, costs))
    best_trial = _best(study)
    best = next((r for r in rows if best_trial and r.trial == best_trial.number), None)
    finished, why = _finished(cfg, study, totals)
    result = Collected(cfg.study_name, wave, parent, rows, totals, best, finished, why)
    _log_parent(client, parent, cfg, result, study)
    if finished:
        decision = _decide_best(client, champion, best) if best and champion is not None else None
        if decision is not None:
            client.set_tag(parent, "sweep.best_decision", decision.outcome)
        client.set_terminated(parent, "FINISHED")
        result = Collected(cfg.study_name, wave, parent, rows, totals, best, finished, why, decision)
    return result
