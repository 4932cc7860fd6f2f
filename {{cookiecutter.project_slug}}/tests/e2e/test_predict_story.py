"""`make e2e`: the real predict.yml under act (issue 16), dispatched on the default branch against the doubles of
gpu_runner_testing.story.harness: the champion of a real training run predicts images in moto's S3 on the simulated
GPU instance and on a hosted runner; a missing alias launches nothing; a runner lost in the middle of a batch leaves
shards that a rerun completes; an unreadable image is a row with its reason. Issue 30, High 2: the champion's files
overwritten in the bucket (as a training job that may write there could) stop resolve before anything is launched,
and overwritten once resolve has passed they stop the job that predicts, on the CPU and on the GPU: nothing
predicted, no output written. Each story ends with nothing left running."""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from gpu_runner_testing.story.harness import (
    LIVE,
    AwsFaultProxy,
    GitHubDouble,
    Simulator,
    WorkflowRun,
    default_branch,
    kill_matching,
    prepare_repository,
    run_workflow,
)
from gpu_runner_testing.story.stories import (
    FAST_TRAIN,
    PACKAGE,
    Stack,
    _wait_until,
    on_demand_price_list,
    typical_spot_history,
)
from mlflow.tracking import MlflowClient
from PIL import Image

pytestmark = pytest.mark.e2e

MODEL_NAME = "e2e-predict"
EXPERIMENT = "e2e-predict"
IMAGES = 240  # 239 digits and one broken upload
BROKEN = "batch/broken.png"
TRAIN: dict[str, Any] = {
    **FAST_TRAIN,
    "training": {**FAST_TRAIN["training"], "epochs": 2, "allow_cpu": True},
    # A TFLite export for the CPU job; the model logged so the run registers a version.
    "export": {"tflite": True, "tflite_int8": False},
    "tracking": {"experiment_name": EXPERIMENT, "log_model": True, "log_system_metrics": False},
    "registry": {"model_name": MODEL_NAME},
}


@dataclass
class Batch:
    """One dispatch of predict.yml and what it left."""

    run: WorkflowRun
    simulator: Simulator | None
    run_id: str
    output: str
    scratch: Path
    fired: list[str] = field(default_factory=list)
    instances_left: int = -1
    runners_left: int = -1


