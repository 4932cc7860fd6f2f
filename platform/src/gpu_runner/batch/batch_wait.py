"""Follow a submitted Batch job from the workflow job: each status change, the job's CloudWatch log lines as they
appear (every attempt's stream; an array job's children; a multi-node job's nodes), and the outcome as an exit code.

Exit codes: 0 SUCCEEDED; the container's exit code when the job FAILED with one (1 without); EXIT_INTERRUPTED
when the last attempt lost its host (a Spot reclaim that Batch's retryStrategy did not retry). An attempt whose host
was reclaimed is reported as an interruption; when Batch retries it, the wait follows the new attempt's stream.

Every job line is printed behind a label ("[job] ", "[3] ", "[node 1] "): a line is the branch's output, and
GitHub's runner reads a line starting with "::" (after leading spaces) as a workflow command, so no job line may
start one.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from gpu_runner.batch.batch_jobs import CANCEL_REASON, ENDED, array_children, describe
from gpu_runner.core.errors import RunnerError

log = logging.getLogger(__name__)

# What Batch writes as an attempt's statusReason when the instance under it went away (a Spot reclaim among them).
HOST_LOST = re.compile(r"Host EC2 \(instance (i-[0-9a-f]+)\) terminated\.")
EXIT_INTERRUPTED = 75  # EX_TEMPFAIL (sysexits.h): try again later
# Where the awslogs driver writes unless the job definition's logConfiguration says otherwise.
DEFAULT_LOG_GROUP = "/aws/batch/job"


@dataclass(frozen=True)
class Outcome:
    status: str
    exit_code: int
    reason: str
    interrupted: bool = False
    cancelled: bool = False
    job: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class _Tail:
    """One log stream read forward from its head; `token` is GetLogEvents' nextForwardToken."""

    label: str
    token: str | None = None


@dataclass
class _Follow:
    tails: dict[tuple[str, str], _Tail] = field(default_factory=dict)
    statuses: dict[str, str] = field(default_factory=dict)
    attempts_seen: dict[str, int] = field(default_factory=dict)


def log_group(job: Mapping[str, Any]) -> str:
    options = job.get("container", {}).get("logConfiguration", {}).get("options", {})
    return options.get("awslogs-group", DEFAULT_LOG_GROUP)


def streams_of(job: Mapping[str, Any]) -> Iterator[str]:
    """Every attempt's log stream, then the current one (a retried job has one per attempt), without repeats."""
    seen: set[str] = set()
    names = [a.get("container", {}).get("logStreamName") for a in job.get("attempts", [])]
    for name in [*names, job.get("container", {}).get("logStreamName")]:
        if name and name not in seen:
            seen.add(name)
            yield name


