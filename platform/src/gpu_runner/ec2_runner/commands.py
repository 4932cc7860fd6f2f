"""The EC2 runner backend's commands: `launch`, `wait`, `teardown` (gpu-runner-start.yml and gpu-runner-stop.yml),
`resume` (after a spot interruption), `capacity` (a sweep's plan) and `reap` (reap.yml)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from gpu_runner.backend import Handle, Work
from gpu_runner.core import checkpoint_owners, credential, timeline
from gpu_runner.core import workflow_contract as contract
from gpu_runner.core.aws import Aws
from gpu_runner.core.command_line import Command, SubParsers, add_command, add_slot, bool_value
from gpu_runner.core.dispatch import api_base_url, check_dispatch_commit, workflow_token
from gpu_runner.core.errors import RunnerError
from gpu_runner.core.github import GitHubRunners, dispatch_workflow
from gpu_runner.core.naming import RunContext
from gpu_runner.core.settings import Settings

T = TypeVar("T")


def register(commands: SubParsers) -> None:
    launch = add_command(commands, "launch", Command(run=_launch, narrows_instance_types=True),
                         help="register a JIT runner and launch its GPU instance")  # fmt: skip
    launch.add_argument("--instance-type", default="", help="try only this type (overrides instance_types)")
    launch.add_argument("--spot", type=bool_value, default=None, help="true/false: override use_spot")
    # The dispatch inputs, checked before any API call (a resumed attempt sets both; a push leaves them empty).
    launch.add_argument(
        "--commit", default="", help="the dispatch input commit (40 hex digits, on this branch)"
    )
    launch.add_argument("--attempt", default="1", help="the dispatch input attempt (1..max_attempts)")
    add_slot(launch)

    wait = add_command(commands, "wait", Command(run=_wait), help="wait until the runner is online")
    wait.add_argument("--region", required=True)
    wait.add_argument("--instance-id", required=True)
    wait.add_argument("--runner-id", required=True)
    wait.add_argument("--timeout", type=float, default=None, help="seconds (default: wait_timeout_seconds)")
    add_slot(wait)

    teardown = add_command(
        commands, "teardown", Command(run=_teardown),
        help="terminate, deregister, delete the parameter of THIS workflow run (its run key; idempotent)",
    )  # fmt: skip
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
    add_slot(teardown)

    resume = add_command(commands, "resume", Command(run=_resume, narrows_instance_types=True),
                         help="after a spot interruption: dispatch the next attempt of train.yml")  # fmt: skip
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

    # capacity asks nothing of GitHub: it also answers on a laptop.
    capacity = add_command(
        commands, "capacity", Command(run=_capacity, in_workflow=False),
        help="how many GPU runners the vCPU quotas let a sweep start now (step outputs runners=...)",
    )  # fmt: skip
    # A string, checked before any API call (argparse's int would take " 2" and "-1" alike, in its own words).
    capacity.add_argument("--wanted", required=True, help="runners the sweep would start at once (parallel)")

    reap = add_command(commands, "reap", Command(run=_reap),
                       help="clean up expired or orphaned instances, runners and parameters")  # fmt: skip
    reap.add_argument("--region", action="append", default=[], help="extra regions to scan (repeatable)")


def _github(settings: Settings, aws: Aws, ctx: RunContext) -> GitHubRunners:
    """The workflows pass no GitHub credential: it is read from AWS with the role (credential.py)."""
    env = credential.github_env(
        settings, aws.client("ssm", settings.region), kms=aws.client("kms", settings.region)
    )
    return GitHubRunners.from_env(ctx.repository, env=env)


def _run_context(args: argparse.Namespace) -> RunContext:
    """The run key, with the slot checked before any API call: a malformed one names nothing launch could have
    made, so teardown, too, has nothing to end for it."""
    return dataclasses.replace(RunContext.from_env(), slot=contract.slot(args.slot))


def _launch(args: argparse.Namespace, settings: Settings, aws: Aws) -> int:
    from gpu_runner.ec2_runner.backend import Ec2Runner

    # Before any AWS call (the credential is read from SSM): the train job would have nowhere to keep its
    # checkpoints, and nothing must be asked of AWS for a launch that cannot train.
    if not settings.bucket:
        raise RunnerError(
            f"bucket: not set in {args.settings}; set it to the bucket `make bootstrap` created (the "
            "default branch's copy is the one that counts)"
        )
    ctx = _run_context(args)
    github = _github(settings, aws, ctx)
    # A hand-made dispatch must not start a GPU for an attempt that cannot exist or a commit of another branch
    # (before the JIT config and RunInstances). A push leaves `commit` empty: the run trains its own GITHUB_SHA.
    contract.attempt(args.attempt, settings.max_attempts)
    if args.commit:
        check_dispatch_commit(args.commit, ctx)
    nonce = os.environ.get(contract.LABEL_NONCE) or None
    handle = Ec2Runner(settings, aws, github, ctx, label_nonce=nonce).launch(Work(use_spot=args.spot))
    checkpoint_owners.record_for_run(aws.client("s3", settings.region), settings.bucket, ctx,
                                     commit=args.commit or ctx.commit,
                                     session=handle.ids[contract.LaunchOutput.INSTANCE_ID])  # fmt: skip
    return 0


def _wait(args: argparse.Namespace, settings: Settings, aws: Aws) -> int:
    from gpu_runner.ec2_runner.backend import NAME, Ec2Runner

    ctx = _run_context(args)
    # Each value checked before the credential is read from AWS (the first call), as launch checks its inputs.
    ids = {contract.LaunchOutput.INSTANCE_ID: contract.instance_id(args.instance_id),
           contract.LaunchOutput.RUNNER_ID: str(contract.runner_id(args.runner_id))}  # fmt: skip
    handle = Handle(NAME, contract.region(args.region), {str(key): value for key, value in ids.items()})
    backend = Ec2Runner(settings, aws, _github(settings, aws, ctx), ctx)
    return backend.wait(handle, timeout_seconds=args.timeout)


def _teardown(args: argparse.Namespace, settings: Settings, aws: Aws) -> int:
    """Tear down the CALLING run's resources (ownership.py): found through its run key (GITHUB_REPOSITORY,
    GITHUB_RUN_ID, GITHUB_RUN_ATTEMPT and --slot), whatever ids are given; the ids are claims, and one that is not
    this run's is refused, naming it and why, after everything of this run's was torn down. Each value is checked
    on its own: a bad run id or attempt (the train job's output, a dispatch input) costs the MLflow cost logging,
    never the terminate or deregister."""
    from gpu_runner.ec2_runner import lifecycle, ownership

    ctx = _run_context(args)
    github = _github(settings, aws, ctx)
    phases = timeline.parse_phases(args.phase)
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
    return 0


def _resume(args: argparse.Namespace, settings: Settings, aws: Aws) -> int:
    from gpu_runner.ec2_runner import resume

    ctx = RunContext.from_env()
    mode = contract.resume_mode(args.mode)
    token = workflow_token("actions: write") if mode == "dispatch" else ""

    def dispatch(ref: str, inputs: Mapping[str, str]) -> None:
        # resume() never calls it in mode none; a second lock on the one door that starts a GPU.
        if mode != "dispatch":
            raise RunnerError(f"resume mode {mode}: not dispatching {resume.WORKFLOW}")
        dispatch_workflow(ctx.repository, resume.WORKFLOW, ref, inputs, token, api_base_url())

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
    return 0


def _capacity(args: argparse.Namespace, settings: Settings, aws: Aws) -> int:
    from gpu_runner.ec2_runner import capacity

    wanted = contract.wanted(args.wanted)
    return capacity.report(settings, capacity.capacity(settings, aws, wanted))


def _reap(args: argparse.Namespace, settings: Settings, aws: Aws) -> int:
    from gpu_runner.ec2_runner import reaper

    github = _github(settings, aws, RunContext.from_env())
    reaper.reap(settings, aws, github, regions=tuple(args.region))
    return 0
