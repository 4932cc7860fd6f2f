"""What a project hands its sweep: its validated training config, the rules of what may be searched in it, and
its training function. Everything here is the team's to change; the sweep reads it and never imports the
project."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from ..registry import ChampionRule
from ..train_hooks import TrainHooks, TrainOutcome

Direction = Literal["maximize", "minimize"]


@dataclass(frozen=True)
class SearchRules:
    """Which fields of the training config a sweep may search, and the metrics the training logs."""

    # Top-level sections whose fields decide the training's path (data, model, training): a `section.field`
    # path elsewhere (where results go) is refused.
    sections: tuple[str, ...]
    # Dotted paths a sweep may not search, each with why (set by the sweep itself, or only about where files go).
    not_searchable: Mapping[str, str]
    # The metrics the training logs once per run (the objective's candidates), each with its better direction.
    run_metrics: Mapping[str, Direction]
    # The metrics it logs after every epoch (handed to TrainHooks.on_epoch: the pruner's), with their direction.
    epoch_metrics: Mapping[str, Direction]
    # The fields the sweep sets in every trial's config: the epoch budget, the S3 checkpoint root, and the local
    # checkpoint folder (each trial gets its own below it).
    epochs: str = "training.epochs"
    checkpoint_uri: str = "training.checkpoint_uri"
    checkpoint_dir: str = "training.checkpoint_dir"


@dataclass(frozen=True)
class SweepProject:
    """The project's side of a sweep."""

    # The validated training config every trial starts from (a pydantic model of sections).
    base: BaseModel
    rules: SearchRules
    # The MLflow experiment the parent and child runs go to.
    experiment: str
    # The champion rule the best trial is compared with when the sweep ends; None when the project has none.
    champion: ChampionRule | None
    # Trains one config with the hooks; returns its outcome (None: a non-chief worker, which has no run).
    train: Callable[[BaseModel, TrainHooks], TrainOutcome | None]
