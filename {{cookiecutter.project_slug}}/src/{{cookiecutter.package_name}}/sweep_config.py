"""The hyperparameter sweep's configuration (`configs/sweep.yaml`), validated against the training config.

Every search-space entry is a dotted path into the training config (`training.learning_rate`); the path is
checked against the training config's model, the distribution against the field's type, and every bound or
choice against the field's own validation (each is applied to the base config and validated), so a range the
training would refuse fails here, before a GPU is launched. Errors name the sweep field and the fix.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .config import HEADLINE_METRICS, Config, ConfigError, config_from_dict, read_yaml_mapping

PositiveInt = Annotated[int, Field(gt=0)]
# Sections whose fields decide the training's path (Config.trajectory()); tracking, export and registry are
# where results go, not what is searched.
SEARCHABLE_SECTIONS = ("data", "model", "training")
# Set by the sweep itself (budget.epochs_per_trial) or only about where files go / how the run is watched.
NOT_SEARCHABLE = {
    "training.epochs": "set by budget.epochs_per_trial",
    "training.checkpoint_dir": "where files go, not what is trained",
    "training.checkpoint_uri": "where files go, not what is trained",
    "training.watch_interruptions": "how the run is watched, not what is trained",
    "training.interruption_poll_seconds": "how the run is watched, not what is trained",
    "training.allow_cpu": "a debugging switch, not a hyperparameter",
    "data.cache_dir": "where files go, not what is trained",
    "data.sync_workers": "how data is copied, not what is trained",
}
# The per-epoch values Keras logs (callbacks.MlflowEpochLogger logs the same names) and the direction in which
# each is better: the pruner compares them in the study's direction, so the two must agree.
INTERMEDIATE_DIRECTIONS = {
    "val_accuracy": "maximize",
    "val_loss": "minimize",
    "accuracy": "maximize",
    "loss": "minimize",
}
# Headline metrics where smaller is better; the rest are better when larger (config.HEADLINE_METRICS).
_SMALLER_IS_BETTER = {"best_val_loss"} | {
    m for m in HEADLINE_METRICS if m.endswith(("_size_bytes", "_latency_ms"))
}
# Optuna's study_name becomes an S3 prefix and an MLflow tag value: keep it to what reads well in both.
_STUDY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


class SweepConfigError(ConfigError):
    """configs/sweep.yaml is missing, unparsable, or has an invalid field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Scalar = bool | int | float | str


class FloatRange(_Strict):
    type: Literal["float"]
    low: float
    high: float
    log: bool = False
    step: float | None = Field(None, gt=0)


class IntRange(_Strict):
    type: Literal["int"]
    low: int
    high: int
    log: bool = False
    step: PositiveInt = 1


class Choice(_Strict):
    type: Literal["categorical"]
    # Lists are allowed (model.filters: [[16, 32], [32, 64]]); Optuna keeps only scalars, so a list choice is
    # stored as its JSON text and decoded when it is applied (`decode_choice`).
    choices: tuple[Scalar | tuple[Scalar, ...], ...] = Field(min_length=1)


ParamSpec = Annotated[FloatRange | IntRange | Choice, Field(discriminator="type")]


class Objective(_Strict):
    # A headline metric train logs once per run (config.HEADLINE_METRICS).
    metric: str = "best_val_accuracy"
    direction: Literal["maximize", "minimize"] = "maximize"
    # What the trial reports after every epoch for the pruner; empty = val_accuracy or val_loss by direction.
    intermediate: str = ""


class Sampler(_Strict):
    name: Literal["tpe", "random", "grid"] = "tpe"
    seed: int = Field(42, ge=0)


class Pruner(_Strict):
    name: Literal["none", "median", "hyperband", "successive_halving"] = "median"
    # median: trials before any is pruned, and epochs of each trial before it may be pruned.
    startup_trials: int = Field(2, ge=0)
    warmup_epochs: int = Field(2, ge=0)
    # hyperband / successive_halving: the fewest epochs a trial gets, and the keep-1-in-N factor.
    min_epochs: PositiveInt = 1
    reduction_factor: int = Field(3, ge=2)


