"""What passes between the GPU workflows (.github/workflows/gpu-runner-start.yml, gpu-runner-stop.yml, reap.yml)
and `gpu-runner`: the values that come in (flags the workflows build from inputs and job outputs, checked here),
and what goes out (the step outputs it appends to $GITHUB_OUTPUT, the job summary, the masked secrets).

Step outputs are written one group at a time (not at the end) so the `stop` job can clean up whatever exists
even if `launch` dies half-way. Some incoming values come from the GPU instance (the train job's outputs) or
from a hand-made dispatch, so they are untrusted: a value like `--x` must stay a value (the workflow passes
`--opt=value`), and a value of the wrong shape must be refused here, before it reaches an API call, a file path
or another workflow run.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping
from enum import StrEnum
from pathlib import Path

from gpu_runner.core.errors import RunnerError
from gpu_runner.core.naming import SLOT, SLOT_MAX_DIGITS
from gpu_runner.core.settings import REGION


class LaunchOutput(StrEnum):
    """`gpu-runner launch`'s step outputs; gpu-runner-start.yml maps every one to an output of the start job."""

    # Written as soon as the just-in-time runner config exists (before RunInstances).
    RUNNER_ID = "runner-id"
    RUNNER_NAME = "runner-name"
    LABEL = "label"
    PARAMETER = "parameter"
    # Written once RunInstances returned.
    INSTANCE_ID = "instance-id"
    REGION = "region"
    INSTANCE_TYPE = "instance-type"
    MARKET = "market"
    AVAILABILITY_ZONE = "availability-zone"
    # The settings' bucket: the train job's checkpoint URI (s3://<bucket>/checkpoints), from the default branch.
    BUCKET = "bucket"


class WaitOutput(StrEnum):
    """`gpu-runner wait`'s step outputs: the timeline's "runner online" moment (epoch seconds, and after launch)."""

    RUNNER_ONLINE_AT = "runner-online-at"
    RUNNER_ONLINE_SECONDS = "runner-online-seconds"


class SettingsOutput(StrEnum):
    """`gpu-runner workflow-settings`'s step outputs: the values of the default branch's configs/gpu-runner.yaml
    that the workflows need before any AWS credential exists (written once there, not in each workflow)."""

    REGION = "region"
    TRAIN_BRANCH_PREFIX = "train-branch-prefix"
    SWEEP_BRANCH_PREFIX = "sweep-branch-prefix"
    # sweep.yml's plan and collect jobs keep the study under s3://<bucket>/sweeps (no start job to ask).
    BUCKET = "bucket"
    # sweep.yml's plan job: a trial's k-th wave launches with attempt k, which launch caps at max_attempts.
    MAX_ATTEMPTS = "max-attempts"
    # runner or batch: which of train.yml's and sweep.yml's GPU jobs run (configs/gpu-runner.yaml backend).
    BACKEND = "backend"


class TunnelOutput(StrEnum):
    """`gpu-runner mlflow-server connect`'s step outputs, for the MLflow tunnel action."""

    TRACKING_URI = "tracking-uri"  # http://127.0.0.1:<port>, the local end of the SSM session
    PID = "pid"  # the plugin's process (its own session: it outlives the step)


class CapacityOutput(StrEnum):
    """`gpu-runner capacity`'s step outputs, for sweep.yml's plan job."""

    RUNNERS = "runners"  # how many runners to start now: min(--wanted, what the vCPU quotas allow)
    VCPUS_PER_RUNNER = "vcpus-per-runner"  # of the largest configured G or VT type (0: none configured)
    QUOTA_VCPUS = "quota-vcpus"  # the quotas read (on-demand, plus spot with use_spot), summed
    IN_USE_VCPUS = "in-use-vcpus"  # the region's pending and running instances those quotas count


class BatchOutput(StrEnum):
    """`gpu-runner batch submit`'s step output (the job the wait follows and the cancel path terminates) and
    `batch ship`'s (the job's code, which its container fetches and checks: batch_source.py)."""

    JOB_ID = "job-id"
    SOURCE_URI = "source-uri"
    SOURCE_SHA256 = "source-sha256"
    # `batch open-run`'s: the run the job trains into and `batch wait` logs the cost to (the name the training CLI
    # gives the same output on a runner).
    MLFLOW_RUN_ID = "mlflow-run-id"
    # `batch sweep-wave`'s: a sweep wave's trial numbers in the plan's order (`sweep trial --trials`) and the array
    # size (0: a wave of one trial is a single job).
    TRIALS = "trials"
    ARRAY_SIZE = "array-size"


# Never echoed to the log: the label is what another workflow would need to queue a job for this runner
# (issue 13, item 1); the parameter names where its JIT config is.
UNPRINTED = (LaunchOutput.LABEL, LaunchOutput.PARAMETER)
# The environment gpu-runner reads in a workflow, besides the GITHUB_* defaults naming.RunContext reads.
GITHUB_OUTPUT = "GITHUB_OUTPUT"
GITHUB_STEP_SUMMARY = "GITHUB_STEP_SUMMARY"
GITHUB_TOKEN = "GITHUB_TOKEN"
GITHUB_API_URL = "GITHUB_API_URL"
# Test-only (act needs the label before the run starts). Only whoever writes the start job's environment could
# set it, and that one controls the launch anyway.
LABEL_NONCE = "GPU_RUNNER_LABEL_NONCE"


