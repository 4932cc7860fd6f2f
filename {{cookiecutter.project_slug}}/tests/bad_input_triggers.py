"""The triggers and "left running" claims of the training side's "Bad input" rows (docs/bad-input.md):
one trigger per table id (training CLI, train.yaml, data sources), each giving the bad input for real.

tests/test_bad_input.py runs them; the runner side's are in tests/doubles/runner_bad_input_triggers.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest
from botocore.awsrequest import AWSResponse
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient
from PIL import Image

from {{ cookiecutter.package_name }}.cli import main

DATA_BUCKET = "bad-input-data"
CHECKPOINT_BUCKET = "bad-input-ckpt"


# ---------------------------------------------------------------------- the world a row runs in
@dataclass
class Case:
    tmp: Path
    mlflow_uri: str
    monkeypatch: pytest.MonkeyPatch
    runs_before: set[tuple[str, str]] = field(default_factory=set)
    checkpoint_before: dict[str, str] = field(default_factory=dict)
    # A sweep row that plans a first wave before the bad one: (trials asked, waves claimed) after that wave.
    study_before: tuple[int, int] | None = None


def mlflow_runs(uri: str) -> set[tuple[str, str]]:
    client = MlflowClient(uri)
    experiments = [e.experiment_id for e in client.search_experiments(view_type=ViewType.ALL)]
    if not experiments:
        return set()
    runs = client.search_runs(experiments, run_view_type=ViewType.ALL, max_results=5000)
    return {(run.info.run_id, run.info.status) for run in runs}


def s3_objects(bucket: str) -> dict[str, str]:
    pages = boto3.client("s3").get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return {obj["Key"]: obj["ETag"] for page in pages for obj in page.get("Contents", [])}


def cli(*argv: str) -> int:
    """`python -m <package> ...` in-process; argparse's exit status counts like main()'s."""
    try:
        return main(list(argv))
    except SystemExit as stopped:
        return int(stopped.code or 0)


def write_config(case: Case, text: str, name: str = "cfg.yaml") -> str:
    (case.tmp / name).write_text(text, encoding="utf-8")
    return name


def train_on(case: Case, source: str) -> int:
    """Train on a data source; a one-epoch config so a wrongly accepted source would not take long either."""
    config = write_config(case, f"data:\n  source: '{source}'\n  cache_dir: cache\ntraining:\n  epochs: 1\n")
    return cli("train", "--config", config)


def png(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.zeros((8, 8), dtype=np.uint8)).save(path)


SWEEP_BASE = (
    "training:\n  epochs: 1\nexport:\n  tflite: false\n  tflite_int8: false\ntracking:\n  experiment_name: bad-sweeps\n"
    "  log_system_metrics: false\n"
)
SWEEP = (
    "study_name: demo\ntrials: 4\nparallel: 2\nbudget:\n  usd: 1.0\nspace:\n"
    "  model.dropout: {type: float, low: 0.0, high: 0.5}\n"
)
STUDY_ROOT = "outputs/sweeps"


def sweep_plan(case: Case, sweep_text: str) -> int:
    """`sweep plan` as sweep.yml's plan job runs it (the local storage root: the study is the same)."""
    return cli(
        "sweep", "plan", "--sweep", write_config(case, sweep_text, "sweep.yaml"),
        "--config", write_config(case, SWEEP_BASE, "train.yaml"), "--runners", "2",
    )  # fmt: skip


def study_state(case: Case) -> tuple[int, int]:
    """(trials asked, waves claimed) of the study 'demo', read through the storage the jobs use."""
    import optuna
    from gpu_job import study_storage

    uri = f"{case.tmp / STUDY_ROOT}/demo/"
    trials = optuna.load_study(study_name="demo", storage=study_storage.open_study_storage(uri)).trials
    return len(trials), study_storage.latest_wave(uri)


def attempts_above_runner(case: Case) -> int:
    """`sweep check` as sweep.yml's plan job runs it, with the settings' max_attempts 3."""
    sweep_text = SWEEP.replace("budget:\n", "budget:\n  max_attempts_per_trial: 4\n")
    return cli(
        "sweep", "check", "--sweep", write_config(case, sweep_text, "sweep.yaml"),
        "--config", write_config(case, SWEEP_BASE, "train.yaml"), "--max-attempts=3",
    )  # fmt: skip