class Budget(_Strict):
    # Each trial trains at most this many epochs (replaces training.epochs) and at most this many minutes (it
    # stops at the end of the epoch that passes it; the GPU runner's max_runtime_minutes stays the hard limit).
    epochs_per_trial: PositiveInt = 20
    minutes_per_trial: float = Field(60.0, gt=0)
    # The whole sweep: no new wave starts once the children's billed cost or GPU hours reach either (None = no
    # limit). The cost is what the stop job logs on each trial's run (gpu_runner.cost.record).
    usd: float | None = Field(None, gt=0)
    gpu_hours: float | None = Field(None, gt=0)
    # An interrupted or lost trial is resumed (from its S3 checkpoint, in the same MLflow run) in the next wave
    # until it has had this many attempts; then it is marked failed.
    max_attempts_per_trial: PositiveInt = 2


class SweepConfig(_Strict):
    study_name: str
    objective: Objective = Objective()
    space: dict[str, ParamSpec] = Field(min_length=1)
    sampler: Sampler = Sampler()
    pruner: Pruner = Pruner()
    trials: PositiveInt = 8
    # GPU runners at once (one trial each); the plan job starts fewer when the vCPU quota does not allow more.
    parallel: int = Field(2, ge=1, le=32)
    budget: Budget = Budget()

    @model_validator(mode="after")
    def _study_name(self) -> SweepConfig:
        if not _STUDY_NAME.fullmatch(self.study_name):
            raise ValueError(
                "study_name: must start with a letter or digit and hold only letters, digits, '.', '_' and '-' "
                "(at most 100), e.g. digits-cnn-lr"
            )
        return self

    @property
    def intermediate_metric(self) -> str:
        if self.objective.intermediate:
            return self.objective.intermediate
        return "val_accuracy" if self.objective.direction == "maximize" else "val_loss"

    def space_json(self) -> dict[str, Any]:
        """The search space as plain JSON, stored in the study: a later wave compares it with its own."""
        return {path: spec.model_dump(mode="json") for path, spec in sorted(self.space.items())}

    def space_fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.space_json(), sort_keys=True).encode()).hexdigest()[:16]


def encode_choice(value: Any) -> Scalar:
    """A categorical choice as Optuna stores it: scalars as they are, a list as its JSON text."""
    return json.dumps(list(value)) if isinstance(value, list | tuple) else value


def decode_choice(value: Any) -> Any:
    if isinstance(value, str) and value.startswith("["):
        return json.loads(value)
    return value


def _field(path: str) -> tuple[str, str, Any]:
    """(section, key, annotation) of a dotted path into Config, or a ValueError that says what exists."""
    section, dot, key = path.partition(".")
    if not dot or "." in key:
        raise ValueError(f"'{path}' is not a dotted path <section>.<field> (e.g. training.learning_rate)")
    if section not in SEARCHABLE_SECTIONS:
        raise ValueError(
            f"section '{section}' cannot be searched; use one of {', '.join(SEARCHABLE_SECTIONS)}"
        )
    fields = Config.model_fields[section].annotation.model_fields
    if key not in fields:
        raise ValueError(
            f"'{section}' has no field '{key}' (unknown or mistyped); its fields: {', '.join(sorted(fields))}"
        )
    if path in NOT_SEARCHABLE:
        raise ValueError(f"'{path}' cannot be searched: {NOT_SEARCHABLE[path]}")
    return section, key, fields[key].annotation


def _numeric_kind(annotation: Any) -> str | None:
    """'float' or 'int' for a plain numeric field (PositiveInt is int with a bound), else None."""
    base = typing.get_args(annotation)[0] if typing.get_origin(annotation) is Annotated else annotation
    if base is float:
        return "float"
    if base is int:
        return "int"
    return None


