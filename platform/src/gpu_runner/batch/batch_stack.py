"""`gpu-runner batch up | down`: the optional AWS Batch stack (gpu_runner/batch/batch.yaml), for `backend: batch`.

`up` runs after `bootstrap`: it reads the bucket, the runner security group, the VPC, the OIDC provider and the
trusted repository from the gpu-runner stack (so the two cannot drift), takes the image, instance types, spot choice
and run time from configs/gpu-runner.yaml, and deploys the stack. Its outputs (OUTPUTS) are what `batch submit`
reads.
"""

from __future__ import annotations

import logging
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_runner.batch import TEMPLATE
from gpu_runner.core.errors import RunnerError
from gpu_runner.core.settings import Settings
from gpu_runner.core.stack_names import REPOSITORY, batch_stack_name, server_stack_name, stack_name
from gpu_runner.setup import stack

log = logging.getLogger(__name__)

# What the stack must output; the submit side reads exactly these names.
OUTPUTS = frozenset(
    {"JobQueue", "MultiNodeJobQueue", "JobDefinition", "MultiNodeJobDefinition", "JobRoleArn", "SubmitRoleArn",
     "LogGroup"}
)  # fmt: skip
# ECS_AL2023_NVIDIA, the compute environments' image type, "doesn't support p3 and g3 instance types" (botocore
# 1.44.8's batch model, Ec2Configuration imageType).
AL2023_NVIDIA_UNSUPPORTED = ("p3", "g3")
DEFAULT_MAX_VCPUS = 16
# The tag every job must carry, valued with the stack's name: the submit role submits and ends only jobs tagged so
# (gpu_runner/batch/batch.yaml SubmitPolicy; its JobTagKey output is this key, tests/runner/test_batch_stack.py holds them
# equal).
JOB_TAG_KEY = "gpu-batch:stack"
# What the submit role's trust names: this workflow of the platform at the commit the gpu-runner stack trusts
# (gpu_runner/batch/batch.yaml SubmitRole).
DEFAULT_SUBMIT_WORKFLOW = "batch.yml"
# The gpu-runner stack parameters the submit role's trust and the node security group reuse.
RUNNER_STACK_PARAMETERS = (
    "GitHubOwner",
    "GitHubRepository",
    "GitHubOwnerId",
    "GitHubRepositoryId",
    "PlatformRepository",
    "PlatformCommit",
    "TrainBranchPrefix",
    "SweepBranchPrefix",
)


# A private ECR image: <account>.dkr.ecr[-fips].<region>.amazonaws.com[.cn]/<repository>[:tag]@sha256:... (Amazon
# ECR User Guide, "Private registry concepts": the registry URL; the China regions' domain ends .com.cn). The
# instances may pull from that one repository only (gpu_runner/batch/batch.yaml InstancePolicy).
ECR_IMAGE = re.compile(
    r"(?P<account>\d{12})\.dkr\.ecr(?:-fips)?\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?P<china>\.cn)?/"
    r"(?P<repository>[a-z0-9][a-z0-9._/-]*?)(?::[A-Za-z0-9_][A-Za-z0-9_.-]*)?@sha256:[0-9a-f]{64}"
)


def ecr_repository_arn(image: str) -> str:
    """The ECR repository ARN of a pinned image, or "" for an image outside ECR (no ECR permission then)."""
    match = ECR_IMAGE.fullmatch(image)
    if match is None:
        return ""
    partition = "aws-cn" if match["china"] else "aws"
    return f"arn:{partition}:ecr:{match['region']}:{match['account']}:repository/{match['repository']}"


class BatchStackError(RunnerError):
    """The Batch stack cannot be deployed as asked (the message names the field and the fix)."""


@dataclass(frozen=True)
class BatchInputs:
    repository: str  # owner/name, as bootstrap was given it
    max_vcpus: int = DEFAULT_MAX_VCPUS
    service_role_arn: str = ""
    submit_workflow: str = DEFAULT_SUBMIT_WORKFLOW

    def __post_init__(self) -> None:
        problems = []
        if not REPOSITORY.fullmatch(self.repository):
            problems.append(f"--repository: '{self.repository}' is not owner/name (e.g. your-org/ml-project)")
        if self.max_vcpus < 1:
            problems.append(
                f"--max-vcpus: {self.max_vcpus} must be at least 1 (one job needs 4 on g4dn.xlarge)"
            )
        if self.service_role_arn and not re.fullmatch(
            r"arn:aws[a-z-]*:iam::\d{12}:role/\S+", self.service_role_arn
        ):
            problems.append(f"--service-role-arn: '{self.service_role_arn}' is not an IAM role ARN")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+\.ya?ml", self.submit_workflow):
            problems.append(
                f"--submit-workflow: '{self.submit_workflow}' is not a workflow file name like batch.yml"
            )
        if problems:
            raise BatchStackError("invalid batch input:\n  " + "\n  ".join(problems))


