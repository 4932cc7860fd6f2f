"""`make e2e`: the team MLflow server (gpu_runner/mlflow_server/mlflow-server.yaml) in a story. Its stack is deployed to the moto
server, its user-data (as moto's CloudFormation rendered it) boots it in the sandbox: a real `mlflow server` with
basic auth on 127.0.0.1, artifacts into the moto bucket. Its schedule has stopped it for the night. A push to a
train branch then runs the real train.yml under act with MLFLOW_TRACKING_URI on that server and the ci user's
password as the repository secret: the start job wakes the server and waits for its ready mark before the
launch, and the run lands in the team server. The jobs on GitHub-hosted runners (the stop job's cost logging, the
pull-request comment) reach it through the SSM tunnel with the stack's tunnel role (MLFLOW_TUNNEL_ROLE_ARN):
StartSession answered by the fault proxy from moto's state, the session handed to the plugin double, which
forwards the local port to the server as the SSM agent on the instance would.

Not shown here (no EC2 boot offline): the instance really rebooting. When wake's StartInstances makes moto's
instance `running`, the test runs what systemd runs on a later boot (the mlflow-ready unit), as the instance would.
"""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from mlflow.tracking import MlflowClient

from gpu_runner.core.settings import load_settings
from gpu_runner.mlflow_server import TEMPLATE as SERVER_TEMPLATE
from gpu_runner.mlflow_server import mlflow_server, mlflow_server_access, mlflow_server_project, mlflow_wake
from gpu_runner.setup import stack as runner_stack
from gpu_runner_testing import mlflow_server_boot, session_manager_plugin
from gpu_runner_testing.aws_fault_proxy import kill_matching
from gpu_runner_testing.story.harness import PROJECT
from gpu_runner_testing.story.stories import Scenario, Stack, run_story, workflow_run_ids

pytestmark = pytest.mark.e2e
RUN_ID = "818"
STOP, START = "cron(0 20 ? * MON-FRI *)", "cron(0 7 ? * MON-FRI *)"


@dataclass(frozen=True)
class TeamServer:
    uri: str
    instance_id: str
    ready_parameter: str
    ci_password: str
    boot: mlflow_server_boot.Boot
    tunnel_role: str
    private_address: (
        str  # the instance's, where the tunnel document sends the agent (here the sandbox's 127.0.0.1)
    )


@pytest.fixture(scope="module")
def team_server(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TeamServer]:
    """`make mlflow-server-up` as far as it goes without a bootstrap stack (the story's AWS set-up is
    stories.make_stack): the passwords, the stack with the story's bucket and runner group, the first boot."""
    settings = load_settings(PROJECT / "configs" / "gpu-runner.yaml")
    ssm, cfn, ec2 = stack.client("ssm"), stack.client("cloudformation"), stack.client("ec2")
    inputs = mlflow_server.ServerInputs(stack.repository, stop_schedule=STOP, start_schedule=START)
    runner = {"BucketName": settings.bucket, "RunnerSecurityGroupId": stack.security_group,
              "OidcProviderArn": _oidc_provider(stack.client("iam"))}  # fmt: skip
    owner, repository = stack.repository.split("/")
    lock = PROJECT / "uv.lock"
    version = mlflow_server.locked_mlflow_version(lock)
    requirements = mlflow_server_project.checked_requirements(
        mlflow_server_project.requirements_file(None, PROJECT),  # the file `up` takes for this project
        version,
        mlflow_server_project.locked_version(lock, "boto3"),
    )
    stack.client("s3").put_object(Bucket=settings.bucket, Key=requirements.key, Body=requirements.body)
    deployment = mlflow_server.Deployment(
        version, mlflow_server_project.served_layout(PROJECT / "configs" / "train.yaml"), requirements,
        (_people_role(stack.client("iam")),),
    )  # fmt: skip
    body = SERVER_TEMPLATE.read_text(encoding="utf-8")
    name = mlflow_server.server_stack_name(settings.project, stack.repository)
    repository_parameters = {"GitHubOwner": owner, "GitHubRepository": repository}
    parameters = mlflow_server.stack_parameters(settings, inputs, runner, repository_parameters, deployment)
    outputs = runner_stack.deploy(cfn, name, body, parameters, delay_seconds=1)
    # As `up` does: the passwords after the stack, under its key.
    mlflow_server_access.store_passwords(ssm, settings.ssm_prefix, outputs["PasswordKeyArn"])
    names = mlflow_server.parameter_names(settings.ssm_prefix)
    user_data = ec2.describe_instance_attribute(InstanceId=outputs["InstanceId"], Attribute="userData")
    script = base64.b64decode(user_data["UserData"]["Value"]).decode()
    port = mlflow_server_boot.free_port()
    env = {"MLFLOW_S3_ENDPOINT_URL": stack.moto_endpoint, "AWS_ENDPOINT_URL": stack.moto_endpoint,
           "AWS_DEFAULT_REGION": stack.region}  # fmt: skip
    boot = mlflow_server_boot.run_boot(
        script, tmp_path_factory.mktemp("team-server"), port=port, extra_env=env
    )
    assert boot.result.returncode == 0, (boot.result.stdout + boot.result.stderr).decode() + boot.log(
        "mlflow"
    )
    ci_password = ssm.get_parameter(Name=names["ci"], WithDecryption=True)["Parameter"]["Value"]
    try:
        instance = ec2.describe_instances(InstanceIds=[outputs["InstanceId"]])["Reservations"][0][
            "Instances"
        ][0]
        yield TeamServer(f"http://127.0.0.1:{port}", outputs["InstanceId"], outputs["ReadyParameter"],
                         ci_password, boot, outputs["TunnelRoleArn"], instance["PrivateIpAddress"])  # fmt: skip
    finally:
        mlflow_server_boot.stop_server(boot)
        # Other stories on this worker must find no server. moto deletes a stack's resources in template order,
        # so a role with an attached policy refuses (DeleteConflict): the instance is terminated on its own.
        ec2.terminate_instances(InstanceIds=[outputs["InstanceId"]])
        with contextlib.suppress(ClientError):
            cfn.delete_stack(StackName=name)


