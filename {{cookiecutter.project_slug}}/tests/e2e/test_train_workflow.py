"""`make e2e`: the real train.yml, start -> train -> stop, with act against local AWS, GitHub and MLflow.

See gpu_runner_testing.story.harness for what is real and what is a double. The happy story: one launch, one training, teardown,
and the results on the branch's open pull request (one comment, then edited in place by a re-run of that job).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import boto3
import pytest
from gpu_runner_testing.story.harness import BRANCH, act_time
from gpu_runner_testing.story.report import record
from gpu_runner_testing.story.stories import Scenario, Stack, run_story, story_prices, workflow_run_ids
from mlflow.tracking import MlflowClient

from gpu_runner.core.workflow_contract import LaunchOutput
from gpu_runner.cost.pricing import load_table

pytestmark = pytest.mark.e2e
RUN_ID = "777"


def test_train_workflow_end_to_end(stack: Stack, tmp_path: Path) -> None:
    scenario = Scenario(0, "happy story", "all green", train={}, pull_request=True, comment_again=True)
    story = run_story(stack, scenario, tmp_path, RUN_ID)
    run, simulator, settings = story.run, story.simulator, stack.settings
    assert run is not None and simulator is not None
    context = f"act log: {run.log}\nsimulator errors: {simulator.errors}\ngithub calls: {story.github_calls}"
    # An unmapped runs-on label silently SKIPS a job with exit 0: every job must have reported a result.
    jobs = {"start": "success", "train": "success", "stop": "success", "comment": "success"}
    assert run.results == jobs, context
    assert run.returncode == 0, context
    assert not simulator.errors, context
    assert len(simulator.instances) == 1, context
    instance = simulator.instances[0]
    console = (instance.sim_dir / "console.log").read_text()
    assert instance.process.returncode is not None, console
    # GitHub's real-size JIT config (over the 4,096 of a Standard SSM parameter) went through SSM and the boot
    # script whole: the proxy in front of moto refuses what AWS refuses (gpu_runner_testing/aws_limits.py).
    (issued,) = story.github.issued_jit_configs.values()
    assert len(issued) > 4096 and f"read the JIT config ({len(issued)} characters)" in console, console
    calls = simulator.calls(instance)

    # MLflow: the run the train job logged to the local tracking server.
    client = MlflowClient(stack.mlflow_uri)
    runs = workflow_run_ids(client, RUN_ID)
    assert len(runs) == 1, runs
    mlrun = client.get_run(runs[0])
    run_id, experiment_id = mlrun.info.run_id, mlrun.info.experiment_id
    assert mlrun.info.status == "FINISHED"
    assert {"training.epochs", "runtime.gpus"} <= set(mlrun.data.params), mlrun.data.params
    tags = mlrun.data.tags
    assert tags["git.commit"] == story.head_sha
    assert tags["git.branch"] == BRANCH
    assert tags["github.run_url"].startswith(f"https://github.com/{stack.repository}/actions/runs/"), tags
    start_outputs = run.outputs["start"]
    assert (
        tags["gpu.instance_type"]
        == start_outputs[LaunchOutput.INSTANCE_TYPE]
        == settings["instance_types"][0]
    )
    assert tags["gpu.market"] == start_outputs[LaunchOutput.MARKET]
    # The simulated instance has no GPU: the story passes training.allow_cpu, and the run says so.
    assert (tags["gpu.allow_cpu"], tags["gpu.count"], tags["tf.build_cuda"]) == (
        "true",
        "0",
        "none (CPU build)",
    )
    assert run.outputs["train"]["gpu-preflight"] == "cpu-allowed"
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

    # Checkpoints are in S3, under this branch and commit, marked complete, pointing at this MLflow run.
    state = story.checkpoint_state()
    assert state == {"run_id": run_id, "epochs_done": epochs, "complete": True}, state
    # Under the training session's own prefix (<checkpoint uri>/<aws:userid>/<branch>/<commit>-<config hash>).
    session, _, rest = tags["checkpoint.uri"].removeprefix(stack.checkpoint_uri + "/").partition("/")
    assert session and rest.startswith("train-demo/" + story.head_sha[:12]), tags["checkpoint.uri"]
    bucket, _, key = tags["checkpoint.uri"][5:].partition("/")
    s3 = boto3.client("s3", region_name="us-east-1", endpoint_url=stack.moto_endpoint)
    # The launch recorded its instance as this branch's at this commit: what a resumed attempt may restore from.
    launched = run.outputs["start"][LaunchOutput.INSTANCE_ID]
    owner = f"checkpoints/owners/{quote(BRANCH, safe='')}/{story.head_sha}/{launched}"
    assert s3.list_objects_v2(Bucket=bucket, Prefix=owner).get("KeyCount") == 1, owner
    files = s3.list_objects_v2(Bucket=bucket, Prefix=f"{key}/files/").get("Contents", [])
    assert any(o["Key"].endswith(".index") for o in files), files

    # The job summary links the run and shows its metrics.
    summary = "".join(run.summaries["train"])
    assert f"({stack.mlflow_uri}/#/experiments/{experiment_id}/runs/{run_id})" in summary, summary
    assert f"| test_accuracy | {mlrun.data.metrics['test_accuracy']:.4f} |" in summary, summary

    # The stop job priced the instance and logged the attempt's cost to this run, at step 1 (a push).
    metrics = mlrun.data.metrics
    for key in ("billed_seconds", "cost_usd", "volume_cost_usd", "overhead_seconds", "price_usd_per_hour"):
        assert [m.step for m in client.get_metric_history(run_id, key)] == [1], key
    (training,) = client.get_metric_history(run_id, "training_seconds")
    assert training.step == 1
    assert metrics["billed_seconds"] >= 60
    assert metrics["overhead_seconds"] == pytest.approx(max(0.0, metrics["billed_seconds"] - training.value))
    assert tags["cost.instance_type"] == start_outputs[LaunchOutput.INSTANCE_TYPE]
    assert tags["cost.market"] == start_outputs[LaunchOutput.MARKET]
    assert tags["cost.availability_zone"] == start_outputs[LaunchOutput.AVAILABILITY_ZONE]
    assert tags["cost.region"] == start_outputs[LaunchOutput.REGION]
    assert tags["cost.volume_gb"] == str(settings.get("root_volume_gb", 100))
    # moto has no Price List API and answers $0.00001 spot prices: the story's account answers both as AWS
    # does (stories.story_prices: the bundled table's sourced prices), so the stop job takes a real run's path.
    prices = story_prices(tags["cost.region"])
    assert tags["cost.on_demand_source"] == "aws-pricing-api"
    assert float(tags["cost.on_demand_usd_per_hour"]) == pytest.approx(
        prices["on_demand_usd_per_hour"][tags["cost.instance_type"]]
    )
    if tags["cost.market"] == "spot":
        assert tags["cost.price_source"] == "ec2-spot-price-history"
        typical = prices["spot_typical_usd_per_hour"][tags["cost.instance_type"]]
        assert metrics["price_usd_per_hour"] == pytest.approx(typical)
        assert metrics["price_usd_per_hour"] > 0.01
    else:
        assert tags["cost.price_source"] == tags["cost.on_demand_source"]
        assert tags["cost.price_usd_per_hour"] == tags["cost.on_demand_usd_per_hour"]
    gp3 = load_table()["regions"][tags["cost.region"]]["gp3_usd_per_gb_month"]
    volume_usd = gp3 * int(tags["cost.volume_gb"]) * metrics["billed_seconds"] / 3600 / 730
    assert metrics["volume_cost_usd"] == pytest.approx(volume_usd)
    instance_usd = metrics["price_usd_per_hour"] * metrics["billed_seconds"] / 3600
    assert metrics["cost_usd"] == pytest.approx(instance_usd + volume_usd)
    stop_summary = "".join(run.summaries.get("stop", []))
    assert (
        f"**GPU cost (attempt 1)**: ${metrics['cost_usd']:.4f} for {tags['cost.instance_type']} "
        in stop_summary
    )
    assert f"({int(metrics['billed_seconds'])} s) at $" in stop_summary and "overhead " in stop_summary

    # The pull request opened before the push got one comment from the comment job, by the workflow's bot, with
    # this run's metrics, champion comparison, billed cost and links; a re-run of that job edited it in place.
    comment_step = next(
        (
            r
            for r in run.records
            if r.get("jobID") == "comment" and r.get("step", "").startswith("Create or update")
        ),
        None,
    )
    assert comment_step is not None, context
    (comment,) = story.pr_comments
    body = comment["body"]
    assert comment["login"] == "github-actions[bot]" and comment["type"] == "Bot"
    assert body.startswith("<!-- ml-project:train-report -->\n### Training on `train/demo`"), body
    assert f"| **test_accuracy** | {metrics['test_accuracy']:.4f} |" in body, body
    assert f"({stack.mlflow_uri}/#/experiments/{experiment_id}/runs/{run_id})" in body, body
    # Training registers nothing (issue 30): the comment compares with the champion and names promote.yml.
    assert "registry.version" not in tags and tags["champion.decision"] in ("candidate", "kept"), tags
    registered = client.search_registered_models(f"name = '{tags['registry.model_name']}'")
    holder = registered[0].aliases.get("champion") if registered else None
    assert ("no champion yet" in body) == (holder is None), body
    assert f"registry decision: `{tags['champion.decision']}`" in body, body
    assert f"**Billed GPU cost**: ${metrics['cost_usd']:.4f} for " in body, body
    assert f"commit `{story.head_sha[:12]}`" in body
    assert f"[workflow run](https://github.com/{stack.repository}/actions/runs/{RUN_ID}/attempts/1)" in body
    rerun = story.comment_rerun
    assert rerun is not None and rerun.returncode == 0, (rerun and rerun.stderr, rerun and rerun.stdout)
    (edited,) = story.pr_comments_after_rerun
    assert edited["id"] == comment["id"] and "/attempts/2)" in edited["body"], edited
    pr = story.pull_number
    writes = [(m, p) for m, p, _ in story.github_calls if m in ("POST", "PATCH") and "/issues/" in p]
    repo_path = f"/repos/{stack.repository}"
    assert writes == [
        ("POST", f"{repo_path}/issues/{pr}/comments"),
        ("PATCH", f"{repo_path}/issues/comments/{comment['id']}"),
    ], writes
    record(
        "pull-request comment",
        {
            "comment job": f"{run.step_seconds('comment', comment_step['step']):.1f} s (its step)",
            "body": body,
        },
    )

    # Nothing left behind: instance terminated, runner deregistered, JIT parameter deleted.
    assert instance.instance_id == start_outputs[LaunchOutput.INSTANCE_ID]
    assert (story.instances_left, story.runners_left, story.params_left) == (0, 0, 0), context
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

    # The phase timeline as a real run records it: the stop job logged it to this run (step 1) from the boot
    # script's moments, `wait`, the train job, EC2 and MLflow; the figures below are read back from MLflow.
    phases = {}
    for key in ("runner_online_seconds", "image_ready_seconds", "setup_seconds", "teardown_seconds"):
        (point,) = client.get_metric_history(run_id, key)
        assert point.step == 1 and point.value >= 0, key
        phases[key] = point.value
    phases["training_seconds"] = training.value
    assert "**Timeline (attempt 1)**, after launch: launched 0 s" in stop_summary, stop_summary
    # The project's own share of the billed time: the wait's notice delay is within the poll interval (3 s);
    # setup and teardown are the project's; booting the AMI and GitHub's scheduling are not.
    project_overhead = phases["setup_seconds"] + phases["teardown_seconds"] + 3
    phases["project overhead (setup + teardown + <=3 s notice)"] = project_overhead
    record("phases (from MLflow)", phases)

    train_records = [r for r in run.records if r.get("jobID") == "train"]
    timeline = {
        "act wall clock (3 jobs)": run.seconds,
        "launch call (gpu-runner launch step)": run.step_seconds("start", "Launch the GPU instance"),
        "wait step (gpu-runner wait)": run.step_seconds("start", "Wait until the runner is online"),
        "boot -> runner online (simulated)": (instance.online_at or 0) - instance.seen_at,
        "train job start -> end": act_time(train_records[-1]) - act_time(train_records[0]),
        "runner exit -> terminate call done": terminated_at - exit_at,
        "teardown step (stop job)": run.step_seconds("stop", "Tear down the runner and the instance"),
        "comment step (comment job)": run.step_seconds(
            "comment", "Create or update the pull-request comment"
        ),
    }
    record("timeline", timeline)
    artifacts = sorted(listing("plots") | listing("exports") | listing("evaluation") | listing("config"))
    record(
        "story",
        {
            "mlflow_run": run_id,
            "experiment": experiment_id,
            "params": len(mlrun.data.params),
            "metrics": {
                k: round(v, 4) for k, v in sorted(mlrun.data.metrics.items()) if not k.startswith("system/")
            },
            "tags": {
                k: v
                for k, v in sorted(tags.items())
                if k.startswith(("git.", "github.", "gpu.", "checkpoint."))
            },
            "artifacts": [*artifacts, f"logged model {models[0].model_id}"],
            "job_summary": summary,
            "cost_line": stop_summary,
            "act_log": str(run.log),
        },
    )
    # How long each phase took is a figure, not a pass/fail bound: `make bench` (the template's) prints this
    # timeline; the ordering assertions above are what must hold.
