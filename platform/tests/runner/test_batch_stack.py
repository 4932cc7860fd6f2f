"""AWS Batch (gpu_runner/batch/batch.yaml): `gpu-runner batch up` against the moto server after `bootstrap`, what it built,
and who may submit, end and read what (the IAM evaluator, call by call).

moto's CloudFormation creates the node security group and its rule, the roles, policies, instance profile, launch
template, both compute environments, both queues and both job definitions. It does not apply, so these are asserted
on the template instead (and cfn-lint checks their schema): the launch template's metadata options, volumes and
user data (a compute environment launches nothing at MinvCpus 0), the job definitions' Timeout and
PlatformCapabilities (moto reads `timeout` in lower case only), a multi-node definition's NodeProperties (moto
registers every definition from CloudFormation as `container`: gpu_runner_testing.batch_stack hands it the node range's
container), resource tags on queues, and the retry strategy's enforcement (moto runs no job here). moto also
requires a ServiceRole where AWS takes its service-linked role: the tests pass one, the template's default is
asserted. The allowed values come from botocore's batch model, not from moto. The instance role's user-data firewall
runs for real in platform/tests/runner/test_batch_imds.py."""

from __future__ import annotations

import contextlib
import json
import logging
import re
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.exceptions import ClientError
from botocore.validate import validate_parameters
from parliament import analyze_policy_string

from gpu_job import distributed
from gpu_runner import cli
from gpu_runner.batch import TEMPLATE as BATCH_TEMPLATE
from gpu_runner.batch import batch_stack
from gpu_runner.core import naming, stack_names
from gpu_runner.core.aws import Aws
from gpu_runner.core.settings import PINNED_IMAGE, load_settings
from gpu_runner.mlflow_server import mlflow_server
from gpu_runner_testing import batch_stack as double
from gpu_runner_testing import batch_world
from gpu_runner_testing.git_repository import committed_repository
from gpu_runner_testing.github_double import DEFAULT_REPOSITORY
from gpu_runner_testing.gpu_runner_stack import (
    REGION,
    managed_policies,
    role_of,
    role_policies,
    runner_role_name,
    write_settings,
)
from gpu_runner_testing.iam_requests import (
    ACCOUNT,
    Call,
    Request,
    agent_sessions,
    allowed,
    granted_actions,
    record_calls,
    requests_for,
    web_identity_allowed,
)
from gpu_runner_testing.stack_deploy import OIDC_URL, TEST_PLATFORM, bootstrap

BATCH_MODEL = botocore.session.get_session().get_service_model("batch")


@pytest.fixture(scope="module")
def batch_settings_file(settings_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return double.batch_settings(settings_file, tmp_path_factory.mktemp("batch"))


@pytest.fixture(scope="module")
def batch(stack: dict[str, Any], batch_settings_file: Path) -> dict[str, Any]:
    """`make batch-up` after the session's `make bootstrap` (with a service role of the account's: moto needs one)."""
    return double.deployed(
        stack, batch_settings_file, "--service-role-arn", double.service_role(stack["session"])
    )


def _batch_client(batch: dict[str, Any]) -> Any:
    return batch["session"].client("batch")


def _environment(batch: dict[str, Any], arn: str) -> dict[str, Any]:
    (environment,) = _batch_client(batch).describe_compute_environments(computeEnvironments=[arn])[
        "computeEnvironments"
    ]
    return dict(environment)


def _queue(batch: dict[str, Any], output: str) -> dict[str, Any]:
    (queue,) = _batch_client(batch).describe_job_queues(jobQueues=[batch["outputs"][output]])["jobQueues"]
    return dict(queue)


def _definition(batch: dict[str, Any], output: str) -> dict[str, Any]:
    (definition,) = _batch_client(batch).describe_job_definitions(jobDefinitions=[batch["outputs"][output]])[
        "jobDefinitions"
    ]
    return dict(definition)


# --- what it built -----------------------------------------------------------------------------------------------


def test_up_wires_batch_to_the_runner_stack_and_the_settings(
    batch: dict[str, Any], stack: dict[str, Any]
) -> None:
    parameters, runner, settings = batch["parameters"], stack["outputs"], stack["settings"]
    assert parameters["RunnerSecurityGroupId"] == runner["RunnerSecurityGroupId"]
    assert parameters["BucketName"] == runner["BucketName"] == stack["bucket"]
    assert parameters["OidcProviderArn"] == runner["OidcProviderArn"] == stack["oidc"]
    assert parameters["SsmPrefix"] == settings.ssm_prefix
    assert parameters["InstanceTypes"] == ",".join(settings.instance_types) == "g4dn.xlarge,g5.xlarge"
    assert parameters["MultiNodeInstanceType"] == "g4dn.xlarge"
    assert parameters["Image"] == double.IMAGE
    assert parameters["MaxRuntimeSeconds"] == str(settings.max_runtime_minutes * 60)
    # The submit role trusts the platform commit the gpu-runner stack trusts (bootstrap's --platform).
    assert parameters["UseSpot"] == "true"
    assert f"{parameters['PlatformRepository']}@{parameters['PlatformCommit']}" == TEST_PLATFORM
    # No subnet_ids in the settings: the default subnets of the runners' VPC, one per zone.
    ec2 = batch["session"].client("ec2")
    subnets = ec2.describe_subnets(SubnetIds=parameters["SubnetIds"].split(","))["Subnets"]
    assert len(subnets) >= 2 and {s["VpcId"] for s in subnets} == {parameters["VpcId"]}
    assert all(s["DefaultForAz"] for s in subnets)
    assert set(batch["outputs"]) >= batch_stack.OUTPUTS
    assert batch["outputs"]["LogGroup"] == "/aws/batch/job"
    assert (
        f"AWS_BATCH_ROLE_ARN --repo {DEFAULT_REPOSITORY} --body {batch['outputs']['SubmitRoleArn']}"
        in batch["printed"]
    )


def test_compute_environments_are_gpu_spot_and_on_demand_at_zero(
    batch: dict[str, Any], stack: dict[str, Any]
) -> None:
    outputs = batch["outputs"]
    spot = _environment(batch, outputs["SpotComputeEnvironment"])
    on_demand = _environment(batch, outputs["OnDemandComputeEnvironment"])
    for environment, market, strategy in (
        (spot, "SPOT", "SPOT_PRICE_CAPACITY_OPTIMIZED"),
        (on_demand, "EC2", "BEST_FIT_PROGRESSIVE"),
    ):
        resources = environment["computeResources"]
        assert (environment["type"], environment["state"]) == ("MANAGED", "ENABLED")
        assert (resources["type"], resources["allocationStrategy"]) == (market, strategy)
        assert resources["minvCpus"] == 0  # nothing runs (or bills) while no job is queued
        assert resources["maxvCpus"] == 16
        assert resources["instanceTypes"] == list(stack["settings"].instance_types)
        assert resources["subnets"] == batch["parameters"]["SubnetIds"].split(",")
        assert resources["securityGroupIds"][0] == stack["outputs"]["RunnerSecurityGroupId"]
        assert resources["ec2Configuration"] == [{"imageType": "ECS_AL2023_NVIDIA"}]
        assert "spotIamFleetRole" not in resources  # SPOT_PRICE_CAPACITY_OPTIMIZED needs none
        # No gpu-runner: tag, so neither the reaper nor a terminate grant of the gpu-runner stack matches them.
        assert not any(key.startswith("gpu-runner:") for key in resources["tags"])
        assert resources["tags"]["gpu-batch:project"] == stack["settings"].project
    # The instances hold the ECS instance role and nothing else.
    profile = spot["computeResources"]["instanceRole"]
    assert on_demand["computeResources"]["instanceRole"] == profile
    iam = batch["session"].client("iam")
    profile_name = profile.rsplit("/", 1)[-1]
    (role,) = iam.get_instance_profile(InstanceProfileName=profile_name)["InstanceProfile"]["Roles"]
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "ec2.amazonaws.com"}
    assert role["Arn"] not in (batch["outputs"]["JobRoleArn"], batch["outputs"]["SubmitRoleArn"])
    # Both environments launch through the stack's launch template (IMDSv2, encrypted volume: see the template test).
    ec2 = batch["session"].client("ec2")
    template_id = spot["computeResources"]["launchTemplate"]["launchTemplateId"]
    assert ec2.describe_launch_templates(LaunchTemplateIds=[template_id])["LaunchTemplates"]
    assert on_demand["computeResources"]["launchTemplate"]["launchTemplateId"] == template_id