def _applied(base: Config, overrides: dict[str, Any], where: str) -> Config:
    raw = base.model_dump(mode="json")
    for path, value in overrides.items():
        section, _, key = path.partition(".")
        raw[section][key] = value
    try:
        return config_from_dict(raw, where)
    except ConfigError as error:
        # Keep only the field lines: the header names a file the user never wrote.
        raise ValueError("; ".join(line.strip() for line in str(error).splitlines()[1:])) from None


def _check_spec(base: Config, path: str, spec: FloatRange | IntRange | Choice) -> list[str]:
    problems: list[str] = []
    _, _, annotation = _field(path)
    if isinstance(spec, Choice):
        encoded = [encode_choice(c) for c in spec.choices]
        if len(set(map(json.dumps, encoded))) != len(encoded):
            problems.append(f"space.{path}.choices: repeats a value; list each choice once")
        values = [decode_choice(c) for c in encoded]
        where = "choices"
    else:
        kind = _numeric_kind(annotation)
        if kind is None:
            problems.append(
                f"space.{path}.type: '{spec.type}' needs a numeric field, and {path} is not one; use "
                "type: categorical with choices"
            )
            return problems
        if spec.type == "float" and kind == "int":
            problems.append(f"space.{path}.type: {path} is an integer field; use type: int")
            return problems
        if not spec.low < spec.high:
            problems.append(
                f"space.{path}: empty range (low {spec.low} is not below high {spec.high}); give low < high"
            )
            return problems
        if spec.log and spec.low <= 0:
            problems.append(f"space.{path}.low: a log range needs low > 0 (got {spec.low})")
        if spec.log and spec.step not in (None, 1):
            problems.append(f"space.{path}: Optuna samples a log range without a step; remove step or log")
        values = [spec.low, spec.high]
        where = "low/high"
    for value in values:
        try:
            _applied(base, {path: value}, f"space.{path}")
        except ValueError as error:
            problems.append(f"space.{path}.{where}: {value!r} is refused by the training config: {error}")
    return problems


def _check_objective(cfg: SweepConfig) -> list[str]:
    problems = []
    objective = cfg.objective
    if objective.metric not in HEADLINE_METRICS:
        problems.append(
            f"objective.metric: '{objective.metric}' is not a metric train logs; use one of "
            f"{', '.join(HEADLINE_METRICS)}"
        )
    elif (objective.metric in _SMALLER_IS_BETTER) != (objective.direction == "minimize"):
        better = "smaller" if objective.metric in _SMALLER_IS_BETTER else "larger"
        problems.append(
            f"objective.direction: {objective.metric} is better when {better}; set direction: "
            f"{'minimize' if better == 'smaller' else 'maximize'}"
        )
    intermediate = cfg.intermediate_metric
    if intermediate not in INTERMEDIATE_DIRECTIONS:
        problems.append(
            f"objective.intermediate: '{intermediate}' is not logged per epoch; use one of "
            f"{', '.join(INTERMEDIATE_DIRECTIONS)}"
        )
    elif INTERMEDIATE_DIRECTIONS[intermediate] != objective.direction:
        problems.append(
            f"objective.intermediate: {intermediate} improves the other way than direction "
            f"{objective.direction}; the pruner would keep the worst trials. Use "
            f"{'val_accuracy' if objective.direction == 'maximize' else 'val_loss'}"
        )
    return problems


def grid_values(spec: FloatRange | IntRange | Choice) -> list[Any] | None:
    """Every value of a dimension for the grid sampler, or None when the range is continuous."""
    if isinstance(spec, Choice):
        return [encode_choice(c) for c in spec.choices]
    if isinstance(spec, IntRange):
        return list(range(spec.low, spec.high + 1, spec.step))
    if spec.step is None:
        return None
    count = math.floor((spec.high - spec.low) / spec.step + 1e-9) + 1
    return [round(spec.low + i * spec.step, 12) for i in range(count)]


