"""`gpu-runner bootstrap`: once per repository, from a laptop, deploy gpu_runner/setup/gpu-runner.yaml and store the GitHub
credential in AWS."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from gpu_runner.core.aws import Aws
from gpu_runner.core.command_line import Command, SubParsers, add_command
from gpu_runner.core.errors import RunnerError
from gpu_runner.core.settings import Settings
from gpu_runner.pin.project_pin import trusted_platform
from gpu_runner.setup import TEMPLATE


def register(commands: SubParsers) -> None:
    # From a laptop: the repository is a flag.
    boot = add_command(
        commands, "bootstrap", Command(run=_bootstrap, in_workflow=False),
        help="one-time: deploy gpu_runner/setup/gpu-runner.yaml (bucket, OIDC roles, instance profile)",
    )  # fmt: skip
    boot.add_argument("--repository", required=True, help="owner/name of the GitHub repository to trust")
    # Default: the settings file's bucket and branch prefixes, their one source (a different value is refused).
    boot.add_argument("--bucket", default="", help="S3 bucket for data, checkpoints and exports")
    boot.add_argument("--branch-prefix", default="", help="branches that may start GPU training")
    boot.add_argument("--sweep-branch-prefix", default="", help="branches that may run GPU sweeps")
    boot.add_argument("--default-branch", default="main", help="the only branch the reaper role trusts")
    boot.add_argument(
        "--platform",
        default="",
        help="owner/template@commit whose start, stop and batch workflows the launch roles trust "
        "(default: the pin in ./pyproject.toml)",
    )
    boot.add_argument("--owner-id", default="", help="numeric owner id (immutable OIDC subject), optional")
    boot.add_argument("--repository-id", default="", help="numeric repository id, optional")
    boot.add_argument("--oidc-provider-arn", default="", help="reuse the account's GitHub OIDC provider")
    boot.add_argument("--vpc-id", default="", help="VPC of the runner subnets (default VPC when empty)")
    boot.add_argument("--checkpoint-retention-days", type=int, default=30)
    boot.add_argument("--template", type=Path, default=TEMPLATE, help="default: the one gpu_runner ships")
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


def _from_settings(flag: str, given: str, key: str, configured: str, settings_file: Path) -> str:
    """A flag's value where the settings file holds the one source: the file's, or the same value again."""
    if given and configured and given != configured:
        raise RunnerError(
            f"{flag}: '{given}' differs from {key}: '{configured}' in {settings_file}, which the workflows "
            f"read; change {key} there and leave {flag} out"
        )
    return given or configured


def _bootstrap(args: argparse.Namespace, settings: Settings, aws: Aws) -> int:
    from gpu_runner.setup import stack

    bucket = _from_settings("--bucket", args.bucket, "bucket", settings.bucket, args.settings)
    prefix = _from_settings("--branch-prefix", args.branch_prefix, "train_branch_prefix",
                            settings.train_branch_prefix, args.settings)  # fmt: skip
    sweep_prefix = _from_settings("--sweep-branch-prefix", args.sweep_branch_prefix, "sweep_branch_prefix",
                                  settings.sweep_branch_prefix, args.settings)  # fmt: skip
    platform = trusted_platform(args.platform, Path.cwd())
    inputs = stack.StackInputs(
        repository=args.repository, bucket=bucket, train_branch_prefix=prefix, sweep_branch_prefix=sweep_prefix,
        default_branch=args.default_branch, platform_repository=platform.repository,
        platform_commit=platform.commit, owner_id=args.owner_id, repository_id=args.repository_id,
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
    return 0