def test_multinode_nodes_admit_only_their_own_group_on_the_rendezvous_and_worker_ports(
    batch: dict[str, Any], stack: dict[str, Any]
) -> None:
    """The multi-node environment's second group (its nodes' interfaces carry it): inbound from itself only, on
    exactly the two ports the multi-node definition sets for its nodes (MNP_WORKER_PORT, MNP_RENDEZVOUS_PORT)."""
    ec2 = batch["session"].client("ec2")
    environment = _environment(batch, batch["outputs"]["MultiNodeComputeEnvironment"])
    runner_group, node_group = environment["computeResources"]["securityGroupIds"]
    assert runner_group == stack["outputs"]["RunnerSecurityGroupId"]
    (group,) = ec2.describe_security_groups(GroupIds=[node_group])["SecurityGroups"]
    rules = sorted(
        (rule["IpProtocol"], rule["FromPort"], rule["ToPort"], tuple(p["GroupId"] for p in rule["UserIdGroupPairs"]),
         tuple(rule["IpRanges"]), tuple(rule["Ipv6Ranges"]), tuple(rule.get("PrefixListIds", [])))
        for rule in group["IpPermissions"]
    )  # fmt: skip
    assert rules == [
        ("tcp", 2222, 2222, (node_group,), (), (), ()),
        ("tcp", 2223, 2223, (node_group,), (), (), ()),
    ]
    assert group["VpcId"] == batch["parameters"]["VpcId"]
    # The ports the nodes listen on are those (the template's multi-node container: moto registers a node range's
    # container without its environment, gpu_runner_testing.batch_stack).
    (node_range,) = double.template()["Resources"]["MultiNodeJobDefinition"]["Properties"]["NodeProperties"][
        "NodeRangeProperties"
    ]
    condition, with_mlflow, without = node_range["Container"]["Environment"]["Fn::If"]
    ports = {"MNP_WORKER_PORT": {"Ref": "WorkerPort"}, "MNP_RENDEZVOUS_PORT": {"Ref": "RendezvousPort"}}
    assert condition == "HasMlflowPassword"
    assert {e["Name"]: e["Value"] for e in without} == ports
    assert {e["Name"]: e["Value"] for e in with_mlflow} == {
        **ports,
        "MLFLOW_TRACKING_USERNAME": {"Ref": "MlflowUsername"},
    }
    parameters = double.template()["Parameters"]
    assert (parameters["WorkerPort"]["Default"], parameters["RendezvousPort"]["Default"]) == (2222, 2223)
    # The job library's defaults, so a node started without the job definition's values listens there too.
    assert (distributed.DEFAULT_WORKER_PORT, distributed.DEFAULT_RENDEZVOUS_PORT) == (2222, 2223)


def test_single_node_instances_share_no_group_with_multinode_nodes(
    batch: dict[str, Any], stack: dict[str, Any]
) -> None:
    """A single-node job's instance carries the runner group only (no inbound rule): it can neither reach a
    multi-node job's ports nor be reached; the GPU queue never places a job in the multi-node environment."""
    outputs = batch["outputs"]
    multinode = _environment(batch, outputs["MultiNodeComputeEnvironment"])["computeResources"][
        "securityGroupIds"
    ]
    runner_group = stack["outputs"]["RunnerSecurityGroupId"]
    for output in ("SpotComputeEnvironment", "OnDemandComputeEnvironment"):
        groups = _environment(batch, outputs[output])["computeResources"]["securityGroupIds"]
        assert groups == [runner_group], output
        assert not set(groups) & (set(multinode) - {runner_group}), output
    order = {item["computeEnvironment"] for item in _queue(batch, "JobQueue")["computeEnvironmentOrder"]}
    assert outputs["MultiNodeComputeEnvironment"] not in order
    (runner,) = (
        batch["session"].client("ec2").describe_security_groups(GroupIds=[runner_group])["SecurityGroups"]
    )
    assert runner["IpPermissions"] == []


def test_gpu_queue_tries_spot_first_and_the_multinode_queue_never_spot(batch: dict[str, Any]) -> None:
    outputs = batch["outputs"]

    def order(queue: dict[str, Any]) -> list[str]:
        ordered = sorted(queue["computeEnvironmentOrder"], key=lambda item: int(item["order"]))
        return [item["computeEnvironment"] for item in ordered]

    gpu, multinode = _queue(batch, "JobQueue"), _queue(batch, "MultiNodeJobQueue")
    assert gpu["jobQueueName"] == f"{batch['name']}-gpu" and gpu["state"] == "ENABLED"
    assert order(gpu) == [outputs["SpotComputeEnvironment"], outputs["OnDemandComputeEnvironment"]]
    assert multinode["jobQueueName"] == f"{batch['name']}-multinode"
    # AWS runs no multi-node parallel job on spot: the multinode queue has only its own on-demand environment.
    assert order(multinode) == [outputs["MultiNodeComputeEnvironment"]]
    markets = {_environment(batch, arn)["computeResources"]["type"] for arn in order(multinode)}
    assert markets == {"EC2"}


def test_job_definitions_run_the_pinned_image_on_one_gpu_with_retries_on_spot_reclaims(
    batch: dict[str, Any],
) -> None:
    outputs = batch["outputs"]
    for output, name in (
        ("JobDefinition", f"{batch['name']}-train"),
        ("MultiNodeJobDefinition", f"{batch['name']}-train-multinode"),
    ):
        definition = _definition(batch, output)
        assert (definition["jobDefinitionName"], definition["status"]) == (name, "ACTIVE")
        # The multi-node definition's is its node range's container (see gpu_runner_testing.batch_stack).
        container = definition["containerProperties"]
        assert container["image"] == double.IMAGE
        assert container["jobRoleArn"] == outputs["JobRoleArn"]
        # str(): moto resolves a Number parameter's Ref to a number, CloudFormation to a string.
        requirements = {r["type"]: str(r["value"]) for r in container["resourceRequirements"]}
        assert requirements == {"GPU": "1", "VCPU": "4", "MEMORY": "14336"}
        assert container["logConfiguration"] == {"logDriver": "awslogs"}  # the default /aws/batch/job group
        assert container.get("privileged") is False
        # Actions "aren't case sensitive" (botocore's batch model, EvaluateOnExit action); moto lowercases them.
        retry = definition["retryStrategy"]
        rules = [{**rule, "action": rule["action"].upper()} for rule in retry["evaluateOnExit"]]
        assert retry["attempts"] == 3
        assert rules == [
            {"onStatusReason": "Host EC2*", "action": "RETRY"},
            {"onReason": "*", "action": "EXIT"},
        ]
    multinode = _definition(batch, "MultiNodeJobDefinition")["containerProperties"]
    assert multinode["instanceType"] == batch["parameters"]["MultiNodeInstanceType"]


def test_batch_template_settings_moto_does_not_apply() -> None:
    resources = double.template()["Resources"]
    data = resources["LaunchTemplate"]["Properties"]["LaunchTemplateData"]
    assert data["MetadataOptions"] == {
        "HttpTokens": "required",
        "HttpPutResponseHopLimit": 1,
        "HttpEndpoint": "enabled",
        "HttpProtocolIpv6": "disabled",
    }
    (volume,) = data["BlockDeviceMappings"]
    assert volume["Ebs"]["Encrypted"] is True and volume["Ebs"]["VolumeSize"] == {"Ref": "RootVolumeGb"}
    # MIME multi-part (what Batch merges), blocking awsvpc tasks from the instance's metadata credentials.
    user_data = data["UserData"]["Fn::Base64"]
    assert user_data.startswith("MIME-Version: 1.0\nContent-Type: multipart/mixed;")
    assert "echo ECS_AWSVPC_BLOCK_IMDS=true >> /etc/ecs/ecs.config" in user_data
    for name in ("JobDefinition", "MultiNodeJobDefinition"):
        properties = resources[name]["Properties"]
        assert properties["Timeout"] == {"AttemptDurationSeconds": {"Ref": "MaxRuntimeSeconds"}}
        assert properties["PlatformCapabilities"] == ["EC2"] and properties["PropagateTags"] is True
    node = resources["MultiNodeJobDefinition"]["Properties"]
    assert node["Type"] == "multinode"
    assert (node["NodeProperties"]["NumNodes"], node["NodeProperties"]["MainNode"]) == (2, 0)
    (node_range,) = node["NodeProperties"]["NodeRangeProperties"]
    assert node_range["TargetNodes"] == "0:"
    # The same container as the single-node definition, plus the one instance type all nodes share and their ports.
    single = resources["JobDefinition"]["Properties"]["ContainerProperties"]
    differ = ("InstanceType", "Environment")
    assert {k: v for k, v in node_range["Container"].items() if k not in differ} == {
        k: v for k, v in single.items() if k not in differ
    }
    # Both run their jobs as JobUser, never root, and no SubmitJob override can change that.
    for container in (single, node_range["Container"]):
        assert container["User"] == {"Ref": "JobUser"}
    job_user = double.template()["Parameters"]["JobUser"]
    assert job_user["Default"] == "1000:1000"
    assert not re.fullmatch(job_user["AllowedPattern"], "0:0") and not re.fullmatch(
        job_user["AllowedPattern"], "root"
    )
    assert "user" in BATCH_MODEL.shape_for("ContainerProperties").members
    for overrides in ("ContainerOverrides", "TaskContainerOverrides"):
        assert "user" not in BATCH_MODEL.shape_for(overrides).members, overrides
    # AWS's default: no ServiceRole (Batch's service-linked role) unless one is given.
    for name in ("SpotComputeEnvironment", "OnDemandComputeEnvironment", "MultiNodeComputeEnvironment"):
        service_role = resources[name]["Properties"]["ServiceRole"]
        assert service_role == {
            "Fn::If": ["HasServiceRole", {"Ref": "ServiceRoleArn"}, {"Ref": "AWS::NoValue"}]
        }
    assert double.template()["Parameters"]["ServiceRoleArn"]["Default"] == ""
    # use_spot: false leaves the spot environment out and the GPU queue with the on-demand one only.
    assert resources["SpotComputeEnvironment"]["Condition"] == "UseSpot"
    order = resources["GpuJobQueue"]["Properties"]["ComputeEnvironmentOrder"]
    condition, with_spot, without_spot = order["Fn::If"]
    assert condition == "UseSpot" and len(with_spot) == 2
    assert without_spot == [{"Order": 1, "ComputeEnvironment": {"Ref": "OnDemandComputeEnvironment"}}]


