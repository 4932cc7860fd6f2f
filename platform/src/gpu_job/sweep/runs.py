"""The sweep's MLflow runs: one parent run per study, one child run per trial, and the roll-up of what the
children cost (the billed seconds and dollars the stop job logs on each trial's run).

The cost metric names are the runner's (gpu_runner/cost/record.py: COST_USD, BILLED_SECONDS, logged once per
attempt with the attempt as the step); the launch code and the job library never import each other, so
tests/job/sweep/test_runs.py keeps these names equal to that module's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from .. import tracking
from .space import SweepConfig

COST_USD = "cost_usd"
BILLED_SECONDS = "billed_seconds"
# MLflow's own tag for nesting (mlflow.utils.mlflow_tags.MLFLOW_PARENT_RUN_ID): the UI shows children under it.
PARENT_RUN_TAG = "mlflow.parentRunId"
STUDY_TAG = "sweep.study"
TRIAL_TAG = "sweep.trial"
ROLE_TAG = "sweep.role"  # parent | trial


@dataclass(frozen=True)
class ChildCost:
    trial: int
    run_id: str
    cost_usd: float
    billed_seconds: float


@dataclass(frozen=True)
class Totals:
    cost_usd: float
    gpu_hours: float
    children: tuple[ChildCost, ...]

    def spent_line(self, cfg: SweepConfig) -> str | None:
        """Which whole-sweep budget is used up, in words; None while both last."""
        budget = cfg.budget
        if budget.usd is not None and self.cost_usd >= budget.usd:
            return f"budget.usd: ${self.cost_usd:.2f} of ${budget.usd:.2f} spent by {len(self.children)} trial run(s)"
        if budget.gpu_hours is not None and self.gpu_hours >= budget.gpu_hours:
            return (
                f"budget.gpu_hours: {self.gpu_hours:.2f} of {budget.gpu_hours:.2f} GPU hours used by "
                f"{len(self.children)} trial run(s)"
            )
        return None


def create_parent(client: MlflowClient, experiment_name: str, cfg: SweepConfig) -> str:
    """The sweep's parent run (RUNNING until the last collect ends it); returns its id."""
    experiment = client.get_experiment_by_name(experiment_name)
    experiment_id = experiment.experiment_id if experiment else client.create_experiment(experiment_name)
    tags = {
        **tracking.run_tags(),
        STUDY_TAG: cfg.study_name,
        ROLE_TAG: "parent",
        "sweep.sampler": cfg.sampler.name,
        "sweep.pruner": cfg.pruner.name,
        "sweep.metric": cfg.objective.metric,
        "sweep.direction": cfg.objective.direction,
    }
    run = client.create_run(experiment_id, run_name=f"sweep {cfg.study_name}", tags=tags)
    client.log_dict(run.info.run_id, cfg.model_dump(mode="json"), "sweep/sweep_config.json")
    for key, value in {"trials": cfg.trials, "parallel": cfg.parallel, **budget_params(cfg)}.items():
        client.log_param(run.info.run_id, key, str(value))
    return run.info.run_id


def budget_params(cfg: SweepConfig) -> dict[str, str]:
    return {f"budget.{k}": str(v) for k, v in cfg.budget.model_dump().items()}


def child_tags(
    parent_run_id: str, cfg: SweepConfig, trial: int, params: Mapping[str, object]
) -> dict[str, str]:
    """A trial run's tags: nested under the parent, its trial number and sampled values readable as tags."""
    return {
        PARENT_RUN_TAG: parent_run_id,
        STUDY_TAG: cfg.study_name,
        TRIAL_TAG: str(trial),
        ROLE_TAG: "trial",
        **{f"sweep.param.{path}": tracking.tag_value(path, value) for path, value in params.items()},
    }


def children(client: MlflowClient, parent_run_id: str) -> list[Run]:
    parent = client.get_run(parent_run_id)
    return client.search_runs(
        [parent.info.experiment_id],
        filter_string=f"tags.`{PARENT_RUN_TAG}` = '{parent_run_id}'",
        max_results=10000,
    )


def _summed_per_step(client: MlflowClient, run_id: str, metric: str) -> float:
    """Sum over attempts (steps) of the last value logged at each: a retried write leaves two points at one step,
    and it counts once (as gpu_runner.cost.record.last_per_step does)."""
    last: dict[int, tuple[int, float]] = {}
    for point in client.get_metric_history(run_id, metric):
        if point.step not in last or point.timestamp >= last[point.step][0]:
            last[point.step] = (point.timestamp, point.value)
    return math.fsum(value for _, value in last.values())


def totals(client: MlflowClient, parent_run_id: str) -> Totals:
    costs = []
    for run in children(client, parent_run_id):
        trial = int(run.data.tags.get(TRIAL_TAG, "-1"))
        costs.append(
            ChildCost(
                trial,
                run.info.run_id,
                _summed_per_step(client, run.info.run_id, COST_USD),
                _summed_per_step(client, run.info.run_id, BILLED_SECONDS),
            )
        )
    costs.sort(key=lambda c: c.trial)
    return Totals(
        math.fsum(c.cost_usd for c in costs),
        math.fsum(c.billed_seconds for c in costs) / 3600,
        tuple(costs),
    )
