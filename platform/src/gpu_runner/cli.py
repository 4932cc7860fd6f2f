"""`gpu-runner workflow-settings | launch | wait | teardown | resume | reap | capacity | pr-comment | mlflow-server
wake | connect` (what the workflows run), `bootstrap`, `doctor`, `mlflow-server up | down | tunnel`, `batch up | down`,
`cost-report`.

Each family registers its own commands (FAMILIES, in the order `--help` lists them); this module parses, loads
the settings and the AWS session a command needs, and turns every error into one line and an exit status."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from types import FrameType

from botocore.exceptions import BotoCoreError, ClientError

from gpu_runner.batch import commands as batch_commands
from gpu_runner.core import log_output
from gpu_runner.core import workflow_commands as shared_commands
from gpu_runner.core.aws import Aws
from gpu_runner.core.command_line import command_of
from gpu_runner.core.errors import RunnerError
from gpu_runner.core.settings import load_settings
from gpu_runner.cost import commands as cost_commands
from gpu_runner.doctor import commands as doctor_commands
from gpu_runner.ec2_runner import commands as ec2_runner_commands
from gpu_runner.ec2_runner import ec2
from gpu_runner.mlflow_server import commands as mlflow_server_commands
from gpu_runner.pin import commands as pin_commands
from gpu_runner.pr_comment import commands as pr_comment_commands
from gpu_runner.setup import commands as setup_commands

DEFAULT_SETTINGS = Path("configs/gpu-runner.yaml")
# A family's commands: one `register(subparsers)` each; adding a family is one line here (CONTRIBUTING.md).
FAMILIES = (
    shared_commands,
    ec2_runner_commands,
    setup_commands,
    doctor_commands,
    cost_commands,
    mlflow_server_commands,
    batch_commands,
    pr_comment_commands,
    pin_commands,
)


def parser() -> argparse.ArgumentParser:
    """Every family's commands under one `gpu-runner`."""
    top = argparse.ArgumentParser(prog="gpu-runner", description=__doc__.split("\n\n")[0])
    top.add_argument("--settings", type=Path, default=DEFAULT_SETTINGS, help="YAML settings file")
    commands = top.add_subparsers(dest="command", required=True)
    for family in FAMILIES:
        family.register(commands)
    return top


def _raise_on_sigterm(signum: int, frame: FrameType | None) -> None:
    # A cancelled workflow sends SIGTERM: turn it into SystemExit so launch's cleanup runs.
    raise SystemExit(128 + signum)


def aws_refusal(error: ClientError, region: str) -> str:
    """One line for an AWS error that no command turned into a RunnerError (reap, resume, a describe)."""
    if ec2.error_code(error) in ec2.CREDENTIAL_CODES:
        return f"AWS refused {error.operation_name}: {ec2.explain(error, region)}"
    message = error.response.get("Error", {}).get("Message", "")
    return (
        f"AWS refused {error.operation_name}: {ec2.error_code(error)}: {message} (the roles' permissions are in "
        "gpu_runner/setup/gpu-runner.yaml; make bootstrap applies changes)"
    )


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    log_output.to_stdout()
    command = command_of(args)
    if command.standalone is not None:  # no settings, no AWS, no workflow environment
        try:
            return command.standalone(args)
        except RunnerError as error:  # a command with its own exit status or output catches it first
            print(f"error: {error}", file=sys.stderr)
            return 1
    assert command.run is not None  # Command holds exactly one of the two
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    region = ""
    try:
        narrowed = command.narrows_instance_types and args.instance_type
        overrides = {"instance_types": args.instance_type} if narrowed else {}
        settings = load_settings(args.settings, overrides)
        region = settings.region
        if command.in_workflow and not os.environ.get("GITHUB_REPOSITORY"):
            raise RunnerError(
                "GITHUB_REPOSITORY is not set: GitHub Actions sets it; by hand, export GITHUB_REPOSITORY=owner/name"
            )
        return command.run(args, settings, Aws())
    except RunnerError as error:
        if command.check_lines:  # doctor speaks in check lines, also about its own settings
            print(f"✗ settings: {' '.join(str(error).split())}; fix: correct {args.settings} and run again")
            return 1
        print(f"error: {error}", file=sys.stderr)
        return 1
    except ClientError as error:
        print(f"error: {aws_refusal(error, region)}", file=sys.stderr)
        return 1
    except BotoCoreError as error:
        print(
            f"error: AWS: {error} (in a workflow the AWS credentials step must run first; by hand: aws sso login)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