@pytest.fixture(scope="module")
def champion(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A real training run in the story's MLflow server, promoted to champion (what the promote workflow does:
    measured on the held-out set, copied and registered with its files' digests); the images under
    s3://<bucket>/incoming/e2e/. Returns the input prefix."""
    import importlib

    config = importlib.import_module(f"{PACKAGE}.config")
    promote = importlib.import_module(f"{PACKAGE}.promote")
    train = importlib.import_module(f"{PACKAGE}.train")
    workdir = tmp_path_factory.mktemp("champion")
    raw = {**TRAIN, "training": {**TRAIN["training"], "checkpoint_dir": str(workdir / "ckpt")}}
    cfg = config.config_from_dict({**raw, "export": {**raw["export"], "output_dir": str(workdir / "out")}})
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", stack.mlflow_uri)
        patch.setenv("AWS_ENDPOINT_URL", stack.moto_endpoint)
        result = train.train(cfg)
        promoted = promote.promote(MlflowClient(stack.mlflow_uri), cfg, result.run_id, workdir / "promote")
        assert promoted.decision.version == "1", promoted.decision
    data = importlib.import_module(f"{PACKAGE}.data")
    images, _, _ = data.load_digits_images(cfg.data)
    s3 = stack.client("s3")
    bucket = stack.settings["bucket"]
    for index in range(IMAGES - 1):
        body = io.BytesIO()
        Image.fromarray((images[index, :, :, 0] * 255).astype(np.uint8)).save(body, format="PNG")
        s3.put_object(Bucket=bucket, Key=f"incoming/e2e/batch/{index:03d}.png", Body=body.getvalue())
    s3.put_object(Bucket=bucket, Key=f"incoming/e2e/{BROKEN}", Body=b"\x89PNG cut short")
    return f"s3://{bucket}/incoming/e2e/"


def dispatch(
    stack: Stack,
    scratch: Path,
    run_id: str,
    inputs: dict[str, str],
    during: Callable[[Batch], None] | None = None,
    on_record: Callable[[dict[str, Any], Any], None] | None = None,
) -> Batch:
    """predict.yml dispatched on the default branch with `inputs`; the GPU path on a simulated instance.
    `during` runs in a thread beside act (the runner-lost story watches S3 from there); `on_record` sees each of
    act's log records as it comes (harness.run_workflow)."""
    scratch.mkdir(parents=True)
    branch = default_branch()
    repo, _, head = prepare_repository(
        scratch, {"security_group_ids": [stack.security_group]}, TRAIN, compile_bytecode=False, branch=branch
    )
    workflow = repo / ".github" / "workflows" / "predict.yml"
    rules = [on_demand_price_list(stack.region), typical_spot_history(stack.region)]
    simulator = None
    with (
        GitHubDouble(repositories=(stack.repository,)) as github,
        AwsFaultProxy(stack.moto_endpoint, rules=rules) as proxy,
    ):
        github.commit(branch, sha=head, repository=stack.repository)
        if inputs.get("device") == "gpu":
            simulator = Simulator(
                stack.moto_endpoint, stack.region, github, scratch / "instances", run_id=run_id
            )
            simulator.start()
        batch = Batch(None, simulator, run_id, inputs["output"], scratch)  # type: ignore[arg-type]
        watcher = threading.Thread(target=during, args=(batch,), daemon=True) if during else None
        try:
            if watcher:
                watcher.start()
            batch.run = run_workflow(
                scratch=scratch, moto_endpoint=stack.moto_endpoint, mlflow_uri=stack.mlflow_uri, github=github,
                simulator=simulator, repo=repo, workflow=workflow, head_sha=head, repository=stack.repository,
                image_bin=stack.image_bin, run_id=run_id, aws_endpoint=proxy.url, event_name="workflow_dispatch",
                inputs=inputs, branch=branch, on_record=on_record,
            )  # fmt: skip
            _wait_until(lambda: live_instances(stack, run_id) == 0, timeout=60)
            if simulator:
                simulator.wait_for_boots(timeout=10)
        finally:
            if simulator:
                simulator.stop()
        batch.instances_left = live_instances(stack, run_id)
        batch.runners_left = len(github.runners)
    return batch


def live_instances(stack: Stack, run_id: str) -> int:
    ours = [{"Name": "tag:gpu-runner:run-id", "Values": [run_id]}]
    reservations = stack.client("ec2").describe_instances(Filters=ours)["Reservations"]
    return sum(i["State"]["Name"] in LIVE for r in reservations for i in r["Instances"])


def launched(stack: Stack, run_id: str) -> int:
    ours = [{"Name": "tag:gpu-runner:run-id", "Values": [run_id]}]
    return sum(
        len(r["Instances"]) for r in stack.client("ec2").describe_instances(Filters=ours)["Reservations"]
    )


def parts(stack: Stack, output: str) -> list[str]:
    bucket, _, prefix = output[len("s3://") :].partition("/")
    listed = stack.client("s3").list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    return sorted(o["Key"] for o in listed if o["Key"].rsplit("/", 1)[-1].startswith("part-"))


def rows(stack: Stack, output: str) -> dict[str, list]:
    bucket = output[len("s3://") :].split("/", 1)[0]
    s3 = stack.client("s3")
    tables = [
        pq.read_table(pa.BufferReader(s3.get_object(Bucket=bucket, Key=k)["Body"].read()))
        for k in parts(stack, output)
    ]
    return pa.concat_tables(tables).to_pydict()


def inference_runs(stack: Stack) -> list[Any]:
    client = MlflowClient(stack.mlflow_uri)
    experiment = client.get_experiment_by_name(f"{EXPERIMENT}-inference")
    return [] if experiment is None else client.search_runs([experiment.experiment_id])


def context(batch: Batch) -> str:
    return f"act log {batch.run.log}: {batch.run.job_results}; fired {batch.fired}"


def assert_nothing_left(batch: Batch) -> None:
    assert (batch.instances_left, batch.runners_left) == (0, 0), context(batch)
    if batch.simulator:
        assert not batch.simulator.errors, (batch.simulator.errors, context(batch))


def test_on_cpu_the_hosted_runner_predicts_with_tflite_and_no_gpu_starts(
    stack: Stack, champion: str, tmp_path: Path
) -> None:
    output = f"s3://{stack.settings['bucket']}/predictions/e2e-cpu/"
    inputs = {"model": "1", "input": champion, "output": output, "device": "cpu", "shard-size": "100"}

    batch = dispatch(stack, tmp_path / "cpu", "9602", inputs)

    assert (batch.run.results.get("resolve"), batch.run.results.get("predict")) == ("success", "success"), (
        context(batch)
    )
    assert batch.run.results.get("train") in (None, "skipped") and launched(stack, "9602") == 0
    assert batch.run.outputs["resolve"]["export"] == "tflite"
    assert len(rows(stack, output)["key"]) == IMAGES
    (run,) = [r for r in inference_runs(stack) if r.data.params.get("output") == output]
    assert run.data.params["export"] == "tflite" and run.data.metrics["skipped"] == 1


def test_a_model_the_registry_does_not_hold_launches_nothing(
    stack: Stack, champion: str, tmp_path: Path
) -> None:
    output = f"s3://{stack.settings['bucket']}/predictions/e2e-missing/"
    inputs = {"model": "staging", "input": champion, "output": output, "device": "gpu", "shard-size": "50"}

    batch = dispatch(stack, tmp_path / "missing", "9603", inputs)

    assert batch.run.results.get("resolve") == "failure", context(batch)
    assert batch.run.results.get("start") in (None, "skipped") and launched(stack, "9603") == 0
    assert_nothing_left(batch)
    said = batch.run.log.read_text()
    assert f"models:/{MODEL_NAME}@staging': alias 'staging' does not exist (aliases: champion=1" in said
    assert parts(stack, output) == []


def lose_the_runner_after_three_shards(stack: Stack) -> Callable[[Batch], None]:
    """The machine is gone once three shards are in S3 (EC2 says terminated, the job's processes die with it),
    as stories.instance_dies_mid_job does to a training."""

    def watch(batch: Batch) -> None:
        if not _wait_until(lambda: len(parts(stack, batch.output)) >= 3, timeout=900):
            return
        assert batch.simulator is not None and batch.simulator.instances
        stack.client("ec2").terminate_instances(InstanceIds=[batch.simulator.instances[0].instance_id])
        kill_matching("-m", PACKAGE, "predict", under=batch.scratch)
        batch.fired.append(f"runner lost after {len(parts(stack, batch.output))} shards")

    return watch


def test_the_champion_predicts_on_the_gpu_runner_and_a_rerun_completes_what_a_lost_runner_left(
    stack: Stack, champion: str, tmp_path: Path
) -> None:
    output = f"s3://{stack.settings['bucket']}/predictions/e2e-gpu/"
    # One image per shard: the batch takes long enough for the watcher to see three shards and not all.
    inputs = {"model": "champion", "input": champion, "output": output, "device": "gpu", "shard-size": "1"}

    lost = dispatch(
        stack, tmp_path / "lost", "9604", inputs, during=lose_the_runner_after_three_shards(stack)
    )

    assert lost.fired and lost.run.results.get("train") == "failure", context(lost)
    assert lost.run.results.get("stop") == "success", context(lost)
    assert_nothing_left(lost)
    kept = len(parts(stack, output))
    assert 3 <= kept < IMAGES, kept

    again = dispatch(stack, tmp_path / "again", "9605", inputs)

    assert_nothing_left(again)
    for job in ("resolve", "start", "train", "stop"):
        assert again.run.results.get(job) == "success", (job, context(again))
    assert again.run.results.get("predict") in (None, "skipped"), context(again)  # the CPU job
    assert again.run.outputs["resolve"]["model"] == f"models:/{MODEL_NAME}/1", context(again)
    assert again.run.outputs["resolve"]["export"] == "saved_model"
    assert "job-accepted" in (again.simulator.instances[0].sim_dir / "calls.log").read_text()  # type: ignore[union-attr]
    assert len(parts(stack, output)) == IMAGES
    found = rows(stack, output)
    assert len(found["key"]) == IMAGES and set(found["model_version"]) == {f"{MODEL_NAME}/1"}
    broken = found["key"].index(BROKEN)
    assert found["class"][broken] is None and "not a readable image" in found["error"][broken]
    runs = [r for r in inference_runs(stack) if r.data.params.get("output") == output]
    finished = [r for r in runs if r.info.status == "FINISHED"]
    assert len(finished) == 1, [(r.info.status, r.data.metrics) for r in runs]
    run = finished[0]
    assert run.data.tags["model.version"] == "1" and run.data.params["device"] == "gpu"
    assert run.data.metrics["shards_done_before"] >= kept
    assert run.data.metrics["predicted"] == IMAGES - 1 and run.data.metrics["skipped"] == 1
    assert run.data.metrics["cost_usd"] > 0, run.data.metrics  # the stop job priced the instance


# ---------------------------------------------------------------------- issue 30, High 2: only what promote recorded
def served_key(stack: Stack, path: str) -> tuple[str, str]:
    """(bucket, key) of a file of the champion's run: the tracking server keeps artifacts in the session's moto
    bucket (conftest mlflow_server: --artifacts-destination s3://mlflow-artifacts/mlartifacts)."""
    client = MlflowClient(stack.mlflow_uri)
    run_id = client.get_model_version_by_alias(MODEL_NAME, "champion").run_id
    uri = client.get_run(run_id).info.artifact_uri
    return "mlflow-artifacts", uri.replace("mlflow-artifacts:/", "mlartifacts/", 1) + "/" + path


@contextmanager
def overwritten(stack: Stack, path: str) -> Iterator[Callable[[], None]]:
    """A function that overwrites one of the champion's files in the bucket (what a training job that may write
    there could do); the original is put back when the story ends, for the stories after it."""
    bucket, key = served_key(stack, path)
    s3 = stack.client("s3")
    original = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    try:
        # One bit of the last byte flipped: the file's size and all but one byte stay as they were.
        yield lambda: s3.put_object(Bucket=bucket, Key=key, Body=original[:-1] + bytes([original[-1] ^ 1]))
    finally:
        s3.put_object(Bucket=bucket, Key=key, Body=original)


def refused(batch: Batch, path: str) -> None:
    said = batch.run.log.read_text()
    assert f"{path} does not match its recorded SHA-256" in said, context(batch)
    assert "so nothing was loaded or predicted. Fix: restore the file's earlier version" in said, context(
        batch
    )


def test_a_champion_whose_files_were_overwritten_stops_resolve_and_launches_nothing(
    stack: Stack, champion: str, tmp_path: Path
) -> None:
    output = f"s3://{stack.settings['bucket']}/predictions/e2e-overwritten/"
    inputs = {"model": "champion", "input": champion, "output": output, "device": "gpu", "shard-size": "50"}
    weights = "exports/saved_model/variables/variables.data-00000-of-00001"

    with overwritten(stack, weights) as overwrite:
        overwrite()
        batch = dispatch(stack, tmp_path / "overwritten", "9606", inputs)

    assert batch.run.results.get("resolve") == "failure", context(batch)
    assert batch.run.results.get("start") in (None, "skipped") and launched(stack, "9606") == 0
    assert_nothing_left(batch)
    refused(batch, weights)
    assert parts(stack, output) == [] and not [
        r for r in inference_runs(stack) if r.data.params.get("output") == output
    ]


@pytest.mark.parametrize(
    ("device", "path", "job"),
    [("cpu", "exports/model.tflite", "predict"), ("gpu", "exports/saved_model/saved_model.pb", "train")],
)
def test_files_overwritten_after_resolve_are_refused_by_the_job_that_predicts(
    stack: Stack, champion: str, tmp_path: Path, device: str, path: str, job: str
) -> None:
    """Resolve passed with intact files; they change before the next job downloads them (on the GPU path that
    job runs on the simulated instance): it refuses before loading, the stop job still tears the GPU down."""
    run_id = {"cpu": "9607", "gpu": "9608"}[device]
    output = f"s3://{stack.settings['bucket']}/predictions/e2e-overwritten-{device}/"
    inputs = {"model": "champion", "input": champion, "output": output, "device": device, "shard-size": "50"}

    with overwritten(stack, path) as overwrite:
        fired: list[str] = []

        def after_resolve(record: dict[str, Any], _: Any) -> None:
            if record.get("jobID") == "resolve" and record.get("jobResult") == "success" and not fired:
                overwrite()
                fired.append("overwritten after resolve")

        batch = dispatch(stack, tmp_path / device, run_id, inputs, on_record=after_resolve)

    assert fired and batch.run.results.get("resolve") == "success", context(batch)
    assert batch.run.results.get(job) == "failure", context(batch)
    refused(batch, path)
    if device == "gpu":
        assert batch.run.results.get("stop") == "success", context(batch)
        assert launched(stack, run_id) == 1
    assert_nothing_left(batch)
    assert parts(stack, output) == [] and not [
        r for r in inference_runs(stack) if r.data.params.get("output") == output
    ]
