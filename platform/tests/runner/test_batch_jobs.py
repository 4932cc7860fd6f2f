"""The AWS Batch backend: submit, wait (status, streamed log lines, outcome), cancel, array and multi-node jobs,
bad input refused before SubmitJob, the cost of the attempts, and `backend` in the settings.

The jobs really run: moto's Batch backend with the local container host of gpu_runner_testing/batch_host.py (`batch_endpoint`),
each job's command a local process. What moto cannot show (a second attempt after a Spot reclaim: it ignores
retryStrategy) is shown against DescribeJobs answers that botocore's own service model accepts (FakeBatch).
"""

from __future__ import annotations

import math
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import pytest
import yaml
from botocore.exceptions import ClientError, ParamValidationError
from botocore.validate import validate_parameters
from mlflow.tracking import MlflowClient

from gpu_runner import cli
from gpu_runner.batch import batch_jobs, batch_wait
from gpu_runner.batch.batch_cost import (
    SweepLeg,
    SweepMatrixError,
    billed_seconds,
    instance_of,
    job_costs,
    sweep_legs,
    wave_request,
)
from gpu_runner.batch.batch_jobs import BatchInputError, JobRequest
from gpu_runner.batch.batch_stack import JOB_TAG_KEY, batch_stack_name
from gpu_runner.core.aws import Aws
from gpu_runner.core.errors import SettingsError
from gpu_runner.core.settings import Settings
from gpu_runner.cost.record import (
    BILLED_SECONDS,
    COST_USD,
    OVERHEAD_SECONDS,
    TAG_INSTANCE_TYPE,
    TAG_MARKET,
    TRAINING_SECONDS,
)
from gpu_runner.cost.report import read_gpu_runs
from gpu_runner_testing.batch_host import RECLAIM_WHEN
from gpu_runner_testing.batch_world import PY, REGION, RESOURCES

# Long enough for moto's thread to walk SUBMITTED..RUNNING (0.5 s steps) and a process to start on 2 busy cores.
JOB_TIMEOUT = 120.0


