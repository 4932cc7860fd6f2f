"""The queues and job definitions the Batch tests submit to, created on the batch host (gpu_runner_testing/batch_host.py) as
`gpu-runner batch up`'s stack would: `gpu` on Spot (g5.xlarge, g4dn.xlarge), `gpu-mnp` on-demand (the g5
family); a container definition `train` and a 2-node definition `train-mnp`. Once per session (pytest_plugin's
`batch_world`): IAM names are account-wide, so a second creation would collide."""

from __future__ import annotations

import json
import sys
from typing import Any

import boto3

REGION = "us-east-1"
PY = sys.executable
# Each node prints what Batch tells it about the job's nodes (the double adds what moto leaves out).
NODE_REPORT = (
    "import os; e = os.environ; print('node', e['AWS_BATCH_JOB_NODE_INDEX'], 'of', e['AWS_BATCH_JOB_NUM_NODES'], "
    "'main', e['AWS_BATCH_JOB_MAIN_NODE_INDEX'], 'main address', "
    "e.get('AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS', '-'))"
)


def job_credentials(endpoint: str) -> dict[str, str]:
    """A job's AWS environment on the batch host: its endpoint, region and moto's test keys, standing in for the
    job role's credentials (a real container gets them from ECS, not from its environment)."""
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_DEFAULT_REGION": REGION, "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing"}  # fmt: skip


# What every test definition asks for; the image is never pulled (the double runs the command on this machine).
RESOURCES = [{"type": "VCPU", "value": "1"}, {"type": "MEMORY", "value": "512"}]
IMAGE = "local/none"


def _client(service: str, endpoint: str, region: str) -> Any:
    return boto3.client(service, region_name=region, endpoint_url=endpoint)


def compute_environment(endpoint: str, name: str, market: str, types: list[str], region: str = REGION) -> str:
    """A managed compute environment on the batch host with a service role, an instance profile and a security
    group named after it (IAM names are account-wide: one set per environment); returns its ARN."""
    iam, ec2 = _client("iam", endpoint, region), _client("ec2", endpoint, region)
    trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                                      "Principal": {"Service": "batch.amazonaws.com"}}]}  # fmt: skip
    role = iam.create_role(RoleName=f"{name}-service", AssumeRolePolicyDocument=json.dumps(trust))
    role = role["Role"]["Arn"]
    profile = iam.create_instance_profile(InstanceProfileName=f"{name}-instance")["InstanceProfile"]["Arn"]
    subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
    group = ec2.create_security_group(GroupName=name, Description="batch jobs")["GroupId"]
    resources = {"type": market, "minvCpus": 0, "maxvCpus": 64, "instanceTypes": types, "subnets": [subnet],
                 "securityGroupIds": [group], "instanceRole": profile}  # fmt: skip
    return _client("batch", endpoint, region).create_compute_environment(
        computeEnvironmentName=name, type="MANAGED", state="ENABLED", computeResources=resources, serviceRole=role,
    )["computeEnvironmentArn"]  # fmt: skip


def queue(endpoint: str, name: str, environment: str, region: str = REGION) -> None:
    _client("batch", endpoint, region).create_job_queue(
        jobQueueName=name, state="ENABLED", priority=1,
        computeEnvironmentOrder=[{"order": 1, "computeEnvironment": environment}],
    )  # fmt: skip


def create(endpoint: str) -> None:
    queue(endpoint, "gpu", compute_environment(endpoint, "gpu-spot", "SPOT", ["g5.xlarge", "g4dn.xlarge"]))
    queue(endpoint, "gpu-mnp", compute_environment(endpoint, "gpu-ondemand", "EC2", ["g5"]))
    batch = _client("batch", endpoint, REGION)
    batch.register_job_definition(jobDefinitionName="train", type="container", containerProperties={
        "image": IMAGE, "command": ["true"], "resourceRequirements": RESOURCES})  # fmt: skip
    batch.register_job_definition(jobDefinitionName="train-mnp", type="multinode", nodeProperties={
        "numNodes": 2, "mainNode": 0, "nodeRangeProperties": [{"targetNodes": "0:1", "container": {
            "image": IMAGE, "command": [PY, "-c", NODE_REPORT], "resourceRequirements": RESOURCES}}]})  # fmt: skip
