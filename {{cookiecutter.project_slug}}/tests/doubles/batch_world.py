"""The queues and job definitions the Batch tests submit to, created on the batch host (doubles/batch_host.py) as
`gpu-runner batch up`'s stack would: `gpu` on Spot (g5.xlarge, g4dn.xlarge), `gpu-mnp` on-demand (the g5
family); a container definition `train` and a 2-node definition `train-mnp`. Once per session (conftest's
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


def create(endpoint: str) -> None:
    def client(service: str) -> Any:
        return boto3.client(service, region_name=REGION, endpoint_url=endpoint)

    iam, ec2, batch = client("iam"), client("ec2"), client("batch")
    trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                                      "Principal": {"Service": "batch.amazonaws.com"}}]}  # fmt: skip
    role = iam.create_role(RoleName="batch-service", AssumeRolePolicyDocument=json.dumps(trust))
    role = role["Role"]["Arn"]
    profile = iam.create_instance_profile(InstanceProfileName="batch-instance")["InstanceProfile"]["Arn"]
    subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
    group = ec2.create_security_group(GroupName="batch", Description="batch jobs")["GroupId"]

    def environment(name: str, market: str, types: list[str]) -> str:
        resources = {"type": market, "minvCpus": 0, "maxvCpus": 64, "instanceTypes": types, "subnets": [subnet],
                     "securityGroupIds": [group], "instanceRole": profile}  # fmt: skip
        return batch.create_compute_environment(
            computeEnvironmentName=name, type="MANAGED", state="ENABLED", computeResources=resources,
            serviceRole=role,
        )["computeEnvironmentArn"]  # fmt: skip

    for queue, ce in (("gpu", environment("gpu-spot", "SPOT", ["g5.xlarge", "g4dn.xlarge"])),
                      ("gpu-mnp", environment("gpu-ondemand", "EC2", ["g5"]))):  # fmt: skip
        batch.create_job_queue(jobQueueName=queue, state="ENABLED", priority=1,
                               computeEnvironmentOrder=[{"order": 1, "computeEnvironment": ce}])  # fmt: skip
    resources = [{"type": "VCPU", "value": "1"}, {"type": "MEMORY", "value": "512"}]
    # The image is never pulled: the double runs the command on this machine.
    batch.register_job_definition(jobDefinitionName="train", type="container", containerProperties={
        "image": "local/none", "command": ["true"], "resourceRequirements": resources})  # fmt: skip
    batch.register_job_definition(jobDefinitionName="train-mnp", type="multinode", nodeProperties={
        "numNodes": 2, "mainNode": 0, "nodeRangeProperties": [{"targetNodes": "0:1", "container": {
            "image": "local/none", "command": [PY, "-c", NODE_REPORT], "resourceRequirements": resources}}]})  # fmt: skip