def array_child_trial(case: Case, index: str | None) -> int:
    """`sweep trial --trials 3,5` as a Batch array child runs it, its index given or (a single job) not."""
    if index is None:
        case.monkeypatch.delenv("AWS_BATCH_JOB_ARRAY_INDEX", raising=False)
    else:
        case.monkeypatch.setenv("AWS_BATCH_JOB_ARRAY_INDEX", index)
    return cli(
        "sweep", "trial", "--trials", "3,5", "--sweep", write_config(case, SWEEP, "sweep.yaml"),
        "--config", write_config(case, SWEEP_BASE, "train.yaml"), "--storage-root", STUDY_ROOT,
    )  # fmt: skip


def first_wave_then(case: Case, sweep_text: str) -> int:
    assert sweep_plan(case, SWEEP) == 0, "the first wave should have been planned"
    case.study_before = study_state(case)
    return sweep_plan(case, sweep_text)


def budget_spent(case: Case) -> int:
    """The first wave's trial ran and the stop job logged its billed cost on its run: more than budget.usd."""
    assert sweep_plan(case, SWEEP) == 0
    case.study_before = study_state(case)
    client = MlflowClient(case.mlflow_uri)
    parent = client.search_runs(
        [client.get_experiment_by_name("bad-sweeps").experiment_id], "tags.`sweep.role` = 'parent'"
    )[0]
    child = client.create_run(
        parent.info.experiment_id, tags={"mlflow.parentRunId": parent.info.run_id, "sweep.trial": "0"}
    )
    client.log_metric(child.info.run_id, "cost_usd", 1.5, step=1)
    case.runs_before = mlflow_runs(case.mlflow_uri)
    return sweep_plan(case, SWEEP)


# ---------------------------------------------------------------------- triggers: one per table id
def checkpoint_then_typo(case: Case) -> int:
    """Attempt 2 of a training whose attempt 1 left a checkpoint; the config now has a typo."""
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=CHECKPOINT_BUCKET)
    for key, body in {
        "state.json": b'{"run_id": "r1", "epochs_done": 3}',
        "files/chief/ckpt": b"weights",
    }.items():
        s3.put_object(Bucket=CHECKPOINT_BUCKET, Key=f"checkpoints/train-x/abc-123/{key}", Body=body)
    case.checkpoint_before = s3_objects(CHECKPOINT_BUCKET)
    config = write_config(case, "training:\n  epoch: 3\n")
    return cli("train", "--config", config, "--checkpoint-uri", f"s3://{CHECKPOINT_BUCKET}/checkpoints")


def flat_folder(case: Case) -> int:
    png(case.tmp / "flat" / "a.png")
    png(case.tmp / "flat" / "b.png")
    return train_on(case, "flat")


def class_without_images(case: Case) -> int:
    png(case.tmp / "imgs" / "cat" / "0.png")
    (case.tmp / "imgs" / "dog").mkdir()
    return train_on(case, "imgs")


def corrupt_image(case: Case) -> int:
    (case.tmp / "imgs" / "cat").mkdir(parents=True)
    (case.tmp / "imgs" / "cat" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n this is not really a png")
    png(case.tmp / "imgs" / "dog" / "0.png")
    return train_on(case, "imgs")


def empty_prefix(case: Case) -> int:
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=DATA_BUCKET)
    s3.put_object(Bucket=DATA_BUCKET, Key="elsewhere/cat/0.png", Body=b"x")
    return train_on(case, f"s3://{DATA_BUCKET}/nothing")


class _Body:
    def __init__(self, payload: bytes) -> None:
        self._payload = payload

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._payload


def access_denied(case: Case) -> int:
    """The bucket exists, but S3 answers ListObjectsV2 with its real 403 document (a role without s3:ListBucket)."""
    boto3.client("s3").create_bucket(Bucket=DATA_BUCKET)
    denied = (
        b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied'
        b"</Message><RequestId>0000FAULT</RequestId><HostId>fault</HostId></Error>"
    )

    def deny(request: Any, **kwargs: Any) -> AWSResponse | None:
        if kwargs.get("event_name", "").startswith("before-send.s3.ListObjectsV2"):
            return AWSResponse(request.url, 403, {}, _Body(denied))
        return None

    # boto3.client() builds clients from the default session: give it one that answers with the fault.
    session = boto3.Session()
    session.events.register("before-send", deny)
    case.monkeypatch.setattr(boto3, "DEFAULT_SESSION", session)
    return train_on(case, f"s3://{DATA_BUCKET}/images")


