"""The cost of a Batch job's attempts, as the runner backend's cost record (cost/record.Cost, priced by
cost/accounting.estimate with the same Price List, spot history and bundled table).

Per attempt: billed seconds = stoppedAt - startedAt (DescribeJobs' attempts, Unix milliseconds, rounded up): the
time the container ran. Batch's instance boot and any idle time before or after are not in it (Batch may reuse an
instance for the next job), so this is a lower bound of what EC2 bills.

The instance type, in this order:
1. the attempt's container instance: ECS DescribeContainerInstances in the compute environment's cluster answers
   the attributes ecs.instance-type and ecs.availability-zone (ECS sets both on every container instance);
2. else the compute environments of the job's queue, when they list exactly one instance type (not a family);
3. else `fallback_type` (the instance type the job was submitted for); without one the attempt is not priced.
The market is the compute environment's: SPOT or FARGATE_SPOT is spot, anything else on-demand.
A multi-node job's nodes are single-tenant ("Multi-node parallel job nodes are single-tenant. This means that only a
single job container is run on each Amazon EC2 instance.", AWS Batch User Guide, multi-node-parallel-jobs.html):
each node is priced as its own instance.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from gpu_runner.batch.batch_jobs import SPOT_TYPES, array_children, compute_environments
from gpu_runner.core.aws import Aws
from gpu_runner.core.mlflow_rest import MlflowRest
from gpu_runner.cost import accounting
from gpu_runner.cost.record import Cost

log = logging.getLogger(__name__)


def billed_seconds(attempt: Mapping[str, Any]) -> int | None:
    started, stopped = attempt.get("startedAt"), attempt.get("stoppedAt")
    if not started or not stopped or stopped < started:
        return None
    return math.ceil((stopped - started) / 1000)


def _from_container_instance(
    ecs: Any, attempt: Mapping[str, Any], environments: Sequence[Mapping[str, Any]]
) -> tuple[str, str, Mapping[str, Any]] | None:
    arn = attempt.get("container", {}).get("containerInstanceArn", "")
    if not arn.startswith("arn:"):
        return None
    for ce in environments:
        cluster = ce.get("ecsClusterArn")
        if not cluster:
            continue
        try:
            found = ecs.describe_container_instances(cluster=cluster, containerInstances=[arn])
        except (ClientError, BotoCoreError) as error:
            log.info("container instance of %s not described in %s: %s", arn, cluster, error)
            continue
        for instance in found.get("containerInstances", []):
            attributes = {a["name"]: a.get("value", "") for a in instance.get("attributes", [])}
            if attributes.get("ecs.instance-type"):
                return attributes["ecs.instance-type"], attributes.get("ecs.availability-zone", ""), ce
    return None


def instance_of(
    ecs: Any, attempt: Mapping[str, Any], environments: Sequence[Mapping[str, Any]], fallback_type: str = ""
) -> tuple[str, str, str] | None:
    """(instance type, availability zone, market) of an attempt by the rule in the module docstring."""
    found = _from_container_instance(ecs, attempt, environments)
    if found:
        instance_type, zone, ce = found
    else:
        types = {t for ce in environments for t in ce.get("computeResources", {}).get("instanceTypes", [])}
        concrete = sorted(t for t in types if "." in t)
        instance_type = concrete[0] if len(types) == 1 and concrete else fallback_type
        zone, ce = "", environments[0] if environments else {}
        if not instance_type:
            return None
    market = "spot" if ce.get("computeResources", {}).get("type") in SPOT_TYPES else "on-demand"
    return instance_type, zone, market


@dataclass(frozen=True)
class AttemptCost:
    slot: str  # an array child's index (a sweep's trial), "" for a single or multi-node job
    attempt: int  # 1 for the first attempt: the MLflow step of the cost record
    cost: Cost  # a multi-node job's: every node's instance-seconds (billed_seconds = nodes x the attempt's)
    nodes: int = 1


def job_costs(
    aws: Aws,
    job: Mapping[str, Any],
    *,
    region: str,
    volume_gb: int,
    fallback_type: str = "",
    table: Mapping[str, Any] | None = None,
) -> list[AttemptCost]:
    """Each ended attempt of a described job priced: an array job's per child, a multi-node job's per node."""
    batch, ecs = aws.client("batch", region), aws.client("ecs", region)
    queues = (
        batch.describe_job_queues(jobQueues=[job["jobQueue"]])["jobQueues"] if job.get("jobQueue") else []
    )
    environments = compute_environments(batch, queues[0]) if queues else []
    children = array_children(batch, job)
    runs = [(c["jobId"].rsplit(":", 1)[-1], c) for c in children] if children else [("", job)]
    nodes = job.get("nodeProperties", {}).get("numNodes", 1)
    out: list[AttemptCost] = []
    for slot, ran in runs:
        for number, attempt in enumerate(ran.get("attempts", []), start=1):
            cost = _attempt_cost(aws, ecs, ran, number, attempt, environments, region=region,
                                 volume_gb=volume_gb, fallback_type=fallback_type, table=table)  # fmt: skip
            if cost:
                # One record for all the nodes (each its own instance for the attempt's time): MLflow keeps one
                # cost record per attempt, and log_to_mlflow skips a second at the same step as already logged.
                total = dataclasses.replace(cost, billed_seconds=cost.billed_seconds * nodes)
                out.append(AttemptCost(slot, number, total, nodes))
    return out


@dataclass(frozen=True)
class SweepLeg:
    trial: int
    attempt: int  # the trial's attempt in this wave (the plan's): the MLflow step of its first Batch attempt


class SweepMatrixError(ValueError):
    """The plan's matrix does not describe this array job."""


