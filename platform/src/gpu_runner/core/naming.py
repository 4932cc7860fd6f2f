"""Names, labels, tags and parameter paths, derived from the workflow run so every piece can be found again.

One function per derived name: launch, wait, teardown and the reaper must all agree on them.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from gpu_runner.core.errors import RunnerError

NAME_PREFIX = "gpu-runner-"
MANAGED_BY_KEY = "gpu-runner:managed-by"
MANAGED_BY_VALUE = "gpu-runner"

TAG_PROJECT = "gpu-runner:project"
TAG_REPOSITORY = "gpu-runner:repository"
TAG_RUN_ID = "gpu-runner:run-id"
TAG_RUN_ATTEMPT = "gpu-runner:run-attempt"
TAG_BRANCH = "gpu-runner:branch"
TAG_COMMIT = "gpu-runner:commit"
TAG_LABEL = "gpu-runner:label"
# A sweep's trial on one of the run's parallel runners (issue 15): one workflow run starts several, so the slot
# is part of the run key. Only set by a sweep; train.yml's single runner has none and keeps today's names.
TAG_SLOT = "gpu-runner:slot"
# The only job the runner accepts (train.yml's job key, and predict.yml's GPU job's: issue 16); the job-started
# hook checks GITHUB_JOB against it.
TRAIN_JOB = "train"
# Events that may launch a GPU runner, whose train job the hook then accepts: train.yml's and sweep.yml's triggers
# (push, workflow_dispatch) and predict.yml's (workflow_dispatch, schedule; a schedule runs only on the default
# branch: GitHub docs, "Events that trigger workflows" > schedule). Anything else reaching the runner is refused.
# The event is the last of the hook's checks: run id, attempt and the workflow file with its ref already pin the
# one run that launched the instance, so adding schedule lets no other workflow's job in.
TRAIN_EVENTS = ("push", "workflow_dispatch", "schedule")
# 64 random bits in the label: the run id is public once the run is queued, the label must not be derivable
# from it (issue 13, item 1). `secrets`, not `random`: the value has to be unpredictable, not just spread out.
LABEL_NONCE_BYTES = 8
TAG_EXPIRES_AT = "gpu-runner:expires-at"
TAG_RUNNER_ID = "gpu-runner:runner-id"
# On the JIT config parameter only: the ARN of the one instance whose role may read and delete it (the runner
# policy compares it with ec2:SourceInstanceARN; gpu_runner/setup/gpu-runner.yaml, ReadAndDeleteOwnJitConfig).
TAG_INSTANCE_ARN = "gpu-runner:instance-arn"

# The slot: a trial number in canonical decimal (no sign, no leading zero: "007" and "7" would name two runners
# for one trial), at most SLOT_MAX_DIGITS digits, ASCII only (`\d` would take other scripts' digits).
# Six digits keep the longest runner name inside GitHub's 64 characters (see MAX_RUNNER_NAME) with any int64
# run id and an attempt of up to 26 digits; tests/runner/test_slots.py checks the arithmetic.
SLOT_MAX_DIGITS = 6
# Concatenated, not an f-string: doubled braces would read as Jinja to the template's unrendered-text check.
SLOT = re.compile("0|[1-9][0-9]{0," + str(SLOT_MAX_DIGITS - 1) + "}")
# "Runner names can only be 64 characters in length" (a GitHub maintainer, actions/runner PR #1710, 2022-02-24;
# the REST description of generate-jitconfig, gpu_runner_testing/github-openapi.json, states no maxLength for the
# name or a label, only 1 to 100 labels).
MAX_RUNNER_NAME = 64

_TAG_VALUE_UNSAFE = re.compile(r"[^\w .:/=+\-@]")
# KMS CreateAlias, AliasName: "^[a-zA-Z0-9:/_-]+$" (KMS API Reference); ':' is left out, it cannot be in a path.
_ALIAS_UNSAFE = re.compile(r"[^A-Za-z0-9/_-]")


@dataclass(frozen=True)
class RunContext:
    """Which workflow run (and attempt) an instance belongs to."""

    repository: str  # owner/name
    run_id: str
    run_attempt: str
    branch: str
    commit: str
    # GITHUB_WORKFLOW_REF ("owner/repo/.github/workflows/train.yml@refs/heads/<branch>") and GITHUB_EVENT_NAME
    # of the launching run: the runner's job-started hook accepts only a job with the same values.
    workflow_ref: str = ""
    event_name: str = ""
    # A sweep's trial number (`--slot`), "" for train.yml: part of the run key, so two legs of one run differ.
    slot: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RunContext:
        env = os.environ if env is None else env
        return cls(
            repository=env.get("GITHUB_REPOSITORY", ""),
            run_id=env.get("GITHUB_RUN_ID", "local"),
            run_attempt=env.get("GITHUB_RUN_ATTEMPT", "1"),
            branch=env.get("GITHUB_REF_NAME", ""),
            commit=env.get("GITHUB_SHA", ""),
            workflow_ref=env.get("GITHUB_WORKFLOW_REF", ""),
            event_name=env.get("GITHUB_EVENT_NAME", ""),
        )

    @property
    def owner(self) -> str:
        return self.repository.partition("/")[0]

    @property
    def repo(self) -> str:
        return self.repository.partition("/")[2]


def check_slot(slot: str) -> str:
    """`slot` when it is "" or a trial number SLOT allows, else RunnerError (the CLI checks it before any API
    call, naming the flag: workflow_contract.slot; this is the backstop for every other caller)."""
    if slot and not SLOT.fullmatch(slot):
        raise RunnerError(
            f"slot {slot!r} is not a trial number (1 to {SLOT_MAX_DIGITS} digits, no leading zero)"
        )
    return slot


def run_key(ctx: RunContext) -> str:
    """`<run id>-<attempt>`, and `-<slot>` for a sweep's trial: shared by the runner name and the parameter path,
    so the reaper can pair them. Run ids and attempts are digits, so the two forms can never be equal."""
    key = f"{ctx.run_id}-{ctx.run_attempt}"
    return f"{key}-{check_slot(ctx.slot)}" if ctx.slot else key


def runner_name(ctx: RunContext) -> str:
    """Unique per run, attempt and slot (the reaper pairs it with the parameter through the run key)."""
    name = f"{NAME_PREFIX}{run_key(ctx)}"
    if len(name) > MAX_RUNNER_NAME:
        raise RunnerError(
            f"runner name {name!r} is longer than GitHub's {MAX_RUNNER_NAME} characters (GITHUB_RUN_ID and "
            "GITHUB_RUN_ATTEMPT are GitHub's; run launch inside the workflow run)"
        )
    return name


def label_nonce() -> str:
    """The label's unguessable part, new for every launch."""
    return secrets.token_hex(LABEL_NONCE_BYTES)


