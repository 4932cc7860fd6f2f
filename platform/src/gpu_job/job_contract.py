"""What passes between a project's workflows and its jobs' code: the environment variables train.yml's and
sweep-trial.yml's GPU job (`train`) sets (checked here where they come from dispatch inputs), and the step outputs
and job summary the project's commands write back (the stop job reads the run id, sweep.yml the wave's matrix,
predict.yml the pinned model). The exit statuses the workflows read are the project's EXIT_INTERRUPTED (75) and
errors.EXIT_NO_GPU (78).

In the GPU job the config must be a file of the checkout, so a dispatch input cannot point the training at a
file of the runner's host; the commit ends up in S3 keys and MLflow tags. Elsewhere (by hand, the CI's test job,
whose tests use temporary configs) any config file may be used.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from gpu_job.errors import JobInputError
from gpu_job.interruption import GPU_MARKET as GPU_MARKET

# A Git object name of a SHA-1 repository, as `github.sha` writes it.
COMMIT = re.compile(r"[0-9a-f]{40}")
TRAIN_JOB = "train"  # the job id of train.yml's GPU job (GITHUB_JOB)

# In: train.yml's train job sets these (from dispatch inputs and the start job's outputs).
TRAIN_COMMIT = "TRAIN_COMMIT"  # the commit trained (a resumed attempt trains the first one's)
TRAIN_ATTEMPT = "TRAIN_ATTEMPT"  # 1 for a push; the MLflow step of per-attempt metrics
GPU_INSTANCE_TYPE = "GPU_INSTANCE_TYPE"  # set only on the GPU runner
# GPU_MARKET (spot or on-demand): read by the job library's spot watcher, which names it.
# The allow-cpu dispatch input: "true" trains on the CPU when no GPU is visible.
GPU_ALLOW_CPU = "GPU_ALLOW_CPU"
GPU_RUNTIME_IMAGE = "GPU_RUNTIME_IMAGE"  # the job's container image, when it has one (manual/gpu-runtime.md)
# Out: the step outputs train.yml maps to the train job's outputs (the stop job reads them).
MLFLOW_RUN_ID_OUTPUT = "mlflow-run-id"  # the run this attempt's cost is logged to
GPU_PREFLIGHT_OUTPUT = "gpu-preflight"  # ok, cpu-allowed or no-gpu
# Out of sweep.yml's plan job: `sweep check` writes parallel (what the quota check asks for), `sweep plan` the
# trial matrix, the wave number, the parent run.
SWEEP_PARALLEL_OUTPUT = "parallel"
# predict --check (predict.yml's CPU job): the pinned model URI, the export that runs, how many images.
PREDICT_MODEL_OUTPUT = "model"
PREDICT_EXPORT_OUTPUT = "export"
PREDICT_IMAGES_OUTPUT = "images"
SWEEP_MATRIX_OUTPUT = "matrix"  # {"include": [{"trial": N, "attempt": K}, ...]}
SWEEP_WAVE_OUTPUT = "wave"
SWEEP_TRIALS_OUTPUT = "trials"  # how many legs the matrix has (0: nothing to run)
SWEEP_PARENT_RUN_OUTPUT = "parent-run-id"
# Out of its collect job (`sweep collect`): "true" when the next wave should be dispatched.
SWEEP_NEXT_WAVE_OUTPUT = "next-wave"


def check(
    config: Path, env: Mapping[str, str], repository: Path | None = None, flag: str = "--config"
) -> None:
    """Raise JobInputError naming the first bad value and the fix; nothing to check outside a GPU job (train.yml's
    and sweep-trial.yml's job `train`). `flag`: the option that passed the file (a sweep trial checks --sweep too)."""
    if env.get("GITHUB_ACTIONS") != "true" or env.get("GITHUB_JOB") != TRAIN_JOB:
        return
    root = (repository or Path.cwd()).resolve()
    if config.is_absolute() or not (root / config).resolve().is_relative_to(root):
        raise JobInputError(
            f"{flag}: '{config}' is not a path inside the repository; pass a relative path such as "
            f"configs/{'sweep' if flag == '--sweep' else 'train'}.yaml (the dispatch input `{flag[2:]}`)"
        )
    commit = env.get(TRAIN_COMMIT, "")
    if commit and not COMMIT.fullmatch(commit):
        raise JobInputError(
            f"TRAIN_COMMIT: {commit[:60]!r} is not a commit (40 lowercase hex digits); pass the full SHA in the "
            "dispatch input `commit`, or leave it empty for the branch head"
        )
    attempt = env.get(TRAIN_ATTEMPT, "")
    if attempt and not (attempt.isascii() and attempt.isdigit() and int(attempt) >= 1):
        raise JobInputError(
            f"TRAIN_ATTEMPT: {attempt[:60]!r} is not an attempt number (1 or more); the dispatch input `attempt` "
            "is 1 for a first run"
        )


def attempt(env: Mapping[str, str] | None = None) -> int:
    """The workflow attempt (TRAIN_ATTEMPT; 1 by hand): the step of per-attempt metrics."""
    env = os.environ if env is None else env
    value = env.get(TRAIN_ATTEMPT, "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else 1


def write_step_output(name: str, value: str, env: Mapping[str, str] | None = None) -> bool:
    """Append `name=value` to $GITHUB_OUTPUT when running in GitHub Actions; returns whether it did.

    train.yml's stop job reads the MLflow run id this way to log the run's cost after teardown."""
    env = os.environ if env is None else env
    path = env.get("GITHUB_OUTPUT")
    if not path:
        return False
    if "\n" in name or "\n" in value:
        raise ValueError(f"step output {name!r} must be a single line")
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(f"{name}={value}\n")
    return True


def append_job_summary(text: str, env: Mapping[str, str] | None = None) -> bool:
    """Append to $GITHUB_STEP_SUMMARY when running in GitHub Actions; returns whether it did."""
    env = os.environ if env is None else env
    path = env.get("GITHUB_STEP_SUMMARY")
    if not path:
        return False
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text + "\n")
    return True