def job_targets(stack_name: str, *, multinode: bool = False) -> tuple[str, str]:
    """The queue and job definition the template names for a stack (stack_names.BATCH_LONGEST_SUFFIX): what
    `batch submit` uses unless it is told others. SubmitJob takes either by name (the definition's latest active
    revision)."""
    if multinode:
        return f"{stack_name}-multinode", f"{stack_name}-train-multinode"
    return f"{stack_name}-gpu", f"{stack_name}-train"


def settings_problems(settings: Settings) -> list[str]:
    """What configs/gpu-runner.yaml must fix before a Batch stack can run its image (none: an empty list)."""
    problems = []
    # An unpinned image never gets here: Settings refuses one as it is built (settings.PINNED_IMAGE, the pattern
    # gpu_runner/batch/batch.yaml's Image parameter repeats). Empty is valid for runners (host mode), not for Batch.
    if not settings.image:
        problems.append(
            "image: empty; Batch runs every job in a container: set it to the training image pinned by digest "
            "(<name>:<tag>@sha256:<64 hex>, e.g. from `docker buildx imagetools inspect <name>:<tag>`)"
        )
    for instance_type in settings.instance_types:  # settings.py refused wildcards already
        if instance_type.split(".")[0] in AL2023_NVIDIA_UNSUPPORTED:
            problems.append(
                f"instance_types: '{instance_type}' is a family Batch's Amazon Linux 2023 GPU image does not "
                "support (p3, g3): use e.g. g4dn.xlarge or g5.xlarge"
            )
    return problems


def subnet_ids(settings: Settings, ec2: Any, vpc_id: str) -> list[str]:
    """configs/gpu-runner.yaml `subnet_ids`, else the default subnets (one per zone) of the runners' VPC."""
    if settings.subnet_ids:
        return list(settings.subnet_ids)
    vpc = vpc_id or stack.default_vpc(ec2, settings.region)
    subnets = ec2.describe_subnets(
        Filters=[{"Name": "vpc-id", "Values": [vpc]}, {"Name": "default-for-az", "Values": ["true"]}]
    )["Subnets"]
    if not subnets:
        raise BatchStackError(
            f"subnet_ids: empty, and VPC {vpc} has no default subnets; list the subnets for the GPU instances in "
            "configs/gpu-runner.yaml"
        )
    return sorted(s["SubnetId"] for s in subnets)


def mlflow_parameters(cfn: Any, settings: Settings, repository: str) -> dict[str, str]:
    """The team MLflow server's CI user and the SSM name of its password (that stack's CiUsername and
    CiPasswordParameter outputs) when the server is deployed, so jobs log in as the runners do; empty without it
    (`make batch-up` again after `make mlflow-server-up` adds them)."""
    name = server_stack_name(settings.project, repository)
    outputs = stack.stack_outputs(cfn, name) if stack.stack_status(cfn, name) is not None else {}
    return {
        "MlflowUsername": outputs.get("CiUsername", ""),
        "MlflowPasswordParameter": outputs.get("CiPasswordParameter", ""),
    }


def stack_parameters(
    settings: Settings,
    inputs: BatchInputs,
    runner: Mapping[str, str],
    runner_parameters: Mapping[str, str],
    subnets: list[str],
    mlflow: Mapping[str, str],
) -> list[dict[str, str]]:
    values = {
        "Project": settings.project,
        "BucketName": runner["BucketName"],
        "SsmPrefix": settings.ssm_prefix,
        "RunnerSecurityGroupId": runner["RunnerSecurityGroupId"],
        "VpcId": runner_parameters.get("VpcId", ""),
        "SubnetIds": ",".join(subnets),
        "InstanceTypes": ",".join(settings.instance_types),
        "UseSpot": "true" if settings.use_spot else "false",
        "MaxvCpus": str(inputs.max_vcpus),
        "MultiNodeInstanceType": settings.instance_types[0],
        "Image": settings.image,
        "ImageRepositoryArn": ecr_repository_arn(settings.image),
        "MaxRuntimeSeconds": str(settings.max_runtime_minutes * 60),
        "RootVolumeGb": str(settings.root_volume_gb),
        "ServiceRoleArn": inputs.service_role_arn,
        "OidcProviderArn": runner["OidcProviderArn"],
        "SubmitWorkflow": inputs.submit_workflow,
        **mlflow,
        **{key: runner_parameters.get(key, "") for key in RUNNER_STACK_PARAMETERS},
    }
    return [{"ParameterKey": k, "ParameterValue": v} for k, v in values.items()]


