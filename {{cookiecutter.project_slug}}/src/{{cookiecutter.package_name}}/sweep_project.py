"""What this project hands its hyperparameter sweep (the platform's gpu_job.sweep runs the waves): the training
config, which of its fields a sweep may search, the metrics the training logs, and the training itself.

Edit SEARCH_RULES when the config or the training changes: a new section to search, a field that is about where
files go rather than what is trained, a new headline metric (config.HEADLINE_METRICS) or per-epoch metric.
"""

from __future__ import annotations

from gpu_job.sweep.project import SearchRules, SweepProject
from gpu_job.train_hooks import TrainHooks

from .config import HEADLINE_METRICS, Config

SEARCH_RULES = SearchRules(
    # Sections whose fields decide the training's path (Config.trajectory()); tracking, export and registry are
    # where results go, not what is searched.
    sections=("data", "model", "training"),
    # Set by the sweep itself (budget.epochs_per_trial) or only about where files go / how the run is watched.
    not_searchable={
        "training.epochs": "set by budget.epochs_per_trial",
        "training.checkpoint_dir": "where files go, not what is trained",
        "training.checkpoint_uri": "where files go, not what is trained",
        "training.watch_interruptions": "how the run is watched, not what is trained",
        "training.interruption_poll_seconds": "how the run is watched, not what is trained",
        "training.allow_cpu": "a debugging switch, not a hyperparameter",
        "data.cache_dir": "where files go, not what is trained",
        "data.sync_workers": "how data is copied, not what is trained",
    },
    # Smaller is better for the loss, the sizes and the latencies; the rest are better when larger.
    run_metrics={
        metric: "minimize"
        if metric == "best_val_loss" or metric.endswith(("_size_bytes", "_latency_ms"))
        else "maximize"
        for metric in HEADLINE_METRICS
    },
    # What Keras logs every epoch (fit with metrics=["accuracy"] and validation data: train.EPOCH_METRICS), which
    # callbacks.EpochHook hands to the sweep's pruner.
    epoch_metrics={
        "val_accuracy": "maximize",
        "val_loss": "minimize",
        "accuracy": "maximize",
        "loss": "minimize",
    },
)


def _train(cfg: Config, hooks: TrainHooks):
    # Imported when a trial trains, not before: plan and collect never load TensorFlow.
    from . import train

    return train.train(cfg, hooks=hooks)


def sweep_project(base: Config) -> SweepProject:
    """The project's side of a sweep over the training config `base`."""
    champion = base.registry if base.registry.enabled else None
    return SweepProject(base, SEARCH_RULES, base.tracking.experiment_name, champion, _train)
