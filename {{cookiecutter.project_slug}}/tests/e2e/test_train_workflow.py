"""`make e2e`: the real train.yml, start -> train -> stop, with act against local AWS, GitHub and MLflow.

See harness.py for what is real and what is a double. The happy story only: one launch, one training, teardown.
"""

from __future__ import annotations

import time
from pathlib import Path

import boto3
import pytest
import yaml
from harness import (
    AMI_PARAMETER,
    BRANCH,
    PROJECT,
    RUN_ID,
    GitHubDouble,
    Simulator,
    act_time,
    image_python,
    prepare_repository,
    run_workflow,
)
from mlflow.tracking import MlflowClient

pytestmark = pytest.mark.e2e


def test_train_workflow_end_to_end(moto_endpoint: str, mlflow_server: str, tmp_path: Path) -> None:
    settings = yaml.safe_load((PROJECT / "configs" / "gpu-runner.yaml").read_text())
    region, repository = settings["region"], f"e2e-owner/{settings['project']}"
    image_bin = image_python(PROJECT / ".e2e-cache")
    ec2 = boto3.client("ec2", region_name=region, endpoint_url=moto_endpoint)
    ssm = boto3.client("ssm", region_name=region, endpoint_url=moto_endpoint)
    ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    ssm.put_parameter(Name=AMI_PARAMETER, Value=ami, Type="String", Overwrite=True)
    repo, workflow, head_sha = prepare_repository(tmp_path)

    with GitHubDouble(repositories=(repository,)) as github:
        simulator = Simulator(moto_endpoint, region, github, tmp_path / "instances")
        simulator.start()
        try:
            run = run_workflow(
                scratch=tmp_path, moto_endpoint=moto_endpoint, mlflow_uri=mlflow_server, github=github,
                simulator=simulator, repo=repo, workflow=workflow, head_sha=head_sha, repository=repository,
                image_bin=image_bin,
            )  # fmt: skip
            simulator.wait_for_boots(timeout=30)
        finally:
            simulator.stop()
        runners_left = dict(github.runners)
        github_calls = [(c.method, c.path, c.status) for c in github.calls]

    context = f"act log: {run.log}\nsimulator errors: {simulator.errors}\ngithub calls: {github_calls}"
    # An unmapped runs-on label silently SKIPS a job with exit 0: every job must have reported a result.
    assert run.results == {"start": "success", "train": "success", "stop": "success"}, context
    assert run.returncode == 0, context
    assert not simulator.errors, context
    assert len(simulator.instances) == 1, context
    instance = simulator.instances[0]
    console = (instance.sim_dir / "console.log").read_text()
    assert instance.process.returncode == 0, console
    calls = Simulator.calls(instance)

    # MLflow: the run the train job logged to the local tracking server.
    client = MlflowClient(mlflow_server)
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    assert len(runs) == 1, runs
    mlrun = client.get_run(runs[0].info.run_id)
    run_id, experiment_id = mlrun.info.run_id, mlrun.info.experiment_id
    assert mlrun.info.status == "FINISHED"
    assert {"training.epochs", "runtime.gpus"} <= set(mlrun.data.params), mlrun.data.params
    tags = mlrun.data.tags
    assert tags["git.commit"] == head_sha
    assert tags["git.branch"] == BRANCH
    assert tags["github.run_url"].endswith(f"/{repository}/actions/runs/{RUN_ID}/attempts/1"), tags
    start_outputs = run.outputs["start"]
    assert tags["gpu.instance_type"] == start_outputs["instance-type"] == settings["instance_types"][0]
    assert tags["gpu.market"] == start_outputs["market"]
    epochs = int(mlrun.data.metrics["epochs_run"])
    for metric in ("loss", "accuracy", "val_loss", "val_accuracy"):
        assert [m.step for m in client.get_metric_history(run_id, metric)] == list(range(epochs)), metric
    assert mlrun.data.metrics["test_accuracy"] > 0.5

    def listing(path: str) -> set[str]:
        return {item.path for item in client.list_artifacts(run_id, path)}

    assert {"plots/confusion_matrix.png", "plots/learning_curves.png"} <= listing("plots")
    assert {"exports/model.tflite", "exports/saved_model"} <= listing("exports")
    models = client.search_logged_models([experiment_id], filter_string=f"source_run_id = '{run_id}'")
    assert len(models) == 1

    # The job summary links the run and shows its metrics.
    summary = "".join(run.summaries["train"])
    assert f"({mlflow_server}/#/experiments/{experiment_id}/runs/{run_id})" in summary, summary
    assert f"| test_accuracy | {mlrun.data.metrics['test_accuracy']:.4f} |" in summary, summary

    # Nothing left behind: instance terminated, runner deregistered, JIT parameter deleted.
    instance_id = start_outputs["instance-id"]
    assert instance.instance_id == instance_id
    state = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]["State"]
    assert state["Name"] == "terminated"
    assert runners_left == {}, runners_left
    prefix = settings["ssm_prefix"]
    left = [p["Name"] for p in ssm.describe_parameters()["Parameters"] if p["Name"].startswith(prefix)]
    assert left == [], left
    # The instance's own script ended it: the runner exited, then `shutdown -h now` (TerminateInstances).
    assert any(what.startswith("shutdown -h now") for _, what in calls), calls
    exit_at = next(at for at, what in calls if what == "run.sh-exit")
    terminated_at = next(at for at, what in calls if what.startswith("terminated"))
    # ... before the stop job's teardown got there (act's timestamps have whole seconds).
    teardown = next(
        r for r in run.records if r.get("jobID") == "stop" and r.get("step", "").startswith("Tear down")
    )
    assert terminated_at <= act_time(teardown) + 1, (terminated_at, teardown)
    assert not any("--jitconfig" in what for _, what in calls)

    train_records = [r for r in run.records if r.get("jobID") == "train"]
    timeline = {
        "act wall clock (3 jobs)": run.seconds,
        "launch call (gpu-runner launch step)": run.step_seconds("start", "Launch the GPU instance"),
        "wait step (gpu-runner wait)": run.step_seconds("start", "Wait until the runner is online"),
        "boot -> runner online (simulated)": (instance.online_at or 0) - instance.seen_at,
        "train job start -> end": act_time(train_records[-1]) - act_time(train_records[0]),
        "runner exit -> terminate call done": terminated_at - exit_at,
        "teardown step (stop job)": run.step_seconds("stop", "Tear down the runner and the instance"),
    }
    print("\ntimeline (seconds):")
    for what, seconds in timeline.items():
        print(f"  {what:40s} {seconds:7.1f}")
    print(f"  (act timestamps have 1 s resolution; measured at {time.strftime('%H:%M:%S')})")
    assert timeline["runner exit -> terminate call done"] <= 5.0, timeline
