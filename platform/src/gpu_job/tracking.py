"""A job's MLflow run as the workflows need it: where runs go, the tags that lead from a run back to its commit,
workflow run, attempt and hardware, the tag values MLflow's stores accept, and the closing summary.

MLflow is the project's (its lock chooses the version, as it chooses TensorFlow). TensorFlow-free: the GPU tags
take what TensorFlow reports as arguments (the project's training asks it).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping

from mlflow.entities import RunTag

from gpu_job import gpu_preflight, job_contract

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"


def tracking_uri() -> str:
    """MLFLOW_TRACKING_URI when set (CI, GPU runner, shared server), else a local sqlite store."""
    return os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


def tag_value(key: str, value: object) -> str:
    """The one conversion every MLflow tag value goes through on its way out of this package.

    MLflow stores tag values as strings, but only some paths convert: the REST store's protobuf refuses a non-str
    and MLflow's local sqlite store (this project's default store) checks `len(value)`, so an int such as a model
    version fails there with a TypeError (`MlflowClient.log_batch` and `create_run` pass RunTag values through
    unconverted). None is refused: it would become the tag "None"."""
    if value is None:
        raise ValueError(f"MLflow tag {key!r} has no value (None); leave the tag out instead")
    return value if isinstance(value, str) else str(value)


def run_tag_entities(tags: Mapping[str, object]) -> list[RunTag]:
    """RunTag entities for `MlflowClient.log_batch`, each value through tag_value."""
    return [RunTag(key, tag_value(key, value)) for key, value in tags.items()]


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def run_tags(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Tags that let a reviewer go from an MLflow run back to the exact code and workflow run."""
    env = os.environ if env is None else env
    in_actions = env.get("GITHUB_ACTIONS") == "true"
    # TRAIN_COMMIT: train.yml's resumed attempts train a given commit, not the branch head.
    commit = (
        (env.get(job_contract.TRAIN_COMMIT) or env.get("GITHUB_SHA"))
        if in_actions
        else _git("rev-parse", "HEAD")
    )
    branch = env.get("GITHUB_REF_NAME") if in_actions else _git("rev-parse", "--abbrev-ref", "HEAD")
    tags: dict[str, str] = {}
    if commit:
        tags["git.commit"] = commit
        tags["mlflow.source.git.commit"] = commit
    if branch:
        tags["git.branch"] = branch
    if in_actions:
        run_url = (
            f"{env.get('GITHUB_SERVER_URL', 'https://github.com')}/{env.get('GITHUB_REPOSITORY', '')}"
            f"/actions/runs/{env.get('GITHUB_RUN_ID', '')}"
        )
        if env.get("GITHUB_RUN_ATTEMPT"):
            run_url += f"/attempts/{env['GITHUB_RUN_ATTEMPT']}"
        tags["github.run_url"] = run_url
        tags["github.workflow"] = env.get("GITHUB_WORKFLOW", "")
        tags["github.actor"] = env.get("GITHUB_ACTOR", "")
    if env.get(job_contract.TRAIN_ATTEMPT):
        tags["train.attempt"] = env[job_contract.TRAIN_ATTEMPT]
    # Set by train.yml from the launch step, so a run says which hardware (and market) produced it.
    for variable, tag in (
        (job_contract.GPU_INSTANCE_TYPE, "gpu.instance_type"),
        (job_contract.GPU_MARKET, "gpu.market"),
    ):
        if env.get(variable):
            tags[tag] = env[variable]
    return tags


def gpu_tags(
    gpus: int, build: Mapping[str, object], driver: gpu_preflight.Driver, allow_cpu: bool
) -> dict[str, str]:
    """What the run really ran on: the GPUs the driver reports, the driver, and the CUDA/cuDNN TensorFlow was
    built for (`tf.sysconfig.get_build_info()`). On a machine without a GPU they say so, never stay unset."""
    names = sorted({g["name"] for g in driver.gpus})
    tags = {
        "gpu.count": str(gpus),
        "gpu.name": ", ".join(names)
        if gpus and names
        else ("unknown (no NVIDIA driver)" if gpus else "none"),
        "gpu.memory_mib": ", ".join(g["memory_total_mib"] for g in driver.gpus)
        if gpus and driver.gpus
        else "0",
        "gpu.driver": driver.version or "none",
        "gpu.driver_cuda": driver.cuda_version or "none",
        "tf.build_cuda": str(build.get("cuda_version", "none (CPU build)")),
        "tf.build_cudnn": str(build.get("cudnn_version", "none (CPU build)")),
        "gpu.allow_cpu": str(allow_cpu).lower(),
    }
    return tags


def run_link(uri: str, experiment_id: str, run_id: str) -> str:
    """How a human opens the run: a URL for a server, the `mlflow ui` command for a local store."""
    if uri.startswith(("http://", "https://")):
        return f"{uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"
    return f"mlflow ui --backend-store-uri {uri}  (then open http://127.0.0.1:5000/#/experiments/{experiment_id}/runs/{run_id})"


def format_summary(uri: str, experiment_id: str, run_id: str, metrics: Mapping[str, float]) -> str:
    width = max((len(name) for name in metrics), default=0)
    lines = ["", "=" * 72, f"MLflow run {run_id}", f"  tracking: {uri}"]
    lines += [f"  {name:<{width}}  {value:.4f}" for name, value in metrics.items()]
    lines += [f"  open:     {run_link(uri, experiment_id, run_id)}", "=" * 72]
    return "\n".join(lines)


def job_summary(uri: str, experiment_id: str, run_id: str, metrics: Mapping[str, float]) -> str:
    """Markdown for the GitHub job summary: where the run is and its headline metrics."""
    link = run_link(uri, experiment_id, run_id)
    where = f"[{run_id}]({link})" if link.startswith("http") else f"`{run_id}` (`{link}`)"
    rows = "\n".join(f"| {name} | {value:.4f} |" for name, value in metrics.items())
    return f"### Training run\n\nMLflow run: {where}\n\n| metric | value |\n|---|---|\n{rows}\n"
