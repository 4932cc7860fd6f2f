"""The sweep story on the batch backend, step by step as the workflow jobs would run it, without the workflow file:
the plan job plans wave 1 (the real `sweep plan`: the Optuna study in S3, the MLflow parent run), the submitting
job ships the commit and submits the wave as ONE array job (a child per trial, each picking its trial from
AWS_BATCH_JOB_ARRAY_INDEX: gpu_job.sweep_array), `batch wait` follows every child, and the collect job (the real
`sweep collect`) closes the wave. The same study, parent and child runs as the runner backend's sweep story
(test_sweep_workflow.py) asserts; the children are local processes on moto's Batch backend (gpu_runner_testing/batch_host.py)
training the digits from the shipped tree.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import boto3
import pytest
import yaml
from gpu_job.sweep import space
from gpu_job.sweep import study as sweep_study
from gpu_runner_testing.batch_world import REGION, job_credentials
from gpu_runner_testing.story.batch_story import commit_of_the_project, outputs
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

pytestmark = pytest.mark.e2e

PROJECT = Path(__file__).resolve().parents[2]
PACKAGE = next(p.name for p in (PROJECT / "src").iterdir() if (p / "__init__.py").exists())
# Three trials in one wave, one epoch each; no pruner (it could stop a one-epoch trial before its objective).
SWEEP = {"trials": 3, "parallel": 3, "pruner": {"name": "none"},
         "budget": {"epochs_per_trial": 1, "minutes_per_trial": 10, "usd": 20, "max_attempts_per_trial": 2}}  # fmt: skip
TRAIN = {"training": {"epochs": 1}, "export": {"tflite": False, "tflite_int8": False},
         "tracking": {"log_model": False, "log_system_metrics": False}}  # fmt: skip


def step(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, (argv[:4], result.stdout[-3000:], result.stderr[-3000:])
    return result


def test_a_sweep_wave_runs_as_one_array_job(
    tmp_path: Path, batch_world: str, mlflow_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    experiment, study = f"batch-sweep-{uuid.uuid4().hex[:8]}", f"batch-sweep-{uuid.uuid4().hex[:8]}"
    repo = tmp_path / "repo"
    train = {**TRAIN, "tracking": {**TRAIN["tracking"], "experiment_name": experiment}}
    commit = commit_of_the_project(
        repo, "sweep/batch-story", {"train.yaml": train, "sweep.yaml": {**SWEEP, "study_name": study}}
    )
    bucket = f"batch-sweep-{uuid.uuid4().hex[:8]}"
    s3 = boto3.client("s3", region_name=REGION, endpoint_url=batch_world)
    s3.create_bucket(Bucket=bucket)
    github_output = tmp_path / "github-output"
    aws = job_credentials(batch_world)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "AWS_BATCH_"))}, **aws,
        "MLFLOW_TRACKING_URI": mlflow_server, "GITHUB_REPOSITORY": "octo/demo", "GITHUB_OUTPUT": str(github_output),
    }  # fmt: skip
    sweep_args = ["--sweep", "configs/sweep.yaml", "--config", "configs/train.yaml",
                  "--storage-root", f"s3://{bucket}/sweeps"]  # fmt: skip
    ml = [sys.executable, "-m", PACKAGE, "sweep"]
    runner = [
        str(Path(sys.executable).parent / "gpu-runner"),
        "--settings",
        str(tmp_path / "gpu-runner.yaml"),
    ]
    (tmp_path / "gpu-runner.yaml").write_text(
        yaml.safe_dump(
            {"project": "demo", "region": REGION, "instance_types": ["g5.xlarge"], "backend": "batch"}
        )
    )

    # The plan job: wave 1, three new trials, the study in S3 and the parent run in MLflow.
    step([*ml, "plan", *sweep_args, "--runners", "3"], env, repo)
    planned = outputs(github_output)
    trials = [leg["trial"] for leg in json.loads(planned["matrix"])["include"]]
    assert (planned["wave"], trials) == ("1", [0, 1, 2]), planned
    # The submitting job: the commit shipped, the wave submitted as one array job of three children.
    step(
        [*runner, "batch", "ship", "--bucket", bucket, "--commit", commit, "--repo-dir", str(repo)], env, repo
    )
    source = outputs(github_output)
    job_env = {**aws, "MLFLOW_TRACKING_URI": mlflow_server, "PYTHONPATH": "src", "TF_CPP_MIN_LOG_LEVEL": "2"}
    command = [
        sys.executable, "-m", "gpu_runner.batch.batch_source", "run", "--source-uri", source["source-uri"],
        "--sha256", source["source-sha256"], "--dest", "code", "--",
        *ml, "trial", "--trials", ",".join(map(str, trials)), *sweep_args,
        "--checkpoint-root", f"s3://{bucket}/checkpoints",
    ]  # fmt: skip
    step([*runner, "batch", "submit", "--queue", "gpu", "--job-definition", "train", "--name", "sweep-wave-1",
          "--array-size", str(len(trials)), *[f"--env={k}={v}" for k, v in job_env.items()], "--", *command],
         env, repo)  # fmt: skip
    job_id = outputs(github_output)["job-id"]
    # The wait logs each child's cost to its trial's child run (the plan's matrix says which child is which).
    waited = step([*runner, "batch", "wait", "--job-id", job_id, "--poll-seconds", "0.5", "--timeout", "600",
                   "--mlflow-run-id", planned["parent-run-id"], "--sweep-matrix", planned["matrix"]], env, repo)  # fmt: skip
    # Each child's lines behind its index; each trained its own trial.
    for index in range(3):
        assert any(line.startswith(f"[{index}] ") for line in waited.stdout.splitlines()), waited.stdout[
            -3000:
        ]
    # The collect job: the wave's results on the parent run; the budget of 3 trials is spent, no next wave.
    step([*ml, "collect", *sweep_args, "--wave", "1"], env, repo)
    assert outputs(github_output)["next-wave"] == "false"

    # The study: three COMPLETE trials, in the batch host's bucket, as the product opens it.
    cfg = space.SweepConfig.model_validate(space.read_sweep(repo / "configs" / "sweep.yaml"))
    monkeypatch.setenv("AWS_ENDPOINT_URL", batch_world)
    done = sweep_study.open_study(cfg, f"s3://{bucket}/sweeps").get_trials(deepcopy=False)
    assert [t.state for t in done] == [TrialState.COMPLETE] * 3, [(t.number, t.state) for t in done]
    # MLflow: the parent run and one FINISHED child run per trial, the best trial named on the parent.
    client = MlflowClient(mlflow_server)
    parent = client.get_run(planned["parent-run-id"])
    kids = client.search_runs([parent.info.experiment_id],
                              f"tags.mlflow.parentRunId = '{parent.info.run_id}'")  # fmt: skip
    assert sorted(k.data.tags.get("sweep.trial") for k in kids) == ["0", "1", "2"]
    assert all(k.info.status == "FINISHED" for k in kids), [k.info.status for k in kids]
    # The cost roll-up, as the runner backend's sweep story asserts it: each child run priced (the wait), the
    # parent's sweep_cost_usd their sum (the collect).
    costs = [sum(m.value for m in client.get_metric_history(k.info.run_id, "cost_usd")) for k in kids]
    assert all(c > 0 for c in costs), costs
    rolled = client.get_metric_history(parent.info.run_id, "sweep_cost_usd")
    assert max(rolled, key=lambda m: m.step).value == pytest.approx(sum(costs)), (rolled, costs)
    best = max(done, key=lambda t: t.value)
    assert parent.data.tags["sweep.best_trial"] == str(best.number), parent.data.tags
    assert parent.data.tags["sweep.best_run_id"] == best.user_attrs["sweep.mlflow_run_id"]
