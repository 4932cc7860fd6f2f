"""Instance launch across pools against a moto server, with capacity/quota errors injected at the HTTP layer."""

from __future__ import annotations

import re

import pytest

from gpu_runner.core.aws import Aws
from gpu_runner.core.errors import CapacityError, LaunchBlockedError, SettingsError
from gpu_runner.ec2_runner import ec2
from gpu_runner_testing.aws_constants import REGION
from gpu_runner_testing.aws_faults import AwsFaults
from gpu_runner_testing.live_instances import live

TAGS = {"gpu-runner:managed-by": "gpu-runner", "gpu-runner:project": "demo", "Name": "gpu-runner-1-1"}


def spec(ami_id: str, **overrides: object) -> ec2.LaunchSpec:
    values: dict = {
        "ami_id": ami_id,
        "root_device_name": "/dev/sda1",
        "root_volume_gb": 120,
        "user_data": "#!/bin/bash\necho hello\n",
        "tags": TAGS,
    }
    values.update(overrides)
    return ec2.LaunchSpec(**values)


def running(aws: Aws, region: str = REGION) -> list[dict]:
    return live(aws.client("ec2", region), managed_only=True)


def run_instances_calls(faults: AwsFaults) -> list[tuple[str, str]]:
    return [
        (params.get("InstanceMarketOptions.MarketType", "on-demand"), params["InstanceType"])
        for service, operation, _, params in faults.injected
        if operation == "RunInstances"
    ]


def test_classification() -> None:
    assert ec2.classify("InsufficientInstanceCapacity") == "capacity"
    assert ec2.classify("Unsupported") == "not-offered"
    assert ec2.classify("InsufficientFreeAddressesInSubnet") == "subnet-full"
    assert ec2.classify("SpotMaxPriceTooLow") == "spot-only"
    assert ec2.classify("AuthFailure.ServiceLinkedRoleCreationNotPermitted") == "spot-only"
    assert ec2.classify("VcpuLimitExceeded") == "fatal"
    assert ec2.classify("SomethingNew") == "fatal"


def test_ami_from_configurable_parameter(aws: Aws, ami: str) -> None:
    ssm = aws.client("ssm", REGION)
    ssm.put_parameter(Name="/test/dlami/ami-id", Value=ami, Type="String", Overwrite=True)
    ami_id, root = ec2.resolve_ami(
        ssm, aws.client("ec2", REGION), ami_id="", ami_parameter="/test/dlami/ami-id", region=REGION
    )
    assert ami_id == ami
    assert root.startswith("/dev/")


def test_missing_ami_parameter_names_the_setting(aws: Aws) -> None:
    with pytest.raises(SettingsError, match="ami_parameter '/nope/ami' does not exist in us-east-1"):
        ec2.resolve_ami(
            aws.client("ssm", REGION),
            aws.client("ec2", REGION),
            ami_id="",
            ami_parameter="/nope/ami",
            region=REGION,
        )


def test_unknown_ami_id_fails_before_launch(aws: Aws) -> None:
    with pytest.raises(LaunchBlockedError, match="InvalidAMIID"):
        ec2.resolve_ami(
            aws.client("ssm", REGION), aws.client("ec2", REGION), ami_id="ami-0123456789abcdef0",
            ami_parameter="", region=REGION,
        )  # fmt: skip


