"""`gpu-runner doctor`: the read-only preflight a person runs from a laptop, one line per check."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpu_runner.core.aws import Aws
from gpu_runner.core.command_line import Command, SubParsers, add_command
from gpu_runner.core.errors import RunnerError
from gpu_runner.core.settings import Settings
from gpu_runner.core.stack_names import REPOSITORY
from gpu_runner.pin.project_pin import trusted_platform


def register(commands: SubParsers) -> None:
    doctor = add_command(
        commands, "doctor", Command(run=_doctor, in_workflow=False, check_lines=True),
        help="read-only preflight of the AWS account and GitHub repository (one line per check)",
    )  # fmt: skip
    doctor.add_argument("--repository", required=True, help="owner/name of the GitHub repository")
    doctor.add_argument(
        "--branch-prefix",
        default="",
        help="branches the train role must trust (default: train_branch_prefix)",
    )
    doctor.add_argument("--default-branch", default="main", help="the branch the reaper role must trust")
    doctor.add_argument(
        "--platform",
        default="",
        help="owner/template@commit the launch roles must trust (default: the pin in ./pyproject.toml)",
    )


def _doctor(args: argparse.Namespace, settings: Settings, aws: Aws) -> int:
    from gpu_runner.doctor import doctor
    from gpu_runner.doctor.doctor_checks import Target

    if not REPOSITORY.fullmatch(args.repository):
        print(f"✗ repository: '{args.repository}' is not owner/name; fix: pass --repository owner/name")
        return 1
    try:
        platform = trusted_platform(args.platform, Path.cwd())
    except RunnerError as error:
        print(f"✗ platform: {error}")
        return 1
    target = Target(
        settings=settings, repository=args.repository,
        train_branch_prefix=args.branch_prefix or settings.train_branch_prefix,
        default_branch=args.default_branch, platform=platform,
    )  # fmt: skip
    outcomes = doctor.run_checks(target, aws)
    return 0 if all(outcome.ok for outcome in outcomes) else 1
