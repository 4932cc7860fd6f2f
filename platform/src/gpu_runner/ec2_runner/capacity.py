"""`gpu-runner capacity --wanted=N`: how many GPU runners a sweep's plan job may start now, within the account's
vCPU quotas in the settings' region.

Each runner is counted at the vCPUs of the largest configured G or VT instance type (launch may fall back to any
of them). The free vCPUs of a quota are its value minus the vCPUs of the region's pending and running G and VT
instances it counts (every principal's, not only ours: the quota is the account's). On-demand instances count
against L-DB2E81BA; with use_spot, spot instances count against L-3819A6DF, and a runner fits in either pool
(launch tries spot first and falls back to on-demand when spot is refused, MaxSpotInstanceCountExceeded
included: ec2.SPOT_ONLY_CODES). Open spot requests without an instance are not seen (an underestimate of use
that launch's own quota errors still catch).

IAM (the role that runs it; SweepRole of setup/gpu-runner.yaml): servicequotas:GetServiceQuota,
servicequotas:GetAWSDefaultServiceQuota, ec2:DescribeInstanceTypes, ec2:DescribeInstances. Nothing is created.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from gpu_runner.core import quotas
from gpu_runner.core.aws import Aws
from gpu_runner.core.errors import RunnerError
from gpu_runner.core.settings import Settings
from gpu_runner.core.workflow_contract import CapacityOutput, workflow_command, write_outputs
from gpu_runner.ec2_runner import ec2

log = logging.getLogger(__name__)

# The states in which an instance holds quota (a stopped one does not: EC2 User Guide, "On-Demand Instance
# quotas": the quota counts running instances; pending ones are about to).
HOLDING_STATES = ["pending", "running"]


@dataclass(frozen=True)
class Pool:
    """One vCPU quota and what already uses it."""

    code: str
    title: str
    quota_vcpus: float
    in_use_vcpus: int

    def fits(self, vcpus_per_runner: int) -> int:
        return max(0, math.floor((self.quota_vcpus - self.in_use_vcpus) / vcpus_per_runner))


@dataclass(frozen=True)
class Capacity:
    wanted: int
    runners: int  # min(wanted, what the pools allow)
    vcpus_per_runner: int  # 0: no G or VT type configured, nothing checked
    largest_type: str
    pools: tuple[Pool, ...]

    @property
    def quota_vcpus(self) -> float:
        return sum(pool.quota_vcpus for pool in self.pools)

    @property
    def in_use_vcpus(self) -> int:
        return sum(pool.in_use_vcpus for pool in self.pools)


def _holding_instances(client: Any) -> Iterator[dict[str, Any]]:
    filters = [{"Name": "instance-state-name", "Values": HOLDING_STATES}]
    for page in client.get_paginator("describe_instances").paginate(Filters=filters):
        for reservation in page["Reservations"]:
            yield from reservation["Instances"]


def _is_spot(instance: dict[str, Any]) -> bool:
    # Instance.InstanceLifecycle: "Indicates whether this is a Spot Instance or a Scheduled Instance" (botocore's
    # ec2 model); absent for an on-demand instance.
    return instance.get("InstanceLifecycle") == "spot"


def capacity(settings: Settings, aws: Aws, wanted: int) -> Capacity:
    """Read the quotas and the instances holding them; no write."""
    region = settings.region
    client = aws.client("ec2", region)
    gpu_types = [t for t in settings.instance_types if quotas.counted(t)]
    if not gpu_types:
        return Capacity(wanted, wanted, 0, "", ())
    holding = [i for i in _holding_instances(client) if quotas.counted(i["InstanceType"])]
    try:
        vcpus = quotas.vcpus(client, [*gpu_types, *(i["InstanceType"] for i in holding)])
    except ClientError as error:
        if ec2.error_code(error) != "InvalidInstanceType":
            raise
        raise RunnerError(
            f"instance_types: EC2 in {region} does not know {', '.join(gpu_types)} "
            f"({error.response['Error'].get('Message', '')}); fix instance_types in configs/gpu-runner.yaml"
        ) from None
    largest = max(gpu_types, key=lambda t: vcpus[t])
    spot_use = sum(vcpus[i["InstanceType"]] for i in holding if _is_spot(i))
    on_demand_use = sum(vcpus[i["InstanceType"]] for i in holding if not _is_spot(i))
    service_quotas = aws.client("service-quotas", region)
    pools = [
        Pool(
            *quotas.ON_DEMAND_QUOTA,
            quotas.quota_value(service_quotas, quotas.ON_DEMAND_QUOTA[0]),
            on_demand_use,
        )
    ]
    if settings.use_spot:
        # Spot first (launch's order), so it is the pool the increase command names.
        spot_quota = quotas.quota_value(service_quotas, quotas.SPOT_QUOTA[0])
        pools.insert(0, Pool(*quotas.SPOT_QUOTA, spot_quota, spot_use))
    allowed = sum(pool.fits(vcpus[largest]) for pool in pools)
    return Capacity(wanted, min(wanted, allowed), vcpus[largest], largest, tuple(pools))


def shortfall(found: Capacity, region: str) -> str:
    """One line: how many of the wanted runners the quotas allow, why, and the command that asks for more."""
    pools = "; ".join(
        f"{p.code} '{p.title}' is {p.quota_vcpus:g} vCPUs, {p.in_use_vcpus} in use" for p in found.pools
    )
    first = found.pools[0]
    # Enough in the first pool for the runners that do not fit now: its in-use vCPUs plus all it would hold.
    missing = found.wanted - found.runners
    desired = first.in_use_vcpus + (first.fits(found.vcpus_per_runner) + missing) * found.vcpus_per_runner
    return (
        f"the vCPU quota allows {found.runners} of {found.wanted} GPU runners in {region} now: each needs "
        f"{found.vcpus_per_runner} vCPUs ({found.largest_type}, the largest of instance_types); {pools}. To run "
        f"{found.wanted} at once: {quotas.increase_command(first.code, desired, region)}"
    )


def report(settings: Settings, found: Capacity) -> int:
    """Step outputs (always), then a ::warning when fewer than wanted may start, or an ::error and exit status 1
    when none may (the plan job must launch nothing)."""
    write_outputs(
        {
            CapacityOutput.RUNNERS: str(found.runners),
            CapacityOutput.VCPUS_PER_RUNNER: str(found.vcpus_per_runner),
            CapacityOutput.QUOTA_VCPUS: f"{found.quota_vcpus:g}",
            CapacityOutput.IN_USE_VCPUS: str(found.in_use_vcpus),
        }
    )
    title = "GPU vCPU quota"
    if not found.pools:
        others = ", ".join(settings.instance_types)
        print(
            workflow_command(
                "warning", title, f"no G or VT type in instance_types ({others}): quota not checked"
            )
        )
        return 0
    if found.runners == found.wanted:
        log.info(f"the vCPU quota allows all {found.wanted} GPU runner(s) in {settings.region}")
        return 0
    message = shortfall(found, settings.region)
    if found.runners == 0:
        print(workflow_command("error", title, f"{message}; nothing is launched"))
        return 1
    print(workflow_command("warning", title, message))
    return 0