def write_outputs(
    values: Mapping[str, str], env: Mapping[str, str] | None = None, *, unprinted: Collection[str] = ()
) -> None:
    """Append to $GITHUB_OUTPUT and echo to the log, except the values of `unprinted` keys: a job output is
    visible in a log only when something prints it (the runner's label must not be: issue 13, item 1)."""
    env = os.environ if env is None else env
    for key, value in values.items():
        if "\n" in value or "\n" in key:
            raise ValueError(f"output {key!r} must be a single line")
        print(f"{key}=(set, not printed)" if key in unprinted else f"{key}={value}")
    path = env.get(GITHUB_OUTPUT)
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.writelines(f"{key}={value}\n" for key, value in values.items())


def append_summary(markdown: str, env: Mapping[str, str] | None = None) -> None:
    """Add to the job summary ($GITHUB_STEP_SUMMARY) when running in GitHub Actions."""
    env = os.environ if env is None else env
    path = env.get(GITHUB_STEP_SUMMARY)
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(markdown + "\n")


def workflow_command(command: str, title: str, message: str) -> str:
    """`::warning title=T::message` (or error, notice): an annotation on the run's page. Escaped as the Actions
    toolkit does (actions/toolkit packages/core/src/command.ts: escapeData %, CR, LF in the message; escapeProperty
    also : and , in a property), so a value in the message can neither end the line nor forge another command."""

    def data(text: str) -> str:
        return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")

    prop = data(title).replace(":", "%3A").replace(",", "%2C")
    return f"::{command} title={prop}::{data(message)}"


def mask(secret: str, env: Mapping[str, str] | None = None) -> None:
    """A backstop for a secret this process holds: `::add-mask::` (docs.github.com "Workflow commands for GitHub
    Actions", "Masking a value in a log") makes the runner print *** for it in every later line of the job's log,
    should anything print it. Only in GitHub Actions; the value is one line (a JIT config or token), which is the
    unit the runner masks. Nothing here prints a secret otherwise."""
    env = os.environ if env is None else env
    if env.get("GITHUB_ACTIONS") == "true" and secret.strip():
        print(f"::add-mask::{secret.strip()}", flush=True)


# MLflow's tracking stores name a run `uuid.uuid4().hex` (mlflow/store/tracking/sqlalchemy_store.py,
# create_run, MLflow 3.17.2): 32 lowercase hex digits.
MLFLOW_RUN_ID = re.compile(r"[0-9a-f]{32}")
# A Git object name of a SHA-1 repository, as GitHub's `github.sha` and the REST API write it: 40 hex digits.
COMMIT = re.compile(r"[0-9a-f]{40}")
# EC2 resource IDs: "i-" and 17 characters after the hyphen since 2016-2018, 8 before (Amazon EC2 User Guide,
# "Resource IDs", https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/resource-ids.html, read 2026-12-01).
INSTANCE_ID = re.compile(r"i-(?:[0-9a-f]{8}|[0-9a-f]{17})")
# SSM parameter names: "a-zA-Z0-9_.-" and "/" between the levels of a hierarchy, at most 1011 characters of the
# 2048 the API reports (SSM API Reference, PutParameter, Name, read 2026-12-06). The start job's `parameter`
# output is a full path; teardown prints a claimed one back (a refusal), so its shape is checked first.
PARAMETER = re.compile(r"/[A-Za-z0-9_.\-/]{1,1010}")


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


def parameter(value: str) -> str:
    return _matching(
        PARAMETER, value, "--parameter",
        "an SSM parameter path (/ and then letters, digits, _ . - /); it comes from the start job's parameter output",
    )  # fmt: skip


def runner_id(value: str) -> int:
    if not (value.isascii() and value.isdigit() and int(value) > 0):
        raise BadValue(
            f"--runner-id: {_shown(value)} is not a runner id (a positive integer); it comes from the start "
            "job's runner-id output"
        )
    return int(value)


def slot(value: str) -> str:
    """ "" (train.yml: no slot, today's names) or a sweep's trial number (naming.SLOT)."""
    if value and not SLOT.fullmatch(value):
        raise BadValue(
            f"--slot: {_shown(value)} is not a trial number (1 to {SLOT_MAX_DIGITS} ASCII digits, no sign, no "
            "leading zero); sweep.yml passes the matrix leg's trial number, train.yml passes none"
        )
    return value


# gpu-runner-stop.yml's `resume` input (resume.MODES; not imported: resume sits above this module).
RESUME_MODES = ("dispatch", "none")


def resume_mode(value: str) -> str:
    if value not in RESUME_MODES:
        raise BadValue(
            f"--mode: {_shown(value)} is not dispatch or none; gpu-runner-stop.yml's input `resume` is dispatch "
            "(train.yml, the default) or none (sweep.yml)"
        )
    return value


def wanted(value: str) -> int:
    if not (value.isascii() and value.isdigit() and int(value) >= 1):
        raise BadValue(
            f"--wanted: {_shown(value)} is not a number of runners (an integer of at least 1); sweep.yml passes "
            "parallel from configs/sweep.yaml"
        )
    return int(value)


def wave(value: str) -> int:
    """A sweep's wave number, as the plan job wrote it (1, 2, ...): digits only, so it is data in a dispatch."""
    if not (value.isascii() and value.isdigit() and len(value) <= 6 and int(value) >= 1):
        raise BadValue(
            f"--wave: {_shown(value)} is not a wave number (an integer from 1); the plan job writes it"
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
