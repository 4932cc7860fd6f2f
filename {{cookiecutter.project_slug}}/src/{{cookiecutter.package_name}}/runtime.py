"""Decide how to use the hardware: seeds, determinism, GPUs, mixed precision, XLA, distribution strategy (one GPU,
MirroredStrategy over this machine's GPUs, or MultiWorkerMirroredStrategy over the workers of a cluster).

`plan_runtime` is a pure function of the GPU count and the config, so the GPU paths are tested on CPU machines.

It imports TensorFlow because `configure` prepares this process for training (seeds, op determinism, GPU memory
growth, the mixed-precision policy, the distribution strategy the model is built under): only TensorFlow can.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import tensorflow as tf
from gpu_job import distributed, job_contract

from .config import TrainingConfig
from .errors import NoGpuError


@dataclass(frozen=True)
class RuntimePlan:
    gpus: int
    mixed_precision: bool
    xla: bool
    multi_gpu: bool
    # The workers of a multi-worker training (distributed.Cluster); 1 = this machine alone.
    workers: int = 1

    def describe(self) -> dict[str, str]:
        if self.workers > 1:
            strategy = "MultiWorkerMirroredStrategy"
        else:
            strategy = "MirroredStrategy" if self.multi_gpu else "default"
        return {
            "runtime.gpus": str(self.gpus),
            "runtime.mixed_precision": str(self.mixed_precision),
            "runtime.xla": str(self.xla),
            "runtime.strategy": strategy,
            "runtime.workers": str(self.workers),
        }


def plan_runtime(gpus: int, cfg: TrainingConfig, workers: int = 1) -> RuntimePlan:
    """Mixed precision and XLA only pay off (and only work well) on a GPU, and only when the config allows."""
    return RuntimePlan(
        gpus=gpus,
        mixed_precision=gpus > 0 and cfg.mixed_precision,
        xla=gpus > 0 and cfg.xla,
        multi_gpu=gpus > 1,
        workers=workers,
    )


def cpu_allowed(cfg: TrainingConfig, env: Mapping[str, str] | None = None) -> bool:
    """training.allow_cpu, or train.yml's allow-cpu dispatch input (GPU_ALLOW_CPU)."""
    env = os.environ if env is None else env
    return cfg.allow_cpu or env.get(job_contract.GPU_ALLOW_CPU, "").strip().lower() == "true"


def require_gpu_on_gpu_runner(gpus: int, cfg: TrainingConfig, env: Mapping[str, str] | None = None) -> None:
    """The second guard behind the GPU preflight step: on the GPU runner (train.yml sets GPU_INSTANCE_TYPE) a
    training that finds no GPU stops before its first epoch, also when a branch dropped the preflight step."""
    env = os.environ if env is None else env
    instance_type = env.get(job_contract.GPU_INSTANCE_TYPE, "")
    if gpus == 0 and instance_type and not cpu_allowed(cfg, env):
        raise NoGpuError(
            f"no GPU visible to TensorFlow on the GPU runner ({instance_type}): not training on its CPU. Run "
            "`gpu-preflight` for the driver, CUDA and fix (manual/gpu-runtime.md); to train on the CPU anyway "
            "(debugging), set training.allow_cpu: true or the allow-cpu dispatch input"
        )


def configure(
    cfg: TrainingConfig, cluster: distributed.Cluster | None = None
) -> tuple[RuntimePlan, tf.distribute.Strategy]:
    """Apply seeds and the runtime plan to this process; returns the plan and the strategy to build under.

    With a cluster, the strategy is MultiWorkerMirroredStrategy: it reads TF_CONFIG and starts this worker's gRPC
    server when it is created ("TF_CONFIG must be set before a tf.distribute.Strategy instance is created"), and
    no TensorFlow op may run before it ("Collective ops must be configured at program startup"): both from
    TensorFlow's "Multi-worker training with Keras" tutorial,
    https://www.tensorflow.org/tutorials/distribute/multi_worker_with_keras. Nothing here runs an op before it."""
    tf.keras.utils.set_random_seed(cfg.seed)
    if cfg.deterministic:
        tf.config.experimental.enable_op_determinism()
    devices = tf.config.list_physical_devices("GPU")
    for device in devices:
        # Without it TF grabs all GPU memory at start, which breaks a second process on the same GPU.
        tf.config.experimental.set_memory_growth(device, True)
    require_gpu_on_gpu_runner(len(devices), cfg)
    plan = plan_runtime(len(devices), cfg, cluster.num_workers if cluster else 1)
    # Set the policy explicitly both ways: it is process-global and a previous run may have changed it.
    tf.keras.mixed_precision.set_global_policy("mixed_float16" if plan.mixed_precision else "float32")
    if cluster is not None:
        # The cluster as resolved (an explicit TF_CONFIG, or the one the Batch rendezvous agreed on).
        os.environ[distributed.TF_CONFIG] = cluster.tf_config()
        # Every local GPU of every worker is a replica. The collectives run as TensorFlow's RING ("TensorFlow's ring
        # algorithms for all-reduce and all-gather", tf.distribute.experimental.CommunicationImplementation, TF 2.15
        # API docs) over each worker's gRPC server, the one port (MNP_WORKER_PORT) the multi-node security group
        # opens: NCCL's all-reduce on GPUs connects its ranks on ports it picks itself, which cannot be set
        # ("Specifying the client port ... is not [possible] at the moment", NCCL's maintainer, NVIDIA/nccl#388).
        ring = tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.RING
        )
        return plan, tf.distribute.MultiWorkerMirroredStrategy(communication_options=ring)
    strategy = tf.distribute.MirroredStrategy() if plan.multi_gpu else tf.distribute.get_strategy()
    return plan, strategy