def _enum(shape: str) -> list[str]:
    return list(BATCH_MODEL.shape_for(shape).enum)


def test_the_template_uses_only_values_botocores_batch_model_allows() -> None:
    """cfn-lint checks types; the allowed words of the API are botocore's (the model AWS's SDKs are built from)."""
    resources = double.template()["Resources"]
    for name in ("SpotComputeEnvironment", "OnDemandComputeEnvironment", "MultiNodeComputeEnvironment"):
        compute = resources[name]["Properties"]["ComputeResources"]
        assert compute["AllocationStrategy"] in _enum("CRAllocationStrategy")
        assert compute["Type"] in _enum("CRType")
        (configuration,) = compute["Ec2Configuration"]
        # imageType has no enum in the model, only its documentation, which lists the values.
        documentation = BATCH_MODEL.shape_for("Ec2Configuration").members["imageType"].documentation
        assert f"<dt>{configuration['ImageType']}</dt>" in documentation
    for name in ("JobDefinition", "MultiNodeJobDefinition"):
        properties = resources[name]["Properties"]
        assert properties["Type"] in _enum("JobDefinitionType")
        actions = {rule["Action"] for rule in properties["RetryStrategy"]["EvaluateOnExit"]}
        assert actions <= set(_enum("RetryAction"))
        container = (
            properties.get("ContainerProperties")
            or properties["NodeProperties"]["NodeRangeProperties"][0]["Container"]
        )
        assert {r["Type"] for r in container["ResourceRequirements"]} <= set(_enum("ResourceType"))
    # Every queue cancels a job stuck at its head for want of capacity or of a fitting compute environment.
    capacity_wait = double.template()["Parameters"]["CapacityWaitSeconds"]
    # "The minimum value is 600 (10 minutes) and the maximum value is 86,400 (24 hours)" (the model's docs).
    documented = BATCH_MODEL.shape_for("JobStateTimeLimitAction").members["maxTimeSeconds"].documentation
    assert "minimum value is 600" in documented and "maximum value is 86,400" in documented
    assert (capacity_wait["MinValue"], capacity_wait["MaxValue"]) == (600, 86400)
    for name in ("GpuJobQueue", "MultiNodeJobQueue"):
        limits = resources[name]["Properties"]["JobStateTimeLimitActions"]
        assert {limit["Reason"] for limit in limits} == {
            "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY",
            "MISCONFIGURATION:COMPUTE_ENVIRONMENT_MAX_RESOURCE",
            "MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT",
        }, name
        for limit in limits:
            assert limit["Action"] == "CANCEL" and limit["Action"] in _enum("JobStateTimeLimitActionsAction")
            assert limit["State"] in _enum("JobStateTimeLimitActionsState")
            seconds = limit["MaxTimeSeconds"]
            assert seconds == {"Ref": "CapacityWaitSeconds"} or 600 <= seconds <= 86400, (name, limit)
    # And the check is not vacuous: AWS's other spot strategy name is in the enum, a made-up one is not.
    assert "SPOT_CAPACITY_OPTIMIZED" in _enum("CRAllocationStrategy")
    assert "SPOT_CHEAPEST" not in _enum("CRAllocationStrategy")


# --- IAM: parliament, then the evaluator call by call -------------------------------------------------------------


def _role_name(arn: str) -> str:
    return arn.rsplit("/", 1)[-1]


def _submit_policies(batch: dict[str, Any]) -> list[dict[str, Any]]:
    return managed_policies(batch["session"], _role_name(batch["outputs"]["SubmitRoleArn"]))


def _job_policies(batch: dict[str, Any]) -> list[dict[str, Any]]:
    return managed_policies(batch["session"], _role_name(batch["outputs"]["JobRoleArn"]))


def _split_submit_job(issue: str, detail: Any) -> bool:
    """parliament wants each SubmitJob statement to name all three resource types the action touches; the submit
    policy splits them because the tag condition belongs to the new job only, as AWS's own example splits the
    queue from the definition (AWS Batch User Guide, "Restrict job submission by resource tags on job definition
    and job queue"). Only that exact finding is accepted (test_stack_template accepts RunInstances' alike)."""
    return (
        issue == "RESOURCE_MISMATCH"
        and isinstance(detail, list)
        and bool(detail)
        and all(d.get("action") == "batch:SubmitJob" for d in detail)
    )


def _instance_policies(batch: dict[str, Any]) -> list[dict[str, Any]]:
    environment = _environment(batch, batch["outputs"]["OnDemandComputeEnvironment"])
    profile = environment["computeResources"]["instanceRole"].rsplit("/", 1)[-1]
    iam = batch["session"].client("iam")
    (role,) = iam.get_instance_profile(InstanceProfileName=profile)["InstanceProfile"]["Roles"]
    return managed_policies(batch["session"], role["RoleName"])


def test_policies_are_parliament_clean(batch: dict[str, Any]) -> None:
    documents = [*_submit_policies(batch), *_job_policies(batch), *_instance_policies(batch)]
    assert len(documents) == 4  # the instance role's two: the agent's, the image's (an ECR image here)
    for document in documents:
        findings = analyze_policy_string(json.dumps(document)).findings
        assert [f"{f.issue}: {f.detail}" for f in findings if not _split_submit_job(f.issue, f.detail)] == []
    # The filter is narrow: a statement granting SubmitJob on nothing Batch knows is still a finding.
    wrong = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "batch:SubmitJob",
             "Resource": "arn:aws:s3:::bucket/*"}]}  # fmt: skip
    assert analyze_policy_string(json.dumps(wrong)).findings


def _arn(kind: str, name: str) -> str:
    return f"arn:aws:batch:{REGION}:{ACCOUNT}:{kind}/{name}"


def _submit(queue: str, definition: str, tags: dict[str, str] | None = None) -> list[Request]:
    """The authorizations of one SubmitJob (Service Authorization Reference, AWS Batch: the queue, the definition
    and the new job, whose request tags are condition keys, plus batch:TagResource when it carries tags)."""
    context: dict[str, str | list[str]] = {f"aws:RequestTag/{k}": v for k, v in (tags or {}).items()}
    if tags:
        context["aws:TagKeys"] = sorted(tags)
    job = _arn("job", "*")
    requests = [
        Request("batch:SubmitJob", queue, context, "SubmitJob"),
        Request("batch:SubmitJob", definition, context, "SubmitJob"),
        Request("batch:SubmitJob", job, context, "SubmitJob"),
    ]
    if tags:
        requests.append(Request("batch:TagResource", job, context, "SubmitJob"))
    return requests


def _job(action: str, tags: dict[str, str]) -> Request:
    return Request(action, _arn("job", "0d9e6a2c-1"), {f"aws:ResourceTag/{k}": v for k, v in tags.items()})


def _parameter(name: str) -> str:
    return f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter{name}"