def _legs(matrix: str) -> list[SweepLeg]:
    """`sweep plan`'s matrix step output (`{"include": [{"trial": N, "attempt": K}, ...]}`, in the order the wave
    was submitted: child i trains leg i, sweep_array.py). The plan job runs the branch's code, so the value is
    checked, never trusted: whole numbers, a trial >= 0 and an attempt >= 1."""
    try:
        legs = json.loads(matrix)["include"]
        parsed = [SweepLeg(leg["trial"], leg["attempt"]) for leg in legs]
    except (ValueError, KeyError, TypeError) as error:
        raise SweepMatrixError(f"--sweep-matrix: not sweep plan's matrix ({error})") from None
    for leg in parsed:
        if not all(type(v) is int for v in (leg.trial, leg.attempt)) or leg.trial < 0 or leg.attempt < 1:
            raise SweepMatrixError(f"--sweep-matrix: {leg} is not a trial >= 0 with an attempt >= 1")
    return parsed


def sweep_legs(matrix: str, children: int) -> list[SweepLeg]:
    """The plan's matrix as one leg per array child (_legs), exactly one leg per child."""
    parsed = _legs(matrix)
    if len(parsed) != children:
        raise SweepMatrixError(f"--sweep-matrix: {len(parsed)} legs for an array job of {children} children")
    return parsed


def wave_request(matrix: str) -> tuple[str, int]:
    """A planned wave as one submission: the trial numbers in the plan's order (`sweep trial --trials`, child i
    trains the i-th) and the array size, 0 for a wave of one trial (an array job has 2 children at least: a single
    job instead, batch_jobs.py)."""
    legs = _legs(matrix)
    if not legs:
        raise SweepMatrixError(
            "--sweep-matrix: no trial planned (the sweep job runs only when the plan has some)"
        )
    if len({leg.trial for leg in legs}) != len(legs):
        raise SweepMatrixError(f"--sweep-matrix: a trial twice in one wave ({[leg.trial for leg in legs]})")
    return ",".join(str(leg.trial) for leg in legs), (len(legs) if len(legs) > 1 else 0)


def trial_run(client: MlflowRest, parent_run_id: str, trial: int) -> str | None:
    """The child run of `trial` under the sweep's parent run (the tags sweep trial sets), None if it has none."""
    experiment = client.get_run(parent_run_id)["info"]["experiment_id"]
    found = client.search_runs(
        [experiment], f"tags.`mlflow.parentRunId` = '{parent_run_id}' and tags.`sweep.trial` = '{trial}'"
    )
    return found[0]["info"]["run_id"] if found else None


def _attempt_cost(
    aws: Aws,
    ecs: Any,
    job: Mapping[str, Any],
    number: int,
    attempt: Mapping[str, Any],
    environments: Sequence[Mapping[str, Any]],
    *,
    region: str,
    volume_gb: int,
    fallback_type: str,
    table: Mapping[str, Any] | None,
) -> Cost | None:
    seconds = billed_seconds(attempt)
    placed = instance_of(ecs, attempt, environments, fallback_type)
    if seconds is None or placed is None:
        log.warning("warning: attempt %s of job %s not priced (%s)", number, job.get("jobId"),
                    "no start or stop time" if seconds is None else "instance type unknown")  # fmt: skip
        return None
    instance_type, zone, market = placed
    instance = {
        "InstanceType": instance_type,
        "Placement": {"AvailabilityZone": zone},
        "LaunchTime": datetime.fromtimestamp(attempt["startedAt"] / 1000, UTC),
        **({"InstanceLifecycle": "spot"} if market == "spot" else {}),
    }
    return accounting.estimate(aws, instance, region=region, billed_seconds=seconds, volume_gb=volume_gb,
                               table=table)  # fmt: skip