def empty_input_folder(case: Case) -> int:
    (case.tmp / "incoming").mkdir()
    (case.tmp / "incoming" / "notes.txt").write_text("not an image")
    return cli("predict", "--input=incoming", "--output=predictions")


def output_below_a_file(case: Case) -> int:
    (case.tmp / "results").write_text("a file where the folder should be")
    return cli("predict", "--input=digits", "--output=results/predictions")


def model_not_registered(case: Case) -> int:
    config = write_config(case, "registry:\n  model_name: nobody\n")
    return cli("predict", "--model=champion", "--config", config, "--output=predictions")


def alias_missing(case: Case) -> int:
    """A registered model with one version and no alias: what a project has before its first promotion."""
    client = MlflowClient(case.mlflow_uri)
    if not client.search_registered_models("name='bad-input-model'"):
        client.create_registered_model("bad-input-model")
        client.create_model_version("bad-input-model", "s3://bad-input-data/model", run_id=None)
    config = write_config(case, "registry:\n  model_name: bad-input-model\n")
    return cli("predict", "--model=staging", "--config", config, "--output=predictions")


def version_unrecorded(case: Case) -> int:
    """A version registered the old way (training registered its own model): no digest of its files."""
    client = MlflowClient(case.mlflow_uri)
    if not client.search_registered_models("name='bad-input-legacy'"):
        client.create_registered_model("bad-input-legacy")
        experiment = client.get_experiment_by_name("bad-input-legacy") or client.get_experiment(
            client.create_experiment("bad-input-legacy")
        )
        run_id = client.create_run(experiment.experiment_id).info.run_id
        client.set_terminated(run_id)
        client.create_model_version("bad-input-legacy", "s3://bad-input-data/model", run_id=run_id)
        case.runs_before = mlflow_runs(case.mlflow_uri)  # the setup's run is not the command's
    config = write_config(case, "registry:\n  model_name: bad-input-legacy\n")
    return cli("predict", "--model=1", "--config", config, "--output=predictions")


def multi_node(case: Case, env: dict[str, str]) -> int:
    """`train` on a node of a multi-node job whose environment is wrong (refused before TensorFlow starts)."""
    for name, value in env.items():
        case.monkeypatch.setenv(name, value)
    return cli("train", "--config", write_config(case, "training:\n  epochs: 1\n"))


BATCH_CHILD = {
    "AWS_BATCH_JOB_NODE_INDEX": "1",
    "AWS_BATCH_JOB_NUM_NODES": "2",
    "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0",
}
TWO_WORKERS = json.dumps(
    {"cluster": {"worker": ["10.0.0.5:2222", "10.0.0.6:2222"]}, "task": {"type": "worker", "index": 0}}
)


