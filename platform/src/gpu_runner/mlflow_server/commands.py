"""The team MLflow server's commands: `mlflow-server up | down | tunnel | requirements` (a person, from a laptop),
`wake` (the start job) and `connect` (a job on a GitHub-hosted runner)."""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

from gpu_runner.core import workflow_contract as contract
from gpu_runner.core.aws import Aws
from gpu_runner.core.command_line import Command, SubParsers, add_command
from gpu_runner.core.settings import Settings
from gpu_runner.core.stack_names import batch_stack_name
from gpu_runner.mlflow_server import TEMPLATE
from gpu_runner.mlflow_server.mlflow_server_project import DEFAULT_REQUIREMENTS, REGENERATE


def register(commands: SubParsers) -> None:
    server = commands.add_parser(
        "mlflow-server",
        help="the optional team MLflow server (gpu_runner/mlflow_server/mlflow-server.yaml): up, down, tunnel, requirements, wake, connect",
    )
    actions = server.add_subparsers(dest="action", required=True)
    # Only wake runs in a workflow that names its repository; the others take --repository or need none.
    up = add_command(actions, "up", Command(run=_up, in_workflow=False),
                     help="deploy it after bootstrap; prints MLFLOW_TRACKING_URI and the secrets to set")  # fmt: skip
    down = add_command(actions, "down", Command(run=_down, in_workflow=False),
                       help="delete the stack (the data volume leaves a final snapshot)")  # fmt: skip
    tunnel = add_command(actions, "tunnel", Command(run=_tunnel, in_workflow=False),
                         help="forward 127.0.0.1:PORT to it through SSM (starts it if stopped)")  # fmt: skip
    for action in (up, down, tunnel):
        action.add_argument("--repository", required=True, help="owner/name, as given to bootstrap")
    up.add_argument("--instance-type", default="t3.small")
    up.add_argument("--subnet-id", default="", help="default: the first of subnet_ids, else EC2 picks one")
    up.add_argument("--stop-schedule", default="", help="e.g. 'cron(0 20 ? * MON-FRI *)': stop after hours")
    up.add_argument(
        "--start-schedule", default="", help="e.g. 'cron(0 7 ? * MON-FRI *)' (needs a stop schedule)"
    )
    up.add_argument("--timezone", default="UTC", help="IANA time zone of both schedules")
    up.add_argument("--template", type=Path, default=TEMPLATE, help="default: the one gpu_runner ships")
    up.add_argument("--lock", type=Path, default=Path("uv.lock"), help="the mlflow version the server runs")
    up.add_argument(
        "--train-config", type=Path, default=Path("configs/train.yaml"),
        help="the default branch's: the experiments and the served model the server makes",
    )  # fmt: skip
    up.add_argument(
        "--requirements", type=Path, default=None,
        help="the hash-pinned closure the server installs (default: infra/mlflow-server-requirements.txt when the "
        "project has one, written by make mlflow-server-requirements, else the platform's own)",
    )  # fmt: skip
    up.add_argument(
        "--password-reader", action="append", default=[], metavar="ARN",
        help="an IAM role or user who may read the passwords besides you (repeatable; the key keeps only these)",
    )  # fmt: skip
    requirements = add_command(
        actions, "requirements", Command(standalone=_requirements),
        help="compile the requirements the server installs for this uv.lock's mlflow and boto3 (needs PyPI)",
    )  # fmt: skip
    requirements.add_argument("--lock", type=Path, default=Path("uv.lock"), help="the project's lock")
    requirements.add_argument("--output", type=Path, default=DEFAULT_REQUIREMENTS, help="the file to write")
    requirements.add_argument(
        "--extra",
        action="append",
        default=[],
        help="an extra of the lock whose versions bind too (repeatable)",
    )
    requirements.add_argument("--uv", default="uv", help="the uv command (make passes its $(UV))")
    requirements.add_argument(
        "--header", default=REGENERATE, help="the command the file's header says regenerates it"
    )
    tunnel.add_argument("--local-port", type=int, default=5000)
    tunnel.add_argument("--print-only", action="store_true", help="print the command instead of running it")
    add_command(actions, "wake", Command(run=_wake),
                help="the start job: start a stopped server and wait until MLflow answers")  # fmt: skip
    connect = add_command(
        actions, "connect", Command(run=_connect, in_workflow=False),
        help="a job on a GitHub-hosted runner: open the SSM tunnel in the background, wait until MLflow "
        "answers through it, write the step outputs tracking-uri and pid",
    )  # fmt: skip
    connect.add_argument("--no-wake", action="store_true", help="fail instead of starting a stopped server")
    connect.add_argument("--timeout", type=float, default=120.0, help="seconds until MLflow must answer")
    connect.add_argument(
        "--log-file", type=Path, default=Path("mlflow-tunnel.log"), help="the session's output"
    )


