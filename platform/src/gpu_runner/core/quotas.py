"""The vCPU quotas of the G and VT instance families, read the same way by `gpu-runner doctor` (is the largest
configured type allowed at all?) and `gpu-runner capacity` (how many runners may a sweep start now?).

Calls: servicequotas:GetServiceQuota, servicequotas:GetAWSDefaultServiceQuota, ec2:DescribeInstanceTypes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from botocore.exceptions import ClientError

# Families the two G and VT quotas count: every G and VT family of botocore's ec2 model (InstanceType enum,
# botocore 1.4x: g2 g3 g3s g4ad g4dn g5 g5g g6 g6e g6f g7 g7e gr6 gr6f vt1).
GPU_FAMILY = re.compile(r"(?:g|gr|vt)\d")
# vCPU quotas of the G and VT families (Service Quotas, service code ec2): "Running On-Demand G and VT
# instances" and "All G and VT Spot Instance Requests" (names: Amazon EC2 User Guide, "On-Demand Instance
# quotas" and "Spot Instance quotas"; codes as the Service Quotas console lists them, read 2026-12-01).
ON_DEMAND_QUOTA = ("L-DB2E81BA", "Running On-Demand G and VT instances")
SPOT_QUOTA = ("L-3819A6DF", "All G and VT Spot Instance Requests")


def counted(instance_type: str) -> bool:
    """Whether the G and VT quotas count this type (other families have quotas of their own)."""
    return GPU_FAMILY.match(instance_type) is not None


def vcpus(ec2: Any, types: Iterable[str]) -> dict[str, int]:
    """Default vCPUs per instance type (DescribeInstanceTypes VCpuInfo.DefaultVCpus); an unknown type raises
    EC2's InvalidInstanceType."""
    found: dict[str, int] = {}
    wanted = sorted(set(types))
    if not wanted:
        return found
    for page in ec2.get_paginator("describe_instance_types").paginate(InstanceTypes=wanted):
        for item in page["InstanceTypes"]:
            found[item["InstanceType"]] = int(item["VCpuInfo"]["DefaultVCpus"])
    return found


def quota_value(quotas: Any, code: str) -> float:
    """The applied value of an ec2 quota, else AWS's default for it."""
    try:
        return float(quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"])
    except ClientError as error:
        # "If the applied quota value is not available for a quota, the quota is not retrieved" (GetServiceQuota,
        # botocore's service-quotas model): then the default applies.
        if error.response.get("Error", {}).get("Code") != "NoSuchResourceException":
            raise
    default = quotas.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=code)
    return float(default["Quota"]["Value"])


def increase_command(code: str, desired: float, region: str) -> str:
    """The AWS CLI call that asks for more (Service Quotas RequestServiceQuotaIncrease, DesiredValue)."""
    return (
        f"aws service-quotas request-service-quota-increase --service-code ec2 --quota-code {code} "
        f"--desired-value {desired:g} --region {region}"
    )
