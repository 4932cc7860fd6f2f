"""Decide how to use the hardware: seeds, determinism, GPUs, mixed precision, XLA, distribution strategy.

`plan_runtime` is a pure function of the GPU count and the config, so the GPU paths are tested on CPU machines.
"""

from __future__ import annotations

from dataclasses import dataclass

import tensorflow as tf

from .config import TrainingConfig


@dataclass(frozen=True)
class RuntimePlan:
    gpus: int
    mixed_precision: bool
    xla: bool
    multi_gpu: bool

    def describe(self) -> dict[str, str]:
        return {
            "runtime.gpus": str(self.gpus),
            "runtime.mixed_precision": str(self.mixed_precision),
            "runtime.xla": str(self.xla),
            "runtime.strategy": "MirroredStrategy" if self.multi_gpu else "default",
        }


def plan_runtime(gpus: int, cfg: TrainingConfig) -> RuntimePlan:
    """Mixed precision and XLA only pay off (and only work well) on a GPU, and only when the config allows."""
    return RuntimePlan(
        gpus=gpus,
        mixed_precision=gpus > 0 and cfg.mixed_precision,
        xla=gpus > 0 and cfg.xla,
        multi_gpu=gpus > 1,
    )


def configure(cfg: TrainingConfig) -> tuple[RuntimePlan, tf.distribute.Strategy]:
    """Apply seeds and the runtime plan to this process; returns the plan and the strategy to build under."""
    tf.keras.utils.set_random_seed(cfg.seed)
    if cfg.deterministic:
        tf.config.experimental.enable_op_determinism()
    devices = tf.config.list_physical_devices("GPU")
    for device in devices:
        # Without it TF grabs all GPU memory at start, which breaks a second process on the same GPU.
        tf.config.experimental.set_memory_growth(device, True)
    plan = plan_runtime(len(devices), cfg)
    # Set the policy explicitly both ways: it is process-global and a previous run may have changed it.
    tf.keras.mixed_precision.set_global_policy("mixed_float16" if plan.mixed_precision else "float32")
    strategy = tf.distribute.MirroredStrategy() if plan.multi_gpu else tf.distribute.get_strategy()
    return plan, strategy
