"""The sweep's Optuna study in (moto) S3 and in a local directory: concurrent writers, the wave claim, bad input.

Real boto3 against the session's moto server (conftest's `moto_endpoint`), real Optuna, real processes.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import optuna
import pytest
from botocore.exceptions import ClientError

from gpu_job import study_storage
from gpu_job.study_storage import (
    JOURNAL_FILE,
    S3JournalBackend,
    StudyStorageError,
    WaveAlreadyClaimed,
    claim_wave,
    latest_wave,
    open_study_storage,
    parse_study_uri,
    read_wave,
)
from gpu_runner_testing.aws_faults import AwsFaults

BUCKET = "study-storage-test"
STUDY = "digits-sweep"
optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture(scope="module")
def bucket(moto_endpoint: str) -> str:
    boto3.client("s3").create_bucket(Bucket=BUCKET)
    return BUCKET


@pytest.fixture
def s3_uri(bucket: str) -> str:
    """A fresh study prefix per test: tests share the session's moto server."""
    return f"s3://{bucket}/sweeps/{uuid.uuid4().hex[:12]}/"


@pytest.fixture(params=["s3", "local"])
def study_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The same behaviour is asked of both kinds of storage: S3 for the workflow, a directory for `make sweep`."""
    if request.param == "s3":
        return request.getfixturevalue("s3_uri")
    return str(tmp_path / "sweeps" / STUDY)


@pytest.fixture
def session(moto_endpoint: str) -> boto3.Session:
    return boto3.Session()


@pytest.fixture
def faults(session: boto3.Session) -> AwsFaults:
    return AwsFaults(session)


def calls(client: Any, operation: str) -> list[dict[str, Any]]:
    """The parameters of every `operation` call the client makes from now on (botocore's provide-client-params)."""
    seen: list[dict[str, Any]] = []
    client.meta.events.register(
        f"provide-client-params.s3.{operation}", lambda params, **_: seen.append(params)
    )
    return seen


def journal_keys(uri: str) -> list[str]:
    where = parse_study_uri(uri)
    listed = boto3.client("s3").list_objects_v2(Bucket=where.bucket, Prefix=where.prefix + "journal/")
    return [obj["Key"].rsplit("/", 1)[1] for obj in listed.get("Contents", [])]


# ---------------------------------------------------------------------------------------- the double itself
def test_moto_refuses_a_second_conditional_put_with_412(bucket: str) -> None:
    """Our whole version check rests on this: were moto to accept it, every test below would prove nothing.

    moto 5.2.5 checks `If-None-Match: *` on PutObject (moto/s3/responses.py, put_object, read 2026-12-02);
    optuna/optuna PR #6003 (March 2025) found a moto without it, and its S3 backend's concurrent tests failed.
    """
    s3 = boto3.client("s3")
    key = f"probe/{uuid.uuid4().hex}"
    s3.put_object(Bucket=bucket, Key=key, Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as refused:
        s3.put_object(Bucket=bucket, Key=key, Body=b"second", IfNoneMatch="*")
    assert refused.value.response["Error"]["Code"] == "PreconditionFailed"
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == b"first"


def test_moto_lets_exactly_one_of_racing_conditional_puts_win(bucket: str) -> None:
    """Real S3 makes the check and the write one step; moto's threaded server must too, or the concurrent study
    tests could lose a log without noticing. Four clients race for each of 15 keys at the same instant."""
    clients = [boto3.client("s3") for _ in range(4)]
    start = threading.Barrier(len(clients))
    keys = [f"race/{uuid.uuid4().hex}" for _ in range(15)]

    def race(client: Any) -> list[str]:
        won = []
        for key in keys:
            start.wait()
            try:
                client.put_object(Bucket=bucket, Key=key, Body=str(id(client)).encode(), IfNoneMatch="*")
                won.append(key)
            except ClientError as error:
                assert error.response["Error"]["Code"] in {"PreconditionFailed", "ConditionalRequestConflict"}
        return won

    with ThreadPoolExecutor(len(clients)) as pool:
        winners = [key for won in pool.map(race, clients) for key in won]
    assert sorted(winners) == sorted(keys)


# ------------------------------------------------------------------------------------------ the S3 journal
def test_two_writers_racing_for_one_log_number_one_retries_at_the_next(s3_uri: str) -> None:
    first, second = S3JournalBackend(s3_uri), S3JournalBackend(s3_uri)
    assert first.read_logs(0) == [] and second.read_logs(0) == []
    puts = calls(second._client, "PutObject")
    first.append_logs([{"op": "a1"}, {"op": "a2"}, {"op": "a3"}])
    # `second` still believes the journal is empty: its write at log 0 is refused, it re-reads and lands at 3
    # (after all three of the winner's logs, not at 1: the key is the first log number alone).
    second.append_logs([{"op": "b1"}])
    assert [p["Key"].rsplit("/", 1)[1] for p in puts] == ["000000000000.jsonl", "000000000003.jsonl"]
    assert journal_keys(s3_uri) == ["000000000000.jsonl", "000000000003.jsonl"]
    expected = [{"op": "a1"}, {"op": "a2"}, {"op": "a3"}, {"op": "b1"}]
    assert S3JournalBackend(s3_uri).read_logs(0) == expected
    assert first.read_logs(2) == expected[2:]


def test_an_own_write_answered_412_on_a_retry_is_not_written_twice(
    s3_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PutObject landed but its answer was lost; botocore's retry of it gets 412 for our own object."""
    write_id = uuid.UUID(int=7)
    monkeypatch.setattr(study_storage.uuid, "uuid4", lambda: write_id)
    where = parse_study_uri(s3_uri)
    boto3.client("s3").put_object(
        Bucket=where.bucket,
        Key=f"{where.prefix}journal/000000000000.jsonl",
        Body=b'{"op":"mine"}\n',
        Metadata={"write-id": write_id.hex},
    )
    backend = S3JournalBackend(s3_uri)
    backend.append_logs([{"op": "mine"}])
    assert journal_keys(s3_uri) == ["000000000000.jsonl"]
    assert backend.read_logs(0) == [{"op": "mine"}]


def test_a_conditional_request_conflict_409_is_retried(
    s3_uri: str, session: boto3.Session, faults: AwsFaults
) -> None:
    backend = S3JournalBackend(s3_uri, client=session.client("s3"))
    faults.fail("s3", "PutObject", "ConditionalRequestConflict", status=409, times=2)
    backend.append_logs([{"op": "after-409"}])
    assert [code for _, op, code, _ in faults.injected if op == "PutObject"] == [
        "ConditionalRequestConflict"
    ] * 2
    assert S3JournalBackend(s3_uri).read_logs(0) == [{"op": "after-409"}]


def test_attempts_exhausted_raise_a_clear_error(
    s3_uri: str, session: boto3.Session, faults: AwsFaults
) -> None:
    backend = S3JournalBackend(s3_uri, client=session.client("s3"), max_attempts=3)
    faults.fail("s3", "PutObject", "PreconditionFailed", status=412, times=-1)
    with pytest.raises(StudyStorageError, match=r"3 attempts .*taken by other writers.*run fewer writers"):
        backend.append_logs([{"op": "never"}])
    assert len(faults.injected) == 3
    assert journal_keys(s3_uri) == []


def test_read_logs_after_caching_fetches_only_the_new_objects(s3_uri: str) -> None:
    writer, reader = S3JournalBackend(s3_uri), S3JournalBackend(s3_uri)
    writer.append_logs([{"n": 0}, {"n": 1}])
    writer.append_logs([{"n": 2}])
    assert reader.read_logs(0) == [{"n": 0}, {"n": 1}, {"n": 2}]
    gets, lists = calls(reader._client, "GetObject"), calls(reader._client, "ListObjectsV2")
    writer.append_logs([{"n": 3}])
    assert reader.read_logs(3) == [{"n": 3}]
    assert [g["Key"].rsplit("/", 1)[1] for g in gets] == ["000000000003.jsonl"]
    # The listing resumes after the last object read instead of listing the whole journal again.
    assert lists[-1]["StartAfter"].endswith("000000000002.jsonl")
    assert reader.read_logs(0) == [{"n": n} for n in range(4)]
    assert len(gets) == 1
    assert reader.read_logs(4) == []


def test_logs_handed_to_optuna_are_copies(s3_uri: str) -> None:
    """Optuna keeps dicts from replayed logs and updates them later; the cache must not change with them."""
    backend = S3JournalBackend(s3_uri)
    backend.append_logs([{"user_attrs": {"a": 1}}])
    backend.read_logs(0)[0]["user_attrs"]["a"] = 2
    assert backend.read_logs(0) == [{"user_attrs": {"a": 1}}]


@pytest.mark.slow
def test_read_logs_pages_past_1000_journal_objects(s3_uri: str) -> None:
    """ListObjectsV2 returns at most 1,000 keys per call: a long study's journal spans several pages."""
    where = parse_study_uri(s3_uri)
    s3 = boto3.client("s3")

    def put(n: int) -> None:
        key = f"{where.prefix}journal/{n:012d}.jsonl"
        s3.put_object(Bucket=where.bucket, Key=key, Body=json.dumps({"n": n}).encode() + b"\n")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, range(1001)))
    backend = S3JournalBackend(s3_uri)
    lists = calls(backend._client, "ListObjectsV2")
    assert backend.read_logs(0) == [{"n": n} for n in range(1001)]
    assert len(lists) == 2  # the second page: ContinuationToken
    backend.append_logs([{"n": 1001}])
    boto3.client("s3").head_object(Bucket=where.bucket, Key=f"{where.prefix}journal/000000001001.jsonl")
    assert S3JournalBackend(s3_uri).read_logs(1000) == [{"n": 1000}, {"n": 1001}]


def test_a_gap_or_a_stray_object_in_the_journal_is_named(s3_uri: str) -> None:
    where = parse_study_uri(s3_uri)
    s3 = boto3.client("s3")
    s3.put_object(Bucket=where.bucket, Key=f"{where.prefix}journal/000000000000.jsonl", Body=b'{"n":0}\n')
    s3.put_object(Bucket=where.bucket, Key=f"{where.prefix}journal/000000000002.jsonl", Body=b'{"n":2}\n')
    with pytest.raises(
        StudyStorageError, match=r"000000000002\.jsonl starts at log 2 .*ends at log 1.*restore"
    ):
        S3JournalBackend(s3_uri).read_logs(0)
    s3.put_object(Bucket=where.bucket, Key=f"{where.prefix}journal/000000000001.jsonl", Body=b"not json\n")
    with pytest.raises(StudyStorageError, match=r"000000000001\.jsonl is not a journal object"):
        S3JournalBackend(s3_uri).read_logs(0)
    s3.put_object(Bucket=where.bucket, Key=f"{where.prefix}journal/", Body=b"")  # a console "folder": ignored
    s3.put_object(Bucket=where.bucket, Key=f"{where.prefix}journal/notes.txt", Body=b"hello")
    s3.delete_object(Bucket=where.bucket, Key=f"{where.prefix}journal/000000000001.jsonl")
    s3.delete_object(Bucket=where.bucket, Key=f"{where.prefix}journal/000000000002.jsonl")
    with pytest.raises(StudyStorageError, match=r"notes\.txt is not a journal object .*move it elsewhere"):
        S3JournalBackend(s3_uri).read_logs(0)


def test_a_backend_survives_pickling(s3_uri: str) -> None:
    """Optuna pickles storages into worker processes; a boto3 client cannot travel, so a new one is made."""
    backend = S3JournalBackend(s3_uri)
    backend.append_logs([{"n": 0}])
    copy = pickle.loads(pickle.dumps(backend))
    copy.append_logs([{"n": 1}])
    assert backend.read_logs(0) == [{"n": 0}, {"n": 1}]


# ------------------------------------------------------------------------------- Optuna through the storage
def _trial_row(trial: optuna.trial.FrozenTrial) -> tuple:
    return (
        trial.number,
        trial.state,
        trial.params,
        trial.value,
        trial.intermediate_values,
        trial.user_attrs,
    )


def _in_child(out: Any, target: Callable[..., Any], *args: Any) -> None:
    """Run `target` in a spawned process; its result, or its traceback, goes back through `out`."""
    try:
        out.put(("ok", target(*args)))
    except BaseException:
        out.put(("error", traceback.format_exc()))


def _from_children(out: Any, count: int) -> list[Any]:
    results = []
    for _ in range(count):
        status, value = out.get(timeout=120)
        assert status == "ok", f"a child process failed:\n{value}"
        results.append(value)
    return results


def _worker(uri: str, name: str, trials: int, start: Any) -> tuple[float, float, list[tuple[int, float]]]:
    """One trial's machine: ask, report per epoch, tell; what it saw goes back to the test for comparison."""
    study = optuna.load_study(
        study_name=name, storage=open_study_storage(uri), sampler=optuna.samplers.RandomSampler()
    )
    start.wait()
    began = time.monotonic()
    told = []
    for _ in range(trials):
        trial = study.ask()
        x = trial.suggest_float("x", -10, 10)
        trial.report(abs(x), step=0)
        trial.set_user_attr("worker", os.getpid())
        study.tell(trial, x * x)
        told.append((trial.number, x))
    return began, time.monotonic(), told


@pytest.mark.slow
def test_two_processes_ask_report_and_tell_one_study_at_once(study_uri: str) -> None:
    optuna.create_study(study_name=STUDY, storage=open_study_storage(study_uri), direction="minimize")
    context = multiprocessing.get_context("spawn")  # nothing shared with this process but the storage
    start, out = context.Barrier(2), context.Queue()
    workers = [
        context.Process(target=_in_child, args=(out, _worker, study_uri, STUDY, 20, start)) for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    results = _from_children(out, len(workers))
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0

    (began_a, ended_a, told_a), (began_b, ended_b, told_b) = results
    assert began_a < ended_b and began_b < ended_a, "the two writers did not overlap in time"
    told = dict(told_a + told_b)
    assert len(told_a) == len(told_b) == 20 and sorted(told) == list(range(40))

    trials = optuna.load_study(study_name=STUDY, storage=open_study_storage(study_uri)).trials
    assert [t.number for t in trials] == list(range(40))
    for trial in trials:
        x = told[trial.number]
        assert trial.state == optuna.trial.TrialState.COMPLETE
        assert (trial.params, trial.value, trial.intermediate_values) == ({"x": x}, x * x, {0: abs(x)})
    assert len({t.user_attrs["worker"] for t in trials}) == 2
    # A fresh storage (a later job on another machine) replays the journal into the very same study.
    reread = optuna.load_study(study_name=STUDY, storage=open_study_storage(study_uri)).trials
    assert [_trial_row(t) for t in reread] == [_trial_row(t) for t in trials]


def _appender(uri: str, writer: int, count: int, start: Any) -> int:
    backend = S3JournalBackend(uri)
    backend.read_logs(0)
    start.wait()
    for n in range(count):
        backend.append_logs([{"writer": writer, "n": n}])
        backend.read_logs(0)  # what JournalStorage does after every write
    return writer


@pytest.mark.slow
def test_writers_in_tight_loops_do_not_starve_each_other(s3_uri: str) -> None:
    """A regression: when a loser re-listed the journal before retrying, the writer that had just won was always
    quicker: in a run of 3 processes x 150 appends two of them never wrote at all (attempts exhausted)."""
    context = multiprocessing.get_context("spawn")
    start, out = context.Barrier(3), context.Queue()
    jobs = [context.Process(target=_in_child, args=(out, _appender, s3_uri, w, 40, start)) for w in range(3)]
    for job in jobs:
        job.start()
    assert sorted(_from_children(out, 3)) == [0, 1, 2]
    for job in jobs:
        job.join(timeout=30)
    logs = S3JournalBackend(s3_uri).read_logs(0)
    for writer in range(3):  # each writer's logs: all there, once, in its own order
        assert [log["n"] for log in logs if log["writer"] == writer] == list(range(40))


def _prune_check(uri: str, name: str, number: int, value: float) -> bool:
    """The training job of trial `number` (asked by the plan job elsewhere): reports an epoch, asks the pruner."""
    storage = open_study_storage(uri)
    pruner = optuna.pruners.MedianPruner(n_startup_trials=1, n_warmup_steps=0)
    study = optuna.load_study(study_name=name, storage=storage, pruner=pruner)
    trial_id = storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name(name), number)
    trial = optuna.trial.Trial(study, trial_id)
    trial.report(value, step=0)
    pruned = trial.should_prune()
    if pruned:
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    return pruned


@pytest.mark.slow
def test_the_median_pruner_prunes_a_worse_trial_in_another_process(study_uri: str) -> None:
    pruner = optuna.pruners.MedianPruner(n_startup_trials=1, n_warmup_steps=0)
    study = optuna.create_study(
        study_name=STUDY, storage=open_study_storage(study_uri), direction="minimize", pruner=pruner
    )
    first = study.ask()
    for step, loss in enumerate([1.0, 0.8, 0.6]):
        first.report(loss, step=step)
    study.tell(first, 0.6)
    worse, better = study.ask(), study.ask()  # the plan job asks both trials of the wave

    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    verdicts = []
    for trial, loss in ((worse, 5.0), (better, 0.5)):
        job = context.Process(
            target=_in_child, args=(out, _prune_check, study_uri, STUDY, trial.number, loss)
        )
        job.start()
        verdicts.extend(_from_children(out, 1))
        job.join(timeout=30)
        assert job.exitcode == 0
    assert verdicts == [True, False]
    states = {t.number: t.state for t in study.trials}
    assert states[worse.number] == optuna.trial.TrialState.PRUNED
    assert states[better.number] == optuna.trial.TrialState.RUNNING


def test_a_local_study_is_optunas_journal_file_in_the_directory(tmp_path: Path) -> None:
    folder = tmp_path / "not" / "yet" / "there"
    storage = open_study_storage(folder)  # a Path, or its str
    study = optuna.create_study(study_name=STUDY, storage=storage)
    study.enqueue_trial({"x": 1.0})
    trial = study.ask()
    study.tell(trial, trial.suggest_float("x", 0, 2))
    assert isinstance(storage._backend, optuna.storages.journal.JournalFileBackend)
    assert (folder / JOURNAL_FILE).stat().st_size > 0
    assert optuna.load_study(study_name=STUDY, storage=open_study_storage(str(folder))).best_value == 1.0


def test_an_s3_study_reopened_from_a_fresh_storage_reads_back_identically(s3_uri: str) -> None:
    study = optuna.create_study(study_name=STUDY, storage=open_study_storage(s3_uri))
    for value in (3.0, 1.0, 2.0):
        trial = study.ask()
        trial.report(value * 2, step=1)
        study.tell(trial, value)
    again = optuna.load_study(study_name=STUDY, storage=open_study_storage(s3_uri))
    assert [_trial_row(t) for t in again.trials] == [_trial_row(t) for t in study.trials]
    assert again.best_value == 1.0
    assert isinstance(again._storage._backend, S3JournalBackend)


# --------------------------------------------------------------------------------------------- wave claims
def test_a_wave_is_claimed_once_and_the_second_plan_job_is_told_why(study_uri: str) -> None:
    assert latest_wave(study_uri) == 0 and read_wave(study_uri, 1) is None
    claim_wave(study_uri, 1, {"run_id": "111", "trials": [0, 1]})
    with pytest.raises(WaveAlreadyClaimed) as second:
        claim_wave(study_uri, 1, {"run_id": "222", "trials": [2, 3]})
    message = str(second.value)
    assert "wave 1 " in message and "waves/1.json" in message and '"run_id": "111"' in message
    assert "Wait for that plan job to finish, or plan the next wave" in message
    assert second.value.existing == {"run_id": "111", "trials": [0, 1]}
    assert read_wave(study_uri, 1) == {"run_id": "111", "trials": [0, 1]}  # not overwritten
    claim_wave(study_uri, 2, {"run_id": "222"})
    assert latest_wave(study_uri) == 2


def test_two_plan_jobs_claiming_a_wave_at_once_one_wins(study_uri: str) -> None:
    start = threading.Barrier(4)

    def plan(run: int) -> bool:
        start.wait()
        try:
            claim_wave(study_uri, 3, {"run_id": run})
            return True
        except WaveAlreadyClaimed:
            return False

    with ThreadPoolExecutor(4) as pool:
        won = list(pool.map(plan, range(4)))
    assert won.count(True) == 1
    assert read_wave(study_uri, 3) == {"run_id": won.index(True)}
    assert latest_wave(study_uri) == 3


def test_an_own_claim_answered_412_on_a_retry_is_not_refused(
    s3_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan job's PutObject landed, its answer was lost, botocore's retry got 412: that claim is ours."""
    claim_id = uuid.UUID(int=11)
    monkeypatch.setattr(study_storage.uuid, "uuid4", lambda: claim_id)
    where = parse_study_uri(s3_uri)
    s3 = boto3.client("s3")
    s3.put_object(
        Bucket=where.bucket,
        Key=f"{where.prefix}waves/1.json",
        Body=b'{"run_id": "1"}',
        Metadata={"claim-id": claim_id.hex},
    )
    claim_wave(s3_uri, 1, {"run_id": "1"})
    monkeypatch.setattr(study_storage.uuid, "uuid4", lambda: uuid.UUID(int=12))
    with pytest.raises(WaveAlreadyClaimed):
        claim_wave(s3_uri, 1, {"run_id": "1"})  # the same body from another plan job is still refused


def test_a_claim_that_meets_only_409s_is_not_reported_as_claimed(
    s3_uri: str, session: boto3.Session, faults: AwsFaults
) -> None:
    faults.fail("s3", "PutObject", "ConditionalRequestConflict", status=409, times=-1)
    with pytest.raises(
        StudyStorageError, match=r"kept answering 409 ConditionalRequestConflict .*run the plan job again"
    ):
        claim_wave(s3_uri, 1, {}, client=session.client("s3"))
    assert read_wave(s3_uri, 1) is None


def test_a_claim_must_be_a_json_object(study_uri: str) -> None:
    with pytest.raises(StudyStorageError, match=r"must be a JSON object, not list"):
        claim_wave(study_uri, 1, [1])  # type: ignore[arg-type]
    with pytest.raises(StudyStorageError, match=r"is not JSON .*pass plain values"):
        claim_wave(study_uri, 1, {"when": object()})
    assert latest_wave(study_uri) == 0


@pytest.mark.parametrize("wave", [0, -1, True, "1", 1.0])
def test_a_wave_number_must_count_from_one(study_uri: str, wave: Any) -> None:
    with pytest.raises(StudyStorageError, match=r"is not a wave number.*latest_wave\(\) \+ 1"):
        claim_wave(study_uri, wave, {})


def test_latest_wave_compares_numbers_not_names(study_uri: str) -> None:
    for wave in (2, 10, 9):
        claim_wave(study_uri, wave, {})
    assert latest_wave(study_uri) == 10


# ---------------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("uri", "said"),
    [
        ("", r"is empty"),
        ("gs://bucket/sweeps/x", r"'gs://bucket/sweeps/x' is neither s3://bucket/prefix nor a local path"),
        ("S3://bucket/sweeps/x", r"scheme is lower-case"),
        ("s3://Bad_Bucket/sweeps/x", r"'Bad_Bucket' is not a valid S3 bucket name"),
        ("s3://ab/sweeps/x", r"'ab' is not a valid S3 bucket name"),
        ("s3://my-bucket", r"has no prefix"),
        ("s3://my-bucket/", r"has no prefix"),
        ("s3://my-bucket/sweeps//x", r"empty folder name"),
    ],
)
def test_a_uri_that_is_neither_s3_nor_a_path_is_refused_with_the_fix(uri: str, said: str) -> None:
    with pytest.raises(StudyStorageError, match=said) as refused:
        open_study_storage(uri)
    assert "s3://<bucket>/sweeps/<study>/" in str(refused.value)


def test_a_file_where_the_study_directory_should_be_is_refused(tmp_path: Path) -> None:
    (tmp_path / "study").write_text("x")
    with pytest.raises(StudyStorageError, match=r"is a file, not a directory"):
        open_study_storage(str(tmp_path / "study"))


def test_a_bucket_that_does_not_exist_is_named_before_anything_runs(moto_endpoint: str) -> None:
    uri = "s3://no-such-study-bucket/sweeps/x/"
    said = r"bucket 'no-such-study-bucket' does not exist; fix the bucket name .*or create the bucket"
    for call in (lambda: open_study_storage(uri), lambda: latest_wave(uri), lambda: claim_wave(uri, 1, {})):
        with pytest.raises(StudyStorageError, match=said):
            call()


@pytest.mark.parametrize(
    ("operation", "call", "action"),
    [
        ("ListObjectsV2", lambda uri, client: open_study_storage(uri, client=client), "s3:ListBucket"),
        ("PutObject", lambda uri, client: claim_wave(uri, 1, {}, client=client), "s3:PutObject"),
        ("GetObject", lambda uri, client: read_wave(uri, 1, client=client), "s3:GetObject"),
    ],
)
def test_access_denied_names_the_permission_to_grant(
    s3_uri: str,
    session: boto3.Session,
    faults: AwsFaults,
    operation: str,
    call: Callable[[str, Any], Any],
    action: str,
) -> None:
    faults.fail("s3", operation, "AccessDenied", status=403, times=-1, message="Access Denied")
    where = parse_study_uri(s3_uri)
    with pytest.raises(StudyStorageError, match=rf"access denied to {operation}; grant {action} ") as denied:
        call(s3_uri, session.client("s3"))
    assert f"arn:aws:s3:::{where.bucket}/{where.prefix}*" in str(denied.value)