def members(batch: Any, job: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(label, job) of what runs: an array's children, a multi-node job's nodes (<id>#<node>), or the job itself."""
    job_id = job["jobId"]
    children = array_children(batch, job)
    if children:
        return [(f"[{c.get('arrayProperties', {}).get('index', c['jobId'].rsplit(':', 1)[-1])}] ", c)
                for c in children]  # fmt: skip
    out: list[tuple[str, dict[str, Any]]] = [("[job] ", dict(job))]
    nodes = job.get("nodeProperties", {}).get("numNodes")
    if nodes:
        out += [(f"[node {n['jobId'].rsplit('#', 1)[-1]}] ", n)
                for n in describe(batch, [f"{job_id}#{i}" for i in range(nodes)])]  # fmt: skip
    return out


def tasks_of(parts: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """The ECS task id of every attempt of each part (an attempt's container.taskArn, and the running one's; the
    id is the ARN's last part: arn:aws:ecs:<region>:<account>:task/<cluster>/<id>): the session name of the job
    role's credentials in that attempt (checkpoint_owners.py)."""
    arns = [
        container.get("taskArn", "")
        for _, part in parts
        for container in [
            *(a.get("container", {}) for a in part.get("attempts", [])),
            part.get("container", {}),
        ]
    ]
    return list(dict.fromkeys(arn.rsplit("/", 1)[-1] for arn in arns if arn))


def _read_new(logs: Any, group: str, stream: str, tail: _Tail) -> Iterator[str]:
    """The lines written since the last read. The end of the stream is where the token stops moving (GetLogEvents:
    "If you have reached the end of the stream, it returns the same token you passed in")."""
    while True:
        kwargs: dict[str, Any] = {"logGroupName": group, "logStreamName": stream, "startFromHead": True}
        if tail.token:
            kwargs["nextToken"] = tail.token
        try:
            reply = logs.get_log_events(**kwargs)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                return  # not written yet: the container has not logged anything
            raise
        for event in reply.get("events", []):
            # One event may hold several lines: each gets the label, or a line after the first could start a
            # workflow command (splitlines splits on every line break the runner might read as one).
            yield from event.get("message", "").splitlines() or [""]
        token = reply.get("nextForwardToken")
        if not token or token == tail.token:
            return
        tail.token = token


def _report(follow: _Follow, label: str, job: Mapping[str, Any]) -> None:
    job_id, status = job["jobId"], job.get("status", "")
    if follow.statuses.get(job_id) != status:
        follow.statuses[job_id] = status
        reason = f": {job['statusReason']}" if job.get("statusReason") else ""
        log.info("%s%s%s", label, status, reason)
    attempts = job.get("attempts", [])
    for number, attempt in enumerate(attempts[follow.attempts_seen.get(job_id, 0) :],
                                     start=follow.attempts_seen.get(job_id, 0) + 1):  # fmt: skip
        lost = HOST_LOST.search(attempt.get("statusReason", ""))
        if lost:
            log.info("%sattempt %s interrupted: its host %s was terminated (a Spot reclaim); Batch retries it as the "
                     "job definition's retryStrategy allows", label, number, lost.group(1))  # fmt: skip
    # An attempt counts as seen once it has stopped: a running one may still be interrupted.
    follow.attempts_seen[job_id] = sum(1 for a in attempts if a.get("stoppedAt"))


def _stream(
    follow: _Follow, logs: Any, label: str, job: Mapping[str, Any], emit: Callable[[str], None]
) -> None:
    group = log_group(job)
    for stream in streams_of(job):
        tail = follow.tails.setdefault((group, stream), _Tail(label))
        for line in _read_new(logs, group, stream, tail):
            emit(f"{tail.label}{line}")


def _done(job: Mapping[str, Any]) -> bool:
    if job.get("status") in ENDED:
        return True
    summary = job.get("arrayProperties", {}).get("statusSummary", {})
    size = job.get("arrayProperties", {}).get("size", 0)
    return bool(size) and summary.get("SUCCEEDED", 0) + summary.get("FAILED", 0) == size


def outcome_of(job: Mapping[str, Any], parts: list[tuple[str, dict[str, Any]]]) -> Outcome:
    """The job's result as the workflow job's: an array job fails when any child failed."""
    size = job.get("arrayProperties", {}).get("size")
    if size and "index" not in job.get("arrayProperties", {}):
        failed = [label.strip() for label, child in parts if child.get("status") == "FAILED"]
        if not failed and job.get("status") != "FAILED":
            return Outcome("SUCCEEDED", 0, "", job=job)
        reason = job.get("statusReason") or f"{len(failed)} of {size} children failed: {', '.join(failed)}"
        # Cancelled: the parent was, or every failed child was (cancel terminates the children one by one).
        children_cancelled = [
            child.get("statusReason", "").startswith(CANCEL_REASON)
            for _, child in parts
            if child.get("status") == "FAILED"
        ]
        cancelled = reason.startswith(CANCEL_REASON) or (bool(children_cancelled) and all(children_cancelled))
        return Outcome("FAILED", 1, reason, cancelled=cancelled, job=job)
    if job.get("status") == "SUCCEEDED":
        return Outcome("SUCCEEDED", 0, "", job=job)
    attempts = job.get("attempts", [])
    last = attempts[-1] if attempts else {}
    reason = (
        job.get("statusReason") or last.get("statusReason") or last.get("container", {}).get("reason", "")
    )
    cancelled = reason.startswith(CANCEL_REASON)
    interrupted = bool(HOST_LOST.search(last.get("statusReason", "") or reason)) and not cancelled
    code = job.get("container", {}).get("exitCode") or last.get("container", {}).get("exitCode") or 1
    return Outcome("FAILED", EXIT_INTERRUPTED if interrupted else code, reason or "no reason given",
                   interrupted=interrupted, cancelled=cancelled, job=job)  # fmt: skip


def wait(
    batch: Any,
    logs: Any,
    job_id: str,
    *,
    poll_seconds: float = 5.0,
    timeout_seconds: float | None = None,
    emit: Callable[[str], None] = print,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    on_tasks: Callable[[list[str]], None] | None = None,
) -> Outcome:
    """Poll until the job ends, printing status changes and its log lines; returns the outcome. `on_tasks` is
    told the ECS task id of each attempt of the job (of each child, each node) once, as soon as it is seen."""
    follow = _Follow()
    tasks_seen: set[str] = set()
    deadline = None if timeout_seconds is None else clock() + timeout_seconds
    while True:
        found = describe(batch, [job_id])
        if not found:
            raise RunnerError(f"job_id: no Batch job {job_id} in this region (was it submitted elsewhere?)")
        job = found[0]
        _report(follow, "", job)
        parts = members(batch, job)
        for label, part in parts:
            if part["jobId"] != job_id:
                _report(follow, label, part)
            _stream(follow, logs, label, part, emit)
        if on_tasks is not None:
            new = [task for task in tasks_of(parts) if task not in tasks_seen]
            if new:
                tasks_seen.update(new)
                on_tasks(new)
        if _done(job):
            outcome = outcome_of(job, parts)
            if outcome.status == "SUCCEEDED":
                log.info("job %s SUCCEEDED", job_id)
            else:
                what = (
                    "cancelled" if outcome.cancelled else "interrupted" if outcome.interrupted else "FAILED"
                )
                log.info("job %s %s (exit code %s): %s", job_id, what, outcome.exit_code, outcome.reason)
            return outcome
        if deadline is not None and clock() > deadline:
            raise RunnerError(
                f"job {job_id} still {job.get('status')} after {timeout_seconds:.0f} s; it keeps running: "
                "`gpu-runner batch cancel` ends it"
            )
        sleep(poll_seconds)