def test_the_submit_role_submits_watches_and_ends_only_its_own_jobs(
    batch: dict[str, Any], stack: dict[str, Any]
) -> None:
    policies, outputs, name = _submit_policies(batch), batch["outputs"], batch["name"]
    ours = {"gpu-batch:stack": name}
    for queue, definition in (
        (outputs["JobQueue"], outputs["JobDefinition"]),
        (outputs["MultiNodeJobQueue"], outputs["MultiNodeJobDefinition"]),
        (outputs["JobQueue"], _arn("job-definition", f"{name}-train")),  # the bare name: the latest revision
    ):
        for request in _submit(queue, definition, ours):
            assert allowed(policies, request), request
    refused = {
        "another queue": _submit(_arn("job-queue", "someone-elses-gpu"), outputs["JobDefinition"], ours),
        "another definition (another image, another role)": _submit(
            outputs["JobQueue"], _arn("job-definition", "someone-elses:1"), ours
        ),
        "a definition whose name starts like ours": _submit(
            outputs["JobQueue"], _arn("job-definition", f"{name}-training:1"), ours
        ),
        "an untagged job (it could not be ended)": _submit(outputs["JobQueue"], outputs["JobDefinition"]),
        "another stack's tag": _submit(
            outputs["JobQueue"], outputs["JobDefinition"], {"gpu-batch:stack": "x"}
        ),
    }
    for what, requests in refused.items():
        assert not all(allowed(policies, r) for r in requests), what
    assert allowed(policies, Request("batch:DescribeJobs", "*"))
    assert not allowed(policies, _job("batch:CancelJob", ours)), "TerminateJob cancels too: no CancelJob"
    for action in ("batch:TerminateJob",):
        assert allowed(policies, _job(action, ours)), action
        assert not allowed(policies, _job(action, {"gpu-batch:stack": "another-queue-stack"})), action
        assert not allowed(policies, _job(action, {})), action
    # Never a job definition of its own (any image with the job role), a role to pass, or another service.
    assert granted_actions(policies) == {"batch:SubmitJob", "batch:TagResource", "batch:DescribeJobs",
                                         "batch:DescribeJobQueues", "batch:DescribeComputeEnvironments",
                                         "batch:DescribeJobDefinitions", "ecs:DescribeContainerInstances",
                                         "ec2:DescribeSpotPriceHistory", "pricing:GetProducts", "batch:TerminateJob",
                                         "logs:GetLogEvents", "s3:PutObject"}  # fmt: skip
    assert not allowed(
        policies, Request("batch:RegisterJobDefinition", _arn("job-definition", f"{name}-train"))
    )
    assert not allowed(policies, Request("iam:PassRole", outputs["JobRoleArn"]))
    # Its jobs' logs, not the rest of the account-wide group.
    group = f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/batch/job:log-stream:"
    assert allowed(policies, Request("logs:GetLogEvents", f"{group}{name}-train/default/4f1c"))
    assert allowed(policies, Request("logs:GetLogEvents", f"{group}{name}-train-multinode/default/4f1c"))
    assert not allowed(policies, Request("logs:GetLogEvents", f"{group}other-project-train/default/4f1c"))
    # Nor a secret: the GitHub credential, the MLflow passwords, a runner's config.
    prefix = stack["settings"].ssm_prefix
    secrets = [f"{prefix}-github-credential", f"{prefix}/7-1/jitconfig",
               *mlflow_server.parameter_names(prefix).values()]  # fmt: skip
    for secret in secrets:
        assert not allowed(policies, Request("ssm:GetParameter", _parameter(secret))), secret


_O, _N = DEFAULT_REPOSITORY.split("/")
_WF = f"{_O}/{_N}/.github/workflows"
# Issue 31: batch.yml is the platform's, trusted at the commit the project pins (job_workflow_ref <path>@<sha>).
_PLATFORM, _C = TEST_PLATFORM.split("@")
_PF = f"{_PLATFORM}/.github/workflows"
SUBMIT_SUBJECTS = [
    ("the project's own batch.yml at the default branch (the trust before the platform held it)", f"repo:{_O}/{_N}:ref:refs/heads/train/x:job_workflow_ref:{_WF}/batch.yml@refs/heads/main", False),
    ("the platform's batch.yml at another commit", f"repo:{_O}/{_N}:ref:refs/heads/train/x:job_workflow_ref:{_PF}/batch.yml@{'0' * 40}", False),
    ("a fork of the platform at the pinned commit", f"repo:{_O}/{_N}:ref:refs/heads/sweep/y:job_workflow_ref:evil/{_PLATFORM.split('/')[1]}/.github/workflows/batch.yml@{_C}", False),
    ("the platform's batch.yml at a branch", f"repo:{_O}/{_N}:ref:refs/heads/train/x:job_workflow_ref:{_PF}/batch.yml@refs/heads/main", False),
    ("the pinned platform's batch.yml in a train branch's run", f"repo:{_O}/{_N}:ref:refs/heads/train/x:job_workflow_ref:{_PF}/batch.yml@{_C}", True),
    ("the same, immutable ids", f"repo:{_O}@1001/{_N}@2002:ref:refs/heads/train/x:job_workflow_ref:{_PF}/batch.yml@{_C}", True),
    ("the pinned platform's batch.yml in a sweep branch's run", f"repo:{_O}/{_N}:ref:refs/heads/sweep/y:job_workflow_ref:{_PF}/batch.yml@{_C}", True),
    ("the same, immutable ids (sweep)", f"repo:{_O}@1001/{_N}@2002:ref:refs/heads/sweep/y:job_workflow_ref:{_PF}/batch.yml@{_C}", True),
    ("a branch writer: a sweep branch's own batch.yml", f"repo:{_O}/{_N}:ref:refs/heads/sweep/y:job_workflow_ref:{_WF}/batch.yml@refs/heads/sweep/y", False),
    ("a branch writer: the branch's own batch.yml", f"repo:{_O}/{_N}:ref:refs/heads/train/x:job_workflow_ref:{_WF}/batch.yml@refs/heads/train/x", False),
    ("a branch writer: the pinned platform's file in another branch's run", f"repo:{_O}/{_N}:ref:refs/heads/feature:job_workflow_ref:{_PF}/batch.yml@{_C}", False),
    ("the default branch's own run (not a train branch)", f"repo:{_O}/{_N}:ref:refs/heads/main:job_workflow_ref:{_PF}/batch.yml@{_C}", False),
    ("a branch writer: a train branch calling another branch's copy", f"repo:{_O}/{_N}:ref:refs/heads/train/x:job_workflow_ref:{_WF}/batch.yml@refs/heads/feature", False),
    ("a branch named like the ref", f"repo:{_O}/{_N}:ref:refs/heads/train/x:job_workflow_ref:{_WF}/batch.yml@refs/heads/x.yml@refs/heads/main", False),
    ("a fork's pull request", f"repo:{_O}/{_N}:pull_request:job_workflow_ref:{_WF}/batch.yml@refs/pull/7/merge", False),
    ("a pull request calling the pinned platform's file", f"repo:{_O}/{_N}:pull_request:job_workflow_ref:{_PF}/batch.yml@{_C}", False),
    ("another workflow of the default branch", f"repo:{_O}/{_N}:ref:refs/heads/train/x:job_workflow_ref:{_WF}/train.yml@refs/heads/main", False),
    ("an environment job", f"repo:{_O}/{_N}:environment:prod:job_workflow_ref:{_PF}/batch.yml@{_C}", False),
    ("a tag", f"repo:{_O}/{_N}:ref:refs/tags/train/v1:job_workflow_ref:{_PF}/batch.yml@{_C}", False),
    ("another repository", f"repo:evil/{_N}:ref:refs/heads/train/x:job_workflow_ref:evil/{_N}/.github/workflows/batch.yml@refs/heads/main", False),
    ("a recycled owner name (other ids)", f"repo:{_O}@9999/{_N}@2002:ref:refs/heads/train/x:job_workflow_ref:{_PF}/batch.yml@{_C}", False),
    ("GitHub's default subject on a train branch", f"repo:{_O}/{_N}:ref:refs/heads/train/x", False),
]  # fmt: skip


@pytest.mark.parametrize(("who", "sub", "expected"), SUBMIT_SUBJECTS, ids=[row[0] for row in SUBMIT_SUBJECTS])
def test_only_the_default_branch_batch_workflow_in_a_train_or_sweep_branch_run_assumes_the_submit_role(
    batch: dict[str, Any], who: str, sub: str, expected: bool
) -> None:
    trust = role_of(batch["session"], batch["outputs"]["SubmitRoleArn"])["AssumeRolePolicyDocument"]
    provider = batch["parameters"]["OidcProviderArn"]
    claims = {f"{OIDC_URL}:aud": "sts.amazonaws.com", f"{OIDC_URL}:sub": sub}
    assert web_identity_allowed(trust, provider, claims) is expected, who
    assert not web_identity_allowed(trust, provider, {**claims, f"{OIDC_URL}:aud": "https://github.com/evil"})
    assert not web_identity_allowed(trust, provider + "-other", claims)


