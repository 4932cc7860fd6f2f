"""Typed training configuration, loaded from YAML.

Every model is frozen and rejects unknown keys, so a typo in `configs/train.yaml` fails loudly with the field's
dotted path instead of being silently ignored.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from gpu_job.config_files import field_lines, invalid, read_yaml_mapping
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

PositiveInt = Annotated[int, Field(gt=0)]


def _template_answer(key: str) -> str:
    """Answers given to the template live in a JSON data file, never pasted into Python source."""
    return json.loads((resources.files(__package__) / "defaults.json").read_text("utf-8"))[key]


DEFAULT_EXPERIMENT = _template_answer("experiment_name")
DEFAULT_MODEL_NAME = _template_answer("model_name")

# The headline metrics train.py logs on every run (evaluate.Evaluation.metrics(), the best validation epoch,
# the export checks), known here so a misspelt `registry.metric` fails before any training; tests/test_registry.py
# compares this list with what a real run logs, so the two cannot drift apart.
HEADLINE_METRICS = (
    "test_accuracy",
    "test_macro_precision",
    "test_macro_recall",
    "test_macro_f1",
    "best_val_accuracy",
    "best_val_loss",
    "epochs_run",
    # The SavedModel's figures (export.Measured: size on disk, agreement with Keras, single-image CPU latency).
    "saved_model_size_bytes",
    "saved_model_agreement",
    "saved_model_latency_ms",
    # Only with export.tflite (dynamic range) or export.tflite_int8 (full integer) true; without them the
    # champion decision on one of these is skipped (the run is kept).
    "tflite_agreement",
    "tflite_size_bytes",
    "tflite_latency_ms",
    "tflite_int8_agreement",
    "tflite_int8_size_bytes",
    "tflite_int8_latency_ms",
)
# What promote measures on the held-out set for the decision (evaluate.Evaluation.metrics(), the same names train
# logs for its test split): the training's other figures (validation, epochs, export sizes and latencies) are the
# run's own claims, which promote ignores.
PROMOTE_METRICS = ("test_accuracy", "test_macro_precision", "test_macro_recall", "test_macro_f1")
# registry.holdout: an image folder in the bucket's holdout/ prefix (the promote role's only S3 grant).
_HOLDOUT = re.compile(r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/holdout/(?:[^/\s]+/)*(?:[^/\s]+)?")
# Model registry names: MLflow rejects '/' and ':'; the rest is kept to what reads well in a URL and a filter.
_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,255}")
# MLflow's alias rule (letters, digits, '_', '-'), minus its reserved names 'latest' and 'v<number>'.
_ALIAS = re.compile(r"[A-Za-z0-9_-]{1,255}")


class ConfigError(ValueError):
    """The configuration file is missing, unparsable or has an invalid field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DataConfig(_Strict):
    # "digits" = scikit-learn's embedded 8x8 digits; a path = image folder (one sub-folder per class);
    # "s3://bucket/prefix" = the same layout in S3, synced to `cache_dir` first.
    source: str = "digits"
    cache_dir: Path = Path("data/cache")
    image_size: tuple[PositiveInt, PositiveInt] = (8, 8)
    channels: Literal[1, 3] = 1
    validation_fraction: float = Field(0.15, gt=0, lt=0.5)
    test_fraction: float = Field(0.15, gt=0, lt=0.5)
    sync_workers: int = Field(16, ge=1, le=128)

    @field_validator("source")
    @classmethod
    def _source_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must be 'digits', a local folder path or an s3://bucket/prefix URI")
        if value.startswith("s3://") and not value[5:].split("/", 1)[0]:
            raise ValueError("s3 URI has no bucket: use s3://bucket/prefix")
        return value

    @model_validator(mode="after")
    def _fractions_leave_training_data(self) -> DataConfig:
        if self.validation_fraction + self.test_fraction >= 0.8:
            raise ValueError("validation_fraction + test_fraction must stay below 0.8 to leave training data")
        return self


