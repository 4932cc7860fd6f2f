"""EC2: resolve the AMI, launch one GPU instance across pools, terminate, read the console.

A pool is (market, instance type, subnet). Pools are tried in order: every spot pool first when spot is enabled,
then every on-demand pool. Errors are classified so capacity problems move on to the next pool while problems no
other pool can fix (quota, permission, bad parameter) stop at once with a message that names the fix.
"""

from __future__ import annotations

import base64
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from botocore.exceptions import ClientError, ConnectionClosedError, EndpointConnectionError, ReadTimeoutError

from gpu_runner.core.aws import Aws
from gpu_runner.core.errors import CapacityError, LaunchBlockedError, SettingsError

log = logging.getLogger(__name__)

Market = Literal["spot", "on-demand"]
Kind = Literal["capacity", "not-offered", "subnet-full", "spot-only", "fatal"]

# Every code below is one EC2 documents ("Error codes for the Amazon EC2 API",
# https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html) or, for throttling, one botocore's
# retry configuration names for EC2; tests/runner/test_error_codes.py holds both lists and checks these tables.
# No capacity for this type in this zone right now: the next pool may have some.
CAPACITY_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "UnfulfillableCapacity",
        "InsufficientHostCapacity",
        "InsufficientReservedInstanceCapacity",
    }
)
# The type is not offered in this subnet's zone (EC2: "Unsupported"): never there, but maybe in the next one.
NOT_OFFERED_CODES = frozenset({"Unsupported"})
# The subnet has no free private IP address: no instance type fits there, the next subnet may have room.
SUBNET_FULL_CODES = frozenset({"InsufficientFreeAddressesInSubnet"})
# Spot refused for reasons no other spot pool fixes: on-demand next (not the next spot pool).
SPOT_ONLY_CODES = frozenset(
    {
        "SpotMaxPriceTooLow",
        "MaxSpotInstanceCountExceeded",
        "AuthFailure.ServiceLinkedRoleCreationNotPermitted",
    }
)
# What the one line logged on a spot refusal says to do about it (codes not listed: no fix needed).
SPOT_FALLBACK_HINTS = {
    # dstack #886, RunsOn #233, terraform-aws-github-runner #104: the first spot launch in an account creates the
    # AWSServiceRoleForEC2Spot service-linked role with the caller's permissions.
    "AuthFailure.ServiceLinkedRoleCreationNotPermitted": (
        "the account has no AWSServiceRoleForEC2Spot role and this role may not create it: run make bootstrap "
        "again (gpu_runner/setup/gpu-runner.yaml grants iam:CreateServiceLinkedRole for spot.amazonaws.com only), or once "
        "`aws iam create-service-linked-role --aws-service-name spot.amazonaws.com`"
    ),
    "MaxSpotInstanceCountExceeded": "the account's spot request limit is reached in {region}",
}
# Throttling: botocore's retry configuration for EC2 (botocore/data/_retry.json "ec2" policies, and the standard
# mode's throttling codes in botocore/retries/standard.py) names these two for EC2.
THROTTLING_CODES = frozenset({"RequestLimitExceeded", "EC2ThrottledException"})
# Worth another try in the same pool: throttling and EC2's own transient server errors (not capacity).
TRANSIENT_CODES = THROTTLING_CODES | frozenset({"InternalError", "ServiceUnavailable", "Unavailable"})
RUN_ATTEMPTS_PER_POOL = 6
MAX_BACKOFF_SECONDS = 20.0