def runner_label(ctx: RunContext, nonce: str) -> str:
    """The runner's only custom label: the run key plus a nonce known only to the start job's outputs, so no
    other workflow can name it while the instance boots (the job-started hook refuses whatever gets through)."""
    if not re.fullmatch(r"[0-9a-f]{16,64}", nonce):
        raise ValueError("label nonce: 16 to 64 lowercase hex digits (naming.label_nonce())")
    return f"{runner_name(ctx)}-{nonce}"


def parameter_name(prefix: str, ctx: RunContext) -> str:
    """SSM path of this run's JIT config: `<prefix>/<run id>-<attempt>/jitconfig`."""
    return f"{prefix.rstrip('/')}/{run_key(ctx)}/jitconfig"


def jit_config_key_alias(prefix: str) -> str:
    """Alias of the stack's KMS key for the JIT configs under `prefix` (`gpu-runner bootstrap` passes it to the
    stack, `launch` encrypts under it): derived from the one setting both read, so the two cannot drift."""
    return "alias" + _ALIAS_UNSAFE.sub("-", prefix.rstrip("/")) + "/jit-config"


def github_credential_key_alias(prefix: str) -> str:
    """Alias of the stack's KMS key for the GitHub credential (`<prefix>-github-credential`): bootstrap passes it to
    the stack, and every reader of the credential resolves it to check the parameter is encrypted under that key."""
    return "alias" + _ALIAS_UNSAFE.sub("-", prefix.rstrip("/")) + "/github-credential"


def instance_arn(partition: str, region: str, account: str, instance_id: str) -> str:
    """`arn:<partition>:ec2:<region>:<account>:instance/<id>`, the form ec2:SourceInstanceARN takes (EC2 User
    Guide, "Amazon Resource Names (ARNs) for Amazon EC2")."""
    return f"arn:{partition}:ec2:{region}:{account}:instance/{instance_id}"


def run_key_of_runner(name: str) -> str | None:
    return name[len(NAME_PREFIX) :] if name.startswith(NAME_PREFIX) else None


def run_key_of_parameter(name: str) -> str:
    return name.rstrip("/").split("/")[-2] if name.count("/") >= 2 else ""


def tag_value(value: str) -> str:
    """EC2 tag values allow a limited character set and 256 characters; branch names may hold anything."""
    return _TAG_VALUE_UNSAFE.sub("_", value)[:256]
