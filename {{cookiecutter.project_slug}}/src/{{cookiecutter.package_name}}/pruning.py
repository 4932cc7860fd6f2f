"""Magnitude pruning while training, with the TensorFlow Model Optimization Toolkit (tfmot 0.7.5).

`wrap` puts every Conv2D and Dense layer in a `prune_low_magnitude` wrapper driven by a `PolynomialDecay`
schedule: from `pruning.begin_epoch` to `pruning.end_epoch`, every `pruning.frequency_steps` training steps, the
smallest-magnitude kernel weights are masked to zero until `final_sparsity` of them are. `strip` removes the
wrappers again (the zeros stay in the plain layers), so the exports and the logged model need no tfmot to load.
https://www.tensorflow.org/model_optimization/guide/pruning/pruning_with_keras (the API used here:
prune_low_magnitude, PolynomialDecay, UpdatePruningStep, strip_pruning).

The wrappers' state (mask, threshold, pruning step) is made of layer variables, so Keras' BackupAndRestore saves
and restores it with the weights: a resumed fit continues the schedule where it stopped (tests/test_pruning.py).
A zero weight still takes four bytes in a float32 SavedModel or TFLite file; what pruning buys on disk shows when
the file is compressed (benchmarks/inference_bench.py reports the gzip size).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tensorflow as tf
import tensorflow_model_optimization as tfmot

from .config import Config, PruningConfig, TrainingConfig


@dataclass(frozen=True)
class Schedule:
    """The PolynomialDecay schedule in training steps, as tfmot counts them (one per batch)."""

    begin_step: int
    end_step: int
    frequency: int

    def params(self) -> dict[str, int]:
        return {
            "pruning.schedule_begin_step": self.begin_step,
            "pruning.schedule_end_step": self.end_step,
            "pruning.schedule_frequency": self.frequency,
        }


def steps_per_epoch(samples: int, batch_size: int) -> int:
    """Batches in one epoch: pipeline.make_dataset keeps the last, partial batch."""
    return -(-samples // batch_size)


def schedule(cfg: PruningConfig, per_epoch: int) -> Schedule:
    """Epochs to steps. The mask is only updated on steps `begin + k * frequency` (tfmot's
    PruningSchedule._should_prune_in_step), so the end step is moved down onto one of them: otherwise the last
    update falls before it and the model stops short of `final_sparsity`."""
    begin = cfg.begin_epoch * per_epoch
    span = (cfg.end_epoch - cfg.begin_epoch) * per_epoch
    frequency = min(cfg.frequency_steps, span)
    return Schedule(begin, begin + span // frequency * frequency, frequency)


def runtime_training(cfg: Config) -> TrainingConfig:
    """The training settings the runtime is planned from: without mixed precision when pruning. tfmot 0.7.5's
    wrapper does not cast for a layer that keeps float32 under the mixed_float16 policy (model.py's output
    layer): "Input 'y' of 'Mul' Op has type float16 that does not match type float32" in the first batch
    (measured on CPU with the policy set, 2026-12-03). XLA with pruning trains (same measurement)."""
    if not (cfg.pruning.enabled and cfg.training.mixed_precision):
        return cfg.training
    print("NOTE: pruning.enabled: mixed precision stays off (tfmot's wrappers fail under mixed_float16)")
    return cfg.training.model_copy(update={"mixed_precision": False})


def wrap(model: tf.keras.Model, cfg: PruningConfig, per_epoch: int) -> tf.keras.Model:
    """The model with pruning wrappers (new variables: call it inside the distribution strategy's scope)."""
    steps = schedule(cfg, per_epoch)
    polynomial = tfmot.sparsity.keras.PolynomialDecay(
        initial_sparsity=cfg.initial_sparsity,
        final_sparsity=cfg.final_sparsity,
        begin_step=steps.begin_step,
        end_step=steps.end_step,
        frequency=steps.frequency,
    )
    return tfmot.sparsity.keras.prune_low_magnitude(model, pruning_schedule=polynomial)


def callbacks() -> list[tf.keras.callbacks.Callback]:
    """What fit() needs for a wrapped model: without UpdatePruningStep tfmot raises on the first batch."""
    return [tfmot.sparsity.keras.UpdatePruningStep()]


def strip(model: tf.keras.Model) -> tf.keras.Model:
    """The same model without wrappers: plain Keras layers holding the masked (zeroed) kernels."""
    return tfmot.sparsity.keras.strip_pruning(model)


def wrapped_layers(model: tf.keras.Model) -> list[str]:
    """Names of the layers still inside a pruning wrapper (empty after strip)."""
    # tfmot 0.7.5's wrapper class (pruning_wrapper.PruneLowMagnitude) is not in its public API: known by name.
    return [layer.name for layer in model.layers if type(layer).__name__ == "PruneLowMagnitude"]


def kernel_sparsity(variables: Iterable[tf.Variable]) -> float:
    """Fraction of exact zeros over every kernel (the weights pruning masks; biases and batch-norm statistics
    are never pruned)."""
    kernels = [v.numpy() for v in variables if v.name.split("/")[-1].startswith("kernel")]
    total = sum(k.size for k in kernels)
    return float(sum(np.count_nonzero(k == 0) for k in kernels) / total) if total else 0.0


def saved_model_sparsity(path: Path) -> float:
    """kernel_sparsity of what the SavedModel on disk holds: the figure logged as `export.sparsity`."""
    return kernel_sparsity(tf.saved_model.load(str(path)).variables)
