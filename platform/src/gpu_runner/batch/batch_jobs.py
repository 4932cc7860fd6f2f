"""The AWS Batch backend (`backend: batch`): submit a training job to a queue and cancel it. Waiting, log streaming
and the outcome are in batch_wait.py, the cost of its attempts in batch_cost.py.

Everything the request says is checked before SubmitJob, and each refusal names the field and the fix: the queue
(exists, ENABLED and VALID), the instance type (one the queue's compute environments may launch), a multi-node
definition on a queue with Spot capacity, the array size, the job name, the environment and the tags.

Sources (read 2026-12-04):
- [submit-model] botocore data batch/2016-08-10/service-2.json, SubmitJobRequest.jobName: "It can be up to 128
  letters long. The first character must be alphanumeric, can contain uppercase and lowercase letters, numbers,
  hyphens (-), and underscores (_)."; ContainerOverrides.environment: "Environment variables cannot start with
  AWS_BATCH. This naming convention is reserved for variables that Batch sets."
- [array] "The array size can be between 2 and 10,000. If you specify array properties for a job, it becomes an
  array job." (docs.aws.amazon.com/eventbridge/latest/pipes-reference/API_BatchArrayProperties.html; the same
  words on the Batch target of EventBridge and AWS::Events::Rule BatchArrayProperties).
- [quotas] AWS Batch User Guide, "Resource: AWS Batch service quotas" (batch/latest/userguide/service_limits.html):
  "Maximum job payload size (for SubmitJob API operations) 30 KiB", not adjustable.
- [mnp-ce] AWS Batch User Guide, "Compute environment considerations for MNP" (batch/latest/userguide/
  mnp-ce.html): "Multi-node parallel jobs aren't supported on compute environments that use Spot Instances." and
  "Multi-node parallel jobs aren't supported on UNMANAGED compute environments."
"""

from __future__ import annotations

import json
import logging
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpu_runner.core.errors import RunnerError, SettingsError

log = logging.getLogger(__name__)

JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")  # [submit-model]
ARRAY_MIN, ARRAY_MAX = 2, 10_000  # [array]
SUBMIT_PAYLOAD_MAX_BYTES = 30 * 1024  # [quotas]
RESERVED_ENV_PREFIX = "AWS_BATCH"  # [submit-model]
# A POSIX shell can export only such names; anything else (a '=', a space, a '$(...)') is refused, never quoted.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")
MAX_TAGS = 50  # AWS's common tag limit; aws: keys are AWS's own
SPOT_TYPES = ("SPOT", "FARGATE_SPOT")
ENDED = ("SUCCEEDED", "FAILED")
DESCRIBE_MAX = 100  # DescribeJobs takes at most 100 job ids
# Why a job is cancelled when the workflow is: TerminateJob's reason, shown as the job's statusReason.
CANCEL_REASON = "cancelled with its GitHub Actions run"
# Each multi-node job's own secret for its rendezvous (the project's distributed.py RENDEZVOUS_SECRET, which says
# why it travels in SubmitJob's node overrides and who can read it there). Drawn here, per submission: 256 bits.
RENDEZVOUS_SECRET = "MNP_RENDEZVOUS_SECRET"
RENDEZVOUS_SECRET_BYTES = 32


class BatchInputError(SettingsError):
    """A submit request AWS Batch would refuse or misplace: nothing was submitted."""


@dataclass(frozen=True)
class JobRequest:
    """One submission. `command` and `environment` come from the branch's code: they go to AWS as a list and a
    mapping, never through a shell string."""

    name: str
    queue: str
    definition: str
    command: tuple[str, ...] = ()
    environment: Mapping[str, str] = field(default_factory=dict)
    array_size: int = 0  # 0: not an array job; a sweep is one array job, one child per trial
    instance_type: str = ""  # "" = whatever the queue picks; else it must be one the queue may launch
    tags: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Submitted:
    job_id: str
    job_name: str
    multi_node: bool


def _first(items: Sequence[Mapping[str, Any]], what: str, name: str, fix: str) -> Mapping[str, Any]:
    if not items:
        raise BatchInputError(f"{what}: '{name}' does not exist; {fix}")
    return items[0]


