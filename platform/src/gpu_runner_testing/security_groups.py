"""The runner's security group in moto, as gpu_runner/setup/gpu-runner.yaml makes it (no inbound rule)."""

from __future__ import annotations

from gpu_runner.core.aws import Aws
from gpu_runner_testing.aws_constants import REGION


def runner_security_group(aws: Aws, region: str = REGION) -> str:
    """The runner's group in `region`, as the stack makes it (launch refuses an empty security_group_ids)."""
    ec2 = aws.client("ec2", region)
    found = ec2.describe_security_groups(Filters=[{"Name": "group-name", "Values": ["gpu-runner-test"]}])
    if found["SecurityGroups"]:
        return str(found["SecurityGroups"][0]["GroupId"])
    return str(ec2.create_security_group(GroupName="gpu-runner-test", Description="test runner")["GroupId"])