def test_launch_settings_reach_ec2(aws: Aws, ami: str) -> None:
    client = aws.client("ec2", REGION)
    launched = ec2.launch_instance(
        aws,
        spec(ami),
        region=REGION,
        instance_types=("g4dn.xlarge",),
        subnet_ids=(),
        use_spot=True,
    )
    assert (launched.market, launched.instance_type) == ("spot", "g4dn.xlarge")
    instance = ec2.describe(client, launched.instance_id)
    assert instance is not None
    assert instance["InstanceType"] == "g4dn.xlarge"
    assert instance["MetadataOptions"]["HttpTokens"] == "required"
    assert instance["MetadataOptions"]["HttpPutResponseHopLimit"] == 2
    assert instance.get("InstanceLifecycle") == "spot"
    assert {t["Key"]: t["Value"] for t in instance["Tags"]} == TAGS
    behaviour = client.describe_instance_attribute(
        InstanceId=launched.instance_id, Attribute="instanceInitiatedShutdownBehavior"
    )
    assert behaviour["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"
    volume_id = instance["BlockDeviceMappings"][0]["Ebs"]["VolumeId"]
    volume = client.describe_volumes(VolumeIds=[volume_id])["Volumes"][0]
    assert (volume["Size"], volume["Encrypted"]) == (120, True)
    assert {t["Key"]: t["Value"] for t in volume.get("Tags", [])} == TAGS


def test_first_type_out_of_capacity_moves_to_the_next(aws: Aws, faults: AwsFaults, ami: str) -> None:
    faults.fail(
        "ec2",
        "RunInstances",
        "InsufficientInstanceCapacity",
        status=500,
        when=lambda p: p["InstanceType"] == "g4dn.xlarge",
    )
    launched = ec2.launch_instance(
        aws, spec(ami), region=REGION,
        instance_types=("g4dn.xlarge", "g5.xlarge"), subnet_ids=(), use_spot=True,
    )  # fmt: skip
    assert (launched.market, launched.instance_type) == ("spot", "g5.xlarge")
    assert [(a.instance_type, a.error) for a in launched.attempts] == [
        ("g4dn.xlarge", "InsufficientInstanceCapacity")
    ]
    assert len(running(aws)) == 1


def test_every_spot_pool_out_falls_back_to_on_demand(aws: Aws, faults: AwsFaults, ami: str) -> None:
    faults.fail(
        "ec2", "RunInstances", "InsufficientInstanceCapacity", times=-1,
        when=lambda p: p.get("InstanceMarketOptions.MarketType") == "spot",
    )  # fmt: skip
    launched = ec2.launch_instance(
        aws, spec(ami), region=REGION,
        instance_types=("g4dn.xlarge", "g5.xlarge"), subnet_ids=(), use_spot=True,
    )  # fmt: skip
    assert (launched.market, launched.instance_type) == ("on-demand", "g4dn.xlarge")
    assert run_instances_calls(faults) == [("spot", "g4dn.xlarge"), ("spot", "g5.xlarge")]
    assert "InstanceLifecycle" not in ec2.describe(aws.client("ec2", REGION), launched.instance_id)


def test_spot_price_error_skips_remaining_spot_pools(aws: Aws, faults: AwsFaults, ami: str) -> None:
    faults.fail("ec2", "RunInstances", "SpotMaxPriceTooLow")
    launched = ec2.launch_instance(
        aws, spec(ami), region=REGION,
        instance_types=("g4dn.xlarge", "g5.xlarge"), subnet_ids=(), use_spot=True,
    )  # fmt: skip
    assert (launched.market, launched.instance_type) == ("on-demand", "g4dn.xlarge")
    assert [a.error for a in launched.attempts] == ["SpotMaxPriceTooLow"]


def test_subnets_are_tried_in_order(aws: Aws, faults: AwsFaults, ami: str) -> None:
    client = aws.client("ec2", REGION)
    vpc = client.create_vpc(CidrBlock="10.20.0.0/16")["Vpc"]["VpcId"]
    first, second = (
        client.create_subnet(VpcId=vpc, CidrBlock=f"10.20.{n}.0/24", AvailabilityZone=f"{REGION}{zone}")[
            "Subnet"
        ]
        for n, zone in ((1, "a"), (2, "b"))
    )
    faults.fail(
        "ec2",
        "RunInstances",
        "InsufficientInstanceCapacity",
        when=lambda p: p.get("SubnetId") == first["SubnetId"],
    )
    launched = ec2.launch_instance(
        aws, spec(ami), region=REGION, instance_types=("g4dn.xlarge",),
        subnet_ids=(first["SubnetId"], second["SubnetId"]), use_spot=False,
    )  # fmt: skip
    assert launched.subnet_id == second["SubnetId"]
    assert launched.availability_zone == f"{REGION}b"


def test_vcpu_quota_fails_fast_and_names_the_quota(aws: Aws, faults: AwsFaults, ami: str) -> None:
    faults.fail("ec2", "RunInstances", "VcpuLimitExceeded", times=-1)
    with pytest.raises(LaunchBlockedError) as info:
        ec2.launch_instance(
            aws, spec(ami), region=REGION,
            instance_types=("g4dn.xlarge", "g5.xlarge"), subnet_ids=(), use_spot=True,
        )  # fmt: skip
    assert "Running On-Demand G and VT instances" in str(info.value)
    assert "All G and VT Spot Instance Requests" in str(info.value)
    assert len(run_instances_calls(faults)) == 1
    assert running(aws) == []


def test_missing_permission_names_it(aws: Aws, faults: AwsFaults, ami: str) -> None:
    faults.fail("ec2", "RunInstances", "UnauthorizedOperation", status=403)
    with pytest.raises(LaunchBlockedError, match="make bootstrap again"):
        ec2.launch_instance(
            aws, spec(ami), region=REGION,
            instance_types=("g4dn.xlarge",), subnet_ids=(), use_spot=False,
        )  # fmt: skip


def test_no_capacity_anywhere(aws: Aws, faults: AwsFaults, ami: str) -> None:
    # EC2 sends this with HTTP 500, which botocore's retry modes would retry: one call per pool, no more.
    faults.fail("ec2", "RunInstances", "InsufficientInstanceCapacity", times=-1, status=500)
    with pytest.raises(
        CapacityError,
        match=re.escape("spot g4dn.xlarge, spot g5.xlarge, on-demand g4dn.xlarge, on-demand g5.xlarge"),
    ):
        ec2.launch_instance(
            aws, spec(ami), region=REGION,
            instance_types=("g4dn.xlarge", "g5.xlarge"), subnet_ids=(), use_spot=True,
        )  # fmt: skip
    assert len(run_instances_calls(faults)) == 4
    assert running(aws) == []


def test_throttled_launch_is_retried_with_one_client_token(
    aws: Aws, faults: AwsFaults, ami: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ec2, "MAX_BACKOFF_SECONDS", 0.01)
    faults.fail("ec2", "RunInstances", "RequestLimitExceeded", times=2, status=503)
    faults.fail("ec2", "RunInstances", "InternalError", times=1, status=500)
    launched = ec2.launch_instance(
        aws, spec(ami), region=REGION,
        instance_types=("g4dn.xlarge",), subnet_ids=(), use_spot=False,
    )  # fmt: skip
    assert launched.attempts == ()
    calls = [params for _, operation, _, params in faults.injected if operation == "RunInstances"]
    assert len(calls) == 3
    # The same idempotency token on every try: a lost answer cannot turn into a second instance.
    assert len({p["ClientToken"] for p in calls}) == 1
    assert len(running(aws)) == 1


def test_transient_errors_give_up_after_the_attempt_budget(
    aws: Aws, faults: AwsFaults, ami: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ec2, "MAX_BACKOFF_SECONDS", 0.01)
    faults.fail("ec2", "RunInstances", "RequestLimitExceeded", times=-1, status=503)
    with pytest.raises(LaunchBlockedError, match="RequestLimitExceeded"):
        ec2.launch_instance(
            aws, spec(ami), region=REGION,
            instance_types=("g4dn.xlarge", "g5.xlarge"), subnet_ids=(), use_spot=False,
        )  # fmt: skip
    assert len(run_instances_calls(faults)) == ec2.RUN_ATTEMPTS_PER_POOL
    assert running(aws) == []


def test_terminate_is_idempotent_and_console_readable(aws: Aws, ami: str) -> None:
    client = aws.client("ec2", REGION)
    launched = ec2.launch_instance(
        aws,
        spec(ami),
        region=REGION,
        instance_types=("g4dn.xlarge",),
        subnet_ids=(),
        use_spot=False,
    )
    assert isinstance(ec2.console_output(client, launched.instance_id), str)
    assert ec2.terminate(client, launched.instance_id) in {"shutting-down", "terminated"}
    assert ec2.terminate(client, launched.instance_id) in {"shutting-down", "terminated"}
    assert ec2.terminate(client, "i-0000000000000dead") == "terminated"


def two_subnets(aws: Aws, zones: tuple[str, str] = ("a", "b"), cidr: str = "10.30") -> tuple[str, str]:
    client = aws.client("ec2", REGION)
    vpc = client.create_vpc(CidrBlock=f"{cidr}.0.0/16")["Vpc"]["VpcId"]
    first, second = (
        client.create_subnet(VpcId=vpc, CidrBlock=f"{cidr}.{n}.0/24", AvailabilityZone=f"{REGION}{zone}")[
            "Subnet"
        ]["SubnetId"]
        for n, zone in enumerate(zones, start=1)
    )
    return first, second


def test_spot_service_linked_role_missing_falls_back_to_on_demand(
    aws: Aws, faults: AwsFaults, ami: str, logged
) -> None:
    """A new account without AWSServiceRoleForEC2Spot (and a role that may not create it): EC2 answers with a 403
    on every spot request. No other spot pool can fix that, so the next try is on-demand, with the fix named."""
    faults.fail(
        "ec2", "RunInstances", "AuthFailure.ServiceLinkedRoleCreationNotPermitted", status=403, times=-1,
        when=lambda p: p.get("InstanceMarketOptions.MarketType") == "spot",
        message="The provided credentials do not have permission to create the service-linked role for EC2 Spot "
        "Instances.",
    )  # fmt: skip
    launched = ec2.launch_instance(
        aws, spec(ami), region=REGION,
        instance_types=("g4dn.xlarge", "g5.xlarge"), subnet_ids=(), use_spot=True,
    )  # fmt: skip
    logs = logged()
    assert (launched.market, launched.instance_type) == ("on-demand", "g4dn.xlarge")
    assert run_instances_calls(faults) == [("spot", "g4dn.xlarge")]
    (line,) = [line for line in logs if "ServiceLinkedRoleCreationNotPermitted" in line]
    assert "falling back to on-demand" in line
    assert "make bootstrap" in line and "iam:CreateServiceLinkedRole" in line
    assert "aws iam create-service-linked-role --aws-service-name spot.amazonaws.com" in line
    assert len(running(aws)) == 1


def test_a_full_subnet_moves_on_to_the_next_subnet(aws: Aws, faults: AwsFaults, ami: str, logged) -> None:
    first, second = two_subnets(aws, cidr="10.31")
    faults.fail(
        "ec2", "RunInstances", "InsufficientFreeAddressesInSubnet", times=-1,
        when=lambda p: p.get("SubnetId") == first,
    )  # fmt: skip
    launched = ec2.launch_instance(
        aws, spec(ami), region=REGION, instance_types=("g4dn.xlarge", "g5.xlarge"),
        subnet_ids=(first, second), use_spot=False,
    )  # fmt: skip
    logs = logged()
    assert (launched.instance_type, launched.subnet_id) == ("g4dn.xlarge", second)
    assert (
        f"subnet {first} has no free IP address (InsufficientFreeAddressesInSubnet); trying the next subnet"
        in logs
    )


def test_a_full_subnet_is_not_tried_again_for_the_next_type(aws: Aws, faults: AwsFaults, ami: str) -> None:
    first, second = two_subnets(aws, cidr="10.32")
    faults.fail("ec2", "RunInstances", "InsufficientFreeAddressesInSubnet", times=-1,
                when=lambda p: p.get("SubnetId") == first)  # fmt: skip
    faults.fail("ec2", "RunInstances", "InsufficientInstanceCapacity", times=-1, status=500,
                when=lambda p: p.get("SubnetId") == second)  # fmt: skip
    with pytest.raises(CapacityError):
        ec2.launch_instance(
            aws, spec(ami), region=REGION, instance_types=("g4dn.xlarge", "g5.xlarge"),
            subnet_ids=(first, second), use_spot=False,
        )  # fmt: skip
    calls = [(p["InstanceType"], p["SubnetId"]) for _, op, _, p in faults.injected if op == "RunInstances"]
    assert calls == [("g4dn.xlarge", first), ("g4dn.xlarge", second), ("g5.xlarge", second)]


def test_unsupported_says_not_offered_in_this_zone_and_moves_on(
    aws: Aws, faults: AwsFaults, ami: str, logged
) -> None:
    first, second = two_subnets(aws, cidr="10.33")
    faults.fail(
        "ec2", "RunInstances", "Unsupported", when=lambda p: p.get("SubnetId") == first,
        message="Your requested instance type (g4dn.xlarge) is not supported in your requested Availability Zone",
    )  # fmt: skip
    launched = ec2.launch_instance(
        aws, spec(ami), region=REGION, instance_types=("g4dn.xlarge",),
        subnet_ids=(first, second), use_spot=False,
    )  # fmt: skip
    logs = logged()
    assert launched.subnet_id == second
    assert [line for line in logs if "g4dn.xlarge is not offered in this zone" in line and first in line]


def test_ec2_throttled_exception_is_retried_like_request_limit_exceeded(
    aws: Aws, faults: AwsFaults, ami: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # botocore's retry config: EC2 answers both throttling codes with HTTP 503 (botocore/data/_retry.json).
    monkeypatch.setattr(ec2, "MAX_BACKOFF_SECONDS", 0.01)
    faults.fail("ec2", "RunInstances", "EC2ThrottledException", times=2, status=503)
    launched = ec2.launch_instance(
        aws, spec(ami), region=REGION,
        instance_types=("g4dn.xlarge",), subnet_ids=(), use_spot=False,
    )  # fmt: skip
    assert launched.attempts == ()
    # Two throttled answers, then the third try reached moto and launched.
    assert len(run_instances_calls(faults)) == 2
    assert len(running(aws)) == 1
