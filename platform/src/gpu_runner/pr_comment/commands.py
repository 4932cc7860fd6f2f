"""`gpu-runner pr-comment`: the comment jobs of train.yml and sweep.yml (MLflow and GitHub's pull requests only:
no settings, no AWS)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from gpu_runner.core import workflow_contract as contract
from gpu_runner.core.command_line import Command, SubParsers, add_command
from gpu_runner.core.errors import RunnerError


def register(commands: SubParsers) -> None:
    comment = add_command(
        commands, "pr-comment", Command(standalone=_pr_comment),
        help="train.yml / sweep.yml: keep one comment with the run's metrics, champion delta and cost on the "
        "branch's open pull request (GITHUB_TOKEN with pull-requests: write; MLflow from MLFLOW_TRACKING_*)",
    )  # fmt: skip
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
