"""`make batch-up` in the runner tests: the gpu-runner CLI in-process against the moto server, after the session's
bootstrap stack (gpu_runner_testing.gpu_runner_stack), and what it deployed.

One adaptation for moto 5.2.5, whose CloudFormation registers every AWS::Batch::JobDefinition as type `container`
and then requires ContainerProperties (moto/batch/models.py, JobDefinition.create_from_cloudformation_json hard-codes
_type="container"): on the way to moto, a `multinode` definition's single node range container is handed over as
its ContainerProperties. Everything else reaches moto as gpu_runner/batch/batch.yaml says; what only a multi-node definition
has (NumNodes, MainNode, the node range) is asserted on the template (tests/runner/test_batch_stack.py)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from gpu_runner import cli
from gpu_runner.batch import TEMPLATE as BATCH_TEMPLATE
from gpu_runner.batch import batch_stack
from gpu_runner.core.aws import Aws
from gpu_runner_testing.github_double import DEFAULT_REPOSITORY
from gpu_runner_testing.gpu_runner_stack import REGION, CfnLoader
from gpu_runner_testing.stack_deploy import delete_if_present, described, run_cli

# A digest-pinned image of the account's registry (never pulled: moto runs no container).
IMAGE = f"123456789012.dkr.ecr.{REGION}.amazonaws.com/ml-project:1.0@sha256:{'5' * 64}"


def template() -> dict[str, Any]:
    return yaml.load(BATCH_TEMPLATE.read_text(encoding="utf-8"), Loader=CfnLoader)


def for_moto(body: str) -> str:
    """The template as moto 5.2.5's CloudFormation can create it (see the module docstring), as JSON."""
    document = yaml.load(body, Loader=CfnLoader)
    for resource in document["Resources"].values():
        properties = resource.get("Properties", {})
        if resource["Type"] == "AWS::Batch::JobDefinition" and properties.get("Type") == "multinode":
            (node_range,) = properties["NodeProperties"]["NodeRangeProperties"]
            properties["ContainerProperties"] = node_range["Container"]
            del properties["NodeProperties"]
    return json.dumps(document)


def _adapt_template(params: dict[str, Any], **_: Any) -> None:
    params["TemplateBody"] = for_moto(params["TemplateBody"])


def moto_session() -> boto3.Session:
    session = boto3.Session(region_name=REGION)
    for operation in ("CreateStack", "UpdateStack"):
        session.events.register(f"provide-client-params.cloudformation.{operation}", _adapt_template)
    return session


def batch_settings(settings_file: Path, directory: Path, **changes: Any) -> Path:
    """The session's settings file with a pinned image (what `backend: batch` needs), and `changes`."""
    raw = yaml.safe_load(settings_file.read_text())
    path = directory / f"batch-{uuid.uuid4().hex[:8]}.yaml"
    path.write_text(yaml.safe_dump({**raw, "image": IMAGE, **changes}))
    return path


def service_role(session: boto3.Session) -> str:
    """A Batch service role of the account's own (moto requires one; AWS takes its service-linked role instead:
    the template's default, asserted on the template)."""
    trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
             "Principal": {"Service": "batch.amazonaws.com"}}]}  # fmt: skip
    role = session.client("iam").create_role(
        RoleName=f"batch-service-{uuid.uuid4().hex[:8]}", AssumeRolePolicyDocument=json.dumps(trust)
    )
    return str(role["Role"]["Arn"])


def up(settings_file: Path, *extra: str) -> tuple[int, str, str]:
    """`gpu-runner batch up` (exit code, stdout, stderr), its CloudFormation calls adapted for moto."""
    argv = ["--settings", str(settings_file), "batch", "up", "--repository", DEFAULT_REPOSITORY,
            "--template", str(BATCH_TEMPLATE), *extra]  # fmt: skip
    session = moto_session()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cli, "Aws", lambda: Aws(session))
        return run_cli(argv)


def deployed(stack: dict[str, Any], settings_file: Path, *extra: str) -> dict[str, Any]:
    """`up` on a fresh batch stack, then the stack's name, outputs and parameters.

    Fresh, because each module deploys it with a service role of its own: an update replaces the compute
    environment, which moto's CloudFormation leaves as nothing, and the stack then lacks its outputs (seen: the job
    definitions missing in test_training_writes after test_mlflow_server deployed the server stack, whose CI user
    the job definitions name; see stack_deploy.delete_if_present)."""
    name = batch_stack.batch_stack_name(stack["settings"].project, DEFAULT_REPOSITORY)
    delete_if_present(stack["session"], name)
    _delete_batch_resources(stack["session"], name)
    code, printed, err = up(settings_file, *extra)
    assert code == 0, err
    return described(stack["session"], name, printed)


def _delete_batch_resources(session: boto3.Session, stack_name: str) -> None:
    """What deleting the stack deletes on AWS and moto 5.2.5 leaves (its Batch models define no
    delete_from_cloudformation_json): the queues, then the environments they use, then the job definitions, all named
    `<stack>-...` (gpu_runner/batch/batch.yaml). Left, they make the next create fail (InvalidParameterValue, 'A compute
    environment already exists'). By name, not by the stack's resources: an update may have dropped them from it."""
    batch, own = session.client("batch"), f"{stack_name}-"
    for queue in batch.describe_job_queues()["jobQueues"]:
        if queue["jobQueueName"].startswith(own):
            batch.update_job_queue(jobQueue=queue["jobQueueArn"], state="DISABLED")
            batch.delete_job_queue(jobQueue=queue["jobQueueArn"])
    for environment in batch.describe_compute_environments()["computeEnvironments"]:
        if environment["computeEnvironmentName"].startswith(own):
            arn = environment["computeEnvironmentArn"]
            batch.update_compute_environment(computeEnvironment=arn, state="DISABLED")
            batch.delete_compute_environment(computeEnvironment=arn)
    for definition in batch.describe_job_definitions(status="ACTIVE")["jobDefinitions"]:
        if definition["jobDefinitionName"].startswith(own):
            batch.deregister_job_definition(jobDefinition=definition["jobDefinitionArn"])