def _requirements(args: argparse.Namespace) -> int:
    from gpu_runner.mlflow_server.server_requirements import write_requirements

    try:
        print(write_requirements(args.lock, args.output, extras=args.extra, uv=args.uv, header=args.header))
    # No uv, or uv refused (its own message is above). A RunnerError is cli.main's to report.
    except (OSError, subprocess.CalledProcessError) as error:
        print(f"error: {error} (--uv names the uv command; compiling needs PyPI)", file=sys.stderr)
        return 1
    return 0


def _wake(args: argparse.Namespace, settings: Settings, aws: Aws) -> int:
    from gpu_runner.mlflow_server import mlflow_wake

    region = settings.region
    mlflow_wake.wake(aws.client("ec2", region), aws.client("ssm", region), project=settings.project,
                     ssm_prefix=settings.ssm_prefix)  # fmt: skip
    return 0


def _connect(args: argparse.Namespace, settings: Settings, aws: Aws) -> int:
    from gpu_runner.mlflow_server import mlflow_tunnel

    region = settings.region
    tunnel = mlflow_tunnel.connect(
        aws.client("ec2", region), aws.client("ssm", region), settings, log_file=args.log_file,
        wake=not args.no_wake, timeout_seconds=args.timeout,
    )  # fmt: skip
    contract.write_outputs(
        {contract.TunnelOutput.TRACKING_URI: tunnel.tracking_uri, contract.TunnelOutput.PID: str(tunnel.pid)}
    )
    return 0


def _up(args: argparse.Namespace, settings: Settings, aws: Aws) -> int:
    from gpu_runner.mlflow_server import mlflow_server

    region = settings.region
    inputs = mlflow_server.ServerInputs(
        args.repository, instance_type=args.instance_type, subnet_id=args.subnet_id,
        stop_schedule=args.stop_schedule, start_schedule=args.start_schedule, timezone=args.timezone,
        password_readers=tuple(args.password_reader),
    )  # fmt: skip
    mlflow_server.up(
        settings, lambda service: aws.client(service, region), inputs,
        batch_stack=batch_stack_name(settings.project, inputs.repository), template=args.template,
        lock=args.lock, train_config=args.train_config, requirements=args.requirements,
    )  # fmt: skip
    return 0


def _down(args: argparse.Namespace, settings: Settings, aws: Aws) -> int:
    from gpu_runner.mlflow_server import mlflow_server

    cfn = aws.client("cloudformation", settings.region)
    mlflow_server.down(settings, cfn, mlflow_server.ServerInputs(args.repository).repository)
    return 0


def _tunnel(args: argparse.Namespace, settings: Settings, aws: Aws) -> int:
    from gpu_runner.mlflow_server import mlflow_server, mlflow_wake

    region = settings.region
    outputs = mlflow_server.server_outputs(aws.client("cloudformation", region), settings, args.repository)
    command = mlflow_server.tunnel_command(
        outputs["InstanceId"], region, args.local_port, outputs["TunnelDocument"]
    )
    if args.print_only:
        print(shlex.join(command))
        return 0
    mlflow_server.require_plugin()
    mlflow_wake.wake(aws.client("ec2", region), aws.client("ssm", region), project=settings.project,
                     ssm_prefix=settings.ssm_prefix)  # fmt: skip
    print(f"MLflow on http://127.0.0.1:{args.local_port} (Ctrl-C ends the tunnel)", flush=True)
    os.execvp(command[0], command)
    return 0  # not reached: execvp replaces the process
