"""Which AWS session trains which branch and commit: the record a resumed training reads to know whose checkpoints
it may restore (issue 30, High 2).

Training code writes its checkpoints under `checkpoints/<aws:userid>/` only: IAM binds the prefix to the caller's
session (gpu_runner/setup/gpu-runner.yaml RunnerPolicy, gpu_runner/batch/batch.yaml JobPolicy), whose id is `<role id>:<EC2 instance
id>` on a GPU runner and `<role id>:<ECS task id>` in a Batch job. A spot interruption's next attempt, a Batch
retry or a sweep's next wave runs in a new session, so it must restore a predecessor's prefix, and only one of its
own branch: another branch's code may write anything under its own prefix, the path this branch uses included.

So the default branch's code, which alone holds the launch and submit roles, records each session it starts under
`checkpoints/owners/<branch>/<commit>/<session>`, where no training role may write: `launch` the instance right
after RunInstances, `batch wait` each task of the job as it sees it. The branch is GITHUB_REF_NAME of the run,
which a calling workflow cannot set (docs.github.com, "Store information in variables": GITHUB_* default
variables; a caller's `env` does not reach a called workflow: "Reuse workflows", limitations). The training reads
the record back (gpu_job/checkpoints.py, open_store: the same key layout, a test keeps them equal).

A record is created once (If-None-Match: *) and never replaced; a missing one only costs a resume (the attempt
trains from its first epoch), so failing to write it warns and lets the run go on.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from botocore.exceptions import BotoCoreError, ClientError

from gpu_runner.core.errors import RunnerError
from gpu_runner.core.naming import RunContext

log = logging.getLogger(__name__)

# The checkpoint root the workflows give the training (`--checkpoint-uri=s3://<bucket>/checkpoints`).
ROOT = "checkpoints"
OWNERS = "owners"
# An EC2 instance id, or an ECS task id (the last part of a task ARN: 32 hex digits in the long ARN format).
SESSION = re.compile(r"i-[0-9a-f]{8,17}|[0-9a-f]{32}")
COMMIT = re.compile(r"[0-9a-f]{40}")


def owners_key(branch: str, commit: str, session: str) -> str:
    """`checkpoints/owners/<branch, percent-encoded whole>/<commit>/<session>`: no two branch names share a
    record and none reaches into another's (`/` is encoded too, so train/a-b and train-a/b stay apart)."""
    if not branch:
        raise RunnerError("checkpoint owner: no branch (GITHUB_REF_NAME is not set)")
    if not COMMIT.fullmatch(commit):
        raise RunnerError(f"checkpoint owner: commit {commit!r} is not 40 hex digits")
    if not SESSION.fullmatch(session):
        raise RunnerError(f"checkpoint owner: {session!r} is neither an EC2 instance id nor an ECS task id")
    return f"{ROOT}/{OWNERS}/{quote(branch, safe='')}/{commit}/{session}"


def record(
    s3: Any, bucket: str, *, branch: str, commit: str, session: str, detail: Mapping[str, str] | None = None
) -> bool:
    """Create the record; False when it exists already (412, or 409 for a concurrent create: S3 User Guide, "Add
    preconditions to S3 operations with conditional requests")."""
    key = owners_key(branch, commit, session)
    body = json.dumps({"branch": branch, "commit": commit, "session": session,
                       "recorded_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), **(detail or {})})  # fmt: skip
    try:
        s3.put_object(
            Bucket=bucket, Key=key, Body=body.encode(), IfNoneMatch="*", ContentType="application/json"
        )
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in (
            "PreconditionFailed",
            "ConditionalRequestConflict",
        ):
            return False
        raise
    return True


def record_or_warn(
    s3: Any, bucket: str, *, branch: str, commit: str, session: str, detail: Mapping[str, str] | None = None
) -> None:
    """record(), or a workflow warning that says what the failure costs: the run goes on either way."""
    try:
        if record(s3, bucket, branch=branch, commit=commit, session=session, detail=detail):
            log.info(f"checkpoint owner: {session} trains {branch} at {commit[:12]}")
    except (ClientError, BotoCoreError, RunnerError) as error:
        print(
            f"::warning title=checkpoint owner not recorded::{session}: {error}. Its checkpoints "
            "train on; a later attempt will not restore them and starts from the first epoch"
        )


def record_for_run(s3: Any, bucket: str, ctx: RunContext, *, commit: str, session: str) -> None:
    """The session just started (an instance, a Batch task) trains this run's branch at `commit`, the one its job
    checks out: the record a later attempt's resume reads, with the run that started it (record_or_warn)."""
    detail = {
        "repository": ctx.repository,
        "run_id": ctx.run_id,
        "run_attempt": ctx.run_attempt,
        "slot": ctx.slot,
    }
    record_or_warn(s3, bucket, branch=ctx.branch, commit=commit, session=session, detail=detail)
