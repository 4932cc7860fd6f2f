"""The Batch backend's commands: `batch up | down` (the stack, from a laptop) and `batch submit | ship | sweep-wave
| open-run | wait | cancel` (what batch.yml's jobs do with it: manual/batch-jobs.md)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from botocore.exceptions import BotoCoreError, ClientError

from gpu_runner.backend import Handle, Work
from gpu_runner.batch import TEMPLATE
from gpu_runner.core import checkpoint_owners
from gpu_runner.core import workflow_contract as contract
from gpu_runner.core.aws import Aws
from gpu_runner.core.command_line import Command, SubParsers, add_command, key_value
from gpu_runner.core.dispatch import check_dispatch_commit
from gpu_runner.core.errors import RunnerError
from gpu_runner.core.naming import RunContext
from gpu_runner.core.settings import Settings


def register(commands: SubParsers) -> None:
    batch = commands.add_parser(
        "batch",
        help="the optional AWS Batch stack (gpu_runner/batch/batch.yaml, configs/gpu-runner.yaml backend: batch)",
    )
    actions = batch.add_subparsers(dest="action", required=True)
    _register_stack(actions)
    _register_jobs(actions)


def _register_stack(actions: SubParsers) -> None:
    # Run from a laptop: the repository is a flag, not the workflow's GITHUB_REPOSITORY.
    up = add_command(actions, "up", Command(run=_up, in_workflow=False),
                     help="deploy it after bootstrap (compute environments at zero until a job comes)")  # fmt: skip
    down = add_command(actions, "down", Command(run=_down, in_workflow=False),
                       help="delete the stack (the bucket and the job logs stay)")  # fmt: skip
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
    up.add_argument("--template", type=Path, default=TEMPLATE, help="default: the one gpu_runner ships")


def _register_jobs(actions: SubParsers) -> None:
    submit = add_command(actions, "submit", Command(run=_submit, narrows_instance_types=True),
                         help="check the request, submit the job, write the step output job-id")  # fmt: skip
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
    submit.add_argument("--env", type=key_value, action="append", default=[], help="NAME=VALUE, repeatable")
    submit.add_argument("--tag", type=key_value, action="append", default=[], help="NAME=VALUE, repeatable")
    submit.add_argument(
        "--repository", default="", help="owner/name of the Batch stack (default: $GITHUB_REPOSITORY)"
    )
    # dest argv: `command` is the subcommand's own attribute.
    submit.add_argument(
        "argv", nargs="*", metavar="COMMAND", help="after --: the container's argv (no shell)"
    )
    ship = add_command(
        actions, "ship", Command(run=_ship),
        help="pack the commit (git archive) to s3://BUCKET/batch-src/; outputs source-uri, source-sha256",
    )  # fmt: skip
    ship.add_argument("--bucket", required=True, help="the gpu-runner stack's bucket")
    ship.add_argument(
        "--commit",
        default="",
        help="the full SHA to pack (default $GITHUB_SHA); a dispatch's other commit must be on the branch",
    )
    ship.add_argument("--repo-dir", type=Path, default=Path("."), help="a checkout holding the commit")
    wave = add_command(
        actions, "sweep-wave", Command(run=_sweep_wave),
        help="a planned wave as one submission; outputs trials and array-size (batch_cost.py)",
    )  # fmt: skip
    wave.add_argument("--sweep-matrix", required=True, help="sweep plan's matrix output")
    open_run = add_command(
        actions, "open-run", Command(run=_open_run),
        help="open the MLflow run the job trains into; outputs mlflow-run-id (batch_run.py)",
    )  # fmt: skip
    open_run.add_argument(
        "--config", required=True, help="the commit's config, configs/<name>.yaml (tracking.experiment_name)"
    )
    open_run.add_argument("--source-dir", type=Path, default=Path("."), help="the checkout of the commit")
    wait = add_command(actions, "wait", Command(run=_wait),
                       help="print status changes and log lines until the job ends; its exit code")  # fmt: skip
    cancel = add_command(actions, "cancel", Command(run=_cancel),
                         help="terminate the job (idempotent): the workflow's cancel path")  # fmt: skip
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


def _up(args: argparse.Namespace, settings: Settings, aws: Aws) -> int:
    from gpu_runner.batch import batch_stack

    inputs = batch_stack.BatchInputs(
        args.repository, max_vcpus=args.max_vcpus, service_role_arn=args.service_role_arn,
        submit_workflow=args.submit_workflow,
    )  # fmt: skip
    batch_stack.up(settings, aws.client("cloudformation", settings.region), aws.client("ec2", settings.region),
                   inputs, template=args.template)  # fmt: skip
    return 0


def _down(args: argparse.Namespace, settings: Settings, aws: Aws) -> int:
    from gpu_runner.batch import batch_stack

    cfn = aws.client("cloudformation", settings.region)
    batch_stack.down(settings, cfn, batch_stack.BatchInputs(args.repository).repository)
    return 0


def _submit(args: argparse.Namespace, settings: Settings, aws: Aws) -> int:
    from gpu_runner.batch.backend import BatchJobs
    from gpu_runner.batch.batch_stack import JOB_TAG_KEY, batch_stack_name, job_targets

    # main has already required GITHUB_REPOSITORY (in_workflow).
    repository = args.repository or os.environ["GITHUB_REPOSITORY"]
    stack_name = batch_stack_name(settings.project, repository)
    queue, definition = job_targets(stack_name, multinode=args.multinode)
    # The submit role may submit and end only jobs tagged as its stack's (gpu_runner/batch/batch.yaml, SubmitPolicy): the
    # tag is set here, never left to the caller, and a caller's --tag cannot replace it.
    tags = {"project": settings.project, **dict(args.tag), JOB_TAG_KEY: stack_name}
    jobs = BatchJobs(
        settings, aws, queue=args.queue or queue, definition=args.job_definition or definition,
        array_size=args.array_size, instance_type=args.instance_type, tags=tags,
    )  # fmt: skip
    handle = jobs.launch(Work(name=args.name, command=tuple(args.argv), environment=dict(args.env)))
    contract.write_outputs({contract.BatchOutput.JOB_ID: handle.ids[contract.BatchOutput.JOB_ID]})
    return 0


def _cancel(args: argparse.Namespace, settings: Settings, aws: Aws) -> int:
    from gpu_runner.batch.backend import NAME, BatchJobs

    BatchJobs(settings, aws).teardown(
        Handle(NAME, settings.region, {contract.BatchOutput.JOB_ID: args.job_id})
    )
    return 0


def _sweep_wave(args: argparse.Namespace, settings: Settings, aws: Aws) -> int:
    from gpu_runner.batch.batch_cost import SweepMatrixError, wave_request

    try:
        trials, array_size = wave_request(args.sweep_matrix)
    except SweepMatrixError as error:
        raise RunnerError(str(error)) from None
    contract.write_outputs(
        {contract.BatchOutput.TRIALS: trials, contract.BatchOutput.ARRAY_SIZE: str(array_size)}
    )
    return 0


def _open_run(args: argparse.Namespace, settings: Settings, aws: Aws) -> int:
    from gpu_runner.batch import batch_run

    config = batch_run.config_in(args.source_dir, args.config)
    run_id = batch_run.open_run(config, os.environ, {"gpu.backend": "batch"})
    contract.write_outputs({contract.BatchOutput.MLFLOW_RUN_ID: run_id})
    return 0


def _ship(args: argparse.Namespace, settings: Settings, aws: Aws) -> int:
    from gpu_runner.batch import batch_source

    shipped = batch_source.ship(aws.client("s3", settings.region), args.bucket, args.repo_dir,
                                _commit_to_ship(args.commit))  # fmt: skip
    print(f"{'shipped' if shipped.uploaded else 'already shipped'}: {shipped.size} bytes")
    contract.write_outputs({contract.BatchOutput.SOURCE_URI: shipped.uri,
                            contract.BatchOutput.SOURCE_SHA256: shipped.sha256})  # fmt: skip
    return 0


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
        check_dispatch_commit(commit, ctx)
    return commit


def _wait(args: argparse.Namespace, settings: Settings, aws: Aws) -> int:
    from gpu_runner.batch import batch_wait

    # Each task of the job trains this run's branch at --commit: the record its next attempt (a Batch retry) or the
    # sweep's next wave restores from (checkpoint_owners.py). A malformed commit warns per task; the job goes on.
    ctx = RunContext.from_env()
    s3 = aws.client("s3", settings.region)

    def record_tasks(tasks: list[str]) -> None:
        for task in tasks:
            checkpoint_owners.record_for_run(s3, args.bucket, ctx, commit=args.commit, session=task)

    outcome = batch_wait.wait(aws.client("batch", settings.region), aws.client("logs", settings.region), args.job_id,
                              poll_seconds=args.poll_seconds, timeout_seconds=args.timeout,
                              on_tasks=record_tasks if args.bucket else None)  # fmt: skip
    try:  # the cost never changes the job's result
        _log_costs(args, settings, aws, outcome.job)
    except (ClientError, BotoCoreError) as error:
        print(f"warning: cost not computed: {error}")
    return outcome.exit_code


def _log_costs(args: argparse.Namespace, settings: Settings, aws: Aws, job: dict) -> None:
    """Print each attempt's cost; log a single job's to --mlflow-run-id, and with --sweep-matrix an array job's
    children's to their trials' child runs under that (parent) run, at the trial's attempt of the wave."""
    from gpu_runner.batch import batch_cost
    from gpu_runner.batch.backend import BatchJobs
    from gpu_runner.core.mlflow_rest import MlflowError, MlflowRest
    from gpu_runner.cost import accounting

    costs = BatchJobs(settings, aws).attempt_costs(job)
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