def request_problems(request: JobRequest) -> list[str]:
    """What is wrong with the request itself (no AWS call): each line names the field and the fix."""
    out: list[str] = []
    if not JOB_NAME.fullmatch(request.name):
        out.append(
            f"name: {request.name!r} is not a Batch job name: 1-128 letters, digits, '-' and '_', starting with a "
            "letter or digit"
        )
    if request.array_size and not ARRAY_MIN <= request.array_size <= ARRAY_MAX:
        out.append(
            f"array_size: {request.array_size} is outside {ARRAY_MIN}..{ARRAY_MAX:,} (AWS Batch's array sizes); "
            "0 submits a single job, a larger sweep needs several array jobs"
        )
    for key, value in request.environment.items():
        if not ENV_NAME.fullmatch(key):
            out.append(
                f"environment: {key!r} is not a variable name (letters, digits, '_', not first a digit)"
            )
        elif key.upper().startswith(RESERVED_ENV_PREFIX):
            out.append(
                f"environment: {key} starts with {RESERVED_ENV_PREFIX}, a prefix Batch reserves; rename it"
            )
        if not isinstance(value, str) or "\x00" in value:
            out.append(f"environment: the value of {key!r} must be a string without NUL bytes")
    if any(not isinstance(arg, str) or "\x00" in arg for arg in request.command):
        out.append("command: every argument must be a string without NUL bytes")
    if len(request.tags) > MAX_TAGS:
        out.append(f"tags: {len(request.tags)} tags, at most {MAX_TAGS}")
    out += [f"tags: {key!r} starts with aws:, a prefix AWS reserves" for key in request.tags
            if key.lower().startswith("aws:")]  # fmt: skip
    return out


def instance_type_allowed(instance_type: str, allowed: Sequence[str]) -> bool:
    """A managed compute environment's instanceTypes lists types (g5.xlarge) or whole families (g5)."""
    family = instance_type.split(".", 1)[0]
    return instance_type in allowed or family in allowed


def _queue(batch: Any, name: str) -> Mapping[str, Any]:
    queues = batch.describe_job_queues(jobQueues=[name])["jobQueues"]
    queue = _first(
        queues, "queue", name, "give the JobQueue output of `gpu-runner batch up` (its name or ARN)"
    )
    if queue.get("state") != "ENABLED" or queue.get("status") != "VALID":
        raise BatchInputError(
            f"queue: '{name}' is {queue.get('state')}/{queue.get('status')} "
            f"({queue.get('statusReason', 'no reason given')}); it must be ENABLED and VALID: run "
            "`gpu-runner batch up` again or enable it"
        )
    return queue


