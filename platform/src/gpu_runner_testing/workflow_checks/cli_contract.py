"""The gpu-runner CLI contract the workflows are written against:
    gpu-runner [--settings FILE] <subcommand> [options]   (the global option precedes the subcommand)
subcommand -> the options the workflows may pass, in two halves: what the project's own workflows call, and
what the platform's reusable workflows (start, stop, batch.yml) call. Each half is held to its workflows' real
calls where those workflows are tested (a project's tests/workflows/test_gpu_runner_calls.py; the template
repository's tests/test_platform_workflow_scripts.py), and to the real CLI's --help and parser.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from subprocess import CompletedProcess

from gpu_runner_testing.workflow_checks.step_scripts import NESTED_SUBCOMMANDS, GpuRunnerCall
from gpu_runner_testing.workflow_checks.workflow_files import offline_env

CLI_GLOBAL_OPTIONS = {"--settings"}
PROJECT_CLI_CONTRACT = {
    "workflow-settings": set(),
    "reap": set(),
    # sweep.yml's plan job (how many runners the quota allows) and collect job (dispatch the next wave).
    "capacity": {"--wanted"},
    "next-wave": {"--ref", "--wave", "--sweep", "--config"},
    # train.yml's and sweep.yml's comment jobs (the results on the branch's open pull request).
    "pr-comment": {"--kind", "--mlflow-run-id", "--branch", "--commit", "--config"},
}
PLATFORM_CLI_CONTRACT = {
    "workflow-settings": set(),
    "launch": {"--instance-type", "--spot", "--commit", "--attempt", "--slot"},
    "wait": {"--region", "--instance-id", "--runner-id", "--slot"},
    "teardown": {
        "--region", "--instance-id", "--runner-id", "--parameter", "--mlflow-run-id", "--attempt", "--phase",
        "--slot",
    },
    "resume": {
        "--ref", "--attempt", "--train-interrupted", "--region", "--instance-id", "--commit", "--config",
        "--instance-type", "--mode",
    },
    # The start job, before a launch: start the team MLflow server if its schedule stopped it.
    "mlflow-server wake": set(),
    # The tunnel's connect step written out in the stop job (no wake, at most 60 s) and batch.yml.
    "mlflow-server connect": {"--timeout", "--log-file", "--no-wake"},
    # batch.yml (backend: batch): ship the commit, open the MLflow run, submit, wait, and end the job on failure.
    "batch ship": {"--bucket", "--commit", "--repo-dir"},
    "batch open-run": {"--config", "--source-dir"},
    # (a sweep's wave: an array job, each child's cost to its trial's run)
    "batch sweep-wave": {"--sweep-matrix"},
    "batch submit": {"--name", "--env", "--array-size"},
    # (and each task of the job recorded as the run's branch's at its commit: checkpoint_owners.py)
    "batch wait": {"--job-id", "--mlflow-run-id", "--sweep-matrix", "--bucket", "--commit"},
    "batch cancel": {"--job-id"},
}  # fmt: skip
# Switches written literally in a workflow (no value, so nothing a context could make an option): the stop
# job's tunnel connects without waking the server.
LITERAL_SWITCHES = {"--no-wake"}
# `batch submit ... -- <the job's argv>`: the argv's literal words (the separator and the two programs it runs),
# besides the project's package, which the caller passes.
BATCH_JOB_WORDS = {"--", "python", "-m", "gpu_runner.batch.batch_source", "run", "train", "sweep", "trial"}


def loose_arguments(argv: list[str], package: str) -> list[str] | None:
    """The words of a recorded uv call, after `gpu-runner --settings <file> <subcommand>` or after
    `python -m <package> <subcommand>`, that are not one `--opt=value` word or a literal switch (issue 13 item 5:
    a value that starts with `--` must never be read as an option); None for any other call."""
    if argv[:3] == ["run", "--no-sync", "gpu-runner"]:
        # after `--settings configs/gpu-runner.yaml <subcommand> [<action>]` (literals)
        tail = argv[7:] if argv[5] in NESTED_SUBCOMMANDS else argv[6:]
        if "--" in tail:
            tail = [a for a in tail if a not in BATCH_JOB_WORDS | {package}]
    elif argv[:5] == ["run", "--no-sync", "python", "-m", package]:
        tail = (
            argv[7:] if argv[5] == "sweep" else argv[6:]
        )  # `sweep` has its own: plan, trial, collect, check
    else:
        return None
    return [
        a
        for a in tail
        if not re.fullmatch(r"--[a-z][a-z0-9-]*=.*", a, re.DOTALL) and a not in LITERAL_SWITCHES
    ]


def cli_env() -> dict[str, str]:
    """The environment the real CLI runs in for these checks: offline, with no GitHub repository, credentials or
    instance metadata (so it stops before any API call), and no environment of the caller's uv."""
    env = {
        k: v
        for k, v in offline_env().items()
        if k not in {"VIRTUAL_ENV", "UV_PROJECT", "UV_PROJECT_ENVIRONMENT", "GITHUB_REPOSITORY"}
        and not k.startswith(("AWS_", "GPU_"))
    }
    return env | {"AWS_EC2_METADATA_DISABLED": "true"}


def help_options(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text)) - {"--help"}


def help_problems(
    contract: dict[str, set[str]], gpu_runner: Callable[..., CompletedProcess[str]]
) -> list[str]:
    """What the real CLI's --help lacks of `contract` (a subcommand, or an option of one)."""
    top = gpu_runner("--help")
    if top.returncode != 0 or not help_options(top.stdout) >= CLI_GLOBAL_OPTIONS:
        return [f"gpu-runner --help: {top.returncode} {top.stdout}{top.stderr}"]
    problems = []
    for subcommand, options in contract.items():
        sub = gpu_runner(*subcommand.split(" "), "--help")
        if sub.returncode != 0 or subcommand.split(" ")[0] not in top.stdout:
            problems.append(f"gpu-runner {subcommand} --help: {sub.returncode} {sub.stderr}")
        elif missing := options - help_options(sub.stdout):
            problems.append(f"gpu-runner {subcommand} has no {sorted(missing)}")
    return problems


def parse_problems(calls: list[GpuRunnerCall], gpu_runner: Callable[..., CompletedProcess[str]]) -> list[str]:
    """Each command line the workflows produce, given to the real CLI: argparse must accept it (exit 2 with
    `usage:` would mean it did not). With no GITHUB_REPOSITORY the CLI stops right after loading the settings,
    before any API call; capacity and the tunnel's connect need no repository and stop at the first AWS call,
    unsigned."""
    problems, seen = [], set()
    for call in calls:
        if call.subcommand == "wait" and "" in call.argv:
            continue  # only runs after a launch that wrote its outputs
        if call.subcommand == "capacity" and "--wanted=" in call.argv:
            continue  # only runs after `sweep check` wrote parallel
        if tuple(call.argv) in seen:
            continue
        seen.add(tuple(call.argv))
        proc = gpu_runner(*call.argv)
        stop = "Unable to locate credentials" if call.subcommand in NO_REPOSITORY else "GITHUB_REPOSITORY"
        if proc.returncode == 2 or "usage:" in proc.stderr or stop not in proc.stderr:
            problems.append(f"{call.argv}: {proc.returncode} {proc.stderr[-600:]}")
    if not seen:
        problems.append("no command line to parse (a wrong set of workflows?)")
    return problems


# The subcommands that need no GitHub repository (they stop at their first AWS call).
NO_REPOSITORY = {"capacity", "mlflow-server connect"}
