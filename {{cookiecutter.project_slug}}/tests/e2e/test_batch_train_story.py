"""The training story on the batch backend, step by step as a workflow job would run it, without the workflow file
(the workflows do not submit to Batch yet: manual/batch-jobs.md). The project's own commit is shipped with
`gpu-runner batch ship`, submitted with `batch submit` to moto's Batch backend (gpu_runner_testing/batch_host.py: the job's
container is a local process), where `python -m gpu_runner.batch.batch_source run` fetches and checks it and the
project's real `train` trains the digits from the SHIPPED tree: its config, its code, checkpoints to the batch
host's S3, the run to the real MLflow server. `batch wait` streams the job's lines and logs the attempt's cost to
the run, which the cost report then reads as it reads a runner's run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import boto3
import pytest
import yaml
from gpu_runner_testing.batch_world import REGION, job_credentials
from gpu_runner_testing.story.batch_story import commit_of_the_project, outputs
from mlflow.tracking import MlflowClient

# In the e2e tier: about 1.5 min of TensorFlow on the batch host, beside the act stories (not in make test).
pytestmark = pytest.mark.e2e

PROJECT = Path(__file__).resolve().parents[2]
PACKAGE = next(p.name for p in (PROJECT / "src").iterdir() if (p / "__init__.py").exists())
STORY_CONFIG = {
    "training": {"epochs": 2},
    "export": {"tflite": False, "tflite_int8": False},
    "tracking": {"log_system_metrics": False, "run_name": "shipped-config"},
}


def gpu_runner(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    """The gpu-runner CLI as a workflow step runs it: its own process, the step's environment."""
    return subprocess.run(
        [str(Path(sys.executable).parent / "gpu-runner"), "--settings", str(cwd / "gpu-runner.yaml"), *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_a_branch_trains_on_batch_from_its_shipped_commit(
    tmp_path: Path, batch_world: str, mlflow_server: str
) -> None:
    experiment = f"batch-story-{uuid.uuid4().hex[:8]}"
    tracking = {**STORY_CONFIG["tracking"], "experiment_name": experiment}
    commit = commit_of_the_project(
        tmp_path / "repo", "train/batch-story", {"train.yaml": {**STORY_CONFIG, "tracking": tracking}}
    )
    bucket = f"batch-story-{uuid.uuid4().hex[:8]}"
    s3 = boto3.client("s3", region_name=REGION, endpoint_url=batch_world)
    s3.create_bucket(Bucket=bucket)
    step = tmp_path / "step"
    step.mkdir()
    (step / "gpu-runner.yaml").write_text(
        yaml.safe_dump(
            {"project": "demo", "region": REGION, "instance_types": ["g5.xlarge"], "backend": "batch"}
        )
    )
    github_output = step / "github-output"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "AWS_BATCH_"))},
        **job_credentials(batch_world), "GITHUB_REPOSITORY": "octo/demo", "GITHUB_OUTPUT": str(github_output),
        "MLFLOW_TRACKING_URI": mlflow_server,
    }  # fmt: skip
    # The submitting job opens the run (it holds the MLflow credentials), so the wait knows where the cost goes.
    client = MlflowClient(mlflow_server)
    run_id = client.create_run(client.create_experiment(experiment)).info.run_id

    shipped = gpu_runner("batch", "ship", "--bucket", bucket, "--commit", commit, "--repo-dir",
                         str(tmp_path / "repo"), env=env, cwd=step)  # fmt: skip
    assert shipped.returncode == 0, shipped.stderr
    source = outputs(github_output)
    # The job's environment: the tracking server and run, the job role's stand-in credentials, the shipped package
    # first on the path (the image's environment holds the dependencies).
    job_env = {
        "MLFLOW_TRACKING_URI": mlflow_server, "MLFLOW_RUN_ID": run_id, "PYTHONPATH": "src",
        **job_credentials(batch_world), "TF_CPP_MIN_LOG_LEVEL": "2",
    }  # fmt: skip
    command = [
        sys.executable, "-m", "gpu_runner.batch.batch_source", "run", "--source-uri", source["source-uri"],
        "--sha256", source["source-sha256"], "--dest", "code", "--",
        sys.executable, "-m", PACKAGE, "train", "--config", "configs/train.yaml",
        "--checkpoint-uri", f"s3://{bucket}/checkpoints",
    ]  # fmt: skip
    submitted = gpu_runner("batch", "submit", "--queue", "gpu", "--job-definition", "train", "--name", "train-story",
                           *[f"--env={k}={v}" for k, v in job_env.items()], "--", *command, env=env, cwd=step)  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    job_id = outputs(github_output)["job-id"]
    waited = gpu_runner("batch", "wait", "--job-id", job_id, "--mlflow-run-id", run_id, "--poll-seconds", "0.5",
                        "--timeout", "420", env=env, cwd=step)  # fmt: skip

    printed = waited.stdout
    assert waited.returncode == 0, printed[-4000:] + waited.stderr[-2000:]
    assert "[job] unpacked " in printed and source["source-sha256"][:12] in printed
    assert "**GPU cost (attempt 1)**" in printed
    run = client.get_run(run_id)
    # The shipped commit's config trained (its run name, two epochs), in the run the submitting job opened.
    assert run.info.status == "FINISHED" and run.info.run_name == "shipped-config"
    assert run.data.params["training.epochs"] == "2"
    assert [m.step for m in client.get_metric_history(run_id, "val_accuracy")] == [0, 1]
    assert {"billed_seconds", "cost_usd", "training_seconds"} <= set(run.data.metrics)
    # Checkpoints went to the bucket (the batch host's S3), as a runner's do.
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="checkpoints/").get("KeyCount", 0)
    assert listed > 0