def up(
    settings: Settings,
    cfn: Any,
    ec2: Any,
    inputs: BatchInputs,
    *,
    template: Path = TEMPLATE,
    delay_seconds: int = 10,
) -> dict[str, str]:
    """Deploy (or update) the Batch stack; returns its outputs. Refuses before any AWS call when the settings
    cannot make a job definition (no image, an unpinned one)."""
    problems = settings_problems(settings)
    if problems:
        raise BatchStackError(
            "configs/gpu-runner.yaml cannot back a Batch stack:\n  " + "\n  ".join(problems)
        )
    try:
        body = template.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BatchStackError(
            f"--template: {template} not found (the default is the one gpu_runner ships)"
        ) from None
    runner, runner_parameters = stack.runner_stack(
        cfn,
        stack_name(settings.project, inputs.repository),
        "Batch reuses its bucket, VPC, runner security group and OIDC provider",
        BatchStackError,
    )
    if not runner_parameters.get("PlatformCommit"):
        # A gpu-runner stack bootstrapped before the platform held the workflows trusts no platform commit.
        raise BatchStackError(
            f"stack {stack_name(settings.project, inputs.repository)} names no PlatformCommit: run "
            "`make bootstrap` first (the submit role trusts the platform commit that stack trusts)"
        )
    subnets = subnet_ids(settings, ec2, runner_parameters.get("VpcId", ""))
    mlflow = mlflow_parameters(cfn, settings, inputs.repository)
    parameters = stack_parameters(settings, inputs, runner, runner_parameters, subnets, mlflow)
    name = batch_stack_name(settings.project, inputs.repository)
    outputs = stack.deploy(cfn, name, body, parameters, delay_seconds=delay_seconds)
    missing = OUTPUTS - set(outputs)
    if missing:
        raise BatchStackError(
            f"stack {name} lacks output(s) {', '.join(sorted(missing))}: is {template} ours?"
        )
    log.info(next_steps(inputs.repository, outputs))
    return outputs


def next_steps(repository: str, outputs: Mapping[str, str]) -> str:
    repo = shlex.quote(repository)
    return "\n".join(
        [
            "# AWS Batch is ready (nothing runs until a job is queued). The platform's batch workflow submits:",
            f"gh variable set AWS_BATCH_ROLE_ARN --repo {repo} --body {shlex.quote(outputs['SubmitRoleArn'])}",
            "# and configs/gpu-runner.yaml `backend: batch` on the default branch.",
            f"# Queues: {outputs['JobQueue']} (spot, then on-demand), {outputs['MultiNodeJobQueue']} (on-demand).",
        ]
    )


def down(settings: Settings, cfn: Any, repository: str, *, delay_seconds: int = 10) -> None:
    """Delete the stack: queues, compute environments (already at zero instances when idle), definitions, roles.
    The bucket and the job logs in /aws/batch/job stay."""
    name = batch_stack_name(settings.project, BatchInputs(repository).repository)
    if stack.stack_status(cfn, name) is None:
        log.info(f"no Batch stack {name}: nothing to delete")
        return
    cfn.delete_stack(StackName=name)
    cfn.get_waiter("stack_delete_complete").wait(
        StackName=name, WaiterConfig={"Delay": delay_seconds, "MaxAttempts": 120}
    )
    log.info(f"deleted {name}. Kept: the bucket and the job logs in /aws/batch/job")


def batch_outputs(cfn: Any, settings: Settings, repository: str) -> dict[str, str]:
    """The deployed stack's outputs, with every name in OUTPUTS (what submitting a job needs)."""
    name = batch_stack_name(settings.project, BatchInputs(repository).repository)
    if stack.stack_status(cfn, name) is None:
        raise BatchStackError(f"no Batch stack {name} in {settings.region}: run `make batch-up` first")
    outputs = stack.stack_outputs(cfn, name)
    missing = OUTPUTS - set(outputs)
    if missing:
        raise BatchStackError(
            f"stack {name} has no {', '.join(sorted(missing))} output (still creating? an older stack: run "
            "`make batch-up` again)"
        )
    return outputs