# EC2, SSM/STS (JSON) and query-protocol spellings of "these credentials are expired or unknown".
CREDENTIAL_CODES = (
    "AuthFailure",
    "RequestExpired",
    "ExpiredToken",
    "ExpiredTokenException",
    "InvalidClientTokenId",
    "UnrecognizedClientException",
)
# What to do about errors that no other pool can fix.
FATAL_HINTS = {
    "VcpuLimitExceeded": (
        "the vCPU quota for this instance family is too low in {region}: in Service Quotas (EC2) request more "
        "for 'Running On-Demand G and VT instances' (on-demand) or 'All G and VT Spot Instance Requests' (spot); "
        "new accounts start at 0"
    ),
    "InstanceLimitExceeded": "the account's instance limit is reached in {region}: raise it in Service Quotas (EC2)",
    "UnauthorizedOperation": (
        "the AWS role may not launch this instance: the gpu_runner/setup/gpu-runner.yaml policy allows only its instance "
        "types, with the gpu-runner tags, IMDSv2, encrypted volumes and its runner instance profile; after "
        "changing instance_types or instance_profile in configs/gpu-runner.yaml, run make bootstrap again"
    ),
    "AccessDenied": "the AWS role is not allowed to launch instances (gpu_runner/setup/gpu-runner.yaml holds the policy it needs)",
    "InvalidAMIID.NotFound": "AMI not found in {region}: check ami_id / ami_parameter in configs/gpu-runner.yaml",
    "InvalidAMIID.Malformed": "ami_id is malformed: use an id like ami-0123456789abcdef0",
    "InvalidSubnetID.NotFound": (
        "a subnet in subnet_ids does not exist in {region}: fix subnet_ids in configs/gpu-runner.yaml"
    ),
    "InsufficientFreeAddressesInSubnet": (
        "the subnet EC2 picked has no free IP address: list subnet_ids with free addresses (one per availability "
        "zone) in configs/gpu-runner.yaml"
    ),
    "InvalidGroup.NotFound": (
        "a security group in security_group_ids does not exist in {region}: fix security_group_ids in "
        "configs/gpu-runner.yaml"
    ),
    "InvalidParameterValue": "EC2 rejected a launch parameter (see the message): fix configs/gpu-runner.yaml",
    "InvalidParameterCombination": "EC2 rejected a combination of launch parameters (see the message)",
    "InvalidParameter": "EC2 rejected a launch parameter (see the message): fix configs/gpu-runner.yaml",
    **dict.fromkeys(
        CREDENTIAL_CODES,
        "AWS rejected the credentials (expired or unknown): in the workflow check AWS_ROLE_ARN and that the job "
        "has id-token: write; by hand, refresh them (aws sso login, or new keys)",
    ),
}


def classify(code: str) -> Kind:
    """What a RunInstances error means for the remaining pools."""
    for kind, codes in (
        ("capacity", CAPACITY_CODES),
        ("not-offered", NOT_OFFERED_CODES),
        ("subnet-full", SUBNET_FULL_CODES),
        ("spot-only", SPOT_ONLY_CODES),
    ):
        if code in codes:
            return kind  # type: ignore[return-value]
    return "fatal"


def error_code(error: ClientError) -> str:
    return error.response.get("Error", {}).get("Code", "Unknown")


@dataclass(frozen=True)
class LaunchSpec:
    """Everything about the instance except the pool."""

    ami_id: str
    root_device_name: str
    root_volume_gb: int
    user_data: str
    tags: Mapping[str, str]
    security_group_ids: tuple[str, ...] = ()
    instance_profile: str = ""


@dataclass(frozen=True)
class Attempt:
    market: Market
    instance_type: str
    subnet_id: str | None
    error: str


@dataclass(frozen=True)
class Launched:
    instance_id: str
    instance_type: str
    market: Market
    subnet_id: str | None
    availability_zone: str
    launch_time: datetime
    attempts: tuple[Attempt, ...] = field(default_factory=tuple)
    owner_id: str = ""  # the account (RunInstances' reservation OwnerId): part of the instance's ARN


def resolve_ami(ssm: Any, ec2: Any, *, ami_id: str, ami_parameter: str, region: str) -> tuple[str, str]:
    """The AMI id (explicit, or read from the configurable SSM parameter) and its root device name."""
    if not ami_id:
        try:
            ami_id = ssm.get_parameter(Name=ami_parameter)["Parameter"]["Value"]
        except ClientError as error:
            if error_code(error) == "ParameterNotFound":
                raise SettingsError(
                    f"ami_parameter '{ami_parameter}' does not exist in {region}: fix the path in "
                    f"configs/gpu-runner.yaml or set ami_id"
                ) from None
            # The first AWS call of a launch: expired credentials or a missing permission show up here.
            raise LaunchBlockedError(explain(error, region)) from None
    try:
        images = ec2.describe_images(ImageIds=[ami_id])["Images"]
    except ClientError as error:
        raise LaunchBlockedError(explain(error, region)) from None
    if not images:
        raise LaunchBlockedError(f"AMI {ami_id} not found in {region}: check ami_id / ami_parameter")
    return ami_id, images[0].get("RootDeviceName", "/dev/sda1")


