"""`gpu-runner workflow-settings | launch | wait | teardown | resume | reap | capacity | pr-comment | mlflow-server
wake | connect` (what the workflows run), `bootstrap`, `doctor`, `mlflow-server up | down | tunnel`, `batch up | down`,
`cost-report`."""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import signal
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from gpu_runner.core import log_output, naming
from gpu_runner.core import workflow_contract as contract
from gpu_runner.core.aws import Aws
from gpu_runner.core.errors import RunnerError
from gpu_runner.core.github import GitHubRunners
from gpu_runner.core.naming import RunContext
from gpu_runner.core.settings import Settings, load_settings
from gpu_runner.ec2_runner import ec2

DEFAULT_SETTINGS = Path("configs/gpu-runner.yaml")
T = TypeVar("T")


def _bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in {"true", "yes", "1", "on"}:
        return True
    if lowered in {"false", "no", "0", "off"}:
        return False
    raise argparse.ArgumentTypeError(f"'{value}' is not a boolean: use true or false")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpu-runner", description=__doc__)
    parser.add_argument("--settings", type=Path, default=DEFAULT_SETTINGS, help="YAML settings file")
    commands = parser.add_subparsers(dest="command", required=True)

    commands.add_parser(
        "workflow-settings",
        help="write region, train-branch-prefix and sweep-branch-prefix (from the settings) as step outputs",
    )

    launch = commands.add_parser("launch", help="register a JIT runner and launch its GPU instance")
    launch.add_argument("--instance-type", default="", help="try only this type (overrides instance_types)")
    launch.add_argument("--spot", type=_bool, default=None, help="true/false: override use_spot")
    # The dispatch inputs, checked before any API call (a resumed attempt sets both; a push leaves them empty).
    launch.add_argument(
        "--commit", default="", help="the dispatch input commit (40 hex digits, on this branch)"
    )
    launch.add_argument("--attempt", default="1", help="the dispatch input attempt (1..max_attempts)")
    _add_slot(launch)

    wait = commands.add_parser("wait", help="wait until the runner is online")
    wait.add_argument("--region", required=True)
    wait.add_argument("--instance-id", required=True)
    wait.add_argument("--runner-id", required=True)
    wait.add_argument("--timeout", type=float, default=None, help="seconds (default: wait_timeout_seconds)")
    _add_slot(wait)

    teardown = commands.add_parser(
        "teardown",
        help="terminate, deregister, delete the parameter of THIS workflow run (its run key; idempotent)",
    )
    teardown.add_argument("--region", default="", help="where the instance was launched (default: settings)")
    # Claims, checked against the run key (ownership.py): teardown finds this run's resources without them and
    # refuses another run's. Strings, checked in _teardown: one malformed id must not keep the rest from going.
    teardown.add_argument("--instance-id", default="", help="the start job's instance-id (checked, optional)")
    teardown.add_argument("--runner-id", default="", help="the start job's runner-id (checked, optional)")
    teardown.add_argument("--parameter", default="", help="the start job's parameter (checked, optional)")
    # Then the cost of the instance goes to the job summary and, with a run id, to that MLflow run
    # (MLFLOW_TRACKING_URI and its credentials from the environment).
    teardown.add_argument(
        "--mlflow-run-id", default="", help="the training run to log this attempt's cost to"
    )
    # A string, checked later: a bad dispatch input must not stop the teardown from terminating the instance.
    teardown.add_argument(
        "--attempt", default="1", help="this attempt's number (the MLflow step of the cost)"
    )
    # The moments the workflow saw (boot script, wait, train job), for the timeline logged beside the cost.
    teardown.add_argument(
        "--phase", action="append", default=[], metavar="NAME=EPOCH",
        help="a moment of this attempt (boot, image-ready, runner-started, runner-online, job-started); repeatable",
    )  # fmt: skip
    _add_slot(teardown)

    resume = commands.add_parser(
        "resume", help="after a spot interruption: dispatch the next attempt of train.yml"
    )
    resume.add_argument("--ref", required=True, help="branch to dispatch on")
    resume.add_argument("--attempt", default="1", help="this attempt's number (1 for a push)")
    # The train job's output as is: "true" when the train step exited 75, empty otherwise.
    resume.add_argument("--train-interrupted", default="", help="'true' when the train step exited 75")
    resume.add_argument("--region", default="")
    resume.add_argument("--instance-id", default="", help="to read why EC2 ended it (spot reclaim)")
    resume.add_argument("--commit", required=True, help="the commit the next attempt trains")
    resume.add_argument("--config", default="configs/train.yaml")
    resume.add_argument("--instance-type", default="")
    # gpu-runner-stop.yml's `resume` input: sweep.yml passes none (its collect job resumes the trial).
    resume.add_argument(
        "--mode", default="dispatch", help="dispatch (the next attempt of train.yml) or none (only report it)"
    )

    capacity = commands.add_parser(
        "capacity",
        help="how many GPU runners the vCPU quotas let a sweep start now (step outputs runners=...)",
    )
    # A string, checked before any API call (argparse's int would take " 2" and "-1" alike, in its own words).
    capacity.add_argument("--wanted", required=True, help="runners the sweep would start at once (parallel)")

    next_wave = commands.add_parser(
        "next-wave",
        help="sweep.yml's collect job: dispatch sweep.yml on this branch for the study's next wave",
    )
    next_wave.add_argument("--ref", required=True, help="branch to dispatch on (the sweep branch)")
    next_wave.add_argument("--wave", required=True, help="the wave that just ended (the next is one more)")
    next_wave.add_argument("--sweep", default="configs/sweep.yaml", help="the sweep config of the next wave")
    next_wave.add_argument("--config", default="configs/train.yaml", help="its base training config")

    reap = commands.add_parser("reap", help="clean up expired or orphaned instances, runners and parameters")
    reap.add_argument("--region", action="append", default=[], help="extra regions to scan (repeatable)")

    boot = commands.add_parser(
        "bootstrap", help="one-time: deploy infra/gpu-runner.yaml (bucket, OIDC roles, instance profile)"
    )
    boot.add_argument("--repository", required=True, help="owner/name of the GitHub repository to trust")
    # Default: the settings file's bucket and branch prefixes, their one source (a different value is refused).
    boot.add_argument("--bucket", default="", help="S3 bucket for data, checkpoints and exports")
    boot.add_argument("--branch-prefix", default="", help="branches that may start GPU training")
    boot.add_argument("--sweep-branch-prefix", default="", help="branches that may run GPU sweeps")
    boot.add_argument("--default-branch", default="main", help="the only branch the reaper role trusts")
    boot.add_argument("--owner-id", default="", help="numeric owner id (immutable OIDC subject), optional")
    boot.add_argument("--repository-id", default="", help="numeric repository id, optional")
    boot.add_argument("--oidc-provider-arn", default="", help="reuse the account's GitHub OIDC provider")
    boot.add_argument("--vpc-id", default="", help="VPC of the runner subnets (default VPC when empty)")
    boot.add_argument("--checkpoint-retention-days", type=int, default=30)
    boot.add_argument("--template", type=Path, default=Path("infra/gpu-runner.yaml"))
    # One-time: the GitHub credential goes into AWS (never a repository secret a branch's workflow could print).
    boot.add_argument("--app-id", default="", help="GitHub App id, stored with --app-private-key-file in SSM")
    boot.add_argument("--app-private-key-file", type=Path, default=None, help="the App's private key (.pem)")
    boot.add_argument(
        "--token-file", type=Path, default=None, help="instead of the App: a file holding a PAT"
    )
    boot.add_argument(
        "--credential-writer-arn",
        default="",
        help="the IAM role or user that may store the GitHub credential (default: whoever runs bootstrap)",
    )

    doctor = commands.add_parser(
        "doctor", help="read-only preflight of the AWS account and GitHub repository (one line per check)"
    )
    doctor.add_argument("--repository", required=True, help="owner/name of the GitHub repository")
    doctor.add_argument(
        "--branch-prefix",
        default="",
        help="branches the train role must trust (default: train_branch_prefix)",
    )
    doctor.add_argument("--default-branch", default="main", help="the branch the reaper role must trust")
    _add_cost_report(commands)
    _add_mlflow_server(commands)
    _add_batch(commands)
    _add_pr_comment(commands)
    return parser