def test_no_other_principal_of_the_account_assumes_the_batch_roles(batch: dict[str, Any]) -> None:
    """Another principal in the account (a user, another role): the trusts name GitHub's OIDC provider and ECS
    tasks of this account only, never an account or role principal, so no identity policy elsewhere opens them."""
    session, outputs = batch["session"], batch["outputs"]
    (submit,) = role_of(session, outputs["SubmitRoleArn"])["AssumeRolePolicyDocument"]["Statement"]
    assert list(submit["Principal"]) == ["Federated"] and submit["Action"] == "sts:AssumeRoleWithWebIdentity"
    (job,) = role_of(session, outputs["JobRoleArn"])["AssumeRolePolicyDocument"]["Statement"]
    assert job["Principal"] == {"Service": "ecs-tasks.amazonaws.com"} and job["Action"] == "sts:AssumeRole"
    assert job["Condition"]["StringEquals"] == {"aws:SourceAccount": ACCOUNT}
    assert job["Condition"]["ArnLike"] == {"aws:SourceArn": f"arn:aws:ecs:{REGION}:{ACCOUNT}:*"}


def test_what_training_code_in_a_job_can_do(batch: dict[str, Any], stack: dict[str, Any]) -> None:
    """The job role: the bucket as the runner role has it, its own parameters; no secret, no Batch, no role."""
    policies, bucket = _job_policies(batch), stack["bucket"]
    prefix = stack["settings"].ssm_prefix
    same_account = {"aws:ResourceAccount": ACCOUNT}
    source = (
        f"batch-src/{'a' * 40}/{'b' * 64}.tar.gz"  # the job's code (batch_source.py): fetched, never written
    )
    # A task's own session (aws:userid "<role id>:<task id>"): its checkpoints; every prefix, test_training_writes.
    job_role = role_of(stack["session"], batch["outputs"]["JobRoleArn"])
    own = {**same_account, "aws:userid": f"{job_role['RoleId']}:{'a' * 32}"}
    for action, key in (("s3:GetObject", "data/train.npz"), ("s3:PutObject", f"checkpoints/{own['aws:userid']}/r/1.ckpt"),
                        ("s3:GetObject", source)):  # fmt: skip
        assert allowed(policies, Request(action, f"arn:aws:s3:::{bucket}/{key}", own)), action
    for action, key, context in (
        ("s3:GetObject", "x", {"aws:ResourceAccount": "1" * 12}),  # a stranger's bucket of the same name
        ("s3:PutObject", "runner-mirror/runner.tgz", same_account),
        ("s3:DeleteObject", "sweeps/s/journal/1.jsonl", same_account),
        # Replacing or deleting the archive another job is about to fetch, conditionally or not.
        ("s3:PutObject", source, same_account),
        ("s3:PutObject", source, {**same_account, "s3:if-none-match": "*"}),
        ("s3:DeleteObject", source, same_account),
    ):
        assert not allowed(policies, Request(action, f"arn:aws:s3:::{bucket}/{key}", context)), (action, key)
    assert allowed(policies, Request("ssm:GetParameter", _parameter(f"{prefix}-batch/config")))
    secrets = [f"{prefix}-github-credential", f"{prefix}/7-1/jitconfig", f"{prefix}-batchx/y",
               *mlflow_server.parameter_names(prefix).values()]  # fmt: skip
    for secret in secrets:
        assert not allowed(policies, Request("ssm:GetParameter", _parameter(secret))), secret
    outputs = batch["outputs"]
    for request in (
        *_submit(outputs["JobQueue"], outputs["JobDefinition"], {"gpu-batch:stack": batch["name"]}),
        Request("batch:RegisterJobDefinition", _arn("job-definition", "anything")),
        Request("iam:PassRole", outputs["JobRoleArn"]),
        Request("sts:AssumeRole", outputs["SubmitRoleArn"]),
        # Another multi-node job's rendezvous secret is in its SubmitJob node overrides: DescribeJobs would show it.
        Request("batch:DescribeJobs", "*"),
    ):
        assert not allowed(policies, request), request
    # The same data scope as the runner role: what one may do to the bucket, so may the other.
    runner = managed_policies(stack["session"], runner_role_name(stack))
    for action, key in (("s3:GetObject", "exports/m.keras"), ("s3:PutObject", "runner-mirror/x"),
                        ("s3:DeleteObject", "sweeps/s/waves/1.json"), ("s3:PutObject", "predictions/p.csv")):  # fmt: skip
        request = Request(action, f"arn:aws:s3:::{bucket}/{key}", same_account)
        assert allowed(policies, request) == allowed(runner, request), (action, key)


# Batch names an environment's ECS cluster <environment name>_Batch_<uuid>: botocore's own DescribeComputeEnvironments
# example (examples-1.json beside the batch model), read here so the pattern the policy names is held to it.
BATCH_EXAMPLES = json.loads(
    (Path(botocore.__file__).parent / "data" / "batch" / "2016-08-10" / "examples-1.json").read_text()
)


def _example_cluster_arn() -> str:
    (example,) = [e for e in BATCH_EXAMPLES["examples"]["DescribeComputeEnvironments"]]
    (environment,) = example["output"]["computeEnvironments"]
    assert environment["ecsClusterArn"].endswith(f":cluster/{environment['computeEnvironmentName']}_Batch_" + (
        "2c06f29d-d1fe-3a49-879d-42394c86effc"))  # fmt: skip
    return str(environment["ecsClusterArn"])


def _cluster(environment_name: str) -> str:
    """The ARN Batch gives the ECS cluster of an environment of ours, in the shape of botocore's example."""
    example = _example_cluster_arn()
    suffix = example.rsplit("/", 1)[1].split("_Batch_", 1)[1]
    return f"arn:aws:ecs:{REGION}:{ACCOUNT}:cluster/{environment_name}_Batch_{suffix}"


def _agent_calls(cluster: str, repository: str, stream: str) -> list[Call]:
    """What the ECS agent and Docker on a Batch instance ask AWS over the instance's life, each request held to
    botocore's model of its operation: find the endpoint, register, pull the image (ECR), write the job's log stream,
    report task and container states, drain on a Spot notice, deregister."""
    instance = f"{cluster.replace(':cluster/', ':container-instance/')}/0f1e2d3c4b5a69788796a5b4c3d2e1f0"
    digest = "sha256:" + "5" * 64
    task = f"{cluster.replace(':cluster/', ':task/')}/4f1c"
    requests = [
        ("ecs", "DiscoverPollEndpoint", {"containerInstance": instance, "cluster": cluster}),
        ("ecs", "RegisterContainerInstance", {"cluster": cluster, "instanceIdentityDocument": "{}",
                                              "instanceIdentityDocumentSignature": "x"}),
        ("ecr", "GetAuthorizationToken", {}),
        ("ecr", "BatchGetImage", {"repositoryName": repository, "imageIds": [{"imageDigest": digest}]}),
        ("ecr", "BatchCheckLayerAvailability", {"repositoryName": repository, "layerDigests": [digest]}),
        ("ecr", "GetDownloadUrlForLayer", {"repositoryName": repository, "layerDigest": digest}),
        ("logs", "CreateLogStream", {"logGroupName": "/aws/batch/job", "logStreamName": stream}),
        ("logs", "PutLogEvents", {"logGroupName": "/aws/batch/job", "logStreamName": stream,
                                  "logEvents": [{"timestamp": 1, "message": "epoch 1"}]}),
        ("ecs", "SubmitTaskStateChange", {"cluster": cluster, "task": task, "status": "RUNNING"}),
        ("ecs", "SubmitContainerStateChange", {"cluster": cluster, "task": task, "containerName": "default",
                                               "status": "STOPPED", "exitCode": 0}),
        ("ecs", "SubmitAttachmentStateChanges", {"cluster": cluster, "attachments": [
            {"attachmentArn": f"{task}/eni", "status": "ATTACHED"}]}),
        ("ecs", "UpdateContainerInstancesState", {"cluster": cluster, "containerInstances": [instance],
                                                  "status": "DRAINING"}),
        ("ecs", "DeregisterContainerInstance", {"cluster": cluster, "containerInstance": instance}),
    ]  # fmt: skip
    session = botocore.session.get_session()
    calls = []
    for service, operation, params in requests:
        validate_parameters(params, session.get_service_model(service).operation_model(operation).input_shape)
        calls.append(Call(service, operation, REGION, params))
    return calls


def _agent_requests(cluster: str, repository: str, stream: str) -> list[Request]:
    instance = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
    return [
        *(r for call in _agent_calls(cluster, repository, stream) for r in requests_for(
            call, instance_tags=lambda *_: {}, profile_role=lambda _: "", spot_role_exists=lambda: True)),
        *agent_sessions(REGION, cluster, instance),
    ]  # fmt: skip


