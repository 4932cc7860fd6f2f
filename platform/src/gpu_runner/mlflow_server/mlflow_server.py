"""`gpu-runner mlflow-server up | down | tunnel`: the optional team MLflow server (gpu_runner/mlflow_server/mlflow-server.yaml).

`up` runs after `bootstrap`, on the default branch: it reads the runner security group, the bucket and the VPC from
the gpu-runner stack (so the two cannot drift), what the server makes from configs/train.yaml (the experiments,
the served model) and the hash-pinned requirements (mlflow_server_project.py), uploads those, deploys the stack,
stores the admin, ci and promote passwords in SSM under the stack's key (generated here, never printed:
mlflow_server_access.py) and prints the GitHub settings. `tunnel` forwards 127.0.0.1:<port> to the server through
Session Manager.
"""

from __future__ import annotations

import json
import logging
import re
import shlex
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_runner.core.settings import Settings
from gpu_runner.core.stack_names import REPOSITORY, server_stack_name, stack_name
from gpu_runner.mlflow_server import TEMPLATE
from gpu_runner.mlflow_server.mlflow_server_access import (
    batch_execution_role,
    parameter_names,
    password_readers,
    store_passwords,
)
from gpu_runner.mlflow_server.mlflow_server_project import (
    DEFAULT_TRAIN_CONFIG,
    Requirements,
    Served,
    checked_requirements,
    locked_version,
    requirements_file,
    served_layout,
)
from gpu_runner.mlflow_server.mlflow_wake import MlflowServerError
from gpu_runner.setup import stack

log = logging.getLogger(__name__)

DEFAULT_LOCK = Path("uv.lock")
PORT = 5000
# EventBridge Scheduler cron expressions have six fields inside cron(...) (EventBridge Scheduler User Guide,
# "Schedule types": cron(minutes hours day-of-month month day-of-week year)).
CRON = re.compile(r"cron\((\S+ ){5}\S+\)")
# The stack's own Session document (gpu_runner/mlflow_server/mlflow-server.yaml TunnelDocument): port 5000 fixed, localPortNumber
# its only parameter. SSM document names are at most 128 characters (StartSession DocumentName in botocore's ssm
# model) and may not start with aws or amazon, which AWS reserves (CreateDocument API reference, Name).
TUNNEL_DOCUMENT_PREFIX = "mlflow-tunnel-"
DOCUMENT_NAME_MAX = 128
PLUGIN = "session-manager-plugin"
PLUGIN_DOCS = "https://docs.aws.amazon.com/systems-manager/latest/userguide/session-manager-working-with-install-plugin.html"


@dataclass(frozen=True)
class ServerInputs:
    repository: str  # owner/name, as bootstrap was given it
    instance_type: str = "t3.small"
    subnet_id: str = ""
    stop_schedule: str = ""
    start_schedule: str = ""
    timezone: str = "UTC"
    password_readers: tuple[str, ...] = field(default=())  # IAM ARNs besides the caller

    def __post_init__(self) -> None:
        problems = []
        if not REPOSITORY.fullmatch(self.repository):
            problems.append(f"--repository: '{self.repository}' is not owner/name (e.g. your-org/ml-project)")
        for flag, value in (
            ("--stop-schedule", self.stop_schedule),
            ("--start-schedule", self.start_schedule),
        ):
            if value and not CRON.fullmatch(value):
                problems.append(
                    f"{flag}: '{value}' is not a six-field cron(...) expression, e.g. cron(0 20 ? * MON-FRI *)"
                )
        if self.start_schedule and not self.stop_schedule:
            problems.append(
                "--start-schedule: set --stop-schedule too (a start alone never stops the server)"
            )
        if problems:
            raise MlflowServerError("invalid mlflow-server input:\n  " + "\n  ".join(problems))


def tunnel_document_name(project: str) -> str:
    """`mlflow-tunnel-<project>`: one per project in the account and region, like the stack."""
    return (TUNNEL_DOCUMENT_PREFIX + re.sub(r"[^A-Za-z0-9_.-]", "-", project))[:DOCUMENT_NAME_MAX]


def locked_mlflow_version(lock: Path) -> str:
    """The MLflow the project locks: the server runs the same release as the clients that log to it."""
    return locked_version(lock, "mlflow")


@dataclass(frozen=True)
class Deployment:
    """What a server stack is deployed with besides the gpu-runner stack's values and the inputs."""

    mlflow_version: str
    served: Served
    requirements: Requirements
    password_readers: tuple[str, ...]
    batch_execution_role: str = ""


