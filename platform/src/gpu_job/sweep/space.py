"""The sweep file (configs/sweep.yaml), validated against the project's training config.

Every search-space entry is a dotted path into the training config (`training.learning_rate`); the path is
checked against the training config's model and the project's SearchRules, the distribution against the field's
type, and every bound or choice against the field's own validation (each is applied to the base config and
validated), so a range the training would refuse fails here, before a GPU is launched. Errors name the sweep
field and the fix.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..config_files import field_lines, invalid, read_yaml_mapping
from ..errors import SweepConfigError
from .project import SearchRules

PositiveInt = Annotated[int, Field(gt=0)]
Config = TypeVar("Config", bound=BaseModel)
# Optuna's study_name becomes an S3 prefix and an MLflow tag value: keep it to what reads well in both.
_STUDY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
# The discriminated union's tags (ParamSpec): pydantic puts them into an error's location.
_SPEC_TYPES = ("float", "int", "categorical")


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
    # A metric the training logs once per run (SearchRules.run_metrics).
    metric: str = "best_val_accuracy"
    direction: Literal["maximize", "minimize"] = "maximize"
    # What the trial reports after every epoch for the pruner; empty = the first of the project's epoch metrics
    # that improves in `direction`.
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
    # Each trial trains at most this many epochs (replaces the training's epochs) and at most this many minutes
    # (it stops at the end of the epoch that passes it; the GPU runner's max_runtime_minutes stays the hard limit).
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

    def intermediate_metric(self, rules: SearchRules) -> str:
        if self.objective.intermediate:
            return self.objective.intermediate
        same_way = (m for m, way in rules.epoch_metrics.items() if way == self.objective.direction)
        return next(same_way, "")

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


def _field(base: BaseModel, rules: SearchRules, path: str) -> Any:
    """The annotation of a dotted path into the training config, or a ValueError that says what exists."""
    section, dot, key = path.partition(".")
    if not dot or "." in key:
        raise ValueError(f"'{path}' is not a dotted path <section>.<field> (e.g. training.learning_rate)")
    if section not in rules.sections:
        raise ValueError(f"section '{section}' cannot be searched; use one of {', '.join(rules.sections)}")
    fields = type(getattr(base, section)).model_fields
    if key not in fields:
        raise ValueError(
            f"'{section}' has no field '{key}' (unknown or mistyped); its fields: {', '.join(sorted(fields))}"
        )
    if path in rules.not_searchable:
        raise ValueError(f"'{path}' cannot be searched: {rules.not_searchable[path]}")
    return fields[key].annotation


def _numeric_kind(annotation: Any) -> str | None:
    """'float' or 'int' for a plain numeric field (PositiveInt is int with a bound), else None."""
    base = typing.get_args(annotation)[0] if typing.get_origin(annotation) is Annotated else annotation
    if base is float:
        return "float"
    if base is int:
        return "int"
    return None


def applied(base: Config, overrides: dict[str, Any]) -> Config:
    """`base` with each `section.field` of `overrides` set, validated as a whole by the config's own model;
    a ValueError names every field it refuses."""
    raw = base.model_dump(mode="json")
    for path, value in overrides.items():
        section, _, key = path.partition(".")
        raw[section][key] = value
    try:
        return type(base).model_validate(raw)
    except ValidationError as error:
        raise ValueError("; ".join(field_lines(error))) from None


def _check_spec(
    base: BaseModel, rules: SearchRules, path: str, spec: FloatRange | IntRange | Choice
) -> list[str]:
    problems: list[str] = []
    annotation = _field(base, rules, path)
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
            applied(base, {path: value})
        except ValueError as error:
            problems.append(f"space.{path}.{where}: {value!r} is refused by the training config: {error}")
    return problems


def _check_objective(cfg: SweepConfig, rules: SearchRules) -> list[str]:
    problems = []
    objective = cfg.objective
    if objective.metric not in rules.run_metrics:
        problems.append(
            f"objective.metric: '{objective.metric}' is not a metric train logs; use one of "
            f"{', '.join(rules.run_metrics)}"
        )
    elif rules.run_metrics[objective.metric] != objective.direction:
        better = "smaller" if rules.run_metrics[objective.metric] == "minimize" else "larger"
        problems.append(
            f"objective.direction: {objective.metric} is better when {better}; set direction: "
            f"{rules.run_metrics[objective.metric]}"
        )
    intermediate = cfg.intermediate_metric(rules)
    same_way = [m for m, way in rules.epoch_metrics.items() if way == objective.direction]
    if intermediate not in rules.epoch_metrics:
        problems.append(
            f"objective.intermediate: '{intermediate}' is not logged per epoch; use one of "
            f"{', '.join(rules.epoch_metrics)}"
        )
    elif rules.epoch_metrics[intermediate] != objective.direction:
        problems.append(
            f"objective.intermediate: {intermediate} improves the other way than direction "
            f"{objective.direction}; the pruner would keep the worst trials. Use {' or '.join(same_way)}"
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


def validate_sweep(
    raw: dict[str, Any], base: BaseModel, rules: SearchRules, source: str = "<sweep>"
) -> SweepConfig:
    """Validate a mapping against the sweep schema and the training config `base`; raises SweepConfigError
    listing every bad field."""
    try:
        cfg = SweepConfig.model_validate(raw)
    except ValidationError as error:
        raise SweepConfigError(invalid(source, field_lines(error, _SPEC_TYPES))) from None
    problems: list[str] = []
    for path, spec in cfg.space.items():
        try:
            problems.extend(_check_spec(base, rules, path, spec))
        except ValueError as error:
            problems.append(f"space.{path}: {error}")
    problems += _check_objective(cfg, rules) + _check_grid(cfg)
    if problems:
        raise SweepConfigError(invalid(source, problems))
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


def read_sweep(path: str | Path) -> dict[str, Any]:
    """configs/sweep.yaml's mapping, or SweepConfigError naming what is wrong with the file."""
    return read_yaml_mapping(
        path, SweepConfigError, "sweep config not found (pass --sweep configs/sweep.yaml)",
        "(study_name, space, trials, ...)", empty_ok=False,
    )  # fmt: skip


def load_sweep_config(path: str | Path, base: BaseModel, rules: SearchRules) -> SweepConfig:
    """Load configs/sweep.yaml and validate it against the training config `base`."""
    return validate_sweep(read_sweep(path), base, rules, str(path))


def trial_config(
    base: Config, rules: SearchRules, sweep: SweepConfig, params: dict[str, Any], checkpoint_uri: str
) -> Config:
    """The training config of one trial: the sampled params applied, the per-trial epoch budget, the checkpoint
    root (each trial checkpoints under its own scope of it: trial.checkpoint_scope, so two trials never share a
    checkpoint, even with equal params)."""
    overrides = {path: decode_choice(value) for path, value in params.items()}
    overrides[rules.epochs] = sweep.budget.epochs_per_trial
    overrides[rules.checkpoint_uri] = checkpoint_uri
    try:
        return applied(base, overrides)
    except ValueError as error:
        raise SweepConfigError(
            f"sampled params {params} are refused by the training config: {error}"
        ) from None