def test_the_instance_role_is_the_ecs_agents_on_this_stacks_clusters_and_nothing_more(
    batch: dict[str, Any],
) -> None:
    """What the instances hold (only root on them reaches it: test_batch_imds.py): every call the ECS agent makes
    for a job of ours, in each of the three environments' clusters, and the same calls refused on any other
    cluster, repository or log stream; no managed policy, no other service."""
    policies, name = _instance_policies(batch), batch["name"]
    repository = double.IMAGE.split("/", 1)[1].split(":", 1)[0]
    assert (
        batch["parameters"]["ImageRepositoryArn"] == f"arn:aws:ecr:{REGION}:{ACCOUNT}:repository/{repository}"
    )
    ours = [_cluster(f"{name}-{kind}") for kind in ("spot", "on-demand", "multinode")]
    for cluster in ours:
        for stream in (f"{name}-train/default/4f1c", f"{name}-train-multinode/default/4f1c"):
            denied = [r for r in _agent_requests(cluster, repository, stream) if not allowed(policies, r)]
            assert denied == [], denied
    granted = {r.action for r in _agent_requests(ours[0], repository, f"{name}-train/default/4f1c")}
    assert granted_actions(policies) == granted
    suffix = _cluster("x").rsplit("_Batch_", 1)[1]
    elsewhere = {
        "another project's cluster": _cluster("other-project-on-demand"),
        "a cluster named to look like ours": f"arn:aws:ecs:{REGION}:{ACCOUNT}:cluster/{name}-on-demand_Batch_x_Batch_{suffix}",
        "a longer environment name of ours": _cluster(f"{name}-on-demand-2"),
        "the default cluster": f"arn:aws:ecs:{REGION}:{ACCOUNT}:cluster/default",
        "our name in another region": _cluster(f"{name}-on-demand").replace(REGION, "eu-west-1"),
    }  # fmt: skip
    for what, cluster in elsewhere.items():
        ecs = [r for r in _agent_requests(cluster, repository, f"{name}-train/default/4f1c")
               if r.action.startswith("ecs:") and r.action != "ecs:DiscoverPollEndpoint"]  # fmt: skip
        assert ecs and not any(allowed(policies, r) for r in ecs), what
    for what, request in {
        "pull another repository": Request("ecr:BatchGetImage", f"arn:aws:ecr:{REGION}:{ACCOUNT}:repository/other"),
        "write another definition's stream": Request(
            "logs:PutLogEvents", f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/batch/job:log-stream:other-train/default/1"),
        "write another group": Request(
            "logs:CreateLogStream", f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/other:log-stream:{name}-train/default/1"),
        "create a cluster": Request("ecs:CreateCluster", f"arn:aws:ecs:{REGION}:{ACCOUNT}:cluster/x"),
        "run a task": Request("ecs:RunTask", f"arn:aws:ecs:{REGION}:{ACCOUNT}:task-definition/x:1"),
        "read the bucket": Request("s3:GetObject", f"arn:aws:s3:::{batch['parameters']['BucketName']}/data/x"),
        "assume the job role": Request("sts:AssumeRole", batch["outputs"]["JobRoleArn"]),
        "submit a job": Request("batch:SubmitJob", batch["outputs"]["JobQueue"]),
    }.items():  # fmt: skip
        assert not allowed(policies, request), what
    # moto attaches no ManagedPolicyArns: on the template, none (AmazonEC2ContainerServiceforEC2Role was there).
    assert "ManagedPolicyArns" not in double.template()["Resources"]["InstanceRole"]["Properties"]


def test_an_image_outside_ecr_gets_no_ecr_permission() -> None:
    """ImageRepositoryArn is derived from the image; an image of another registry leaves the ECR statements out
    (HasEcrImage), an ECR one names its repository only."""
    assert (
        batch_stack.ecr_repository_arn(double.IMAGE)
        == f"arn:aws:ecr:{REGION}:{ACCOUNT}:repository/ml-project"
    )
    china = f"123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn/team/train@sha256:{'a' * 64}"
    assert (
        batch_stack.ecr_repository_arn(china)
        == "arn:aws-cn:ecr:cn-north-1:123456789012:repository/team/train"
    )
    assert batch_stack.ecr_repository_arn(f"ghcr.io/org/train:1@sha256:{'a' * 64}") == ""
    assert batch_stack.ecr_repository_arn(f"public.ecr.aws/org/train@sha256:{'a' * 64}") == ""
    resources = double.template()["Resources"]
    assert resources["InstanceImagePolicy"]["Condition"] == "HasEcrImage"
    assert double.template()["Conditions"]["HasEcrImage"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "ImageRepositoryArn"}, ""]}]
    }
    granted = {
        a
        for s in resources["InstancePolicy"]["Properties"]["PolicyDocument"]["Statement"]
        for a in s["Action"]
    }
    assert not any(action.startswith("ecr:") for action in granted)
    pattern = double.template()["Parameters"]["ImageRepositoryArn"]["AllowedPattern"]
    assert re.fullmatch(pattern, batch_stack.ecr_repository_arn(double.IMAGE)) and re.fullmatch(pattern, "")


def test_the_submit_role_ships_only_new_archives_under_batch_src(batch: dict[str, Any]) -> None:
    """`batch ship` puts the commit's archive with If-None-Match: *; the submit role can do nothing else to the
    bucket: not replace or delete an archive (the fetch's hash check would catch it, the policy refuses first), not
    read one, not write the project's data."""
    policies, bucket = _submit_policies(batch), batch["parameters"]["BucketName"]
    source = f"arn:aws:s3:::{bucket}/batch-src/{'a' * 40}/{'b' * 64}.tar.gz"
    assert allowed(policies, Request("s3:PutObject", source, {"s3:if-none-match": "*"}))
    for request in (
        Request("s3:PutObject", source),  # no precondition: it would replace what is there
        Request("s3:PutObject", source, {"s3:if-none-match": '"etag"'}),
        Request("s3:PutObject", f"arn:aws:s3:::{bucket}/data/train.npz", {"s3:if-none-match": "*"}),
        Request("s3:GetObject", source),
        Request("s3:DeleteObject", source),
    ):
        assert not allowed(policies, request), request


def test_branch_writers_get_no_batch_access(batch: dict[str, Any], stack: dict[str, Any]) -> None:
    """The gpu-runner stack's roles (a branch writer holds the train or sweep role in its jobs; training code on a
    runner the runner role) may neither submit nor end Batch jobs, nor terminate the Batch instances."""
    roles = {
        "train": role_policies(stack, "TrainRoleArn"),
        "sweep": role_policies(stack, "SweepRoleArn"),
        "predict": role_policies(stack, "PredictRoleArn"),
        "reaper": role_policies(stack, "ReaperRoleArn"),
        "runner": managed_policies(stack["session"], runner_role_name(stack)),
    }
    outputs = batch["outputs"]
    environment = _environment(batch, outputs["OnDemandComputeEnvironment"])
    tags = environment["computeResources"]["tags"]
    instance = Request("ec2:TerminateInstances", f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/i-0123456789abcdef0",
                       {f"ec2:ResourceTag/{k}": v for k, v in tags.items()})  # fmt: skip
    for role, policies in roles.items():
        requests = [*_submit(outputs["JobQueue"], outputs["JobDefinition"], {"gpu-batch:stack": batch["name"]}),
                    _job("batch:TerminateJob", {"gpu-batch:stack": batch["name"]}), instance]  # fmt: skip
        for request in requests:
            assert not allowed(policies, request), (role, request)


# --- bad input -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"image": ""}, "image: empty; Batch runs every job in a container"),
        ({"image": "ghcr.io/org/train:1.0"}, "image: 'ghcr.io/org/train:1.0' is not pinned by digest"),
        (
            {"instance_types": ["g3.4xlarge"]},
            "instance_types: 'g3.4xlarge' is a family Batch's Amazon Linux 2023",
        ),
    ],
    ids=["no image", "unpinned image", "a family the GPU image does not support"],
)
def test_settings_batch_cannot_run_are_refused_before_any_aws_call(
    settings_file: Path,
    tmp_path: Path,
    recorded: tuple[list[Any], Any],
    changes: dict[str, Any],
    message: str,
) -> None:
    path = double.batch_settings(settings_file, tmp_path, **changes)
    calls, _ = recorded
    code, _, err = double.run_cli(["--settings", str(path), "batch", "up", "--repository", DEFAULT_REPOSITORY,
                                   "--template", str(double.BATCH_TEMPLATE)])  # fmt: skip
    assert code != 0 and message in err, err
    assert calls == []


def test_the_template_pins_the_image_with_the_settings_pattern() -> None:
    """settings.py refuses an unpinned image as it loads (the CLI test above); the template's parameter refuses one
    with the same pattern, so a stack deployed by hand cannot take a tag either."""
    assert double.template()["Parameters"]["Image"]["AllowedPattern"] == PINNED_IMAGE.pattern