def _check_grid(cfg: SweepConfig) -> list[str]:
    if cfg.sampler.name != "grid":
        return []
    problems = [
        f"space.{path}: the grid sampler needs a finite dimension: give this float range a step, or choices"
        for path, spec in cfg.space.items()
        if grid_values(spec) is None
    ]
    if not problems:
        size = math.prod(len(grid_values(spec) or []) for spec in cfg.space.values())
        if cfg.trials > size:
            problems.append(
                f"trials: {cfg.trials} is more than the grid's {size} points; set trials: {size} or widen space"
            )
    return problems


def validate_sweep(raw: dict[str, Any], base: Config, source: str = "<sweep>") -> SweepConfig:
    """Validate a mapping against the sweep schema and the training config; raises SweepConfigError listing
    every bad field."""
    try:
        cfg = SweepConfig.model_validate(raw)
    except ValidationError as error:
        lines = []
        for item in error.errors():
            # A discriminated union puts the tag ('float', 'int') into the location: leave it out.
            parts = [str(p) for p in item["loc"] if p not in ("float", "int", "categorical")]
            field = ".".join(parts) or "<root>"
            if item["type"] == "extra_forbidden":
                lines.append(f"  {field}: unknown key (remove it or fix its spelling)")
            elif item["type"] in ("union_tag_invalid", "union_tag_not_found"):
                given = item.get("input")
                tag = given.get("type") if isinstance(given, dict) else given
                lines.append(f"  {field}.type: must be float, int or categorical (got {tag!r})")
            else:
                message = item["msg"].removeprefix("Value error, ")
                lines.append(f"  {field}: {message} (got {item.get('input')!r})")
        raise SweepConfigError(f"{source}: {len(lines)} invalid field(s)\n" + "\n".join(lines)) from None
    problems: list[str] = []
    for path, spec in cfg.space.items():
        try:
            problems.extend(_check_spec(base, path, spec))
        except ValueError as error:
            problems.append(f"space.{path}: {error}")
    problems += _check_objective(cfg) + _check_grid(cfg)
    if problems:
        raise SweepConfigError(
            f"{source}: {len(problems)} invalid field(s)\n" + "\n".join(f"  {p}" for p in problems)
        )
    return cfg


def check_runner_attempts(cfg: SweepConfig, max_attempts: int, source: str = "<sweep>") -> None:
    """A trial's k-th wave launches its runner with attempt k, and the runner refuses an attempt above its own
    max_attempts (configs/gpu-runner.yaml), so the sweep's limit must fit inside the runner's."""
    limit = cfg.budget.max_attempts_per_trial
    if limit > max_attempts:
        raise SweepConfigError(
            f"{source}: budget.max_attempts_per_trial: {limit} is more than max_attempts ({max_attempts}) in "
            f"configs/gpu-runner.yaml, so a trial's wave {max_attempts + 1} could not launch its runner; set "
            f"budget.max_attempts_per_trial to at most {max_attempts} or raise max_attempts"
        )


def load_sweep_config(path: str | Path, base: Config) -> SweepConfig:
    """Load configs/sweep.yaml and validate it against the training config `base`."""
    raw = read_yaml_mapping(
        path, SweepConfigError, "sweep config not found (pass --sweep configs/sweep.yaml)",
        "(study_name, space, trials, ...)", empty_ok=False,
    )  # fmt: skip
    return validate_sweep(raw, base, str(path))


def trial_config(base: Config, sweep: SweepConfig, params: dict[str, Any], checkpoint_uri: str) -> Config:
    """The training config of one trial: the sampled params applied, the per-trial epoch budget, the checkpoint
    root (each trial checkpoints under its own scope of it: sweep_trial.checkpoint_scope, so two trials never share
    a checkpoint, even with equal params)."""
    overrides = {path: decode_choice(value) for path, value in params.items()}
    overrides["training.epochs"] = sweep.budget.epochs_per_trial
    overrides["training.checkpoint_uri"] = checkpoint_uri
    try:
        return _applied(base, overrides, f"trial of {sweep.study_name}")
    except ValueError as error:
        raise SweepConfigError(
            f"sampled params {params} are refused by the training config: {error}"
        ) from None