def _people_role(iam: Any) -> str:
    """The role the team's admins use, the password reader `up` names (moto's own caller is not one)."""
    trust = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"},
                                                                 "Action": "sts:AssumeRole"}]})  # fmt: skip
    try:
        return str(iam.get_role(RoleName="mlflow-people")["Role"]["Arn"])
    except ClientError:
        return str(iam.create_role(RoleName="mlflow-people", AssumeRolePolicyDocument=trust)["Role"]["Arn"])


def _oidc_provider(iam: Any) -> str:
    """The account's GitHub OIDC provider (bootstrap's; the story makes its own when no earlier one did)."""
    for provider in iam.list_open_id_connect_providers()["OpenIDConnectProviderList"]:
        if provider["Arn"].endswith("/token.actions.githubusercontent.com"):
            return str(provider["Arn"])
    created = iam.create_open_id_connect_provider(
        Url="https://token.actions.githubusercontent.com", ClientIDList=["sts.amazonaws.com"]
    )
    return str(created["OpenIDConnectProviderArn"])


def _reboot_when_started(ec2: Any, server: TeamServer, done: threading.Event, booted: list[float]) -> None:
    while not done.is_set():
        state = ec2.describe_instances(InstanceIds=[server.instance_id])["Reservations"][0]["Instances"][0]
        if state["State"]["Name"] == "running":
            time.sleep(2)  # a boot takes a while: wake must wait for the mark, not find it at once
            result = mlflow_server_boot.later_boot(server.boot)
            assert result.returncode == 0, result.stderr.decode()
            booted.append(time.time())
            return
        time.sleep(0.5)