@pytest.fixture
def batch(batch_world: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A Batch client of the product's kind on the batch host; `batch.submitted` lists every SubmitJob sent."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", batch_world)
    client = boto3.client("batch", region_name=REGION)
    submitted: list[dict[str, Any]] = []
    client.meta.events.register(
        "provide-client-params.batch.SubmitJob", lambda params, **_: submitted.append(dict(params))
    )
    client.submitted = submitted
    yield client


@pytest.fixture
def logs(batch: Any) -> Any:
    return boto3.client("logs", region_name=REGION)


def run_job(
    batch: Any, logs: Any, request: JobRequest, *, check_shape: bool = True
) -> tuple[batch_wait.Outcome, list[str]]:
    lines: list[str] = []
    submitted = batch_jobs.submit(batch, request)
    outcome = batch_wait.wait(batch, logs, submitted.job_id, poll_seconds=0.2, timeout_seconds=JOB_TIMEOUT,
                              emit=lines.append)  # fmt: skip
    # What the wait read from the batch host has the shape botocore's model gives DescribeJobs (the fakes below
    # are held to the same check).
    if check_shape:
        conforming(BATCH_MODEL, "DescribeJobs", {"jobs": [dict(outcome.job)]})
    return outcome, lines


def test_a_job_runs_and_its_output_is_streamed(
    batch: Any, logs: Any, logged: Callable[[], list[str]], batch_world: str
) -> None:
    # The values come from the branch: they reach the process as argv and environment, never through a shell.
    hostile = "$(touch pwned); `id` ${HOME}"
    code = (
        "import os, sys; print('epoch 1'); print('greeting', os.environ['GREETING']); print(sys.argv[1]); "
        "print('to stderr', file=sys.stderr); print('::add-mask::x'); "
        "print('attempt', os.environ['AWS_BATCH_JOB_ATTEMPT'], 'queue', os.environ['AWS_BATCH_JQ_NAME']); "
        "print('aws key:', os.environ.get('AWS_ACCESS_KEY_ID'), os.environ.get('AWS_ENDPOINT_URL'))"
    )
    request = JobRequest(name="train-ok", queue="gpu", definition="train", command=(PY, "-c", code, hostile),
                         environment={"GREETING": hostile}, tags={"project": "demo"})  # fmt: skip
    outcome, lines = run_job(batch, logs, request)

    assert (outcome.status, outcome.exit_code) == ("SUCCEEDED", 0)
    assert {"[job] epoch 1", f"[job] greeting {hostile}", f"[job] {hostile}", "[job] to stderr"} <= set(lines)
    # The variables real Batch sets; and the job sees its own environment, not the host's: its AWS credentials
    # are the job role's (here the batch host's stand-in: moto's keys and the host's own address).
    assert {"[job] attempt 1 queue gpu", f"[job] aws key: testing {batch_world}"} <= set(lines)
    # A job's line that is a workflow command is shown, not obeyed: it never starts a line.
    assert "[job] ::add-mask::x" in lines and not any(line.lstrip().startswith("::") for line in lines)
    assert "SUCCEEDED" in logged()
    sent = batch.submitted[-1]
    assert sent["containerOverrides"]["command"] == [PY, "-c", code, hostile]
    assert sent["containerOverrides"]["environment"] == [{"name": "GREETING", "value": hostile}]
    assert sent["tags"] == {"project": "demo"} and sent["propagateTags"] is True


def test_a_failing_job_fails(batch: Any, logs: Any, logged: Callable[[], list[str]]) -> None:
    """moto's DescribeJobs drops the container's exit code (Job.describe replaces describe_short's `container`
    with the job definition's details); ListJobs keeps it, so the process's own code is checked there. The exit
    code as the wait's result: test_a_failed_job_exits_with_its_containers_code."""
    code = "import sys; print('loss is nan'); sys.exit(3)"
    outcome, lines = run_job(batch, logs, JobRequest("train-fails", "gpu", "train", command=(PY, "-c", code)))

    assert (outcome.status, outcome.cancelled) == ("FAILED", False) and outcome.exit_code != 0
    assert "[job] loss is nan" in lines
    assert any(f"job {outcome.job['jobId']} FAILED (exit code 1)" in line for line in logged())
    [listed] = [j for j in batch.list_jobs(jobQueue="gpu", jobStatus="FAILED")["jobSummaryList"]
                if j["jobId"] == outcome.job["jobId"]]  # fmt: skip
    assert listed["container"]["exitCode"] == 3


def test_a_failed_job_exits_with_its_containers_code() -> None:
    stopped = attempt("s", 1000, 5000, "Essential container in task exited") | {}
    stopped["container"]["exitCode"] = 3
    batch = FakeBatch([job("FAILED", [stopped], statusReason="Essential container in task exited")])

    outcome = batch_wait.wait(batch, FakeLogs({}), "j-1", emit=lambda _: None, sleep=lambda _: None)

    assert (outcome.exit_code, outcome.reason) == (3, "Essential container in task exited")


def test_cancel_terminates_a_running_job(batch: Any, logs: Any, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    code = "import os, time; open(os.environ['PID_FILE'], 'w').write(str(os.getpid())); print('started', flush=True); time.sleep(600)"
    submitted = batch_jobs.submit(batch, JobRequest("train-cancelled", "gpu", "train", command=(PY, "-c", code),
                                                    environment={"PID_FILE": str(pid_file)}))  # fmt: skip
    deadline = time.monotonic() + JOB_TIMEOUT
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.2)
    pid = int(pid_file.read_text())
    assert batch_jobs.describe(batch, [submitted.job_id])[0]["status"] == "RUNNING"

    assert batch_jobs.cancel(batch, submitted.job_id) == "RUNNING"
    lines: list[str] = []
    outcome = batch_wait.wait(batch, logs, submitted.job_id, poll_seconds=0.2, timeout_seconds=JOB_TIMEOUT,
                              emit=lines.append)  # fmt: skip

    assert (outcome.status, outcome.cancelled) == ("FAILED", True)
    assert outcome.reason == batch_jobs.CANCEL_REASON and outcome.exit_code != 0
    assert "[job] started" in lines
    with pytest.raises(ProcessLookupError):  # the job's process is gone, not left running
        os.kill(pid, 0)
    assert batch_jobs.cancel(batch, submitted.job_id) == "FAILED"  # the cancel path may run twice


def test_cancel_terminates_an_array_jobs_running_children(batch: Any, logs: Any, tmp_path: Path) -> None:
    code = "import os, pathlib, time; pathlib.Path(os.environ['PID_DIR'], os.environ['AWS_BATCH_JOB_ARRAY_INDEX']).write_text(str(os.getpid())); time.sleep(600)"
    submitted = batch_jobs.submit(batch, JobRequest("sweep-cancelled", "gpu", "train", command=(PY, "-c", code),
                                                    environment={"PID_DIR": str(tmp_path)}, array_size=2))  # fmt: skip
    deadline = time.monotonic() + JOB_TIMEOUT
    while len([p for p in tmp_path.iterdir() if p.read_text()]) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    pids = [int(p.read_text()) for p in tmp_path.iterdir()]

    batch_jobs.cancel(batch, submitted.job_id)
    outcome = batch_wait.wait(batch, logs, submitted.job_id, poll_seconds=0.2, timeout_seconds=JOB_TIMEOUT,
                              emit=lambda _: None)  # fmt: skip

    assert (outcome.status, outcome.cancelled, len(pids)) == ("FAILED", True, 2)
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_host_lost_on_the_last_attempt_is_an_interruption(
    batch: Any, logs: Any, tmp_path: Path, logged: Callable[[], list[str]]
) -> None:
    """The batch host drops the job's host (its process killed, Batch's statusReason); moto starts no second
    attempt (retryStrategy ignored), so this is the end of the job: the wait reports an interruption. The retry
    itself: test_a_spot_reclaim_is_reported_and_the_wait_follows_the_retry."""
    started, reclaim = tmp_path / "started", tmp_path / "reclaim"
    code = "import os, pathlib, time; print('epoch 1', flush=True); pathlib.Path(os.environ['STARTED']).touch(); time.sleep(600)"
    environment = {"STARTED": str(started), RECLAIM_WHEN: str(reclaim)}
    submitted = batch_jobs.submit(batch, JobRequest("train-reclaimed", "gpu", "train", command=(PY, "-c", code),
                                                    environment=environment))  # fmt: skip
    deadline = time.monotonic() + JOB_TIMEOUT
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    reclaim.touch()
    lines: list[str] = []
    outcome = batch_wait.wait(batch, logs, submitted.job_id, poll_seconds=0.2, timeout_seconds=JOB_TIMEOUT,
                              emit=lines.append)  # fmt: skip

    assert (outcome.status, outcome.interrupted, outcome.cancelled) == ("FAILED", True, False)
    assert outcome.exit_code == batch_wait.EXIT_INTERRUPTED and outcome.reason == HOST_LOST
    assert "[job] epoch 1" in lines
    assert any(
        "attempt 1 interrupted: its host i-0123456789abcdef0 was terminated" in line for line in logged()
    )


def test_an_array_job_runs_one_child_per_index(batch: Any, logs: Any) -> None:
    code = "import os; print('trial', os.environ['AWS_BATCH_JOB_ARRAY_INDEX'], 'of', os.environ['AWS_BATCH_JOB_ARRAY_SIZE'])"
    # moto answers an array parent without startedAt, which botocore's model marks required (moto's, not ours).
    outcome, lines = run_job(
        batch,
        logs,
        JobRequest("sweep", "gpu", "train", command=(PY, "-c", code), array_size=3),
        check_shape=False,
    )

    assert (outcome.status, outcome.exit_code) == ("SUCCEEDED", 0)
    assert {"[0] trial 0 of 3", "[1] trial 1 of 3", "[2] trial 2 of 3"} <= set(lines)
    assert batch.submitted[-1]["arrayProperties"] == {"size": 3}
    # Each trial priced on its own (the slot of the cost line), on the queue's Spot market.
    costs = job_costs(Aws(), outcome.job, region=REGION, volume_gb=30, fallback_type="g5.xlarge")
    assert sorted((c.slot, c.attempt, c.cost.market) for c in costs) == [
        (str(i), 1, "spot") for i in range(3)
    ]


def test_a_multi_node_job_runs_each_node_with_its_index(batch: Any, logs: Any) -> None:
    outcome, lines = run_job(batch, logs, JobRequest("train-2-nodes", "gpu-mnp", "train-mnp"))

    assert (outcome.status, outcome.exit_code) == ("SUCCEEDED", 0)
    # moto writes both nodes to the parent's one stream (real Batch: one per node, <id>#<node>, also followed).
    assert "[job] node 0 of 2 main 0 main address -" in lines
    assert "[job] node 1 of 2 main 0 main address 127.0.0.1" in lines


# Each node prints a digest of the job's rendezvous secret, never the secret itself.
SECRET_DIGEST = (
    "import hashlib, os; s = os.environ.get('MNP_RENDEZVOUS_SECRET', ''); "
    "print('node', os.environ['AWS_BATCH_JOB_NODE_INDEX'], 'secret', len(s), hashlib.sha256(s.encode()).hexdigest())"
)


def test_each_multi_node_job_gets_a_fresh_rendezvous_secret_on_every_node_and_nowhere_else(
    batch: Any, logs: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """`batch submit` draws a secret per multi-node job and puts it in SubmitJob's node overrides, so every node of
    that job has the same one and the next job another; the submit's log and the wait's lines never carry it (the
    project's distributed.py says why SubmitJob, and who else can read it there)."""
    caplog.set_level("DEBUG", logger="gpu_runner")  # everything gpu-runner logs, at every level
    digests = []
    for _ in range(2):
        # A definition each: moto writes every job of one definition to the same log stream.
        name = f"secret-mnp-{uuid.uuid4().hex[:8]}"
        batch.register_job_definition(jobDefinitionName=name, type="multinode", nodeProperties={
            "numNodes": 2, "mainNode": 0, "nodeRangeProperties": [{"targetNodes": "0:", "container": {
                "image": "local/none", "command": [PY, "-c", SECRET_DIGEST], "resourceRequirements": RESOURCES}}]})  # fmt: skip
        outcome, lines = run_job(batch, logs, JobRequest("secret-job", "gpu-mnp", name))
        assert (outcome.status, outcome.exit_code) == ("SUCCEEDED", 0), lines
        reported = {line.split()[2]: line.split()[4:] for line in lines if " secret " in line}
        assert set(reported) == {"0", "1"}, lines
        (digest,) = {tuple(v) for v in reported.values()}  # the same secret on both nodes
        assert digest[0] == "43"  # 256 bits, url-safe
        digests.append(digest[1])
        (sent,) = batch.submitted[-1:]
        (override,) = sent["nodeOverrides"]["nodePropertyOverrides"]
        secret = {e["name"]: e["value"] for e in override["containerOverrides"]["environment"]}[
            batch_jobs.RENDEZVOUS_SECRET
        ]
        assert override["targetNodes"] == "0:"
        assert secret not in "\n".join(lines) and secret not in caplog.text
    assert digests[0] != digests[1], "two jobs shared a secret"


@pytest.mark.parametrize(
    ("request_", "named"),
    [
        (JobRequest("t", "no-such-queue", "train"), "queue: 'no-such-queue' does not exist"),
        (
            JobRequest("t", "gpu-mnp", "train-mnp", environment={"MNP_RENDEZVOUS_SECRET": "x" * 43}),
            "environment: MNP_RENDEZVOUS_SECRET is drawn by `batch submit`",
        ),
        (JobRequest("t", "gpu", "no-such-definition"), "definition: 'no-such-definition' does not exist"),
        (
            JobRequest("t", "gpu", "train", instance_type="p4d.24xlarge"),
            "instance_type: p4d.24xlarge is not among",
        ),
        (JobRequest("t", "gpu", "train-mnp"), "multi-node parallel jobs are not supported on Spot"),
        (JobRequest("t", "gpu", "train", array_size=1), "array_size: 1 is outside 2..10,000"),
        (JobRequest("t", "gpu", "train", array_size=10_001), "array_size: 10001 is outside 2..10,000"),
        (JobRequest("t$(id)", "gpu", "train"), "name: 't$(id)' is not a Batch job name"),
        (JobRequest("-t", "gpu", "train"), "name: '-t' is not a Batch job name"),
        (JobRequest("t" * 129, "gpu", "train"), "is not a Batch job name"),
        (
            JobRequest("t", "gpu", "train", environment={"X=$(id)": "1"}),
            "environment: 'X=$(id)' is not a variable",
        ),
        (JobRequest("t", "gpu", "train", environment={"AWS_BATCH_JOB_ID": "x"}), "a prefix Batch reserves"),
        (JobRequest("t", "gpu", "train", command=("a\x00b",)), "command: every argument must be a string"),
        (JobRequest("t", "gpu", "train", tags={"aws:x": "y"}), "tags: 'aws:x' starts with aws:"),
        (
            JobRequest("t", "gpu", "train", environment={"CONFIG": "x" * 31_000}),
            "over AWS Batch's 30,720-byte job payload limit",
        ),
    ],
)
def test_bad_input_is_refused_before_submitting(batch: Any, request_: JobRequest, named: str) -> None:
    with pytest.raises(
        BatchInputError, match=named.replace("$", r"\$").replace("(", r"\(").replace(")", r"\)")
    ):
        batch_jobs.submit(batch, request_)
    assert batch.submitted == []


def test_the_batch_host_refuses_a_payload_over_30_kib_as_aws_does(batch: Any) -> None:
    """The double holds SubmitJob to AWS's 30 KiB job payload (gpu_runner_testing/aws_limits.py), so a submit path that skipped
    the check above would fail here, not on a user's first large sweep."""
    fits = {"jobName": "payload-fits", "jobQueue": "gpu", "jobDefinition": "train",
            "containerOverrides": {"environment": [{"name": "CONFIG", "value": "x" * 29_000}]}}  # fmt: skip
    batch.submit_job(**fits)
    too_big = {**fits, "containerOverrides": {"environment": [{"name": "CONFIG", "value": "x" * 31_000}]}}
    with pytest.raises(ClientError) as refused:
        batch.submit_job(**too_big)
    assert refused.value.response["Error"]["Code"] == "ClientException"
    assert "at most 30720 bytes" in refused.value.response["Error"]["Message"]


def test_the_allowed_instance_types_are_the_queues() -> None:
    assert batch_jobs.instance_type_allowed("g5.2xlarge", ["g5"])  # a family allows its sizes
    assert batch_jobs.instance_type_allowed("g5.xlarge", ["g5.xlarge", "g4dn.xlarge"])
    assert not batch_jobs.instance_type_allowed("g5.2xlarge", ["g5.xlarge"])
    assert not batch_jobs.instance_type_allowed("g6.xlarge", ["g5", "optimal"])


# ---- What moto cannot run: a second attempt (it ignores retryStrategy). Answers checked against botocore's model.

BATCH_MODEL = botocore.session.get_session().get_service_model("batch")
LOGS_MODEL = botocore.session.get_session().get_service_model("logs")
HOST_LOST = "Host EC2 (instance i-0123456789abcdef0) terminated."  # the batch host's own words too


def conforming(model: Any, operation: str, answer: dict[str, Any]) -> dict[str, Any]:
    """The answer, once botocore's service model accepts it as `operation`'s output (else ParamValidationError)."""
    validate_parameters(answer, model.operation_model(operation).output_shape)
    return answer


class FakeBatch:
    """DescribeJobs answers in order (the last repeats), each validated; TerminateJob recorded."""

    def __init__(self, answers: list[dict[str, Any]]) -> None:
        self.answers = [conforming(BATCH_MODEL, "DescribeJobs", {"jobs": [a]}) for a in answers]
        self.calls = 0

    def describe_jobs(self, jobs: list[str]) -> dict[str, Any]:
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        return answer


class FakeLogs:
    """GetLogEvents over fixed streams, with CloudWatch's token rule: the same token back at the end."""

    def __init__(self, streams: dict[str, list[str]]) -> None:
        self.streams = streams

    def get_log_events(self, logGroupName: str, logStreamName: str, startFromHead: bool,
                       nextToken: str = "") -> dict[str, Any]:  # fmt: skip
        messages = self.streams.get(logStreamName, [])
        start = int(nextToken.split("/")[-1]) if nextToken else 0
        events = [
            {"timestamp": i, "message": m, "ingestionTime": i} for i, m in enumerate(messages[start:], start)
        ]
        token = f"f/{len(messages)}"
        return conforming(LOGS_MODEL, "GetLogEvents", {"events": events, "nextForwardToken": token,
                                                        "nextBackwardToken": "b/0"})  # fmt: skip


def attempt(
    stream: str, started: int, stopped: int | None = None, reason: str = "", task: str = "0" * 32
) -> dict[str, Any]:
    out: dict[str, Any] = {"container": {"logStreamName": stream, "containerInstanceArn": "arn:aws:ecs:us-east-1:"
                                         "123456789012:container-instance/c/1",
                                         "taskArn": f"arn:aws:ecs:us-east-1:123456789012:task/c/{task}"},
                           "startedAt": started}  # fmt: skip
    if stopped:
        out |= {"stoppedAt": stopped, "statusReason": reason}
    return out


def job(status: str, attempts: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
    current = attempts[-1].get("container", {}).get("logStreamName") if attempts else None
    return {"jobId": "j-1", "jobName": "train", "jobQueue": "gpu", "jobDefinition": "train:1", "status": status,
            "startedAt": 1, "attempts": attempts, "container": {"logStreamName": current} if current else {},
            **more}  # fmt: skip


def test_a_spot_reclaim_is_reported_and_the_wait_follows_the_retry(logged: Callable[[], list[str]]) -> None:
    """Batch's retryStrategy (attempts 2, evaluateOnExit onStatusReason "Host EC2*" RETRY) starts attempt 2 on a
    new host after attempt 1's was reclaimed; moto cannot (it stores retryStrategy and runs one attempt), so the
    answers below are DescribeJobs answers as Batch gives them, each accepted by botocore's service model."""
    first, lost = attempt("train/default/a1", 1000), attempt("train/default/a1", 1000, 61_000, HOST_LOST)
    second = attempt("train/default/a2", 90_000)
    batch = FakeBatch([
        job("RUNNING", [first]), job("RUNNABLE", [lost]), job("RUNNING", [lost, second]),
        job("SUCCEEDED", [lost, attempt("train/default/a2", 90_000, 150_000, "Essential container in task exited")]),
    ])  # fmt: skip
    logs = FakeLogs(
        {"train/default/a1": ["epoch 1", "epoch 2"], "train/default/a2": ["resumed at epoch 2", "done"]}
    )
    lines: list[str] = []

    outcome = batch_wait.wait(batch, logs, "j-1", poll_seconds=0, emit=lines.append, sleep=lambda _: None)

    assert (outcome.status, outcome.exit_code, outcome.interrupted) == ("SUCCEEDED", 0, False)
    assert lines == ["[job] epoch 1", "[job] epoch 2", "[job] resumed at epoch 2", "[job] done"]
    said = logged()
    assert any("attempt 1 interrupted: its host i-0123456789abcdef0 was terminated" in line for line in said)
    assert said.index("RUNNABLE") < said.index("SUCCEEDED")


def test_each_attempts_task_is_reported_once_as_soon_as_it_is_seen() -> None:
    """The retry's resume restores the checkpoint of the attempt before it, whose task's role session wrote it
    (checkpoints/<role id>:<task id>/): `batch wait` reports each task the first time an answer shows it, so the
    record (checkpoint_owners.py) exists while the retry starts."""
    t1, t2 = "1" * 32, "2" * 32
    first, lost = attempt("a1", 1000, task=t1), attempt("a1", 1000, 61_000, HOST_LOST, task=t1)
    second = attempt("a2", 90_000, task=t2)
    batch = FakeBatch([job("RUNNING", [first]), job("RUNNABLE", [lost]), job("RUNNING", [lost, second]),
                       job("SUCCEEDED", [lost, attempt("a2", 90_000, 150_000, "exited", task=t2)])])  # fmt: skip
    reported: list[tuple[int, list[str]]] = []

    batch_wait.wait(batch, FakeLogs({}), "j-1", emit=lambda _: None, sleep=lambda _: None,
                    on_tasks=lambda tasks: reported.append((batch.calls, tasks)))  # fmt: skip

    assert reported == [(1, [t1]), (3, [t2])]  # t1 at the first answer, before the retry's attempt exists


def test_every_line_of_a_multi_line_event_is_labelled() -> None:
    batch = FakeBatch([job("SUCCEEDED", [attempt("s", 1000, 2000)])])
    logs = FakeLogs({"s": ["one\n::add-mask::x\r\n  ::stop-commands::t"]})
    lines: list[str] = []

    batch_wait.wait(batch, logs, "j-1", emit=lines.append, sleep=lambda _: None)

    assert lines == ["[job] one", "[job] ::add-mask::x", "[job]   ::stop-commands::t"]


def test_a_reclaim_without_a_retry_left_is_an_interruption() -> None:
    lost = attempt("s", 1000, 61_000, HOST_LOST)
    batch = FakeBatch([job("FAILED", [lost], statusReason=HOST_LOST)])

    outcome = batch_wait.wait(batch, FakeLogs({}), "j-1", emit=lambda _: None, sleep=lambda _: None)

    assert outcome.exit_code == batch_wait.EXIT_INTERRUPTED
    assert (outcome.interrupted, outcome.reason) == (True, HOST_LOST)


def test_the_double_answers_are_checked_against_botocores_model() -> None:
    with pytest.raises(ParamValidationError):  # the check bites: attempts is a list, startedAt a number
        conforming(BATCH_MODEL, "DescribeJobs", {"jobs": [job("RUNNING", [{"startedAt": "yesterday"}])]})
    with pytest.raises(ParamValidationError):
        conforming(BATCH_MODEL, "DescribeJobs", {"jobs": [{"jobId": "j-1"}]})  # jobName, status... required


def test_the_cost_of_an_attempt_is_its_duration_times_the_price(batch: Any, logs: Any) -> None:
    outcome, _ = run_job(batch, logs, JobRequest("train-priced", "gpu-mnp", "train-mnp"))
    [ran] = outcome.job["attempts"]
    # Priced from the bundled-table form only: no AWS price source answers for the moto account.
    table = {"as_of": "2026-12", "regions": {REGION: {"on_demand_usd_per_hour": {"g5.xlarge": 1.006},
                                                      "gp3_usd_per_gb_month": 0.08}}}  # fmt: skip

    costs = job_costs(Aws(), outcome.job, region=REGION, volume_gb=30, fallback_type="g5.xlarge", table=table)

    seconds = math.ceil((ran["stoppedAt"] - ran["startedAt"]) / 1000)
    # Two nodes, two instances, one attempt: one record of both (MLflow keeps one per attempt and step).
    [priced] = costs
    assert (priced.slot, priced.attempt, priced.nodes) == ("", 1, 2)
    cost = priced.cost
    assert (cost.instance_type, cost.market, cost.billed_seconds) == ("g5.xlarge", "on-demand", 2 * seconds)
    assert cost.instance_usd == pytest.approx(cost.price.usd * 2 * seconds / 3600)
    assert cost.price.usd > 0


@pytest.mark.parametrize(
    ("matrix", "children", "message"),
    [
        ('{"include": [{"trial": 3, "attempt": 1}]}', 2, "1 legs for an array job of 2 children"),
        ('{"include": [{"trial": -1, "attempt": 1}]}', 1, "is not a trial >= 0"),
        ('{"include": [{"trial": "3", "attempt": 1}]}', 1, "is not a trial >= 0"),
        ('{"include": [{"trial": 3, "attempt": 0}]}', 1, "attempt >= 1"),
        ('{"include": [{"trial": 3}]}', 1, "not sweep plan's matrix"),
        ("[3, 5]", 2, "not sweep plan's matrix"),
        ("3,5", 2, "not sweep plan's matrix"),
    ],
)
def test_a_sweep_matrix_that_does_not_describe_the_array_job_is_refused(
    matrix: str, children: int, message: str
) -> None:
    """The plan job runs the branch's code: its matrix output is checked before it says where a cost goes."""
    with pytest.raises(SweepMatrixError, match=message):
        sweep_legs(matrix, children)
    assert sweep_legs('{"include":[{"trial":3,"attempt":2},{"trial":5,"attempt":1}]}', 2) == [
        SweepLeg(3, 2),
        SweepLeg(5, 1),
    ]


def test_a_planned_wave_is_one_submission(batch_cli: list[str], tmp_path: Path) -> None:
    """batch.yml's `batch sweep-wave`: the trials in the plan's order (child i trains the i-th) and the array
    size, a single job (size 0) for one trial; a matrix that cannot be one submission is refused by name."""
    assert wave_request(
        '{"include":[{"trial":3,"attempt":1},{"trial":5,"attempt":2},{"trial":4,"attempt":1}]}'
    ) == (
        "3,5,4",
        3,
    )
    assert wave_request('{"include":[{"trial":7,"attempt":2}]}') == ("7", 0)
    for matrix, message in (
        ('{"include": []}', "no trial planned"),
        ('{"include":[{"trial":3,"attempt":1},{"trial":3,"attempt":2}]}', "a trial twice in one wave"),
        ("not json", "not sweep plan's matrix"),
        ('{"include":[{"trial":"3; touch pwned","attempt":1}]}', "is not a trial >= 0"),
    ):
        with pytest.raises(SweepMatrixError, match=message):
            wave_request(matrix)
    # The CLI writes both outputs, and refuses a bad matrix with exit 1 and nothing written.
    assert (
        cli.main(
            [
                *batch_cli,
                "sweep-wave",
                '--sweep-matrix={"include":[{"trial":0,"attempt":1},{"trial":1,"attempt":1}]}',
            ]
        )
        == 0
    )
    assert (tmp_path / "github-output").read_text().splitlines() == ["trials=0,1", "array-size=2"]
    assert cli.main([*batch_cli, "sweep-wave", '--sweep-matrix={"include": []}']) == 1
    assert (tmp_path / "github-output").read_text().splitlines() == ["trials=0,1", "array-size=2"]


ECS_MODEL = botocore.session.get_session().get_service_model("ecs")


class FakeEcs:
    """DescribeContainerInstances of one container instance of a cluster, the answer checked against the model."""

    def __init__(self, cluster: str, instance_type: str, zone: str) -> None:
        self.cluster = cluster
        self.attributes = {"ecs.instance-type": instance_type, "ecs.availability-zone": zone}

    def describe_container_instances(self, cluster: str, containerInstances: list[str]) -> dict[str, Any]:
        found = [{"containerInstanceArn": arn, "attributes": [{"name": k, "value": v} for k, v in
                  self.attributes.items()]} for arn in containerInstances if cluster == self.cluster]  # fmt: skip
        return conforming(
            ECS_MODEL, "DescribeContainerInstances", {"containerInstances": found, "failures": []}
        )


def test_the_instance_type_is_the_container_instances_then_the_queues_then_the_fallback() -> None:
    ran = attempt("s", 1000, 2000)  # its containerInstanceArn is an ECS ARN
    spot = {"computeEnvironmentName": "a", "ecsClusterArn": "arn:aws:ecs:us-east-1:123456789012:cluster/a",
            "computeResources": {"type": "SPOT", "instanceTypes": ["g5", "g6"]}}  # fmt: skip
    one_type = {
        "computeEnvironmentName": "b",
        "computeResources": {"type": "EC2", "instanceTypes": ["g6.xlarge"]},
    }

    ecs = FakeEcs(spot["ecsClusterArn"], "g5.2xlarge", "us-east-1b")
    assert instance_of(ecs, ran, [spot], "g4dn.xlarge") == ("g5.2xlarge", "us-east-1b", "spot")
    nowhere = FakeEcs("arn:aws:ecs:us-east-1:123456789012:cluster/other", "g5.2xlarge", "us-east-1b")
    assert instance_of(nowhere, ran, [one_type], "g4dn.xlarge") == ("g6.xlarge", "", "on-demand")
    assert instance_of(nowhere, ran, [spot], "g4dn.xlarge") == ("g4dn.xlarge", "", "spot")  # families only
    assert instance_of(nowhere, ran, [spot]) is None  # not priced rather than priced as a guess


def test_billed_seconds_round_up_and_need_both_times() -> None:
    assert billed_seconds({"startedAt": 1_000, "stoppedAt": 3_601_500}) == 3601
    assert billed_seconds({"startedAt": 1_000}) is None


@pytest.fixture
def batch_cli(batch: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """`gpu-runner --settings <a batch project's settings> batch` as a workflow step runs it: GITHUB_REPOSITORY
    set, step outputs to tmp_path/github-output (job_id_output reads the job id back)."""
    settings = tmp_path / "gpu-runner.yaml"
    settings.write_text(yaml.safe_dump({"project": "demo", "region": REGION, "instance_types": ["g5.xlarge"],
                                        "backend": "batch"}))  # fmt: skip
    monkeypatch.setenv("GITHUB_REPOSITORY", "octo/demo")
    monkeypatch.setenv("GITHUB_OUTPUT", str(tmp_path / "github-output"))
    return ["--settings", str(settings), "batch"]


def job_id_output(tmp_path: Path) -> str:
    """The job-id step output the last `batch submit` wrote."""
    key, _, job_id = (tmp_path / "github-output").read_text().strip().rpartition("\n")[2].partition("=")
    assert key == "job-id", key
    return job_id


def test_the_cli_wait_records_the_jobs_task_as_this_branchs(
    batch: Any, batch_cli: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """batch.yml's wait step (`--bucket --commit`): the job's task is recorded under this run's branch and commit,
    where the next attempt's resume looks (checkpoint_owners.py); a malformed commit only warns."""
    bucket, commit = f"owners-{uuid.uuid4().hex[:8]}", "d" * 40
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket=bucket)  # REGION is us-east-1: no location constraint
    monkeypatch.setenv("GITHUB_REF_NAME", "train/batch")
    for given, recorded in ((commit, True), ("not-a-commit", False)):
        assert cli.main([*batch_cli, "submit", "--queue", "gpu", "--job-definition", "train", "--name", "owned",
                         "--", PY, "-c", "pass"]) == 0  # fmt: skip
        job_id = job_id_output(tmp_path)
        assert cli.main([*batch_cli, "wait", "--job-id", job_id, "--poll-seconds", "0.2", "--timeout", "120",
                         "--bucket", bucket, "--commit", given]) == 0  # fmt: skip
        [described] = batch_jobs.describe(batch, [job_id])
        task = described["attempts"][-1]["container"]["taskArn"].rsplit("/", 1)[-1]
        listed = s3.list_objects_v2(Bucket=bucket, Prefix="checkpoints/owners/").get("Contents", [])
        keys = {o["Key"] for o in listed}
        assert (f"checkpoints/owners/train%2Fbatch/{commit}/{task}" in keys) == recorded, keys


def test_the_cli_submits_waits_and_cancels(
    batch: Any, batch_cli: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = batch_cli
    code = "import os; print('from the cli', os.environ['A'])"

    # A --tag cannot replace the stack's tag: the submit role may end only the jobs tagged as its stack's.
    assert cli.main([*common, "submit", "--queue", "gpu", "--job-definition", "train", "--name", "cli-job",
                     "--instance-type", "g5.xlarge", "--env", "A=1=2", "--tag", f"{JOB_TAG_KEY}=other-stack",
                     "--", PY, "-c", code]) == 0  # fmt: skip
    job_id = job_id_output(tmp_path)
    [described] = batch_jobs.describe(batch, [job_id])
    stack_tag = {JOB_TAG_KEY: batch_stack_name("demo", "octo/demo")}
    assert described["tags"] == {"project": "demo", **stack_tag}
    assert described["container"]["command"] == [PY, "-c", code]
    assert cli.main([*common, "wait", "--job-id", job_id, "--poll-seconds", "0.2", "--timeout", "120"]) == 0
    out = capsys.readouterr().out
    assert "[job] from the cli 1=2" in out
    assert (
        "**GPU cost (attempt 1)**" in out and "g5.xlarge spot" in out
    )  # the queue's compute environment is SPOT
    assert cli.main([*common, "cancel", "--job-id", job_id]) == 0  # already over: nothing to do, no error
    assert "already SUCCEEDED" in capsys.readouterr().out

    assert cli.main([*common, "submit", "--queue", "gpu", "--job-definition", "train", "--name", "x;y"]) == 1
    assert "name: 'x;y' is not a Batch job name" in capsys.readouterr().err
    # Without --queue, the stack's own queue (none on this host: refused before SubmitJob, by its name).
    stack = batch_stack_name("demo", "octo/demo")
    assert cli.main([*common, "submit", "--name", "default-queue", "--", PY, "-c", "pass"]) == 1
    assert f"'{stack}-gpu' does not exist" in capsys.readouterr().err
    assert (
        cli.main([*common, "submit", "--multinode", "--name", "default-queue", "--", PY, "-c", "pass"]) == 1
    )
    assert f"'{stack}-multinode' does not exist" in capsys.readouterr().err


def test_backend_is_runner_or_batch() -> None:
    base = {"project": "demo", "region": REGION, "instance_types": ("g5.xlarge",)}
    assert Settings(**base).backend == "runner"
    assert Settings(**base, backend="batch").backend == "batch"
    with pytest.raises(SettingsError, match="backend: 'kubernetes' is not one of runner, batch"):
        Settings(**base, backend="kubernetes")


def test_a_batch_jobs_cost_reaches_the_cost_report_as_a_runner_runs_does(
    mlflow_server: str, batch: Any, batch_cli: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """The job trains into an MLflow run (MLflow resumes MLFLOW_RUN_ID, as the runner's stop job's run id is the
    training's), `batch wait --mlflow-run-id` logs the attempt's cost there with the runner backend's record
    (cost/accounting.log_to_mlflow), and `gpu-runner cost report`'s reader finds it beside the runner's runs."""
    client = MlflowClient(mlflow_server)
    experiment = f"batch-cost-{uuid.uuid4().hex[:8]}"
    run_id = client.create_run(client.create_experiment(experiment)).info.run_id
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    train = (
        "import mlflow, time; time.sleep(1.5)\n"
        f"with mlflow.start_run():\n    mlflow.log_metric({TRAINING_SECONDS!r}, 1.25, step=1)\n"
    )
    common = batch_cli
    assert cli.main([*common, "submit", "--queue", "gpu", "--job-definition", "train", "--name", "cost-job",
                     "--env", f"MLFLOW_TRACKING_URI={mlflow_server}", "--env", f"MLFLOW_RUN_ID={run_id}",
                     "--", PY, "-c", train]) == 0  # fmt: skip
    job_id = job_id_output(tmp_path)
    wait = [*common, "wait", "--job-id", job_id, "--mlflow-run-id", run_id, "--poll-seconds", "0.2",
            "--timeout", str(int(JOB_TIMEOUT))]  # fmt: skip
    assert cli.main(wait) == 0
    assert "**GPU cost (attempt 1)**" in capsys.readouterr().out
    [ran] = batch_jobs.describe(batch, [job_id])[0]["attempts"]

    runs, excluded = read_gpu_runs([experiment], 1, uri=mlflow_server)

    [found] = runs
    assert excluded == 0 and found.run_id == run_id and found.attempts == 1
    assert (found.instance_type, found.market) == ("g5.xlarge", "spot")  # the queue's environment is SPOT
    assert found.billed_seconds == billed_seconds(ran) >= 2 and found.training_seconds == 1.25
    assert found.cost_usd > 0 and found.overhead_seconds == found.billed_seconds - 1.25
    # The same metrics and tags as a runner run's record (the report reads nothing else).
    logged = client.get_run(run_id).data
    assert {BILLED_SECONDS, COST_USD, OVERHEAD_SECONDS, TRAINING_SECONDS} <= set(logged.metrics)
    assert (logged.tags[TAG_INSTANCE_TYPE], logged.tags[TAG_MARKET]) == ("g5.xlarge", "spot")
    # A re-run of the wait (a re-run of the workflow job) does not count the attempt twice.
    assert cli.main(wait) == 0
    assert read_gpu_runs([experiment], 1, uri=mlflow_server)[0][0].billed_seconds == found.billed_seconds


def test_a_one_trial_wave_is_a_single_job_whose_cost_goes_to_its_trials_run(
    mlflow_server: str, batch: Any, batch_cli: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """An array job has two children at least, so a wave of one trial is submitted as a single job: with the
    plan's one-leg matrix its cost goes to that trial's child run at the trial's attempt, never to the parent
    (whose sweep_cost_usd sweep collect sums from the children), nor to another trial's run."""
    client = MlflowClient(mlflow_server)
    experiment = client.create_experiment(f"batch-wave-{uuid.uuid4().hex[:8]}")
    parent = client.create_run(experiment).info.run_id
    child = client.create_run(experiment, tags={"mlflow.parentRunId": parent, "sweep.trial": "7"}).info.run_id
    other = client.create_run(
        experiment, tags={"mlflow.parentRunId": parent, "sweep.trial": "17"}
    ).info.run_id
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    common = batch_cli
    assert cli.main([*common, "submit", "--queue", "gpu", "--job-definition", "train", "--name", "wave-of-one",
                     "--", PY, "-c", "import time; time.sleep(1.2)"]) == 0  # fmt: skip
    job_id = job_id_output(tmp_path)
    wait = [*common, "wait", "--job-id", job_id, "--mlflow-run-id", parent, "--poll-seconds", "0.2"]

    assert cli.main([*wait, "--sweep-matrix", '{"include": [{"trial": 7, "attempt": 2}]}']) == 0

    assert "**GPU cost (attempt 2)**" in capsys.readouterr().out
    assert [m.step for m in client.get_metric_history(child, BILLED_SECONDS)] == [2]
    assert client.get_metric_history(parent, BILLED_SECONDS) == []
    assert client.get_metric_history(other, BILLED_SECONDS) == []
    # A matrix that does not describe the job (two legs for one job) logs nothing and says why; the job's result
    # stands.
    assert (
        cli.main(
            [
                *wait,
                "--sweep-matrix",
                '{"include": [{"trial": 7, "attempt": 3}, {"trial": 17, "attempt": 1}]}',
            ]
        )
        == 0
    )
    assert (
        "cost not logged to MLflow: --sweep-matrix: 2 legs for an array job of 1 children"
        in capsys.readouterr().out
    )
    assert [m.step for m in client.get_metric_history(child, BILLED_SECONDS)] == [2]
    assert client.get_metric_history(other, BILLED_SECONDS) == []