def test_up_without_the_runner_stack_says_to_bootstrap(
    settings_file: Path, tmp_path: Path, moto_endpoint: str
) -> None:
    path = double.batch_settings(settings_file, tmp_path, project="never-bootstrapped")
    code, _, err = double.up(path)
    assert code != 0 and "no gpu-runner stack" in err and "run `make bootstrap` first" in err, err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--max-vcpus", "0"), "--max-vcpus: 0 must be at least 1"),
        (("--service-role-arn", "batch-role"), "--service-role-arn: 'batch-role' is not an IAM role ARN"),
        (("--submit-workflow", "../evil"), "--submit-workflow: '../evil' is not a workflow file name"),
    ],
)
def test_bad_flags_are_refused(
    settings_file: Path, tmp_path: Path, extra: tuple[str, ...], message: str
) -> None:
    code, _, err = double.up(double.batch_settings(settings_file, tmp_path), *extra)
    assert code != 0 and message in err, err


def test_outputs_and_down_of_a_stack_that_is_not_there(
    settings_file: Path, moto_endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = load_settings(settings_file)
    cfn = double.moto_session().client("cloudformation")
    with pytest.raises(batch_stack.BatchStackError, match=r"no Batch stack .* run `make batch-up` first"):
        batch_stack.batch_outputs(cfn, settings, "someone/else")
    caplog.set_level(logging.INFO, logger=batch_stack.__name__)
    batch_stack.down(settings, cfn, "someone/else")
    assert "nothing to delete" in caplog.text


def test_batch_outputs_reads_the_deployed_stack(batch: dict[str, Any], stack: dict[str, Any]) -> None:
    cfn = batch["session"].client("cloudformation")
    outputs = batch_stack.batch_outputs(cfn, stack["settings"], DEFAULT_REPOSITORY)
    assert {key: outputs[key] for key in batch_stack.OUTPUTS} == {
        key: batch["outputs"][key] for key in batch_stack.OUTPUTS
    }


def test_submits_default_queue_and_definition_are_the_deployed_ones(batch: dict[str, Any]) -> None:
    """`batch submit` without --queue / --job-definition names what the stack built (by name: the outputs are
    ARNs, the definition's with its revision)."""
    outputs = batch["outputs"]
    for multinode, (queue_key, definition_key) in ((False, ("JobQueue", "JobDefinition")),
                                                   (True, ("MultiNodeJobQueue", "MultiNodeJobDefinition"))):  # fmt: skip
        queue, definition = batch_stack.job_targets(batch["name"], multinode=multinode)
        assert outputs[queue_key].endswith(f":job-queue/{queue}"), (queue, outputs[queue_key])
        assert outputs[definition_key].rsplit(":", 1)[0].endswith(f":job-definition/{definition}")


def test_stack_names_leave_room_for_queue_and_definition_names() -> None:
    name = batch_stack.batch_stack_name("p" * 300, DEFAULT_REPOSITORY)
    assert len(name) == stack_names.BATCH_STACK_NAME_MAX and name.startswith("batch-ppp")
    # Batch's 128-character name limit holds for the longest name the template derives from it.
    assert len(name + stack_names.BATCH_LONGEST_SUFFIX) == 128
    assert stack_names.BATCH_LONGEST_SUFFIX == "-train-multinode"
    assert double.template()["Resources"]["MultiNodeJobDefinition"]["Properties"]["JobDefinitionName"] == {
        "Fn::Sub": "${AWS::StackName}" + stack_names.BATCH_LONGEST_SUFFIX
    }
    # Different repositories of one project get different stacks (and queues).
    assert name != batch_stack.batch_stack_name("p" * 300, "other/repo")


def test_the_batch_command_group_has_up_and_down() -> None:
    parser = cli.parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["batch", "launch", "--repository", DEFAULT_REPOSITORY])
    args = parser.parse_args(["batch", "up", "--repository", DEFAULT_REPOSITORY])
    assert (args.command, args.action, args.max_vcpus, args.template) == (
        "batch",
        "up",
        16,
        BATCH_TEMPLATE,
    )


def test_a_rerun_keeps_the_queues_and_definitions(batch: dict[str, Any], batch_settings_file: Path) -> None:
    """`make batch-up` again with the same settings (after a template update, say): the stack is updated, not
    replaced; the queues and job definition revisions the workflows hold stay valid."""
    code, _, err = double.up(batch_settings_file, "--service-role-arn", batch["parameters"]["ServiceRoleArn"])
    assert code == 0, err
    cfn = batch["session"].client("cloudformation")
    (again,) = cfn.describe_stacks(StackName=batch["name"])["Stacks"]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in again["Outputs"]}
    for key in batch_stack.OUTPUTS:
        assert outputs[key] == batch["outputs"][key], key
    assert _queue(batch, "JobQueue")["status"] == "VALID"


@pytest.mark.slow  # a bootstrap stack of its own (~5 s), then a Batch stack
def test_without_spot_the_gpu_queue_is_on_demand_only(
    tmp_path: Path, oidc_provider: str, ami_for_infra: str, stack: dict[str, Any]
) -> None:
    """`use_spot: false`: no spot environment, the GPU queue on-demand only. Its own project and bootstrap stack,
    so the module's stack stays as the other tests read it. (Not `batch down` against moto: moto deletes a
    stack's resources in creation order, a role before the policy attached to it, and IAM refuses: DeleteConflict,
    as gpu_runner_testing.gpu_runner_stack says of the bootstrap stack.)"""
    runner_settings = write_settings(tmp_path / "gpu-runner.yaml")
    project = load_settings(runner_settings).project
    bootstrap(runner_settings, project=project, region=REGION, repository=DEFAULT_REPOSITORY,
                         bucket=f"batch-test-{uuid.uuid4().hex[:12]}", oidc_provider=oidc_provider)  # fmt: skip
    session = double.moto_session()
    cfn = session.client("cloudformation")
    try:
        path = double.batch_settings(runner_settings, tmp_path, use_spot=False)
        code, _, err = double.up(path, "--service-role-arn", double.service_role(session))
        assert code == 0, err
        outputs = batch_stack.batch_outputs(cfn, load_settings(path), DEFAULT_REPOSITORY)
        parameters = cfn.describe_stacks(StackName=batch_stack.batch_stack_name(project, DEFAULT_REPOSITORY))
        assert {"ParameterKey": "UseSpot", "ParameterValue": "false"} in parameters["Stacks"][0]["Parameters"]
        assert "SpotComputeEnvironment" not in outputs
        for output, environment in (("JobQueue", "OnDemandComputeEnvironment"),
                                    ("MultiNodeJobQueue", "MultiNodeComputeEnvironment")):  # fmt: skip
            (queue,) = session.client("batch").describe_job_queues(jobQueues=[outputs[output]])["jobQueues"]
            (only,) = queue["computeEnvironmentOrder"]
            assert only["computeEnvironment"] == outputs[environment], output
    finally:
        # The batch stack only; its bootstrap stack stays, as test_doctor's does.
        with contextlib.suppress(ClientError):  # best effort, as the session's stack (see above)
            cfn.delete_stack(StackName=batch_stack.batch_stack_name(project, DEFAULT_REPOSITORY))
        _give_the_session_stack_its_key_alias_back(stack)


def _give_the_session_stack_its_key_alias_back(stack: dict[str, Any]) -> None:
    """A test's own bootstrap shares the session stack's ssm_prefix, and moto lets it take the jit-config key alias
    (alias/gpu-runner/<repository>/jit-config) away from the session stack's key, where AWS would refuse the second
    alias. Point it back: test_key_policies reads it later in the same worker (CI's custom bake failed so)."""
    kms = stack["session"].client("kms")
    alias = naming.jit_config_key_alias(stack["settings"].ssm_prefix)
    key = stack["outputs"]["JitConfigKeyArn"].rsplit("/", 1)[-1]
    try:
        kms.update_alias(AliasName=alias, TargetKeyId=key)
    except ClientError:
        kms.create_alias(AliasName=alias, TargetKeyId=key)


