"""A project as the sweep sees it, without TensorFlow: a training config of sections (pydantic, strict, as a
generated project's), and a real training that honours every TrainHooks field: logistic regression by
mini-batch gradient descent (numpy) on a seeded two-class problem, logged to MLflow the way a project's training
logs (params once, the per-epoch metrics with the epoch as step, the headline metrics, the champion decision).

Its backup is a JSON file (epochs done, weights, run id) in training.checkpoint_dir, written after every epoch
and removed when the run ends, so the sweep's resume paths (an interrupted trial, a trial lost mid-epoch) run
against a training that really resumes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import mlflow
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpu_job import registry, tracking
from gpu_job.errors import DataError
from gpu_job.sweep.project import SearchRules, SweepProject
from gpu_job.train_hooks import TrainHooks

PositiveInt = Annotated[int, Field(gt=0)]
BACKUP = "backup.json"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DataConfig(_Strict):
    # "blobs" = two seeded Gaussian classes; anything else is a source that does not exist (a failing trial).
    source: str = "blobs"
    samples: PositiveInt = 400
    spread: float = Field(1.5, gt=0, le=5)


class ModelConfig(_Strict):
    # The powers of the inputs the model sees ([1, 3]: x and x^3); a list field, as a project's layer sizes are.
    powers: tuple[PositiveInt, ...] = (1,)
    l2: float = Field(0.0, ge=0, lt=1)

    @field_validator("powers")
    @classmethod
    def _at_least_one(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if not value:
            raise ValueError("needs at least one power, e.g. [1]")
        return value


class TrainingConfig(_Strict):
    epochs: PositiveInt = 4
    batch_size: PositiveInt = 32
    learning_rate: float = Field(0.1, gt=0, le=1)
    seed: int = Field(0, ge=0)
    checkpoint_dir: Path = Path("outputs/checkpoints")
    checkpoint_uri: str = ""


class TrackingConfig(_Strict):
    experiment_name: str = "toy"


class RegistryConfig(_Strict):
    enabled: bool = True
    model_name: str = "toy-model"
    metric: str = "test_accuracy"
    direction: Literal["maximize", "minimize"] = "maximize"
    alias: str = "champion"


class ToyConfig(_Strict):
    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    training: TrainingConfig = TrainingConfig()
    tracking: TrackingConfig = TrackingConfig()
    registry: RegistryConfig = RegistryConfig()


RULES = SearchRules(
    sections=("data", "model", "training"),
    not_searchable={
        "training.epochs": "set by budget.epochs_per_trial",
        "training.checkpoint_dir": "where files go, not what is trained",
        "training.checkpoint_uri": "where files go, not what is trained",
    },
    run_metrics={"test_accuracy": "maximize", "best_val_accuracy": "maximize", "best_val_loss": "minimize"},
    epoch_metrics={
        "val_accuracy": "maximize",
        "val_loss": "minimize",
        "accuracy": "maximize",
        "loss": "minimize",
    },
)


@dataclass(frozen=True)
class Outcome:
    run_id: str
    metrics: dict[str, float]
    model_id: str | None = None


def _data(cfg: ToyConfig) -> tuple[np.ndarray, np.ndarray]:
    if cfg.data.source != "blobs":
        raise DataError(f"data.source: '{cfg.data.source}' does not exist; use blobs")
    rng = np.random.default_rng(1234)
    half = cfg.data.samples // 2
    x = np.concatenate(
        [rng.normal(-1, cfg.data.spread, (half, 2)), rng.normal(1, cfg.data.spread, (half, 2))]
    )
    y = np.concatenate([np.zeros(half), np.ones(half)])
    order = rng.permutation(len(y))
    features = np.concatenate([x[order] ** p for p in cfg.model.powers], axis=1)
    return np.concatenate([features, np.ones((len(y), 1))], axis=1), y[order]


def _scores(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    p = np.clip(1 / (1 + np.exp(-x @ w)), 1e-7, 1 - 1e-7)
    loss = float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))
    return loss, float(np.mean((p > 0.5) == y))


def train(cfg: ToyConfig, hooks: TrainHooks) -> Outcome:
    """One training of `cfg`, resumed from its backup when one is there."""
    x, y = _data(cfg)
    split = len(y) * 3 // 5, len(y) * 4 // 5
    (xt, yt), (xv, yv), (xs, ys) = (
        (x[: split[0]], y[: split[0]]),
        (x[split[0] : split[1]], y[split[0] : split[1]]),
        (x[split[1] :], y[split[1] :]),
    )
    backup_file = cfg.training.checkpoint_dir / BACKUP
    backup = json.loads(backup_file.read_text()) if backup_file.exists() else None
    w = np.array(backup["weights"]) if backup else np.zeros(x.shape[1])
    done = backup["epochs_done"] if backup else 0
    mlflow.set_tracking_uri(tracking.tracking_uri())
    mlflow.set_experiment(cfg.tracking.experiment_name)
    resume = (backup or {}).get("run_id") or hooks.run_id
    with mlflow.start_run(
        run_id=resume, run_name=None if resume else hooks.run_name, tags=dict(hooks.tags)
    ) as run:
        if hooks.on_run:
            hooks.on_run(run.info.run_id)
        mlflow.set_tags({"checkpoint.scope": hooks.checkpoint_scope, "resumed.from_epoch": str(done)})
        if not run.data.params:
            flat = {
                f"{s}.{k}": str(v)
                for s, values in cfg.model_dump(mode="json").items()
                for k, v in values.items()
            }
            mlflow.log_params(flat)
        rng = np.random.default_rng(cfg.training.seed + done)
        for epoch in range(done, cfg.training.epochs):
            order = rng.permutation(len(yt))
            for start in range(0, len(yt), cfg.training.batch_size):
                batch = order[start : start + cfg.training.batch_size]
                p = 1 / (1 + np.exp(-xt[batch] @ w))
                gradient = xt[batch].T @ (p - yt[batch]) / len(batch) + cfg.model.l2 * w
                w = w - cfg.training.learning_rate * gradient
            logs = dict(zip(("loss", "accuracy"), _scores(w, xt, yt), strict=True))
            logs.update(zip(("val_loss", "val_accuracy"), _scores(w, xv, yv), strict=True))
            mlflow.log_metrics(logs, step=epoch)
            cfg.training.checkpoint_dir.mkdir(parents=True, exist_ok=True)
            state = {"run_id": run.info.run_id, "epochs_done": epoch + 1, "weights": w.tolist()}
            backup_file.write_text(json.dumps(state))
            if hooks.on_epoch and hooks.on_epoch(epoch, logs):
                break
        client = mlflow.MlflowClient()
        history = {
            name: [m.value for m in client.get_metric_history(run.info.run_id, name)]
            for name in ("val_accuracy", "val_loss")
        }
        metrics = {
            "test_accuracy": _scores(w, xs, ys)[1],
            "best_val_accuracy": max(history["val_accuracy"]),
            "best_val_loss": min(history["val_loss"], default=math.nan),
            "epochs_run": float(
                len({m.step for m in client.get_metric_history(run.info.run_id, "val_loss")})
            ),
        }
        mlflow.log_metrics(metrics)
        if hooks.decide_champion and cfg.registry.enabled:
            decision = registry.decide(client, cfg.registry, run.info.run_id, metrics)
        else:
            decision = registry.skipped(cfg.registry, hooks.skip_reason or "registry.enabled is false")
        registry.log_decision(client, run.info.run_id, decision)
    backup_file.unlink()
    return Outcome(run.info.run_id, metrics)


def project(base: ToyConfig) -> SweepProject:
    """The toy project's side of a sweep over `base` (a test swaps the training with dataclasses.replace)."""
    champion = base.registry if base.registry.enabled else None
    return SweepProject(base, RULES, base.tracking.experiment_name, champion, train)