# What the tunnel role's trust needs from the gpu-runner stack's parameters (the repository bootstrap was given).
RUNNER_STACK_PARAMETERS = ("GitHubOwner", "GitHubRepository", "GitHubOwnerId", "GitHubRepositoryId")


def stack_parameters(
    settings: Settings,
    inputs: ServerInputs,
    runner: Mapping[str, str],
    runner_parameters: Mapping[str, str],
    deployment: Deployment,
) -> list[dict[str, str]]:
    values = {
        "Project": settings.project,
        "BucketName": runner["BucketName"],
        "SsmPrefix": settings.ssm_prefix,
        "RunnerSecurityGroupId": runner["RunnerSecurityGroupId"],
        "VpcId": runner_parameters.get("VpcId", ""),
        "SubnetId": inputs.subnet_id or (settings.subnet_ids[0] if settings.subnet_ids else ""),
        "InstanceType": inputs.instance_type,
        "MlflowVersion": deployment.mlflow_version,
        "RequirementsSha256": deployment.requirements.sha256,
        "ExperimentNames": deployment.served.experiments_json(),
        "ServedModelName": deployment.served.model,
        "PasswordReaderArns": ",".join(deployment.password_readers),
        "BatchExecutionRoleArn": deployment.batch_execution_role,
        "StopSchedule": inputs.stop_schedule,
        "StartSchedule": inputs.start_schedule,
        "ScheduleTimezone": inputs.timezone,
        "TunnelDocumentName": tunnel_document_name(settings.project),
        "OidcProviderArn": runner["OidcProviderArn"],
        **{key: runner_parameters.get(key, "") for key in RUNNER_STACK_PARAMETERS},
    }
    return [{"ParameterKey": k, "ParameterValue": v} for k, v in values.items()]


REQUIRED_OUTPUTS = frozenset({
    "InstanceId", "TrackingUri", "CiUsername", "CiPasswordParameter", "PromoteUsername", "PromotePasswordParameter",
    "PasswordKeyArn", "ReadyParameter", "TunnelRoleArn", "TunnelDocument",
})  # fmt: skip


def up(
    settings: Settings,
    aws: Any,
    inputs: ServerInputs,
    *,
    batch_stack: str,
    template: Path = TEMPLATE,
    lock: Path = DEFAULT_LOCK,
    train_config: Path = DEFAULT_TRAIN_CONFIG,
    requirements: Path | None = None,
    delay_seconds: int = 10,
) -> dict[str, str]:
    """Deploy (or update) the server stack; returns its outputs. `aws(service)` gives a client in the region;
    `batch_stack` is the name of the repository's batch stack, whose job execution role may decrypt the ci
    password once it exists (`make batch-up` first, then `up` again). Every file is checked before any AWS call."""
    try:
        body = template.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MlflowServerError(
            f"--template: {template} not found (the default is the one gpu_runner ships)"
        ) from None
    version = locked_mlflow_version(lock)
    # The project's own file beside its lock when it has one, else the platform's (requirements_file).
    pinned = checked_requirements(
        requirements_file(requirements, lock.parent), version, locked_version(lock, "boto3")
    )
    served = served_layout(train_config)
    cfn, iam = aws("cloudformation"), aws("iam")
    runner, runner_parameters = stack.runner_stack(
        cfn,
        stack_name(settings.project, inputs.repository),
        "the server reuses its bucket, VPC and runner security group",
        MlflowServerError,
    )
    deployment = Deployment(
        version, served, pinned,
        tuple(password_readers(aws("sts"), iam, inputs.password_readers)),
        batch_execution_role(cfn, iam, batch_stack),
    )  # fmt: skip
    aws("s3").put_object(Bucket=runner["BucketName"], Key=pinned.key, Body=pinned.body)
    parameters = stack_parameters(settings, inputs, runner, runner_parameters, deployment)
    name = server_stack_name(settings.project, inputs.repository)
    outputs = stack.deploy(cfn, name, body, parameters, delay_seconds=delay_seconds)
    missing = REQUIRED_OUTPUTS - set(outputs)
    if missing:
        raise MlflowServerError(
            f"stack {name} lacks output(s) {', '.join(sorted(missing))}: is {template} ours?"
        )
    # After the stack: they are encrypted under its key. A new server's first boot waits for them.
    store_passwords(aws("ssm"), settings.ssm_prefix, outputs["PasswordKeyArn"])
    log.info(next_steps(inputs.repository, settings.region, outputs))
    return outputs