def test_a_stopped_team_server_is_woken_before_the_launch_and_holds_the_run(
    stack: Stack, team_server: TeamServer, tmp_path: Path
) -> None:
    ec2, ssm = stack.client("ec2"), stack.client("ssm")
    settings = load_settings(PROJECT / "configs" / "gpu-runner.yaml")
    ec2.stop_instances(InstanceIds=[team_server.instance_id])  # the stop schedule, at 20:00
    first_mark = ssm.get_parameter(Name=team_server.ready_parameter)["Parameter"]
    assert first_mark["Value"] == team_server.uri  # the first boot's mark (its address, here 127.0.0.1)
    # Gone, so only this boot's mark can let the launch go (that an older mark is not taken for it is
    # the platform's test_mlflow_server.py's; here it would cost wake's 30 s clock margin in waiting).
    ssm.delete_parameter(Name=team_server.ready_parameter)
    done, booted = threading.Event(), []
    watcher = threading.Thread(
        target=_reboot_when_started, args=(ec2, team_server, done, booted), daemon=True
    )
    watcher.start()
    secrets = {"MLFLOW_TRACKING_USERNAME": "ci", "MLFLOW_TRACKING_PASSWORD": team_server.ci_password}
    # The hosted jobs' tunnel: the plugin double on every job's PATH, the instance's port 5000 at the server.
    session_manager_plugin.install(stack.image_bin)
    connections = tmp_path / "tunnel-connections.txt"
    job_env = {
        session_manager_plugin.TARGETS_ENV: json.dumps(
            {
                f"{team_server.instance_id}:{team_server.private_address}:5000": team_server.uri.removeprefix(
                    "http://"
                )
            }
        ),
        session_manager_plugin.RECORD_ENV: str(connections),
    }
    scenario = Scenario(
        40, "team MLflow server", "woken, then the run logged to it; the hosted jobs through the tunnel",
        secrets=secrets, variables={"MLFLOW_TUNNEL_ROLE_ARN": team_server.tunnel_role}, job_env=job_env,
        pull_request=True,
    )  # fmt: skip
    try:
        story = run_story(replace(stack, mlflow_uri=team_server.uri), scenario, tmp_path, RUN_ID)
    finally:
        done.set()
        watcher.join(timeout=10)
        # act leaves a job's background processes running (GitHub's runner kills them at the job's end).
        kill_matching("gpu_runner_testing.session_manager_plugin", under=tmp_path)
    run = story.run
    assert run is not None
    context = f"act log: {run.log}"
    assert run.lifecycle_results == {"start": "success", "train": "success", "stop": "success"}, context
    log = run.log.read_text()
    assert f"starting the MLflow server {team_server.instance_id}" in log, context
    assert f"MLflow server {team_server.instance_id} is ready at {team_server.uri}" in log, context
    # No GPU before MLflow answered: the mark of this boot is older than the GPU instance.
    mark = ssm.get_parameter(Name=team_server.ready_parameter)["Parameter"]
    assert booted and mark["LastModifiedDate"] > first_mark["LastModifiedDate"]
    gpu = ec2.describe_instances(Filters=[{"Name": "tag:gpu-runner:run-id", "Values": [RUN_ID]}])
    (instance,) = [i for r in gpu["Reservations"] for i in r["Instances"]]
    assert mark["LastModifiedDate"] <= instance["LaunchTime"], (
        mark["LastModifiedDate"],
        instance["LaunchTime"],
    )
    assert mlflow_wake.find_server(ec2, settings.project) is not None
    # The hosted jobs came through the tunnel: two sessions (the stop job's, the comment job's), each used.
    assert story.proxy is not None and story.proxy.count("StartSession") == 2, context
    assert log.count("MLflow answers through the tunnel at http://127.0.0.1:") == 2, context
    sessions = {line.split()[0] for line in connections.read_text().splitlines()}
    assert len(sessions) == 2, connections.read_text()
    (comment,) = story.pr_comments
    assert "test_accuracy" in comment["body"] and "**Billed GPU cost**" in comment["body"], comment["body"]

    # The run, as the team sees it through the server (the ci user's password; basic auth is on).
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_USERNAME", "ci")
        patch.setenv("MLFLOW_TRACKING_PASSWORD", team_server.ci_password)
        client = MlflowClient(team_server.uri)
        runs = workflow_run_ids(client, RUN_ID)
        assert len(runs) == 1, runs
        logged = client.get_run(runs[0])
        assert logged.info.status == "FINISHED"
        assert logged.data.metrics["test_accuracy"] > 0.5
        assert logged.data.metrics["cost_usd"] > 0  # the stop job's teardown logged the cost there too
        assert client.list_artifacts(logged.info.run_id), "no artifact reached the server"
    bucket = settings.bucket
    keys = [
        o["Key"]
        for page in stack.client("s3")
        .get_paginator("list_objects_v2")
        .paginate(Bucket=bucket, Prefix="mlflow-artifacts/")
        for o in page.get("Contents", [])
    ]
    assert any(logged.info.run_id in k for k in keys), keys[:5]