def _key_value(value: str) -> tuple[str, str]:
    name, sep, rest = value.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"'{value}' is not NAME=VALUE")
    return name, rest


def _batch_parser(commands: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """The `batch` command group; its actions are added to what this returns."""
    batch = commands.add_parser(
        "batch",
        help="the optional AWS Batch stack (infra/batch.yaml, configs/gpu-runner.yaml backend: batch)",
    )
    return batch.add_subparsers(dest="action", required=True)


def _add_batch(commands: argparse._SubParsersAction) -> None:
    actions = _batch_parser(commands)
    up = actions.add_parser(
        "up", help="deploy it after bootstrap (compute environments at zero until a job comes)"
    )
    down = actions.add_parser("down", help="delete the stack (the bucket and the job logs stay)")
    for action in (up, down):
        action.add_argument("--repository", required=True, help="owner/name, as given to bootstrap")
    up.add_argument("--max-vcpus", type=int, default=16, help="per compute environment (g4dn.xlarge: 4 each)")
    up.add_argument(
        "--service-role-arn", default="", help="default: AWS Batch's service-linked role (recommended)"
    )
    up.add_argument(
        "--submit-workflow",
        default="batch.yml",
        help="the default-branch workflow file the submit role trusts",
    )
    up.add_argument("--template", type=Path, default=Path("infra/batch.yaml"))
    _add_batch_jobs(actions)


def _add_batch_jobs(actions: argparse._SubParsersAction) -> None:
    """`batch submit | wait | cancel`: what a workflow job does with the stack (docs/batch-jobs.md)."""
    submit = actions.add_parser(
        "submit", help="check the request, submit the job, write the step output job-id"
    )
    submit.add_argument("--queue", default="", help="default: the stack's <stack>-gpu (-multinode) queue")
    submit.add_argument(
        "--job-definition", default="", help="default: the stack's <stack>-train (-train-multinode)"
    )
    submit.add_argument(
        "--multinode", action="store_true", help="the defaults are the multi-node queue and definition"
    )
    submit.add_argument("--name", required=True, help="the job name (letters, digits, - and _)")
    submit.add_argument("--array-size", type=int, default=0, help="a sweep: one child per trial (2..10000)")
    submit.add_argument("--instance-type", default="", help="refused unless the queue may launch it")
    submit.add_argument("--env", type=_key_value, action="append", default=[], help="NAME=VALUE, repeatable")
    submit.add_argument("--tag", type=_key_value, action="append", default=[], help="NAME=VALUE, repeatable")
    submit.add_argument(
        "--repository", default="", help="owner/name of the Batch stack (default: $GITHUB_REPOSITORY)"
    )
    # dest argv: `command` is the subcommand's own attribute.
    submit.add_argument(
        "argv", nargs="*", metavar="COMMAND", help="after --: the container's argv (no shell)"
    )
    ship = actions.add_parser(
        "ship",
        help="pack the commit (git archive) to s3://BUCKET/batch-src/; outputs source-uri, source-sha256",
    )
    ship.add_argument("--bucket", required=True, help="the gpu-runner stack's bucket")
    ship.add_argument(
        "--commit",
        default="",
        help="the full SHA to pack (default $GITHUB_SHA); a dispatch's other commit must be on the branch",
    )
    ship.add_argument("--repo-dir", type=Path, default=Path("."), help="a checkout holding the commit")
    wave = actions.add_parser(
        "sweep-wave", help="a planned wave as one submission; outputs trials and array-size (batch_cost.py)"
    )
    wave.add_argument("--sweep-matrix", required=True, help="sweep plan's matrix output")
    open_run = actions.add_parser(
        "open-run", help="open the MLflow run the job trains into; outputs mlflow-run-id (batch_run.py)"
    )
    open_run.add_argument(
        "--config", required=True, help="the commit's config, configs/<name>.yaml (tracking.experiment_name)"
    )
    open_run.add_argument("--source-dir", type=Path, default=Path("."), help="the checkout of the commit")
    wait = actions.add_parser(
        "wait", help="print status changes and log lines until the job ends; its exit code"
    )
    cancel = actions.add_parser("cancel", help="terminate the job (idempotent): the workflow's cancel path")
    for action in (wait, cancel):
        action.add_argument("--job-id", required=True)
    wait.add_argument("--poll-seconds", type=float, default=5.0)
    wait.add_argument("--timeout", type=float, default=None, help="seconds; the job keeps running after it")
    wait.add_argument(
        "--mlflow-run-id", default="", help="the training run (a sweep: the parent run) to log the cost to"
    )
    wait.add_argument(
        "--sweep-matrix",
        default="",
        help="sweep plan's matrix output: child i's cost goes to leg i's trial run",
    )
    wait.add_argument(
        "--bucket",
        default="",
        help="the gpu-runner stack's bucket: record each task of the job as this branch's (checkpoint_owners.py)",
    )
    wait.add_argument("--commit", default="", help="with --bucket: the commit the job trains (40 hex digits)")


def _add_mlflow_server(commands: argparse._SubParsersAction) -> None:
    server = commands.add_parser(
        "mlflow-server",
        help="the optional team MLflow server (infra/mlflow-server.yaml): up, down, tunnel, wake, connect",
    )
    actions = server.add_subparsers(dest="action", required=True)
    up = actions.add_parser(
        "up", help="deploy it after bootstrap; prints MLFLOW_TRACKING_URI and the secrets to set"
    )
    down = actions.add_parser("down", help="delete the stack (the data volume leaves a final snapshot)")
    tunnel = actions.add_parser(
        "tunnel", help="forward 127.0.0.1:PORT to it through SSM (starts it if stopped)"
    )
    for action in (up, down, tunnel):
        action.add_argument("--repository", required=True, help="owner/name, as given to bootstrap")
    up.add_argument("--instance-type", default="t3.small")
    up.add_argument("--subnet-id", default="", help="default: the first of subnet_ids, else EC2 picks one")
    up.add_argument("--stop-schedule", default="", help="e.g. 'cron(0 20 ? * MON-FRI *)': stop after hours")
    up.add_argument(
        "--start-schedule", default="", help="e.g. 'cron(0 7 ? * MON-FRI *)' (needs a stop schedule)"
    )
    up.add_argument("--timezone", default="UTC", help="IANA time zone of both schedules")
    up.add_argument("--template", type=Path, default=Path("infra/mlflow-server.yaml"))
    up.add_argument("--lock", type=Path, default=Path("uv.lock"), help="the mlflow version the server runs")
    up.add_argument(
        "--train-config", type=Path, default=Path("configs/train.yaml"),
        help="the default branch's: the experiments and the served model the server makes",
    )  # fmt: skip
    up.add_argument(
        "--requirements", type=Path, default=Path("infra/mlflow-server-requirements.txt"),
        help="the hash-pinned closure the server installs (make mlflow-server-requirements)",
    )  # fmt: skip
    up.add_argument(
        "--password-reader", action="append", default=[], metavar="ARN",
        help="an IAM role or user who may read the passwords besides you (repeatable; the key keeps only these)",
    )  # fmt: skip
    tunnel.add_argument("--local-port", type=int, default=5000)
    tunnel.add_argument("--print-only", action="store_true", help="print the command instead of running it")
    actions.add_parser("wake", help="the start job: start a stopped server and wait until MLflow answers")
    connect = actions.add_parser(
        "connect",
        help="a job on a GitHub-hosted runner: open the SSM tunnel in the background, wait until MLflow "
        "answers through it, write the step outputs tracking-uri and pid",
    )
    connect.add_argument("--no-wake", action="store_true", help="fail instead of starting a stopped server")
    connect.add_argument("--timeout", type=float, default=120.0, help="seconds until MLflow must answer")
    connect.add_argument(
        "--log-file", type=Path, default=Path("mlflow-tunnel.log"), help="the session's output"
    )


def _add_pr_comment(commands: argparse._SubParsersAction) -> None:
    comment = commands.add_parser(
        "pr-comment",
        help="train.yml / sweep.yml: keep one comment with the run's metrics, champion delta and cost on the "
        "branch's open pull request (GITHUB_TOKEN with pull-requests: write; MLflow from MLFLOW_TRACKING_*)",
    )
    comment.add_argument(
        "--kind", required=True, help="train (a training run) or sweep (a sweep's parent run)"
    )
    comment.add_argument("--mlflow-run-id", required=True, help="the training run, or the sweep's parent run")
    comment.add_argument("--branch", required=True, help="the trained branch (github.ref_name)")
    comment.add_argument("--commit", default="", help="the trained commit (40 hex digits)")
    comment.add_argument(
        "--config", type=Path, default=Path("configs/train.yaml"), help="for registry.alias (the champion)"
    )


def _pr_comment(args: argparse.Namespace) -> int:
    """Exit 1 with an ::error:: annotation when GitHub or MLflow refuses: the workflow step continues on error, so
    the annotation and the job summary say it while the run's result stays the training's."""
    from gpu_runner.pr_comment.pr_comment import comment

    try:
        posted = comment(
            kind=args.kind, mlflow_run_id=args.mlflow_run_id, branch=args.branch, commit=args.commit,
            config=args.config, env=os.environ,
        )  # fmt: skip
    except RunnerError as error:
        message = " ".join(str(error).split())
        if os.environ.get("GITHUB_ACTIONS") == "true":
            print(contract.workflow_command("error", "Pull-request comment", message))
        contract.append_summary(f"**Pull-request comment not posted**: {message}")
        print(f"error: {message}", file=sys.stderr)
        return 1
    for each in posted:
        contract.append_summary(f"Pull-request comment {each.action} on #{each.pull_number}: {each.url}")
    return 0


def _add_slot(command: argparse.ArgumentParser) -> None:
    # A string, checked in run() before any API call (contract.slot names the flag and the fix).
    command.add_argument(
        "--slot",
        default="",
        help="a sweep's trial number: its own runner name, parameter and instance (default: none)",
    )


def _add_cost_report(commands: argparse._SubParsersAction) -> None:
    cost = commands.add_parser(
        "cost-report",
        help="GPU hours, billed cost, overhead and spot share of the last N days vs an always-on GPU box",
    )
    cost.add_argument("--days", type=float, default=30.0, help="runs started in the last N days (default 30)")
    cost.add_argument(
        "--experiment",
        action="append",
        default=None,
        help="MLflow experiment name, repeatable (default: tracking.experiment_name of --config)",
    )
    cost.add_argument(
        "--config", type=Path, default=Path("configs/train.yaml"), help="for the experiment name"
    )
    cost.add_argument(
        "--cpu-monthly-usd",
        type=float,
        default=0.0,
        help="always-on CPU side of this setup per month, e.g. a dev box (default 0: GitHub-hosted runners)",
    )
    cost.add_argument(
        "--always-on-monthly-usd",
        type=float,
        default=None,
        help="what the always-on GPU box costs per month (default: 730 h x the on-demand price of the most "
        "used instance type, from the runs' cost.on_demand_usd_per_hour tag)",
    )
    cost.add_argument("--out", type=Path, default=Path("outputs/cost-report"), help="for .md and .png")
    cost.add_argument(
        "--mlflow-server-of",
        default="",
        metavar="OWNER/NAME",
        help="add this repository's team MLflow server (mlflow-server up) to the CPU side, priced from its stack "
        "(AWS credentials that may describe it; region and project from --settings)",
    )


def _cost_report(args: argparse.Namespace) -> int:
    """The report on stdout (it is this command's output, not a log line), also written with its chart."""
    from gpu_runner.cost import chart, files, report

    experiments = args.experiment or [report.experiment_from_config(args.config)]
    cpu_usd, cpu_basis = args.cpu_monthly_usd, "--cpu-monthly-usd"
    if args.mlflow_server_of:
        server = _mlflow_server_cost(args)
        if server is not None:
            cpu_usd, cpu_basis = cpu_usd + server.monthly_usd, f"{cpu_basis} + {server.basis}"
    figures = report.cost_report(
        experiments,
        args.days,
        cpu_monthly_usd=cpu_usd,
        cpu_basis=cpu_basis,
        always_on_monthly_usd=args.always_on_monthly_usd,
    )
    markdown, png = files.write_report(figures, args.out)
    print(markdown.read_text(encoding="utf-8"))
    print(f"written: {markdown}" + (f"\nwritten: {png}" if png else ""))
    if png is None:
        print(f"warning: chart not drawn: {chart.PLOT_EXTRA_MISSING}", file=sys.stderr)
    return 0


def _mlflow_server_cost(args: argparse.Namespace) -> Any:
    """The team server's monthly cost, or None (with a warning) when its stack cannot be read."""
    from gpu_runner.cost import server
    from gpu_runner.mlflow_server.mlflow_server import ServerInputs, server_stack_name

    settings = load_settings(args.settings)
    name = server_stack_name(settings.project, ServerInputs(args.mlflow_server_of).repository)
    aws = Aws()
    parameters = server.deployed_server_parameters(aws.client("cloudformation", settings.region), name)
    if parameters is None:
        print(f"warning: no team MLflow server stack {name} readable in {settings.region}: CPU side without it",
              file=sys.stderr)  # fmt: skip
        return None
    return server.server_cost(aws, parameters, settings.region)


def _raise_on_sigterm(signum: int, frame: FrameType | None) -> None:
    # A cancelled workflow sends SIGTERM: turn it into SystemExit so launch's cleanup runs.
    raise SystemExit(128 + signum)


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Run one command; returns its exit status (non-zero only from doctor and capacity, the others raise)."""
    # Imported lazily so `--help` stays fast.
    from gpu_runner.core import timeline
    from gpu_runner.ec2_runner import lifecycle, reaper

    ctx = RunContext.from_env()
    aws = Aws()
    if args.command == "doctor":
        return _doctor(args, settings, aws)
    if args.command == "bootstrap":
        _bootstrap(args, settings, aws)
        return 0
    if args.command == "workflow-settings":
        _workflow_settings(settings)
        return 0
    if args.command == "mlflow-server":
        return _mlflow_server(args, settings, aws)
    if args.command == "batch":
        return _batch(args, settings, aws)
    if args.command == "resume":
        _resume(args, settings, ctx, aws)
        return 0
    if args.command == "next-wave":
        _next_wave(args, ctx)
        return 0
    if args.command == "capacity":
        from gpu_runner.ec2_runner import capacity

        wanted = contract.wanted(args.wanted)
        return capacity.report(settings, capacity.capacity(settings, aws, wanted))
    from gpu_runner.core import credential

    # Before any AWS call (the credential below is read from SSM): the train job would have nowhere to keep its
    # checkpoints, and nothing must be asked of AWS for a launch that cannot train.
    if args.command == "launch" and not settings.bucket:
        raise RunnerError(
            f"bucket: not set in {args.settings}; set it to the bucket `make bootstrap` created (the "
            "default branch's copy is the one that counts)"
        )
    # Before any API call. The slot is part of the run key: a malformed one names nothing launch could have made,
    # so teardown, too, has nothing to end for it.
    if args.command in ("launch", "wait", "teardown"):
        ctx = dataclasses.replace(ctx, slot=contract.slot(args.slot))
    # The workflows pass no GitHub credential: it is read from AWS with the role (credential.py).
    env = credential.github_env(
        settings, aws.client("ssm", settings.region), kms=aws.client("kms", settings.region)
    )
    github = GitHubRunners.from_env(ctx.repository, env=env)
    if args.command == "launch":
        _check_dispatch_inputs(args, settings, ctx)
        nonce = os.environ.get(contract.LABEL_NONCE) or None
        outcome = lifecycle.launch(settings, ctx, aws, github, use_spot=args.spot, label_nonce=nonce)
        instance = outcome.launched.instance_id
        _record_checkpoint_owner(settings, aws, ctx, settings.bucket, args.commit or ctx.commit, instance)
    elif args.command == "wait":
        lifecycle.wait(
            settings, aws, github, region=contract.region(args.region), instance_id=contract.instance_id(args.instance_id),
            runner_id=contract.runner_id(args.runner_id), timeout_seconds=args.timeout,
            runner_name=naming.runner_name(ctx),
        )  # fmt: skip
    elif args.command == "teardown":
        _teardown(args, settings, ctx, aws, github, timeline.parse_phases(args.phase))
    elif args.command == "reap":
        reaper.reap(settings, aws, github, regions=tuple(args.region))
    return 0


def _record_checkpoint_owner(
    settings: Settings, aws: Aws, ctx: RunContext, bucket: str, commit: str, session: str
) -> None:
    """The session just started trains this run's branch at `commit` (the one its job checks out): the record a
    later attempt's resume reads (checkpoint_owners.py)."""
    from gpu_runner.core import checkpoint_owners

    detail = {
        "repository": ctx.repository,
        "run_id": ctx.run_id,
        "run_attempt": ctx.run_attempt,
        "slot": ctx.slot,
    }
    checkpoint_owners.record_or_warn(aws.client("s3", settings.region), bucket, branch=ctx.branch, commit=commit,
                                     session=session, detail=detail)  # fmt: skip


def _mlflow_server(args: argparse.Namespace, settings: Settings, aws: Aws) -> int:
    from gpu_runner.mlflow_server import mlflow_server, mlflow_wake

    region = settings.region
    if args.action == "wake":
        mlflow_wake.wake(aws.client("ec2", region), aws.client("ssm", region), project=settings.project,
                         ssm_prefix=settings.ssm_prefix)  # fmt: skip
        return 0
    if args.action == "connect":
        from gpu_runner.mlflow_server import mlflow_tunnel

        tunnel = mlflow_tunnel.connect(
            aws.client("ec2", region), aws.client("ssm", region), settings, log_file=args.log_file,
            wake=not args.no_wake, timeout_seconds=args.timeout,
        )  # fmt: skip
        contract.write_outputs(
            {
                contract.TunnelOutput.TRACKING_URI: tunnel.tracking_uri,
                contract.TunnelOutput.PID: str(tunnel.pid),
            }
        )
        return 0
    cfn = aws.client("cloudformation", region)
    if args.action == "up":
        inputs = mlflow_server.ServerInputs(
            args.repository, instance_type=args.instance_type, subnet_id=args.subnet_id,
            stop_schedule=args.stop_schedule, start_schedule=args.start_schedule, timezone=args.timezone,
            password_readers=tuple(args.password_reader),
        )  # fmt: skip
        from gpu_runner.batch.batch_stack import batch_stack_name

        mlflow_server.up(
            settings, lambda service: aws.client(service, region), inputs,
            batch_stack=batch_stack_name(settings.project, inputs.repository), template=args.template,
            lock=args.lock, train_config=args.train_config, requirements=args.requirements,
        )  # fmt: skip
    elif args.action == "down":
        mlflow_server.down(settings, cfn, mlflow_server.ServerInputs(args.repository).repository)
    else:
        outputs = mlflow_server.server_outputs(cfn, settings, args.repository)
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
    return 0


def _batch(args: argparse.Namespace, settings: Settings, aws: Aws) -> int:
    if args.action in ("up", "down"):
        return _batch_stack(args, settings, aws)
    from gpu_runner.batch import batch_jobs, batch_wait

    client = aws.client("batch", settings.region)
    if args.action == "submit":
        from gpu_runner.batch.batch_stack import JOB_TAG_KEY, batch_stack_name, job_targets

        # run() has already required GITHUB_REPOSITORY (RunContext.from_env).
        repository = args.repository or os.environ["GITHUB_REPOSITORY"]
        stack_name = batch_stack_name(settings.project, repository)
        queue, definition = job_targets(stack_name, multinode=args.multinode)
        # The submit role may submit and end only jobs tagged as its stack's (infra/batch.yaml, SubmitPolicy): the
        # tag is set here, never left to the caller, and a caller's --tag cannot replace it.
        tags = {"project": settings.project, **dict(args.tag), JOB_TAG_KEY: stack_name}
        request = batch_jobs.JobRequest(
            name=args.name, queue=args.queue or queue, definition=args.job_definition or definition,
            command=tuple(args.argv),
            environment=dict(args.env), array_size=args.array_size, instance_type=args.instance_type, tags=tags,
        )  # fmt: skip
        submitted = batch_jobs.submit(client, request)
        contract.write_outputs({contract.BatchOutput.JOB_ID: submitted.job_id})
        return 0
    if args.action == "cancel":
        batch_jobs.cancel(client, args.job_id)
        return 0
    if args.action == "sweep-wave":
        from gpu_runner.batch.batch_cost import SweepMatrixError, wave_request

        try:
            trials, array_size = wave_request(args.sweep_matrix)
        except SweepMatrixError as error:
            raise RunnerError(str(error)) from None
        contract.write_outputs(
            {contract.BatchOutput.TRIALS: trials, contract.BatchOutput.ARRAY_SIZE: str(array_size)}
        )
        return 0
    if args.action == "open-run":
        from gpu_runner.batch import batch_run

        config = batch_run.config_in(args.source_dir, args.config)
        run_id = batch_run.open_run(config, os.environ, {"gpu.backend": "batch"})
        contract.write_outputs({contract.BatchOutput.MLFLOW_RUN_ID: run_id})
        return 0
    if args.action == "ship":
        from gpu_runner.batch import batch_source

        shipped = batch_source.ship(
            aws.client("s3", settings.region),
            args.bucket,
            args.repo_dir,
            _commit_to_ship(args.commit),
        )
        print(f"{'shipped' if shipped.uploaded else 'already shipped'}: {shipped.size} bytes")
        contract.write_outputs({contract.BatchOutput.SOURCE_URI: shipped.uri,
                                contract.BatchOutput.SOURCE_SHA256: shipped.sha256})  # fmt: skip
        return 0
    # Each task of the job trains this run's branch at --commit: the record its next attempt (a Batch retry) or the
    # sweep's next wave restores from (checkpoint_owners.py). A malformed commit warns per task; the job goes on.
    ctx = RunContext.from_env()

    def record_tasks(tasks: list[str]) -> None:
        for task in tasks:
            _record_checkpoint_owner(settings, aws, ctx, args.bucket, args.commit, task)

    outcome = batch_wait.wait(client, aws.client("logs", settings.region), args.job_id,
                              poll_seconds=args.poll_seconds, timeout_seconds=args.timeout,
                              on_tasks=record_tasks if args.bucket else None)  # fmt: skip
    try:  # the cost never changes the job's result
        _log_batch_costs(args, settings, aws, outcome.job)
    except (ClientError, BotoCoreError) as error:
        print(f"warning: cost not computed: {error}")
    return outcome.exit_code


def _commit_to_ship(commit: str) -> str:
    """The workflow run's own commit, or a dispatch input's: that one only when it is in the dispatched branch's
    history (launch's check: a hand-made dispatch must not send another branch's code to the GPU with this
    branch's roles). Outside a workflow (no GITHUB_SHA) the given commit, as by hand."""
    ctx = RunContext.from_env()
    if not commit:
        if not ctx.commit:
            raise RunnerError("--commit: none given and GITHUB_SHA is not set (GitHub Actions sets it)")
        return ctx.commit
    if ctx.commit and commit != ctx.commit:
        _check_dispatch_commit(commit, ctx)
    return commit


def _log_batch_costs(args: argparse.Namespace, settings: Settings, aws: Aws, job: dict) -> None:
    """Print each attempt's cost; log a single job's to --mlflow-run-id, and with --sweep-matrix an array job's
    children's to their trials' child runs under that (parent) run, at the trial's attempt of the wave."""
    from gpu_runner.batch import batch_cost
    from gpu_runner.core.mlflow_rest import MlflowError, MlflowRest
    from gpu_runner.cost import accounting

    fallback = settings.instance_types[0] if len(settings.instance_types) == 1 else ""
    costs = batch_cost.job_costs(aws, job, region=settings.region, volume_gb=settings.root_volume_gb,
                                 fallback_type=fallback)  # fmt: skip
    run_id, legs = "", None
    try:
        run_id = contract.mlflow_run_id(args.mlflow_run_id) if args.mlflow_run_id else ""
        if args.sweep_matrix:
            # A wave of one trial is a single job (an array job has 2 children at least: batch_jobs.py cites AWS,
            # "The array size can be between 2 and 10,000"): one leg, its cost under slot "".
            children = int(job.get("arrayProperties", {}).get("size", 0)) or 1
            legs = batch_cost.sweep_legs(args.sweep_matrix, children)
    except (RunnerError, batch_cost.SweepMatrixError) as error:
        print(f"warning: cost not logged to MLflow: {error}")
        run_id = ""
    client = MlflowRest.from_env(os.environ) if run_id and legs else None
    for priced in costs:
        # A sweep's parent run never takes a cost itself: its children's are what sweep collect sums.
        target, step = ("" if legs else run_id), priced.attempt
        if legs and client:
            leg = legs[int(priced.slot or 0)]
            # A Batch retry of the child (a reclaimed host) is the trial's next attempt, as a runner's would be.
            step = leg.attempt + priced.attempt - 1
            try:
                target = batch_cost.trial_run(client, run_id, leg.trial) or ""
            except MlflowError as error:
                print(f"warning: cost of trial {leg.trial} not logged to MLflow: {error}")
        overhead = (
            accounting.log_to_mlflow(priced.cost, run_id=target, attempt=step, env=os.environ)
            if target
            else None
        )
        print(accounting.summary_line(priced.cost, attempt=step, overhead=overhead, slot=priced.slot))


def _batch_stack(args: argparse.Namespace, settings: Settings, aws: Aws) -> int:
    from gpu_runner.batch import batch_stack

    cfn = aws.client("cloudformation", settings.region)
    if args.action == "up":
        inputs = batch_stack.BatchInputs(
            args.repository, max_vcpus=args.max_vcpus, service_role_arn=args.service_role_arn,
            submit_workflow=args.submit_workflow,
        )  # fmt: skip
        batch_stack.up(settings, cfn, aws.client("ec2", settings.region), inputs, template=args.template)
    else:
        batch_stack.down(settings, cfn, batch_stack.BatchInputs(args.repository).repository)
    return 0


def _check_dispatch_inputs(args: argparse.Namespace, settings: Settings, ctx: RunContext) -> None:
    """A hand-made dispatch must not start a GPU for an attempt that cannot exist or a commit of another branch
    (before the JIT config and RunInstances). A push leaves `commit` empty: the run trains its own GITHUB_SHA."""
    contract.attempt(args.attempt, settings.max_attempts)
    if args.commit:
        _check_dispatch_commit(args.commit, ctx)


def _check_dispatch_commit(commit: str, ctx: RunContext) -> None:
    """A dispatch input `commit` must be in the dispatched branch's history (GitHub's compare), for launch and for
    `batch ship` alike."""
    from gpu_runner.core.github import DEFAULT_BASE_URL, check_commit_on_branch

    contract.commit(commit)
    token = os.environ.get(contract.GITHUB_TOKEN, "")
    if not token:
        raise RunnerError(
            "GITHUB_TOKEN is not set: the launch step passes the workflow's token (permissions: contents: read) "
            "to check that the dispatch input `commit` is on the dispatched branch"
        )
    # For workflow_dispatch, GITHUB_SHA is the "Last commit on the GITHUB_REF branch or tag" (docs.github.com,
    # "Events that trigger workflows", workflow_dispatch, read 2026-12-01): the head `commit` must be behind.
    if not contract.COMMIT.fullmatch(ctx.commit):
        raise RunnerError(f"GITHUB_SHA {ctx.commit!r} is not a commit: run launch inside the workflow run")
    base_url = os.environ.get(contract.GITHUB_API_URL) or DEFAULT_BASE_URL
    check_commit_on_branch(ctx.repository, commit, ctx.branch, ctx.commit, token, base_url)


def _teardown(
    args: argparse.Namespace,
    settings: Settings,
    ctx: RunContext,
    aws: Aws,
    github: GitHubRunners,
    phases: Mapping[str, float],
) -> None:
    """Tear down the CALLING run's resources (ownership.py): found through its run key (GITHUB_REPOSITORY,
    GITHUB_RUN_ID, GITHUB_RUN_ATTEMPT and --slot), whatever ids are given; the ids are claims, and one that is not
    this run's is refused, naming it and why, after everything of this run's was torn down. Each value is checked
    on its own: a bad run id or attempt (the train job's output, a dispatch input) costs the MLflow cost logging,
    never the terminate or deregister."""
    from gpu_runner.ec2_runner import lifecycle, ownership

    refused: list[str] = []

    def checked(check: Callable[[str], T], value: str, on_bad: Callable[[str], None]) -> T | None:
        try:
            return check(value) if value else None
        except contract.BadValue as error:
            on_bad(str(error))
            return None

    def warn_cost(message: str) -> None:
        print(f"warning: cost not logged to MLflow: {message}")

    def warn_region(message: str) -> None:
        print(f"warning: {message}; using the settings' region {settings.region} (launch never leaves it)")

    scope = ownership.RunScope(ctx, settings.project, settings.ssm_prefix)
    region = checked(contract.region, args.region, warn_region) or settings.region
    instance_id = checked(contract.instance_id, args.instance_id, refused.append) or ""
    runner_id = checked(contract.runner_id, args.runner_id, refused.append)
    parameter = checked(contract.parameter, args.parameter, refused.append) or ""
    run_id = checked(contract.mlflow_run_id, args.mlflow_run_id, warn_cost) or ""
    attempt = checked(lambda v: contract.attempt(v, settings.max_attempts), args.attempt, warn_cost)
    request = lifecycle.CostRequest(settings.root_volume_gb, run_id, attempt, phases=phases, slot=ctx.slot)
    try:
        report = lifecycle.teardown(
            aws, github, scope, region=region, instance_id=instance_id, runner_id=runner_id, parameter=parameter,
            cost_request=request,
        )  # fmt: skip
    finally:
        if refused:  # after the teardown, so these lines end the log, and even when the teardown failed too
            print("error: not torn down: " + "; ".join(refused), file=sys.stderr)
    for each in report.refused:
        # On the run's page too: a refused id is someone else's resource, named by this run's caller.
        if os.environ.get("GITHUB_ACTIONS") == "true":
            print(contract.workflow_command("error", "Teardown refused an id", f"refused {each}"))
        print(f"error: refused {each}", file=sys.stderr)
    if refused or report.refused:
        raise RunnerError(
            f"{len(refused) + len(report.refused)} value(s) refused (see above): this run's own resources were "
            f"torn down ({scope.describe()}); nothing else was touched"
        )


def _workflow_settings(settings: Settings) -> None:
    """The values the workflows need before any AWS credential exists, from the one file that holds them."""
    contract.write_outputs(
        {
            contract.SettingsOutput.REGION: settings.region,
            contract.SettingsOutput.TRAIN_BRANCH_PREFIX: settings.train_branch_prefix,
            contract.SettingsOutput.SWEEP_BRANCH_PREFIX: settings.sweep_branch_prefix,
            contract.SettingsOutput.BUCKET: settings.bucket,
            contract.SettingsOutput.MAX_ATTEMPTS: str(settings.max_attempts),
            contract.SettingsOutput.BACKEND: settings.backend,
        }
    )


def _from_settings(flag: str, given: str, key: str, configured: str, settings_file: Path) -> str:
    """A flag's value where the settings file holds the one source: the file's, or the same value again."""
    if given and configured and given != configured:
        raise RunnerError(
            f"{flag}: '{given}' differs from {key}: '{configured}' in {settings_file}, which the workflows "
            f"read; change {key} there and leave {flag} out"
        )
    return given or configured


def _bootstrap(args: argparse.Namespace, settings: Settings, aws: Aws) -> None:
    from gpu_runner.setup import stack

    bucket = _from_settings("--bucket", args.bucket, "bucket", settings.bucket, args.settings)
    prefix = _from_settings(
        "--branch-prefix",
        args.branch_prefix,
        "train_branch_prefix",
        settings.train_branch_prefix,
        args.settings,
    )
    sweep_prefix = _from_settings(
        "--sweep-branch-prefix",
        args.sweep_branch_prefix,
        "sweep_branch_prefix",
        settings.sweep_branch_prefix,
        args.settings,
    )
    inputs = stack.StackInputs(
        repository=args.repository, bucket=bucket, train_branch_prefix=prefix, sweep_branch_prefix=sweep_prefix,
        default_branch=args.default_branch, owner_id=args.owner_id, repository_id=args.repository_id,
        oidc_provider_arn=args.oidc_provider_arn, vpc_id=args.vpc_id,
        checkpoint_retention_days=args.checkpoint_retention_days,
        credential_writer_arn=args.credential_writer_arn,
    )  # fmt: skip
    outputs = stack.bootstrap(
        settings, aws.client("cloudformation", settings.region), inputs, template=args.template,
        s3=aws.client("s3", settings.region), lambda_client=aws.client("lambda", settings.region),
        ec2=aws.client("ec2", settings.region), quotas=aws.client("service-quotas", stack.trust_size.QUOTA_REGION),
        identity=stack.Identity(
            aws.client("sts", settings.region), aws.client("iam", settings.region),
            storing=bool(args.app_id or args.app_private_key_file or args.token_file),
        ),
    )  # fmt: skip
    stack.store_github_credential(
        settings, aws.client("ssm", settings.region), outputs, app_id=args.app_id,
        app_private_key_file=args.app_private_key_file, token_file=args.token_file,
    )  # fmt: skip
    stack.set_oidc_subject(args.repository, os.environ)


def _doctor(args: argparse.Namespace, settings: Settings, aws: Aws) -> int:
    from gpu_runner.doctor import doctor
    from gpu_runner.doctor.doctor_checks import Target
    from gpu_runner.setup import stack

    if not stack.REPOSITORY.fullmatch(args.repository):
        print(f"✗ repository: '{args.repository}' is not owner/name; fix: pass --repository owner/name")
        return 1
    target = Target(
        settings=settings, repository=args.repository,
        train_branch_prefix=args.branch_prefix or settings.train_branch_prefix,
        default_branch=args.default_branch,
    )  # fmt: skip
    outcomes = doctor.run_checks(target, aws)
    return 0 if all(outcome.ok for outcome in outcomes) else 1


def _resume(args: argparse.Namespace, settings: Settings, ctx: RunContext, aws: Aws) -> None:
    from gpu_runner.core.github import DEFAULT_BASE_URL, dispatch_workflow
    from gpu_runner.ec2_runner import resume

    mode = contract.resume_mode(args.mode)
    token = os.environ.get(contract.GITHUB_TOKEN, "")
    if not token and mode == "dispatch":
        raise RunnerError("GITHUB_TOKEN is not set: pass the workflow's token (permissions: actions: write)")
    base_url = os.environ.get(contract.GITHUB_API_URL) or DEFAULT_BASE_URL

    def dispatch(ref: str, inputs: Mapping[str, str]) -> None:
        # resume() never calls it in mode none; a second lock on the one door that starts a GPU.
        if mode != "dispatch":
            raise RunnerError(f"resume mode {mode}: not dispatching {resume.WORKFLOW}")
        dispatch_workflow(ctx.repository, resume.WORKFLOW, ref, inputs, token, base_url)

    decision = resume.resume(
        settings, aws, dispatch, ref=args.ref, attempt=contract.attempt(args.attempt, settings.max_attempts),
        train_interrupted=args.train_interrupted == "true", region=contract.region(args.region) if args.region else "",
        instance_id=contract.instance_id(args.instance_id) if args.instance_id else "", commit=contract.commit(args.commit),
        config=contract.config_path(args.config, Path.cwd()), instance_type=args.instance_type, mode=mode,
    )  # fmt: skip
    if decision.interrupted:
        told = "" if mode == "dispatch" else f" Not dispatched (resume mode {mode}): the caller resumes it."
        contract.append_summary(
            f"### Spot interruption\n\nAttempt {args.attempt}: {decision.reason}.{told}\n"
        )


SWEEP_WORKFLOW = "sweep.yml"


def _next_wave(args: argparse.Namespace, ctx: RunContext) -> None:
    """One workflow_dispatch of sweep.yml with the next wave's number, as `resume` dispatches train.yml: with the
    run's GITHUB_TOKEN (actions: write), through the same request (dispatch_workflow)."""
    from gpu_runner.core.github import DEFAULT_BASE_URL, dispatch_workflow

    wave = contract.wave(args.wave)
    token = os.environ.get(contract.GITHUB_TOKEN, "")
    if not token:
        raise RunnerError("GITHUB_TOKEN is not set: pass the workflow's token (permissions: actions: write)")
    inputs = {
        "sweep": contract.config_path(args.sweep, Path.cwd()),
        "config": contract.config_path(args.config, Path.cwd()),
        "wave": str(wave + 1),
    }
    base_url = os.environ.get(contract.GITHUB_API_URL) or DEFAULT_BASE_URL
    run_url = dispatch_workflow(ctx.repository, SWEEP_WORKFLOW, args.ref, inputs, token, base_url)
    contract.append_summary(
        f"Started wave {wave + 1} of the sweep on {args.ref}{f': {run_url}' if run_url else ''}.\n"
    )


def aws_refusal(error: ClientError, region: str) -> str:
    """One line for an AWS error that no command turned into a RunnerError (reap, resume, a describe)."""
    if ec2.error_code(error) in ec2.CREDENTIAL_CODES:
        return f"AWS refused {error.operation_name}: {ec2.explain(error, region)}"
    message = error.response.get("Error", {}).get("Message", "")
    return (
        f"AWS refused {error.operation_name}: {ec2.error_code(error)}: {message} (the roles' permissions are in "
        "infra/gpu-runner.yaml; make bootstrap applies changes)"
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    log_output.to_stdout()
    if args.command == "cost-report":  # reads MLflow only: no settings, no AWS, no workflow environment
        from gpu_runner.cost.report import CostReportError

        try:
            return _cost_report(args)
        except (CostReportError, RunnerError) as error:  # RunnerError: --settings or --mlflow-server-of
            print(f"error: {error}", file=sys.stderr)
            return 2
    if args.command == "pr-comment":  # MLflow and GitHub's pull requests only: no settings, no AWS
        return _pr_comment(args)
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    region = ""
    try:
        overrides = {"instance_types": args.instance_type} if getattr(args, "instance_type", "") else {}
        settings = load_settings(args.settings, overrides)
        region = settings.region
        # bootstrap and doctor run from a laptop (the repository is a flag); the others run in a workflow.
        # capacity asks nothing of GitHub: it also answers on a laptop.
        if (
            args.command not in ("bootstrap", "doctor", "capacity")
            and not (args.command == "mlflow-server" and args.action != "wake")
            and not (args.command == "batch" and args.action in ("up", "down"))
            and not os.environ.get("GITHUB_REPOSITORY")
        ):
            raise RunnerError(
                "GITHUB_REPOSITORY is not set: GitHub Actions sets it; by hand, export GITHUB_REPOSITORY=owner/name"
            )
        return run(args, settings)
    except RunnerError as error:
        if args.command == "doctor":  # doctor speaks in check lines, also about its own settings
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
