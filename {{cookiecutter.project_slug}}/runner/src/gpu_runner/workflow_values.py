"""Checks of the values train.yml passes to `gpu-runner` (job outputs, dispatch inputs): each one names the field
and the fix.

Some of these values come from the GPU instance (the train job's outputs) or from a hand-made dispatch, so they
are untrusted: a value like `--x` must stay a value (the workflow passes `--opt=value`), and a value of the wrong
shape must be refused here, before it reaches an API call, a file path or another workflow run.
"""

from __future__ import annotations

import re
from pathlib import Path

from .errors import RunnerError
from .settings import REGION

# MLflow's tracking stores name a run `uuid.uuid4().hex` (mlflow/store/tracking/sqlalchemy_store.py,
# create_run, MLflow 3.17.2): 32 lowercase hex digits.
MLFLOW_RUN_ID = re.compile(r"[0-9a-f]{32}")
# A Git object name of a SHA-1 repository, as GitHub's `github.sha` and the REST API write it: 40 hex digits.
COMMIT = re.compile(r"[0-9a-f]{40}")
# EC2 resource IDs: "i-" and 17 characters after the hyphen since 2016-2018, 8 before (Amazon EC2 User Guide,
# "Resource IDs", https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/resource-ids.html, read 2026-12-01).
INSTANCE_ID = re.compile(r"i-(?:[0-9a-f]{8}|[0-9a-f]{17})")


class BadValue(RunnerError):
    """A value the workflow passed has the wrong shape; the message names the flag and the fix."""


def _matching(pattern: re.Pattern[str], value: str, flag: str, expected: str) -> str:
    """`value` if the whole of it matches `pattern`, else BadValue: "<flag>: <value> is not <expected>"."""
    if not pattern.fullmatch(value):
        raise BadValue(f"{flag}: {_shown(value)} is not {expected}")
    return value


def mlflow_run_id(value: str) -> str:
    return _matching(
        MLFLOW_RUN_ID, value, "--mlflow-run-id",
        "an MLflow run id (32 lowercase hex digits); it comes from the train job's mlflow-run-id output, which "
        "only the training CLI should write",
    )  # fmt: skip


def commit(value: str) -> str:
    return _matching(
        COMMIT, value, "--commit",
        "a commit (40 lowercase hex digits); pass the full SHA in the dispatch input `commit`, or leave it empty "
        "for the branch head",
    )  # fmt: skip


def attempt(value: str, max_attempts: int) -> int:
    if not (value.isascii() and value.isdigit() and 1 <= int(value) <= max_attempts):
        raise BadValue(
            f"--attempt: {_shown(value)} is not an attempt number from 1 to {max_attempts} (max_attempts in "
            "configs/gpu-runner.yaml); the dispatch input `attempt` is 1 for a first run"
        )
    return int(value)


def instance_id(value: str) -> str:
    return _matching(
        INSTANCE_ID, value, "--instance-id",
        "an EC2 instance id (i- and 8 or 17 hex digits); it comes from the start job's instance-id output",
    )  # fmt: skip


def runner_id(value: str) -> int:
    if not (value.isascii() and value.isdigit() and int(value) > 0):
        raise BadValue(
            f"--runner-id: {_shown(value)} is not a runner id (a positive integer); it comes from the start "
            "job's runner-id output"
        )
    return int(value)


def region(value: str) -> str:
    return _matching(REGION, value, "--region", "an AWS region like eu-west-1")


def config_path(value: str, repository: Path) -> str:
    """A training config must be a file of the checked-out repository: relative, and inside it once resolved
    (no `..`, no symlink out), so a dispatch input cannot point the training at a file of the runner's host."""
    root = repository.resolve()
    if not value or Path(value).is_absolute() or not (root / value).resolve().is_relative_to(root):
        raise BadValue(
            f"--config: {_shown(value)} is not a path inside the repository; pass a relative path such as "
            "configs/train.yaml"
        )
    return value


def _shown(value: str) -> str:
    # repr: quotes and escapes make an empty, blank or multi-line value visible; long ones are cut.
    return repr(value if len(value) <= 80 else value[:77] + "...")