def next_steps(repository: str, region: str, outputs: Mapping[str, str]) -> str:
    repo, reg = shlex.quote(repository), shlex.quote(region)
    read = (
        f"aws ssm get-parameter --region {reg} --with-decryption --query Parameter.Value --output text --name"
    )
    return "\n".join(
        [
            "# The team MLflow server. Point the workflows at it (the passwords go from SSM to GitHub unprinted):",
            f"gh variable set MLFLOW_TRACKING_URI --repo {repo} --body {shlex.quote(outputs['TrackingUri'])}",
            f"gh secret set MLFLOW_TRACKING_USERNAME --repo {repo} --body {shlex.quote(outputs['CiUsername'])}",
            f"{read} {shlex.quote(outputs['CiPasswordParameter'])} | gh secret set MLFLOW_TRACKING_PASSWORD --repo {repo}",
            "# promote.yml's own user, as secrets of the `production` environment only (create the environment "
            "first: docs/training.md#champion-model):",
            f"gh secret set MLFLOW_PROMOTE_USERNAME --env production --repo {repo} "
            f"--body {shlex.quote(outputs['PromoteUsername'])}",
            f"{read} {shlex.quote(outputs['PromotePasswordParameter'])} | gh secret set MLFLOW_PROMOTE_PASSWORD "
            f"--env production --repo {repo}",
            "# The jobs on GitHub-hosted runners (outside the VPC) reach it through an SSM tunnel with this role:",
            f"gh variable set MLFLOW_TUNNEL_ROLE_ARN --repo {repo} --body {shlex.quote(outputs['TunnelRoleArn'])}",
            "# People: `make mlflow-tunnel`, then http://127.0.0.1:5000 as admin, password:",
            f"#   {read} {shlex.quote(outputs.get('AdminPasswordParameter', '<prefix>-mlflow-admin-password'))}",
            "# A running server makes new experiments, model and grants at its next boot "
            f"(aws ec2 reboot-instances --region {reg} --instance-ids {shlex.quote(outputs['InstanceId'])}).",
        ]
    )


def down(settings: Settings, cfn: Any, repository: str, *, delay_seconds: int = 10) -> None:
    """Delete the stack; the data volume leaves its final snapshot (DeletionPolicy: Snapshot), the passwords stay."""
    name = server_stack_name(settings.project, repository)
    if stack.stack_status(cfn, name) is None:
        log.info(f"no MLflow server stack {name}: nothing to delete")
        return
    cfn.delete_stack(StackName=name)
    cfn.get_waiter("stack_delete_complete").wait(
        StackName=name, WaiterConfig={"Delay": delay_seconds, "MaxAttempts": 120}
    )
    names = parameter_names(settings.ssm_prefix)
    log.info(
        f"deleted {name}. Kept: the data volume's final snapshot (tag mlflow-server:project={settings.project}; "
        f"`make mlflow-server-up` starts from an empty volume, restore the snapshot by hand to keep the runs), the "
        f"artifacts under s3://<bucket>/mlflow-artifacts/, the passwords {', '.join(names.values())} and their "
        "key (a restored snapshot's users keep their passwords; the next `up` moves them under its new key)"
    )


def server_outputs(cfn: Any, settings: Settings, repository: str) -> dict[str, str]:
    """The deployed stack's outputs, with InstanceId and TunnelDocument (what the tunnel needs)."""
    name = server_stack_name(settings.project, ServerInputs(repository).repository)
    if stack.stack_status(cfn, name) is None:
        raise MlflowServerError(
            f"no MLflow server stack {name} in {settings.region}: run `make mlflow-server-up` first"
        )
    outputs = stack.stack_outputs(cfn, name)
    missing = {"InstanceId", "TunnelDocument"} - set(outputs)
    if missing:
        raise MlflowServerError(
            f"stack {name} has no {' or '.join(sorted(missing))} output (still creating? an older stack: run "
            "`make mlflow-server-up` again)"
        )
    return outputs


def tunnel_command(instance_id: str, region: str, local_port: int, document: str) -> list[str]:
    """The AWS CLI's port forwarding session through the stack's document: 127.0.0.1:<local_port> here to port
    5000 on the server (the document fixes the remote port; localPortNumber is its one parameter)."""
    if not 1 <= local_port <= 65535:
        raise MlflowServerError(f"--local-port: {local_port} is not a TCP port (1-65535)")
    parameters = json.dumps({"localPortNumber": [str(local_port)]}, separators=(",", ":"))
    return ["aws", "ssm", "start-session", "--region", region, "--target", instance_id,
            "--document-name", document, "--parameters", parameters]  # fmt: skip


def require_plugin() -> None:
    """The AWS CLI runs port forwarding through Session Manager's plugin, a separate install."""
    if shutil.which(PLUGIN) is None:
        raise MlflowServerError(
            f"{PLUGIN} is not on PATH: the tunnel needs AWS's Session Manager plugin ({PLUGIN_DOCS})"
        )
