"""The reaper's AWS part as an AWS Lambda function, run by an EventBridge Scheduler schedule (gpu_runner/setup/gpu-runner.yaml).

A safety net that needs nothing from GitHub: GitHub disables a public repository's scheduled workflows after 60 days
without activity, and a 15-minute GitHub schedule bills ~2,900 runner-minutes a month in a private repository. It
terminates our expired instances and deletes our stale runner-config parameters (reaper.reap without a GitHub
client); offline runner registrations stay with reap.yml. Only boto3 is imported on this path: the Lambda Python
runtime includes the AWS SDK for Python (Boto3) and nothing else of ours ("Building Lambda functions with Python",
AWS Lambda Developer Guide, read 2026-12-01), and the deployment package is this package's own files (lambda_zip).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from gpu_runner.core import log_output
from gpu_runner.core.aws import Aws
from gpu_runner.core.errors import SettingsError
from gpu_runner.core.settings import Settings, settings_from_mapping
from gpu_runner.ec2_runner import reaper

# Lambda environment variable -> Settings field. The template sets them from the stack's parameters, which
# `gpu-runner bootstrap` fills from configs/gpu-runner.yaml, so the Lambda reaps with the deployed settings.
TEXT_VARIABLES = {
    "GPU_RUNNER_PROJECT": "project",
    "GPU_RUNNER_SSM_PREFIX": "ssm_prefix",
    "GPU_RUNNER_INSTANCE_PROFILE": "instance_profile",
}
# Not a setting: whose instances the function may end (two repositories may share a project slug).
REPOSITORY_VARIABLE = "GPU_RUNNER_REPOSITORY"
INTEGER_VARIABLES = {
    "GPU_RUNNER_MAX_RUNTIME_MINUTES": "max_runtime_minutes",
    "GPU_RUNNER_IDLE_TIMEOUT_MINUTES": "idle_timeout_minutes",
    "GPU_RUNNER_WAIT_TIMEOUT_SECONDS": "wait_timeout_seconds",
    "GPU_RUNNER_REAP_GRACE_MINUTES": "reap_grace_minutes",
}
# Settings needs an instance type to be valid, and the reaper never launches: a type that names no GPU family, so
# no AMI rule applies (the stack's AllowedInstanceTypes may hold wildcards, which are no instance type).
NEVER_LAUNCHED = ("reaper.never-launches",)
# Set by Lambda itself in every function ("Defined runtime environment variables", AWS Lambda Developer Guide).
REGION_VARIABLE = "AWS_REGION"


def settings_from_env(env: Mapping[str, str]) -> Settings:
    """The reaper's settings from the function's environment; a missing or bad variable is named."""
    raw: dict[str, Any] = {}
    problems = [f"{name}: not set (gpu_runner/setup/gpu-runner.yaml sets it)" for name in (*TEXT_VARIABLES, *INTEGER_VARIABLES, REGION_VARIABLE, REPOSITORY_VARIABLE) if name not in env]  # fmt: skip
    raw.update({key: env[name] for name, key in TEXT_VARIABLES.items() if name in env})
    for name, key in INTEGER_VARIABLES.items():
        if name not in env:
            continue
        try:
            raw[key] = int(env[name])
        except ValueError:
            problems.append(f"{name}: '{env[name]}' is not an integer")
    if problems:
        raise SettingsError("reaper Lambda environment:\n" + "\n".join(f"  {p}" for p in problems))
    raw["region"] = env[REGION_VARIABLE]
    raw["instance_types"] = NEVER_LAUNCHED
    return settings_from_mapping(raw, "reaper Lambda environment")


def reap_aws(
    env: Mapping[str, str], *, aws: Aws | None = None, now: datetime | None = None
) -> dict[str, list[str]]:
    """One AWS-side pass; returns what it did (Lambda logs the return value of an asynchronous invocation)."""
    report = reaper.reap(
        settings_from_env(env), aws or Aws(), None, repository=env[REPOSITORY_VARIABLE], now=now
    )
    return dataclasses.asdict(report)


# Lambda's Python runtime puts its CloudWatch handler on the root logger and sets the root's level only from
# AWS_LAMBDA_LOG_LEVEL (advanced logging controls); without it the root keeps Python's default WARNING, which
# would drop the reaper's INFO lines (what it terminated and deleted). awslambdaric/bootstrap.py,
# _setup_logging (github.com/aws/aws-lambda-python-runtime-interface-client at 46e4c6a, read 2026-12-01).
LOG_LEVEL_VARIABLE = "AWS_LAMBDA_LOG_LEVEL"


def show_info_lines(env: Mapping[str, str]) -> None:
    """The package's INFO lines reach the runtime's handler, unless the function's log level was chosen."""
    if not env.get(LOG_LEVEL_VARIABLE):
        logging.getLogger(log_output.PACKAGE).setLevel(logging.INFO)


def handler(event: Mapping[str, Any], context: Any) -> dict[str, list[str]]:
    """Lambda entry point (`gpu_runner.ec2_runner.reaper_lambda.handler`). The event carries nothing we trust or
    need: the schedule's payload is fixed, and whoever may invoke the function can only make it reap sooner."""
    show_info_lines(os.environ)
    return reap_aws(os.environ)