def explain(error: ClientError, region: str) -> str:
    """`<code>: <what to do> (AWS said: <message>)` for an error no retry or other pool can fix."""
    code = error_code(error)
    message = error.response.get("Error", {}).get("Message", "")
    hint = FATAL_HINTS.get(code, "see the AWS message")
    return f"{code}: {hint.format(region=region)} (AWS said: {message})"


def _pools(
    instance_types: tuple[str, ...], subnet_ids: tuple[str, ...], use_spot: bool
) -> Iterator[tuple[Market, Iterator[tuple[str, str | None]]]]:
    markets: tuple[Market, ...] = ("spot", "on-demand") if use_spot else ("on-demand",)
    for market in markets:
        yield market, ((t, s) for t in instance_types for s in (subnet_ids or (None,)))


def _run_params(
    spec: LaunchSpec, market: Market, instance_type: str, subnet_id: str | None
) -> dict[str, Any]:
    tag_list = [{"Key": k, "Value": v} for k, v in spec.tags.items()]
    params: dict[str, Any] = {
        "ImageId": spec.ami_id,
        "InstanceType": instance_type,
        "MinCount": 1,
        "MaxCount": 1,
        "UserData": spec.user_data,
        # shutdown -h from inside the instance (runner exit, watchdog, max lifetime) terminates it.
        "InstanceInitiatedShutdownBehavior": "terminate",
        # IMDSv2 only; hop limit 2 so the training container can reach the instance role.
        "MetadataOptions": {
            "HttpTokens": "required",
            "HttpPutResponseHopLimit": 2,
            "HttpEndpoint": "enabled",
        },
        "BlockDeviceMappings": [
            {
                "DeviceName": spec.root_device_name,
                "Ebs": {
                    "VolumeSize": spec.root_volume_gb,
                    "VolumeType": "gp3",
                    "Encrypted": True,
                    "DeleteOnTermination": True,
                },
            }
        ],
        "TagSpecifications": [
            {"ResourceType": "instance", "Tags": tag_list},
            {"ResourceType": "volume", "Tags": tag_list},
        ],
    }
    if market == "spot":
        params["InstanceMarketOptions"] = {
            "MarketType": "spot",
            "SpotOptions": {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"},
        }
    if subnet_id:
        params["SubnetId"] = subnet_id
    if spec.security_group_ids:
        params["SecurityGroupIds"] = list(spec.security_group_ids)
    if spec.instance_profile:
        key = "Arn" if spec.instance_profile.startswith("arn:") else "Name"
        params["IamInstanceProfile"] = {key: spec.instance_profile}
    return params


def _run_instances(ec2: Any, params: dict[str, Any]) -> dict[str, Any]:
    """RunInstances in one pool, retrying only throttling and transient errors.

    Written by hand because botocore's retry modes retry every HTTP 5xx, and EC2 answers
    InsufficientInstanceCapacity with a 500: retried, a pool without capacity would cost up to a minute before
    the next pool is tried. One ClientToken for all tries of a pool keeps a retried launch from creating a
    second instance when an earlier answer was lost."""
    params = {**params, "ClientToken": str(uuid.uuid4())}
    for attempt in range(1, RUN_ATTEMPTS_PER_POOL + 1):
        try:
            return ec2.run_instances(**params)
        except ClientError as error:
            if error_code(error) not in TRANSIENT_CODES or attempt == RUN_ATTEMPTS_PER_POOL:
                raise
        except (EndpointConnectionError, ConnectionClosedError, ReadTimeoutError):
            if attempt == RUN_ATTEMPTS_PER_POOL:
                raise
        # Full jitter, as botocore's standard mode: 0..min(20, 2^attempt) s.
        time.sleep(random.uniform(0, min(MAX_BACKOFF_SECONDS, 2.0**attempt)))
    raise AssertionError("unreachable")


def launch_instance(
    aws: Aws,
    spec: LaunchSpec,
    *,
    region: str,
    instance_types: tuple[str, ...],
    subnet_ids: tuple[str, ...],
    use_spot: bool,
    offered: Callable[[str, str | None], bool] | None = None,
) -> Launched:
    """Launch exactly one instance in the first pool with capacity. Through a single-attempt client: retries
    are decided here, per error (see _run_instances). `offered(type, subnet)` (offerings.Offered.allows) leaves
    out the pools where EC2 does not offer the type; they were logged when the offerings were read."""
    ec2 = aws.single_attempt_client("ec2", region)
    attempts: list[Attempt] = []
    full_subnets: set[str | None] = set()
    for market, pools in _pools(instance_types, subnet_ids, use_spot):
        for instance_type, subnet_id in pools:
            if subnet_id in full_subnets or (offered is not None and not offered(instance_type, subnet_id)):
                continue
            try:
                reply = _run_instances(ec2, _run_params(spec, market, instance_type, subnet_id))
            except ClientError as error:
                code = error_code(error)
                attempts.append(Attempt(market, instance_type, subnet_id, code))
                kind = classify(code)
                where = f"{market} {instance_type}" + (f" in {subnet_id}" if subnet_id else "")
                if kind == "capacity":
                    log.info(f"no capacity for {where} ({code}); trying the next pool")
                    continue
                if kind == "not-offered":
                    log.info(
                        f"{instance_type} is not offered in this zone ({where}, {code}); trying the next pool"
                    )
                    continue
                if kind == "subnet-full" and subnet_id:
                    full_subnets.add(subnet_id)
                    log.info(f"subnet {subnet_id} has no free IP address ({code}); trying the next subnet")
                    continue
                if kind == "spot-only":
                    hint = SPOT_FALLBACK_HINTS.get(code, "").format(region=region)
                    log.info(
                        f"spot refused for {where} ({code}); falling back to on-demand"
                        + (f": {hint}" if hint else "")
                    )
                    break
                raise LaunchBlockedError(explain(error, region)) from None
            instance = reply["Instances"][0]
            return Launched(
                instance_id=instance["InstanceId"],
                instance_type=instance_type,
                market=market,
                subnet_id=subnet_id,
                availability_zone=instance.get("Placement", {}).get("AvailabilityZone", ""),
                launch_time=instance.get("LaunchTime", datetime.now(UTC)),
                attempts=tuple(attempts),
                owner_id=str(reply.get("OwnerId", "")),
            )
    tried = ", ".join(
        f"{a.market} {a.instance_type}{' ' + a.subnet_id if a.subnet_id else ''}" for a in attempts
    )
    raise CapacityError(
        f"no capacity in any pool ({tried}); add instance types or subnets in other availability zones to "
        f"configs/gpu-runner.yaml, or retry later"
    )


def terminate(ec2: Any, instance_id: str) -> str:
    """Terminate; returns the state after the call. Already gone counts as terminated (idempotent)."""
    try:
        reply = ec2.terminate_instances(InstanceIds=[instance_id])
    except ClientError as error:
        if error_code(error) in {"InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"}:
            return "terminated"
        raise
    return reply["TerminatingInstances"][0]["CurrentState"]["Name"]


def describe(ec2: Any, instance_id: str) -> dict[str, Any] | None:
    try:
        reservations = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    except ClientError as error:
        if error_code(error) == "InvalidInstanceID.NotFound":
            return None
        raise
    instances = [i for r in reservations for i in r["Instances"]]
    return instances[0] if instances else None


def console_output(ec2: Any, instance_id: str) -> str:
    """The instance's serial console (user-data logs its phases there); empty when not yet available."""
    try:
        reply = ec2.get_console_output(InstanceId=instance_id, Latest=True)
    except ClientError:
        try:
            reply = ec2.get_console_output(InstanceId=instance_id)
        except ClientError as error:
            return f"(console output unavailable: {error_code(error)})"
    text = reply.get("Output") or ""
    try:
        # The API returns base64; boto3 does not decode it.
        return base64.b64decode(text).decode("utf-8", errors="replace")
    except ValueError:
        return text