@pytest.mark.slow  # a bootstrap stack of its own (~5 s), then a Batch stack
def test_jobs_get_the_mlflow_password_from_ssm_never_in_their_request(
    tmp_path: Path, oidc_provider: str, ami_for_infra: str, stack: dict[str, Any]
) -> None:
    """With the team MLflow server deployed, `make batch-up` gives both job definitions its CI user and the SSM
    name of its password (`secrets`), which the ECS agent reads with an execution role that may read that one
    parameter. Nobody who may describe jobs or job definitions sees the password; the job role still cannot read
    it (test_what_training_code_in_a_job_can_do). Its own project, as test_without_spot_the_gpu_queue_is_on_demand_only."""
    runner_settings = write_settings(tmp_path / "gpu-runner.yaml")
    settings = load_settings(runner_settings)
    bootstrap(runner_settings, project=settings.project, region=REGION, repository=DEFAULT_REPOSITORY,
              bucket=f"batch-test-{uuid.uuid4().hex[:12]}", oidc_provider=oidc_provider)  # fmt: skip
    session = double.moto_session()
    cfn = session.client("cloudformation")
    names = mlflow_server.parameter_names(settings.ssm_prefix)
    # A parameter of this test's own: the session's MLflow server tests read <ssm_prefix>-mlflow-ci-password in
    # the same moto (this bootstrap shares the session stack's ssm_prefix).
    ci_parameter = f"/batch-test-{uuid.uuid4().hex[:8]}/mlflow-ci-password"
    password = f"pw-{uuid.uuid4().hex}"
    ssm = session.client("ssm")
    ssm.put_parameter(Name=ci_parameter, Value=password, Type="SecureString")
    # The MLflow server stack's two outputs batch up reads (gpu_runner/mlflow_server/mlflow-server.yaml CiUsername, CiPasswordParameter).
    server = mlflow_server.server_stack_name(settings.project, DEFAULT_REPOSITORY)
    server_template = {
        "Resources": {"Handle": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
        "Outputs": {"CiUsername": {"Value": "ci-bot"}, "CiPasswordParameter": {"Value": ci_parameter}},
    }
    cfn.create_stack(StackName=server, TemplateBody=json.dumps(server_template))
    name = batch_stack.batch_stack_name(settings.project, DEFAULT_REPOSITORY)
    try:
        path = double.batch_settings(runner_settings, tmp_path)
        code, _, err = double.up(path, "--service-role-arn", double.service_role(session))
        assert code == 0, err
        outputs = batch_stack.batch_outputs(cfn, load_settings(path), DEFAULT_REPOSITORY)
        client = session.client("batch")
        parameter_arn = f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter{ci_parameter}"
        described = client.describe_job_definitions(
            jobDefinitions=[outputs["JobDefinition"], outputs["MultiNodeJobDefinition"]]
        )["jobDefinitions"]
        containers = [d.get("containerProperties") or d["nodeProperties"]["nodeRangeProperties"][0]["container"]
                      for d in described]  # fmt: skip
        assert len(containers) == 2
        execution_roles = set()
        for container in containers:
            assert container["secrets"] == [{"name": "MLFLOW_TRACKING_PASSWORD", "valueFrom": parameter_arn}]
            assert {"name": "MLFLOW_TRACKING_USERNAME", "value": "ci-bot"} in container["environment"]
            execution_roles.add(container["executionRoleArn"])
        assert password not in json.dumps(described, default=str)
        (execution_role,) = execution_roles
        policies = managed_policies(session, execution_role.rsplit("/", 1)[-1])
        for document in policies:
            assert not analyze_policy_string(json.dumps(document)).findings, document
        assert allowed(policies, Request("ssm:GetParameters", parameter_arn))
        others = [names["admin"], names["ci"], f"{settings.ssm_prefix}-github-credential",
                  f"{settings.ssm_prefix}-batch/x", f"{ci_parameter}-old"]  # fmt: skip
        for other in others:
            assert not allowed(policies, Request("ssm:GetParameters", _parameter(other))), other
        for request in (
            Request("ssm:GetParameter", parameter_arn),
            Request("s3:GetObject", "arn:aws:s3:::b/k"),
        ):
            assert not allowed(policies, request), request
        trust = role_of(session, execution_role)["AssumeRolePolicyDocument"]
        assert trust["Statement"][0]["Principal"] == {"Service": "ecs-tasks.amazonaws.com"}
    finally:
        for deployed in (name, server):  # best effort, as test_without_spot_the_gpu_queue_is_on_demand_only
            with contextlib.suppress(ClientError):
                cfn.delete_stack(StackName=deployed)
        ssm.delete_parameter(Name=ci_parameter)
        _give_the_session_stack_its_key_alias_back(stack)


def test_without_an_mlflow_server_jobs_get_no_secret(batch: dict[str, Any]) -> None:
    """The session's Batch stack has no MLflow server beside it: no execution role, no secret, no user."""
    assert batch["parameters"]["MlflowPasswordParameter"] == ""
    container = _definition(batch, "JobDefinition")["containerProperties"]
    assert not container.get("secrets") and not container.get("executionRoleArn")
    assert "MLFLOW_TRACKING_USERNAME" not in {e["name"] for e in container.get("environment", [])}


# ---- Call by call: what `gpu-runner batch submit | wait | cancel` really asks, held to the deployed SubmitRole.
def _mirror_on_the_batch_host(endpoint: str, outputs: dict[str, str]) -> None:
    """The stack's GPU queue and job definition under the same ARNs on the batch host (moto's Batch backend whose
    jobs run as local processes: gpu_runner_testing/batch_host.py), on a Spot compute environment as the stack's first one."""
    environment = batch_world.compute_environment(endpoint, "mirror-spot", "SPOT", ["g4dn.xlarge"], REGION)
    batch_world.queue(endpoint, outputs["JobQueue"].rsplit("/", 1)[-1], environment, REGION)
    name = outputs["JobDefinition"].rsplit("/", 1)[-1].split(":")[0]
    registered = boto3.client("batch", region_name=REGION, endpoint_url=endpoint).register_job_definition(
        jobDefinitionName=name, type="container",
        containerProperties={"image": batch_world.IMAGE, "command": ["true"],
                             "resourceRequirements": batch_world.RESOURCES},
    )  # fmt: skip
    assert registered["jobDefinitionArn"] == outputs["JobDefinition"], "the mirror must have the stack's ARN"


def test_every_call_of_submit_wait_and_cancel_is_the_submit_roles_and_nothing_more(
    batch: dict[str, Any], batch_settings_file: Path, batch_endpoint: str, monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:  # fmt: skip
    """The CLI runs for real against the batch host (a job that prints and ends, priced by `wait`; a second one
    cancelled while it runs), its calls recorded; each authorization they need is allowed by the deployed
    SubmitRole's policies, and the policies grant no action the commands do not use."""
    outputs = batch["outputs"]
    # Read from the session's moto before AWS_ENDPOINT_URL points at the batch host.
    policies = _submit_policies(batch)
    _mirror_on_the_batch_host(batch_endpoint, outputs)
    session = boto3.Session(region_name=REGION)
    calls = record_calls(session)
    monkeypatch.setenv("AWS_ENDPOINT_URL", batch_endpoint)
    monkeypatch.setenv("GITHUB_OUTPUT", str(tmp_path / "output"))
    monkeypatch.setenv("GITHUB_REPOSITORY", DEFAULT_REPOSITORY)
    monkeypatch.setattr(cli, "Aws", lambda: Aws(session))
    base = ["--settings", str(batch_settings_file), "batch"]

    def submit(name: str, code: str) -> str:
        (tmp_path / "output").write_text("")
        argv = [*base, "submit", "--queue", outputs["JobQueue"], "--job-definition", outputs["JobDefinition"],
                "--name", name, "--repository", DEFAULT_REPOSITORY, "--", sys.executable, "-c", code]  # fmt: skip
        assert cli.main(argv) == 0
        return (tmp_path / "output").read_text().strip().split("job-id=", 1)[1]

    # The job's code first: shipped, then shipped again by a re-run (the same archive is already there).
    boto3.client("s3", region_name=REGION, endpoint_url=batch_endpoint).create_bucket(
        Bucket=batch["parameters"]["BucketName"], CreateBucketConfiguration={"LocationConstraint": REGION}
    )
    repository, commit = committed_repository(tmp_path / "repo")
    ship = [
        *base,
        "ship",
        "--bucket",
        batch["parameters"]["BucketName"],
        "--commit",
        commit,
        "--repo-dir",
        str(repository),
    ]
    assert cli.main(ship) == 0 and cli.main(ship) == 0
    done = submit("train-1", "print('epoch 1')")
    assert cli.main([*base, "wait", "--job-id", done, "--poll-seconds", "0.2", "--timeout", "120"]) == 0
    running = submit("train-2", "import time; time.sleep(600)")
    host = boto3.client("batch", region_name=REGION, endpoint_url=batch_endpoint)
    deadline = time.monotonic() + 120
    while host.describe_jobs(jobs=[running])["jobs"][0]["status"] != "RUNNING":
        assert time.monotonic() < deadline, "the second job never ran"
        time.sleep(0.2)
    assert cli.main([*base, "cancel", "--job-id", running]) == 0

    def job_tags(region: str, job_id: str) -> dict[str, str]:
        return dict(host.describe_jobs(jobs=[job_id])["jobs"][0].get("tags", {}))

    requests = [r for call in calls for r in requests_for(
        call, instance_tags=lambda *_: {}, profile_role=lambda _: "", spot_role_exists=lambda: True,
        job_tags=job_tags)]  # fmt: skip
    assert {r.action for r in requests} >= {"batch:SubmitJob", "batch:DescribeJobs", "batch:TerminateJob",
                                             "logs:GetLogEvents", "s3:PutObject"}, {c.operation for c in calls}  # fmt: skip
    denied = [r for r in requests if not allowed(policies, r)]
    assert denied == [], denied
    assert granted_actions(policies) == {r.action for r in requests}