TRIGGERS: dict[str, Callable[[Case], int]] = {
    "train-unknown-command": lambda case: cli("fit"),
    "train-missing-config": lambda case: cli("train", "--config", "nope.yaml"),
    "train-checkpoint-uri": lambda case: cli(
        "train",
        "--config",
        write_config(case, "training:\n  epochs: 1\n"),
        "--checkpoint-uri",
        "gs://bucket/ckpt",
    ),
    "train-mnp-no-main-address": lambda case: multi_node(case, BATCH_CHILD),
    "train-tf-config-count": lambda case: multi_node(
        case,
        {
            **BATCH_CHILD,
            "AWS_BATCH_JOB_NODE_INDEX": "0",
            "AWS_BATCH_JOB_NUM_NODES": "3",
            "TF_CONFIG": TWO_WORKERS,
        },
    ),
    "config-unknown-key": checkpoint_then_typo,
    "config-wrong-type": lambda case: cli(
        "train", "--config", write_config(case, "training:\n  batch_size: big\n")
    ),
    "config-out-of-range": lambda case: cli(
        "train", "--config", write_config(case, "training:\n  epochs: 0\n")
    ),
    "config-bad-choice": lambda case: cli("train", "--config", write_config(case, "data:\n  channels: 2\n")),
    "config-not-a-mapping": lambda case: cli(
        "train", "--config", write_config(case, "- a\n- b\n", "bad.yaml")
    ),
    "config-s3-no-bucket": lambda case: cli(
        "train", "--config", write_config(case, 'data:\n  source: "s3:///images"\n')
    ),
    "config-registry-direction": lambda case: cli(
        "train", "--config", write_config(case, "registry:\n  direction: sideways\n")
    ),
    "config-registry-metric": lambda case: cli(
        "train", "--config", write_config(case, "registry:\n  metric: best_val_loss\n")
    ),
    "config-registry-holdout": lambda case: cli(
        "train", "--config", write_config(case, "registry:\n  holdout: s3://bucket/data/eval/\n")
    ),
    "data-missing-folder": lambda case: train_on(case, "no-such-folder"),
    "data-no-class-folders": flat_folder,
    "data-class-without-images": class_without_images,
    "data-corrupt-image": corrupt_image,
    "data-s3-missing-bucket": lambda case: train_on(case, "s3://no-such-bucket/images"),
    "data-s3-empty-prefix": empty_prefix,
    "data-s3-access-denied": access_denied,
    "sweep-unknown-path": lambda case: sweep_plan(
        case, "study_name: demo\nspace:\n  training.learning_rat: {type: float, low: 0.001, high: 0.01}\n"
    ),
    "sweep-empty-range": lambda case: sweep_plan(
        case, "study_name: demo\nspace:\n  model.dropout: {type: float, low: 0.4, high: 0.1}\n"
    ),
    "sweep-parallel-below-one": lambda case: sweep_plan(case, SWEEP.replace("parallel: 2", "parallel: 0")),
    "sweep-budget-spent": budget_spent,
    "sweep-space-changed": lambda case: first_wave_then(case, SWEEP.replace("high: 0.5", "high: 0.4")),
    "sweep-attempts-above-runner": attempts_above_runner,
    "sweep-trials-no-array-index": lambda case: array_child_trial(case, None),
    "sweep-trials-index-out-of-range": lambda case: array_child_trial(case, "2"),
    "predict-missing-model": lambda case: cli(
        "predict", "--model=outputs/none.tflite", "--output=predictions"
    ),
    "predict-empty-input": empty_input_folder,
    "predict-model-not-registered": model_not_registered,
    "predict-alias-missing": alias_missing,
    "predict-version-unrecorded": version_unrecorded,
    "promote-bad-run-id": lambda case: cli("promote", "--run-id=--x"),
    "predict-output-not-writable": output_below_a_file,
}


# ---------------------------------------------------------------------- "left running" claims
def no_run_created(case: Case) -> None:
    after = mlflow_runs(case.mlflow_uri)
    assert after == case.runs_before, after - case.runs_before


def checkpoint_untouched(case: Case) -> None:
    assert case.checkpoint_before, "the trigger stored no checkpoint"
    assert s3_objects(CHECKPOINT_BUCKET) == case.checkpoint_before


def nothing_downloaded(case: Case) -> None:
    cache = case.tmp / "cache"
    assert not cache.exists() or not [p for p in cache.rglob("*") if p.is_file()]


def no_study_created(case: Case) -> None:
    assert not (case.tmp / STUDY_ROOT).exists()


def no_trial_asked_or_wave_claimed(case: Case) -> None:
    assert case.study_before is not None, "the trigger planned no first wave"
    assert study_state(case) == case.study_before


def no_prediction_written(case: Case) -> None:
    assert not list(case.tmp.rglob("part-*.parquet")), list(case.tmp.rglob("part-*.parquet"))


CLAIMS: dict[str, Callable[[Case], None]] = {
    "no prediction written": no_prediction_written,
    "no MLflow run created": no_run_created,
    "checkpoint in S3 untouched": checkpoint_untouched,
    "nothing downloaded": nothing_downloaded,
    "no study created": no_study_created,
    "no trial asked, no wave claimed": no_trial_asked_or_wave_claimed,
}
