"""`make mlflow-server-up` in the runner tests: the gpu-runner CLI in-process against the moto server, after the
session's bootstrap stack (gpu_runner_testing.gpu_runner_stack), and what it deployed.

moto's GetCallerIdentity answers `arn:aws:sts::<account>:user/moto`, a shape real AWS never returns, which `up`
refuses as a password reader; so `up` runs with --password-reader naming a role made here, as an admin whose
session is not an IAM role's would (the readers themselves: test_mlflow_server.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import ClientError

from gpu_runner.mlflow_server import TEMPLATE as SERVER_TEMPLATE
from gpu_runner.mlflow_server import mlflow_server
from gpu_runner.mlflow_server.mlflow_server_project import PLATFORM_REQUIREMENTS
from gpu_runner_testing.github_double import DEFAULT_REPOSITORY
from gpu_runner_testing.stack_deploy import delete_if_present, described, run_cli

# What `mlflow-server up` reads from a project, here the platform's own: its uv.lock (aligned with a new project's
# by the template repository's scripts/relock.py), a training config's two fields, the requirements it ships.
LOCK = Path(__file__).resolve().parents[2] / "uv.lock"
TRAIN_CONFIG = Path(__file__).with_name("server_train_config.yaml")
REQUIREMENTS = PLATFORM_REQUIREMENTS
PEOPLE_ROLE = "mlflow-people"


def people_role() -> str:
    """The ARN of the role the team's admins use (made once in the moto account)."""
    iam = boto3.Session(region_name="us-east-1").client("iam")
    try:
        return str(iam.get_role(RoleName=PEOPLE_ROLE)["Role"]["Arn"])
    except ClientError:
        trust = '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"123456789012"},"Action":"sts:AssumeRole"}]}'
        return str(iam.create_role(RoleName=PEOPLE_ROLE, AssumeRolePolicyDocument=trust)["Role"]["Arn"])


def up(settings_file: Path, *extra: str) -> tuple[int, str, str]:
    argv = ["--settings", str(settings_file), "mlflow-server", "up", "--repository", DEFAULT_REPOSITORY,
            "--template", str(SERVER_TEMPLATE), "--lock", str(LOCK), "--train-config", str(TRAIN_CONFIG),
            "--requirements", str(REQUIREMENTS), "--password-reader", people_role(), *extra]  # fmt: skip
    return run_cli(argv)


def deployed(stack: dict[str, Any], settings_file: Path, *extra: str) -> dict[str, Any]:
    """`up` on a fresh server stack, then the stack's name, outputs and parameters.

    Fresh, because the modules deploy it with different inputs (schedules, a requirements file, a batch stack
    made since, which adds BatchExecutionRoleArn), and each such update changes the instance or PasswordKey, which
    AWS updates or replaces; moto 5's CloudFormation sets a modified resource whose model has no
    update_from_cloudformation_json to nothing (moto/cloudformation/parsing.py, parse_and_update_resource returns
    None), and every DescribeStacks of the stack then answers 500. `up` run twice with the same inputs (a re-run)
    stays an update: test_mlflow_server runs it so."""
    name = mlflow_server.server_stack_name(stack["settings"].project, DEFAULT_REPOSITORY)
    delete_if_present(stack["session"], name)
    code, printed, err = up(settings_file, *extra)
    assert code == 0, err
    return described(stack["session"], name, printed)
