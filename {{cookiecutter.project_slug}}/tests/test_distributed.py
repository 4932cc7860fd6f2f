"""Multi-worker training of this project: two real worker processes on 127.0.0.1 train the digits with
MultiWorkerMirroredStrategy (the chief's MLflow run has the metrics of a single-worker run of the same config, the
other worker logs nothing), the same as a two-node AWS Batch job, the strategy's collectives, and the settings in
docs/training.md. How the environment becomes TF_CONFIG (the platform's gpu_job.distributed) is tested in the
template repository (platform/tests/job/test_distributed.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from gpu_job import distributed
from gpu_job.distributed import Cluster
from gpu_runner_testing.multi_node import batch_env, free_ports

PACKAGE = "{{ cookiecutter.package_name }}"


def run_train(cwd: Path, config: Path, env: dict[str, str], log: Path) -> subprocess.Popen:
    """`python -m <package> train` in its own directory (a node's own disk) and process group."""
    cwd.mkdir(parents=True, exist_ok=True)
    with log.open("w") as handle:
        return subprocess.Popen(
            [sys.executable, "-m", PACKAGE, "train", "--config", str(config)],
            cwd=cwd,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_all(processes: dict[str, subprocess.Popen], logs: dict[str, Path], timeout: float) -> None:
    """Every process exits 0 within the timeout; a hung or failed one fails the test with its log."""
    deadline = time.monotonic() + timeout
    for name, process in processes.items():
        try:
            process.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pytest.fail(f"{name} still running after {timeout:.0f} s:\n{logs[name].read_text()[-3000:]}")
        assert process.returncode == 0, (
            f"{name} exited {process.returncode}:\n{logs[name].read_text()[-4000:]}"
        )


def kill_all(processes: dict[str, subprocess.Popen]) -> None:
    for process in processes.values():
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def mlflow_runs(uri: str) -> list:
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    return [run for e in client.search_experiments() for run in client.search_runs([e.experiment_id])]


def metric_shape(uri: str, run_id: str) -> dict[str, list[int]]:
    """Each metric the run logged, with the steps it was logged at."""
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    return {
        name: sorted(m.step for m in client.get_metric_history(run_id, name))
        for name in client.get_run(run_id).data.metrics
    }


@pytest.mark.slow
def test_two_workers_train_the_digits_and_only_the_chief_logs(tmp_path: Path) -> None:
    # One short epoch of the default config (the digits). System metrics off: they are sampled by the clock, so
    # whether a short run has them is timing, not the shape of what training logs.
    config = tmp_path / "train.yaml"
    config.write_text(
        yaml.safe_dump({"training": {"epochs": 1}, "tracking": {"log_system_metrics": False}}),
        encoding="utf-8",
    )
    base = {
        k: v for k, v in os.environ.items() if k != "TF_CONFIG" and not k.startswith(("AWS_BATCH_", "MNP_"))
    }
    base["TF_CPP_MIN_LOG_LEVEL"] = "2"
    rendezvous_port, *worker_ports = free_ports(3)
    multi_uri = f"sqlite:///{tmp_path / 'multi.db'}"
    single_uri = f"sqlite:///{tmp_path / 'single.db'}"
    common = {
        **base,
        # Every node gets the job's environment: the same tracking URI for all, as a job definition sets it.
        "MLFLOW_TRACKING_URI": multi_uri,
        "MNP_RENDEZVOUS_PORT": str(rendezvous_port),
        "MNP_RENDEZVOUS_TIMEOUT_SECONDS": "120",
    }
    envs = {
        "main node": {
            **common,
            **batch_env(0, 2, 0),
            "MNP_WORKER_PORT": str(worker_ports[0]),
            "MNP_RENDEZVOUS_BIND": "127.0.0.1",
        },
        "child node": {**common, **batch_env(1, 2, 0), "MNP_WORKER_PORT": str(worker_ports[1])},
        # The same config on one worker, at the same time (in its own store), for the shape to compare with.
        "single worker": {**base, "MLFLOW_TRACKING_URI": single_uri},
    }
    logs = {name: tmp_path / f"{name.replace(' ', '-')}.log" for name in envs}
    dirs = {name: tmp_path / name.replace(" ", "-") for name in envs}
    processes: dict[str, subprocess.Popen] = {}
    try:
        for name, env in envs.items():
            processes[name] = run_train(dirs[name], config, env, logs[name])
        wait_all(processes, logs, timeout=420)
    finally:
        kill_all(processes)

    child_log = logs["child node"].read_text()
    assert f"worker 1 of 2, not the chief (the chief is 127.0.0.1:{worker_ports[0]})" in child_log
    main_log = logs["main node"].read_text()
    assert "worker 0 of 2, the chief" in main_log
    # The final barrier: no worker left while the chief still ran (train._wait_for_every_worker).
    assert "heartbeat timeout" not in main_log

    (chief,) = mlflow_runs(multi_uri)  # one run in the job's store: the child logged none
    (single,) = mlflow_runs(single_uri)
    assert chief.info.status == "FINISHED"
    assert metric_shape(multi_uri, chief.info.run_id) == metric_shape(single_uri, single.info.run_id)
    assert metric_shape(multi_uri, chief.info.run_id)["val_accuracy"] == [0]
    params = chief.data.params
    assert (params["runtime.strategy"], params["runtime.workers"]) == ("MultiWorkerMirroredStrategy", "2")
    assert params["runtime.global_batch_size"] == str(2 * int(params["training.batch_size"]))
    assert single.data.params["runtime.strategy"] == "default"

    # The child wrote no exports and no MLflow store of its own; the chief's exports are where they belong.
    child_files = {
        p.relative_to(dirs["child node"]).as_posix() for p in dirs["child node"].rglob("*") if p.is_file()
    }
    assert child_files == {"outputs/checkpoints/backup_kind.json"}, child_files
    assert (dirs["main node"] / "outputs" / "saved_model" / "saved_model.pb").exists()
    assert "MLflow run" not in child_log


@pytest.mark.slow
def test_a_two_node_batch_job_trains_the_digits_through_the_batch_host(
    tmp_path: Path, batch_world: str
) -> None:
    """The same training as a multi-node parallel job of AWS Batch, submitted and waited for with gpu-runner's
    own client: moto's Batch backend starts one process per node (gpu_runner_testing/batch_host.py) with the variables
    Batch gives a node, and each node builds its TF_CONFIG from them through the rendezvous. Both nodes share
    this machine's loopback, so each node range gets its own worker port (on AWS every node has its own host)."""
    import boto3

    from gpu_runner.batch import batch_jobs, batch_wait

    config = tmp_path / "train.yaml"
    config.write_text(
        yaml.safe_dump({"training": {"epochs": 1}, "tracking": {"log_system_metrics": False}}),
        encoding="utf-8",
    )
    store = f"sqlite:///{tmp_path / 'job.db'}"
    rendezvous_port, *worker_ports = free_ports(3)
    common = {"MLFLOW_TRACKING_URI": store, "MNP_RENDEZVOUS_PORT": str(rendezvous_port),
              "MNP_RENDEZVOUS_TIMEOUT_SECONDS": "120", "TF_CPP_MIN_LOG_LEVEL": "2"}  # fmt: skip
    per_node = [{"MNP_WORKER_PORT": str(worker_ports[0]), "MNP_RENDEZVOUS_BIND": "127.0.0.1"},
                {"MNP_WORKER_PORT": str(worker_ports[1])}]  # fmt: skip
    batch = boto3.client("batch", region_name="us-east-1", endpoint_url=batch_world)
    logs = boto3.client("logs", region_name="us-east-1", endpoint_url=batch_world)
    name = f"train-digits-mnp-{os.getpid()}-{time.monotonic_ns()}"
    ranges = [
        {"targetNodes": str(node), "container": {
            "image": "local/none", "command": [sys.executable, "-m", PACKAGE, "train", "--config", str(config)],
            "environment": [{"name": k, "value": v} for k, v in {**common, **extra}.items()],
            "resourceRequirements": [{"type": "VCPU", "value": "1"}, {"type": "MEMORY", "value": "2048"}]}}
        for node, extra in enumerate(per_node)
    ]  # fmt: skip
    batch.register_job_definition(jobDefinitionName=name, type="multinode", nodeProperties={
        "numNodes": 2, "mainNode": 0, "nodeRangeProperties": ranges})  # fmt: skip
    lines: list[str] = []

    # gpu-mnp is the batch world's on-demand queue: the client refuses a multi-node job on a Spot one.
    submitted = batch_jobs.submit(batch, batch_jobs.JobRequest(name=name, queue="gpu-mnp", definition=name))
    outcome = batch_wait.wait(batch, logs, submitted.job_id, poll_seconds=0.5, timeout_seconds=420,
                              emit=lines.append)  # fmt: skip

    printed = "\n".join(lines)
    assert (outcome.status, outcome.exit_code) == ("SUCCEEDED", 0), printed[-4000:]
    assert "worker 0 of 2, the chief" in printed
    assert f"worker 1 of 2, not the chief (the chief is 127.0.0.1:{worker_ports[0]})" in printed
    (chief,) = mlflow_runs(store)  # the job's one run: the child logged none
    assert chief.info.status == "FINISHED"
    assert metric_shape(store, chief.info.run_id)["val_accuracy"] == [0]
    params = chief.data.params
    assert (params["runtime.strategy"], params["runtime.workers"]) == ("MultiWorkerMirroredStrategy", "2")


def test_multi_worker_collectives_go_through_the_worker_port_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The strategy is built with RING collectives (gRPC on MNP_WORKER_PORT), not NCCL, whose own ports the
    multi-node security group does not open."""
    import tensorflow as tf

    from {{ cookiecutter.package_name }} import runtime
    from {{ cookiecutter.package_name }}.config import TrainingConfig

    built: list[dict[str, object]] = []
    monkeypatch.setattr(tf.distribute, "MultiWorkerMirroredStrategy", lambda **options: built.append(options))
    monkeypatch.setenv("TF_CONFIG", "")  # configure() writes it: restored after the test
    runtime.configure(TrainingConfig(), Cluster(("127.0.0.1:2222", "127.0.0.1:2224"), 0))
    (options,) = built
    ring = tf.distribute.experimental.CommunicationImplementation.RING
    assert options["communication_options"].implementation == ring  # type: ignore[attr-defined]


def test_every_distributed_setting_is_named_in_the_docs() -> None:
    """The variables the job definition may set, each in docs/training.md's multi-worker section."""
    docs = (Path(__file__).resolve().parents[1] / "docs" / "training.md").read_text(encoding="utf-8")
    section = docs.split("## Multi-worker training (AWS Batch)", 1)[1].split("\n## ", 1)[0]
    names: list[str] = [
        distributed.TF_CONFIG,
        distributed.NODE_INDEX,
        distributed.NUM_NODES,
        distributed.MAIN_NODE_INDEX,
        distributed.MAIN_NODE_ADDRESS,
        distributed.WORKER_PORT,
        distributed.RENDEZVOUS_PORT,
        distributed.RENDEZVOUS_TIMEOUT,
        distributed.RENDEZVOUS_BIND,
        distributed.RENDEZVOUS_SECRET,
    ]
    assert [name for name in names if f"`{name}`" not in section] == []