def compute_environments(batch: Any, queue: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The queue's compute environments, in the queue's order."""
    order = sorted(queue.get("computeEnvironmentOrder", []), key=lambda entry: entry.get("order", 0))
    arns = [entry["computeEnvironment"] for entry in order]
    if not arns:
        return []
    found = {ce["computeEnvironmentArn"]: ce for ce in
             batch.describe_compute_environments(computeEnvironments=arns)["computeEnvironments"]}  # fmt: skip
    return [found[arn] for arn in arns if arn in found]


def _definition(batch: Any, name: str) -> Mapping[str, Any]:
    # A name alone means its latest ACTIVE revision (SubmitJob's own reading of a name without :revision).
    if name.startswith("arn:") or ":" in name:
        found = batch.describe_job_definitions(jobDefinitions=[name])["jobDefinitions"]
    else:
        found = batch.describe_job_definitions(jobDefinitionName=name, status="ACTIVE")["jobDefinitions"]
    found = sorted(found, key=lambda d: d.get("revision", 0), reverse=True)
    definition = _first(found, "definition", name, "give the JobDefinition output of `gpu-runner batch up`")
    if definition.get("status", "ACTIVE") != "ACTIVE":
        raise BatchInputError(f"definition: '{name}' is {definition['status']}; register it again")
    return definition


def check_placement(request: JobRequest, environments: Sequence[Mapping[str, Any]], multi_node: bool) -> None:
    """Refuse what the queue cannot run: a type none of its compute environments launches, multi-node on Spot."""
    if request.instance_type:
        allowed = sorted(
            {t for ce in environments for t in ce.get("computeResources", {}).get("instanceTypes", [])}
        )
        if not instance_type_allowed(request.instance_type, allowed):
            raise BatchInputError(
                f"instance_type: {request.instance_type} is not among the instance types of queue "
                f"'{request.queue}' ({', '.join(allowed) or 'none'}); pick one of them or add it to the compute "
                "environment (gpu_runner/batch/batch.yaml)"
            )
    if multi_node:
        spot = [ce["computeEnvironmentName"] for ce in environments
                if ce.get("computeResources", {}).get("type") in SPOT_TYPES]  # fmt: skip
        unmanaged = [ce["computeEnvironmentName"] for ce in environments if ce.get("type") == "UNMANAGED"]
        if spot:
            raise BatchInputError(
                f"queue: '{request.queue}' has Spot compute environments ({', '.join(spot)}) and multi-node "
                "parallel jobs are not supported on Spot; submit it to the MultiNodeJobQueue (on-demand)"
            )
        if unmanaged:
            raise BatchInputError(
                f"queue: '{request.queue}' has UNMANAGED compute environments ({', '.join(unmanaged)}), which "
                "cannot run multi-node parallel jobs; use the MultiNodeJobQueue"
            )


def submit_arguments(request: JobRequest, definition: Mapping[str, Any]) -> dict[str, Any]:
    """SubmitJob's parameters: the command as a list and the environment as name/value pairs (never a shell line)."""
    overrides: dict[str, Any] = {}
    if request.command:
        overrides["command"] = list(request.command)
    if request.environment:
        overrides["environment"] = [{"name": k, "value": v} for k, v in sorted(request.environment.items())]
    arguments: dict[str, Any] = {
        "jobName": request.name,
        "jobQueue": request.queue,
        "jobDefinition": definition["jobDefinitionArn"],
        # The job's tags go on to the ECS task it runs as (cost allocation by project and run).
        "propagateTags": True,
    }
    if request.tags:
        arguments["tags"] = dict(request.tags)
    if definition.get("type") == "multinode":
        if overrides:
            arguments["nodeOverrides"] = {
                "nodePropertyOverrides": [{"targetNodes": "0:", "containerOverrides": overrides}]
            }
    elif overrides:
        arguments["containerOverrides"] = overrides
    if request.array_size:
        arguments["arrayProperties"] = {"size": request.array_size}
    return arguments


def submit(batch: Any, request: JobRequest) -> Submitted:
    """Check the request, then SubmitJob. A BatchInputError means nothing was submitted."""
    problems = request_problems(request)
    if problems:
        raise BatchInputError("invalid Batch job:\n" + "\n".join(f"  {p}" for p in problems))
    queue = _queue(batch, request.queue)
    definition = _definition(batch, request.definition)
    multi_node = definition.get("type") == "multinode"
    if multi_node and request.array_size:
        raise BatchInputError(
            "array_size: a multi-node job cannot also be an array job; submit one or the other"
        )
    check_placement(request, compute_environments(batch, queue), multi_node)
    if RENDEZVOUS_SECRET in request.environment:
        raise BatchInputError(
            f"environment: {RENDEZVOUS_SECRET} is drawn by `batch submit` for each multi-node job; a value given "
            "on the command line would sit in the workflow file and its log: remove it"
        )
    if multi_node:
        # Never logged or printed: the nodes read it from their environment, nobody else needs it.
        secret = secrets.token_urlsafe(RENDEZVOUS_SECRET_BYTES)
        request = replace(request, environment={**request.environment, RENDEZVOUS_SECRET: secret})
    arguments = submit_arguments(request, definition)
    # The body botocore sends is this JSON (rest-json, default separators): measure it as AWS will.
    size = len(json.dumps(arguments).encode())
    if size > SUBMIT_PAYLOAD_MAX_BYTES:
        raise BatchInputError(
            f"command/environment: the SubmitJob request is {size:,} bytes, over AWS Batch's {SUBMIT_PAYLOAD_MAX_BYTES:,}"
            "-byte job payload limit; put large values in S3 (s3://<bucket>/...) and pass their URI"
        )
    reply = batch.submit_job(**arguments)
    kind = f"array job of {request.array_size}" if request.array_size else "job"
    kind = "multi-node job" if multi_node else kind
    log.info("submitted %s %s (%s) to %s", kind, reply["jobName"], reply["jobId"], request.queue)
    return Submitted(reply["jobId"], reply["jobName"], multi_node)


def describe(batch: Any, job_ids: list[str]) -> list[dict[str, Any]]:
    """DescribeJobs for any number of ids (it takes at most 100 a call)."""
    found: list[dict[str, Any]] = []
    for start in range(0, len(job_ids), DESCRIBE_MAX):
        found += batch.describe_jobs(jobs=job_ids[start : start + DESCRIBE_MAX])["jobs"]
    return found


def array_children(batch: Any, job: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An array parent's children (<parent id>:<index>), described; [] for any other job."""
    properties = job.get("arrayProperties", {})
    if not properties.get("size") or "index" in properties:
        return []
    return describe(batch, [f"{job['jobId']}:{i}" for i in range(properties["size"])])


def cancel(batch: Any, job_id: str, reason: str = CANCEL_REASON) -> str:
    """TerminateJob: a job not yet started never starts, a RUNNING one is stopped. An array parent's children
    that have not ended are terminated one by one too: AWS documents that cancelling a PENDING parent cancels its
    children (CancelJob), not what TerminateJob on a parent does to RUNNING ones. Idempotent: a job already ended
    is left as it is. Returns the status the job was in."""
    jobs = describe(batch, [job_id])
    if not jobs:
        raise RunnerError(f"job_id: no Batch job {job_id} in this region (was it submitted elsewhere?)")
    status = jobs[0]["status"]
    running = [c["jobId"] for c in array_children(batch, jobs[0]) if c.get("status") not in ENDED]
    if status in ENDED and not running:
        log.info("job %s already %s: nothing to cancel", job_id, status)
        return status
    for one in [job_id, *running]:
        batch.terminate_job(jobId=one, reason=reason)
    children = f" and {len(running)} of its children" if running else ""
    log.info("job %s (%s)%s terminated: %s", job_id, status, children, reason)
    return status
