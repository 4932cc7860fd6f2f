"""The commands every backend's workflows share: `workflow-settings` (values a workflow needs before any AWS
credential exists) and `next-wave` (sweep.yml's collect job dispatches the study's next wave)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpu_runner.core import workflow_contract as contract
from gpu_runner.core.aws import Aws
from gpu_runner.core.command_line import Command, SubParsers, add_command
from gpu_runner.core.dispatch import api_base_url, workflow_token
from gpu_runner.core.github import dispatch_workflow
from gpu_runner.core.naming import RunContext
from gpu_runner.core.settings import Settings

SWEEP_WORKFLOW = "sweep.yml"


def register(commands: SubParsers) -> None:
    add_command(
        commands, "workflow-settings", Command(run=_workflow_settings),
        help="write region, train-branch-prefix and sweep-branch-prefix (from the settings) as step outputs",
    )  # fmt: skip
    next_wave = add_command(
        commands, "next-wave", Command(run=_next_wave),
        help="sweep.yml's collect job: dispatch sweep.yml on this branch for the study's next wave",
    )  # fmt: skip
    next_wave.add_argument("--ref", required=True, help="branch to dispatch on (the sweep branch)")
    next_wave.add_argument("--wave", required=True, help="the wave that just ended (the next is one more)")
    next_wave.add_argument("--sweep", default="configs/sweep.yaml", help="the sweep config of the next wave")
    next_wave.add_argument("--config", default="configs/train.yaml", help="its base training config")


def _workflow_settings(args: argparse.Namespace, settings: Settings, aws: Aws) -> int:
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
    return 0


def _next_wave(args: argparse.Namespace, settings: Settings, aws: Aws) -> int:
    """One workflow_dispatch of sweep.yml with the next wave's number, as `resume` dispatches train.yml: with the
    run's GITHUB_TOKEN (actions: write), through the same request (dispatch_workflow)."""
    wave = contract.wave(args.wave)
    token = workflow_token("actions: write")
    inputs = {
        "sweep": contract.config_path(args.sweep, Path.cwd()),
        "config": contract.config_path(args.config, Path.cwd()),
        "wave": str(wave + 1),
    }
    ctx = RunContext.from_env()
    run_url = dispatch_workflow(ctx.repository, SWEEP_WORKFLOW, args.ref, inputs, token, api_base_url())
    contract.append_summary(
        f"Started wave {wave + 1} of the sweep on {args.ref}{f': {run_url}' if run_url else ''}.\n"
    )
    return 0