class ModelConfig(_Strict):
    filters: tuple[PositiveInt, ...] = (32, 64)
    dense_units: PositiveInt = 64
    dropout: float = Field(0.2, ge=0, lt=1)

    @field_validator("filters")
    @classmethod
    def _at_least_one_conv(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if not value:
            raise ValueError("needs at least one convolution block, e.g. [32, 64]")
        return value


class TrainingConfig(_Strict):
    epochs: PositiveInt = 20
    batch_size: PositiveInt = 64
    learning_rate: float = Field(1e-3, gt=0, le=1)
    early_stopping_patience: PositiveInt = 5
    seed: int = Field(42, ge=0)
    # Bit-for-bit reproducible runs (enables TF op determinism; slower on GPU).
    deterministic: bool = True
    shuffle_buffer: PositiveInt = 2048
    checkpoint_dir: Path = Path("outputs/checkpoints")
    # s3://bucket/prefix: the backup is mirrored there and an interrupted attempt resumes from it. Empty = local
    # disk only (lost with the machine). train.yml sets it to the project bucket (--checkpoint-uri).
    checkpoint_uri: str = ""
    # "epoch", or a number of batches between backups (long epochs on spot capacity).
    checkpoint_every: Literal["epoch"] | PositiveInt = "epoch"
    # Watch the spot interruption notice (IMDS): checkpoint and stop inside the two-minute warning.
    # "auto" = only on spot capacity (train.yml sets GPU_MARKET).
    watch_interruptions: Literal["auto"] | bool = "auto"
    interruption_poll_seconds: float = Field(5.0, gt=0, le=60)
    # Only take effect when a GPU is visible: on CPU both are slower or unsupported.
    mixed_precision: bool = True
    xla: bool = True
    # On a GPU runner, train on the CPU when TensorFlow sees no GPU (debugging only; the GPU still bills). Without
    # it the GPU preflight (gpu_preflight.py) stops the job in seconds. The run is tagged gpu.allow_cpu.
    allow_cpu: bool = False

    @field_validator("checkpoint_uri")
    @classmethod
    def _checkpoint_uri(cls, value: str) -> str:
        if value and (not value.startswith("s3://") or not value[5:].split("/", 1)[0]):
            raise ValueError("must be empty (local disk only) or an s3://bucket/prefix URI")
        return value


class ExportConfig(_Strict):
    output_dir: Path = Path("outputs")
    # Dynamic-range TFLite (int8 weights, float activations): model.tflite.
    tflite: bool = True
    # Full-integer TFLite (int8 inputs, activations and outputs), calibrated on `representative_samples`
    # training images: model_int8.tflite, the smallest; what integer-only accelerators and small ARM CPUs run.
    tflite_int8: bool = True
    representative_samples: PositiveInt = 200
    # Fraction of test samples on which each export must predict the same class as the Keras model.
    tflite_min_agreement: float = Field(0.95, gt=0, le=1)
    # Single-image predictions timed per export (the median is logged as <export>_latency_ms).
    latency_runs: PositiveInt = 50


class PruningConfig(_Strict):
    """Magnitude pruning while training (pruning.py): the smallest kernel weights of every Conv2D and Dense layer
    are set to zero along a polynomial schedule from `initial_sparsity` at `begin_epoch` to `final_sparsity` at
    `end_epoch`; the exports are made from the stripped (unwrapped) model, so the zeros are what they hold."""

    enabled: bool = False
    initial_sparsity: float = 0.0
    # validate_default: a default is checked against the fields a user set above it (begin_epoch: 12 alone fails).
    final_sparsity: float = Field(0.5, validate_default=True)
    begin_epoch: int = Field(0, ge=0)
    end_epoch: PositiveInt = Field(10, validate_default=True)
    # Training steps between two mask updates (tfmot's PolynomialDecay `frequency`, whose default is 100: more than
    # a whole epoch of the digits at batch size 64, 20 steps).
    frequency_steps: PositiveInt = 10

    @field_validator("initial_sparsity")
    @classmethod
    def _initial_in_unit_interval(cls, value: float) -> float:
        if not 0 <= value < 1:
            raise ValueError("must be in [0, 1): the sparsity the schedule starts from, usually 0.0")
        return value

    # Field validators (not one model validator), so the error names the field; each sees the fields above it.
    @field_validator("final_sparsity")
    @classmethod
    def _final_in_open_unit_interval(cls, value: float, info: ValidationInfo) -> float:
        if not 0 < value < 1:
            raise ValueError("must be in (0, 1): the fraction of kernel weights set to zero, e.g. 0.5")
        initial = info.data.get("initial_sparsity")
        if initial is not None and value <= initial:
            raise ValueError(
                f"must be above pruning.initial_sparsity ({initial}): the schedule only ever removes weights"
            )
        return value

    @field_validator("end_epoch")
    @classmethod
    def _end_after_begin(cls, value: int, info: ValidationInfo) -> int:
        begin = info.data.get("begin_epoch")
        if begin is not None and value <= begin:
            raise ValueError(f"must be above pruning.begin_epoch ({begin}): the epoch the schedule ends at")
        return value


class TrackingConfig(_Strict):
    experiment_name: str = Field(DEFAULT_EXPERIMENT, min_length=1)
    run_name: str | None = None
    log_system_metrics: bool = True
    # MLflow's first sample comes after one interval (mlflow/system_metrics/system_metrics_monitor.py, 3.17).
    system_metrics_interval_seconds: PositiveInt = 2
    log_model: bool = True


class RegistryConfig(_Strict):
    # Training compares its run's `metric` with the champion's (read-only, for the job summary and the pull
    # request); only `promote` (promote.yml, the default branch) registers a version of `model_name` and moves
    # `alias`, after measuring `metric` itself on `holdout` with the default branch's code.
    enabled: bool = True
    model_name: str = DEFAULT_MODEL_NAME
    metric: str = "test_accuracy"
    direction: Literal["maximize", "minimize"] = "maximize"
    alias: str = "champion"
    # The held-out set promote evaluates candidate and champion on: "digits" (the default branch's own test split
    # of the packaged digits, the demo's case) or an image folder under s3://<bucket>/holdout/, which the promote
    # role may read and no training role may write.
    holdout: str = "digits"

    @field_validator("holdout")
    @classmethod
    def _holdout(cls, value: str) -> str:
        if value == "digits":
            return value
        if not _HOLDOUT.fullmatch(value):
            raise ValueError(
                "must be 'digits' or an image folder s3://<bucket>/holdout/<folder>/ (one sub-folder per class): "
                "the promote role reads only holdout/, and training roles cannot write there"
            )
        return value

    @field_validator("model_name")
    @classmethod
    def _model_name(cls, value: str) -> str:
        if not _MODEL_NAME.fullmatch(value):
            raise ValueError(
                "must start with a letter or digit and hold only letters, digits, '.', '_' and '-' (at most 256)"
            )
        return value

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, value: str) -> str:
        if value not in PROMOTE_METRICS:
            raise ValueError(
                f"not a metric promote measures on the held-out set; use one of {', '.join(PROMOTE_METRICS)}"
            )
        return value

    @field_validator("alias")
    @classmethod
    def _alias(cls, value: str) -> str:
        if not _ALIAS.fullmatch(value):
            raise ValueError("must hold only letters, digits, '_' and '-', e.g. champion")
        if value.lower() == "latest" or re.fullmatch(r"[vV]\d+", value):
            raise ValueError(
                "'latest' and 'v<number>' are reserved by MLflow; pick another name, e.g. champion"
            )
        return value


class Config(_Strict):
    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    training: TrainingConfig = TrainingConfig()
    export: ExportConfig = ExportConfig()
    pruning: PruningConfig = PruningConfig()
    tracking: TrackingConfig = TrackingConfig()
    registry: RegistryConfig = RegistryConfig()

    @field_validator("pruning")
    @classmethod
    def _pruning_ends_before_training(cls, value: PruningConfig, info: ValidationInfo) -> PruningConfig:
        # Only when on: the defaults (end_epoch 10) must not fail a short training that does not prune.
        training = info.data.get("training")
        if value.enabled and training is not None and value.end_epoch > training.epochs:
            raise ValueError(
                f"pruning.end_epoch ({value.end_epoch}) must not exceed training.epochs ({training.epochs}): "
                "lower pruning.end_epoch or train longer, or the model never reaches pruning.final_sparsity"
            )
        return value

    def trajectory(self) -> dict[str, Any]:
        """What decides the training's path (data, model, training), without where files go or how it is
        watched: a re-run on another machine must find the same checkpoint."""
        dumped = self.model_dump(mode="json")
        local = {
            "checkpoint_dir",
            "checkpoint_uri",
            "watch_interruptions",
            "interruption_poll_seconds",
            "allow_cpu",
        }
        return {
            "data": {k: v for k, v in dumped["data"].items() if k != "cache_dir"},
            "model": dumped["model"],
            "training": {k: v for k, v in dumped["training"].items() if k not in local},
            # A pruned model's checkpoint holds wrapper layers (masks, thresholds, the pruning step) an unpruned
            # model cannot restore, and the other way round: each keeps its own S3 prefix.
            "pruning": dumped["pruning"],
        }

    def flat_params(self) -> dict[str, str]:
        """The whole resolved config as `section.key -> str`, the shape MLflow params need."""
        flat: dict[str, str] = {}
        for section, values in self.model_dump(mode="json").items():
            for key, value in values.items():
                flat[f"{section}.{key}"] = str(value)
        return flat


def config_from_dict(raw: dict[str, Any], source: str = "<config>") -> Config:
    """Validate a mapping; raises ConfigError naming every bad field."""
    try:
        return Config.model_validate(raw)
    except ValidationError as error:
        raise ConfigError(invalid(source, field_lines(error))) from None


def load_config(path: str | Path) -> Config:
    """Load and validate a YAML config file."""
    raw = read_yaml_mapping(
        path, ConfigError, "config file not found (pass --config configs/train.yaml)",
        "of sections (data, model, training, ...)",
    )  # fmt: skip
    return config_from_dict(raw, str(path))
