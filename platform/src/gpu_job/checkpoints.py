"""Training checkpoints in S3: a resumable fit() survives the loss of its machine.

Keras' BackupAndRestore writes the backup (weights, optimizer state, epoch/batch counters) to local disk; this
module mirrors it after every backup, with a state file holding the MLflow run id, and restores it before fit()
on the next attempt of the same branch, commit and config, so that attempt continues the same MLflow run at the
right epoch. A finished training marks its prefix complete: a later run of the same commit and config starts
fresh instead of resuming a finished fit.

Where (issue 30, High 2): `<checkpoint_uri>/<aws:userid>/[<scope>/]<branch>/<commit>-<config hash>/`. The
training roles may write under their own session's `aws:userid` only (gpu_runner's stacks: RunnerPolicy, the Batch JobPolicy),
so one run's code can never write where another run restores from. A later attempt runs in another session (a new
instance, a Batch retry's new task), so it restores from its predecessors' prefixes: those of the sessions the
default branch's launch code recorded, under `<checkpoint_uri>/owners/<branch>/<commit>/<session>`, for THIS
branch and commit (gpu-runner's checkpoint_owners.py writes them; no training role can). Another branch's code
may write anything under its own prefix, even the path this branch would use: its session is not in this
branch's record, so that prefix is never read. Of the candidates, the newest state wins (the last attempt's).

TensorFlow-free (boto3 and files): the Keras callback that pushes after each backup is the project's
callbacks.S3CheckpointSync.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from .errors import DataError
from .s3sync import parse_s3_uri

STATE = "state.json"
FILES = "files/"
# Under the checkpoint root: which sessions trained which branch and commit (written by the default branch's
# gpu-runner only; a `role-id:session` segment never equals it).
OWNERS = "owners"
# The sessions a record may name: an EC2 instance id (the runner role's session: aws:userid "role-id:
# ec2-instance-id", IAM User Guide, "IAM policy elements: Variables and tags") or an ECS task id (a Batch job's
# task role: "role-id:caller-specified-role-name", the session name being the task id, aws/amazon-ecs-agent#3498).
SESSION = re.compile(r"i-[0-9a-f]{8,17}|[0-9a-f]{32}")
# An aws:userid is one path segment: role ids and user ids are letters and digits, a role session name matches
# [\w+=,.@-]* (AWS STS API Reference, AssumeRole, RoleSessionName), a federated user's is account:name.
USER_ID = re.compile(r"[\w+=,.@:-]{1,128}")


def config_hash(resolved: Mapping[str, Any]) -> str:
    """Same config -> same checkpoint prefix; any change (epochs, model, data) starts a new one."""
    return hashlib.sha256(json.dumps(resolved, sort_keys=True).encode()).hexdigest()[:12]


def checkpoint_prefix(base_uri: str, branch: str, commit: str, digest: str) -> str:
    safe_branch = re.sub(r"[^A-Za-z0-9._-]+", "-", branch or "no-branch").strip("-") or "no-branch"
    return f"{base_uri.rstrip('/')}/{safe_branch}/{(commit or 'no-commit')[:12]}-{digest}"


def owners_prefix(root_key: str, branch: str, commit: str) -> str:
    """`<root>/owners/<branch>/<commit>/`: the branch percent-encoded whole (`/` too), so no two branch names
    share a record and none reaches into another's (train/a-b and train-a/b stay apart; gpu-runner writes the
    same keys: gpu_runner/core/checkpoint_owners.py, a test keeps the two equal)."""
    root = root_key.strip("/")
    return f"{root + '/' if root else ''}{OWNERS}/{quote(branch, safe='')}/{commit}/"


def caller_identity(sts: Any | None = None) -> str:
    """This process's aws:userid, as IAM sees it (STS GetCallerIdentity "UserId"; the call needs no permission:
    AWS STS API Reference, GetCallerIdentity)."""
    try:
        user_id = str((sts or boto3.client("sts")).get_caller_identity()["UserId"])
    except (ClientError, BotoCoreError) as error:
        raise DataError(
            f"training.checkpoint_uri: cannot tell which AWS identity writes the checkpoints ({error}); give the "
            "training AWS credentials (the instance profile or the Batch job role), or clear checkpoint_uri to keep "
            "checkpoints on local disk"
        ) from None
    if not USER_ID.fullmatch(user_id):
        raise DataError(f"training.checkpoint_uri: AWS answered an unexpected caller id {user_id!r}")
    return user_id


def recorded_sessions(client: Any, bucket: str, prefix: str) -> list[str]:
    """The sessions recorded under `prefix` (an owners_prefix); keys that are not exactly a session are skipped."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    names = [obj["Key"][len(prefix) :] for page in pages for obj in page.get("Contents", [])]
    return sorted(name for name in names if SESSION.fullmatch(name))


@dataclass(frozen=True)
class Restored:
    run_id: str
    epochs_done: int
    files: int
    source: str = ""  # the prefix it came from (this session's own, or a predecessor's)


class S3Checkpoints:
    """One checkpoint prefix in S3 (this session's own, where it writes), the local BackupAndRestore directory it
    mirrors, and the prefixes it may restore from besides its own (`predecessors`: earlier attempts' sessions)."""

    def __init__(
        self, uri: str, local_dir: Path, client: Any | None = None, predecessors: Sequence[str] = ()
    ) -> None:
        self.uri = uri
        self.bucket, self.prefix = parse_s3_uri(uri)
        self.local_dir = local_dir
        self.client = client or boto3.client("s3")
        self.predecessors = tuple(predecessors)

    def _read_state(self, prefix: str) -> tuple[datetime, dict[str, Any]] | None:
        try:
            reply = self.client.get_object(Bucket=self.bucket, Key=prefix + STATE)
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            if code in {"NoSuchKey", "404"}:
                return None
            if code == "NoSuchBucket":
                raise DataError(
                    f"training.checkpoint_uri '{self.uri}': bucket '{self.bucket}' does not exist "
                    "(make bootstrap creates it, or clear checkpoint_uri to keep checkpoints on local disk)"
                ) from None
            raise
        return reply["LastModified"], json.loads(reply["Body"].read())

    def state(self) -> dict[str, Any] | None:
        """The state file beside this session's own checkpoint (run id, epochs done, complete), or None."""
        found = self._read_state(self.prefix)
        return found[1] if found else None

    def newest(self) -> tuple[str, dict[str, Any]] | None:
        """(prefix, state) of the most recently written state among this session's prefix and its
        predecessors' (the last attempt's; a tie goes to more epochs), or None when none has one."""
        found = []
        for uri in (self.uri, *self.predecessors):
            prefix = parse_s3_uri(uri)[1]
            read = self._read_state(prefix)
            if read:
                found.append((read[0], int(read[1].get("epochs_done", 0)), prefix, read[1]))
        if not found:
            return None
        _, _, prefix, state = max(found, key=lambda item: (item[0], item[1]))
        return prefix, state

    def _keys(self, prefix: str | None = None) -> dict[str, int]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=(self.prefix if prefix is None else prefix) + FILES
        )
        return {obj["Key"]: obj["Size"] for page in pages for obj in page.get("Contents", [])}

    def restore(self) -> Restored | None:
        """Download the newest unfinished checkpoint (this session's or a predecessor's) into the local backup
        directory; None when there is none, or when the newest one is finished."""
        newest = self.newest()
        if newest is None or newest[1].get("complete"):
            return None
        prefix, state = newest
        keys = self._keys(prefix)
        for key in keys:
            relative = Path(key[len(prefix + FILES) :])
            if relative.is_absolute() or ".." in relative.parts:
                raise DataError(
                    f"refusing checkpoint key '{key}': it would be written outside {self.local_dir}"
                )
            target = self.local_dir / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            self.client.download_file(self.bucket, key, str(target))
        source = f"s3://{self.bucket}/{prefix.rstrip('/')}"
        return Restored(str(state.get("run_id", "")), int(state.get("epochs_done", 0)), len(keys), source)

    def push(self, state: Mapping[str, Any]) -> int:
        """Mirror the local backup (uploads first, then stale deletes), then the state: a reader never sees a
        state that points at files not uploaded yet."""
        local = {
            self.prefix + FILES + path.relative_to(self.local_dir).as_posix(): path
            for path in sorted(self.local_dir.rglob("*"))
            if path.is_file()
        }
        for key, path in local.items():
            self.client.upload_file(str(path), self.bucket, key)
        stale = [key for key in self._keys() if key not in local]
        for start in range(0, len(stale), 1000):
            batch = [{"Key": key} for key in stale[start : start + 1000]]
            self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})
        self.client.put_object(
            Bucket=self.bucket, Key=self.prefix + STATE, Body=json.dumps(dict(state)).encode()
        )
        return len(local)

    def mark_complete(self, state: Mapping[str, Any]) -> None:
        self.client.put_object(
            Bucket=self.bucket, Key=self.prefix + STATE, Body=json.dumps({**state, "complete": True}).encode()
        )


def session_prefix(
    base_uri: str, user_id: str, branch: str, commit: str, digest: str, scope: str = ""
) -> str:
    """`<base>/<user id>/[<scope>/]<branch>/<commit>-<digest>`: the checkpoint of a training of that branch, commit
    and config in that AWS session (the only one that may write it: RunnerPolicy and JobPolicy of gpu_runner's stacks)."""
    within = f"/{scope.strip('/')}" if scope.strip("/") else ""
    return checkpoint_prefix(f"{base_uri.rstrip('/')}/{user_id}{within}", branch, commit, digest)


def open_store(
    base_uri: str,
    branch: str,
    commit: str,
    digest: str,
    local_dir: Path,
    *,
    scope: str = "",
    client: Any | None = None,
    sts: Any | None = None,
) -> S3Checkpoints:
    """The checkpoint store of this training: its own prefix under this session's aws:userid, and the prefixes of
    the sessions the default branch recorded for this branch and commit (see the module's docstring). `scope` puts
    the checkpoint under a sub-path of its own (a sweep trial's `sweeps/<study>/trial-<n>`)."""
    client = client or boto3.client("s3")
    identity = caller_identity(sts)
    role_id, colon, session = identity.partition(":")
    predecessors: list[str] = []
    # An IAM user's or the root's own runs (no `role-id:session`) have no recorded predecessors: their own prefix.
    if colon and branch and re.fullmatch(r"[0-9a-f]{40}", commit):
        bucket, root_key = parse_s3_uri(base_uri)
        recorded = recorded_sessions(client, bucket, owners_prefix(root_key, branch, commit))
        predecessors = [
            session_prefix(base_uri, f"{role_id}:{other}", branch, commit, digest, scope)
            for other in recorded
            if other != session
        ]
    own = session_prefix(base_uri, identity, branch, commit, digest, scope)
    return S3Checkpoints(own, local_dir, client, predecessors)


# Beside BackupAndRestore's own folder (`chief/`, which Keras 2.15 deletes when fit() ends: worker_training_state
# .delete_backup), mirrored to S3 with it: what kind of model the backup in `chief/` belongs to.
BACKUP_KIND = "backup_kind.json"


def check_backup_kind(local_dir: Path, pruned: bool) -> None:
    """Refuse to resume a leftover local backup of the other kind of model, then record this training's kind.

    A pruned model's layers are wrappers (kernel, mask, threshold, pruning step): restoring an unpruned backup
    into it (or the reverse) matches none of its weights, yet Keras still restores the epoch counter and goes on
    from there with fresh weights, silently (measured with Keras 2.15). The S3 prefix already differs (the config
    hash holds `pruning`); a local `training.checkpoint_dir` reused with another `pruning.enabled` does not."""
    marker = local_dir / BACKUP_KIND
    chief = local_dir / "chief"
    if chief.is_dir() and any(chief.iterdir()):
        # A backup written before this marker existed was of an unpruned model: pruning is newer.
        was = bool(json.loads(marker.read_text("utf-8")).get("pruned")) if marker.exists() else False
        if was != pruned:
            raise DataError(
                f"training.checkpoint_dir '{local_dir}' holds the backup of an unfinished training with "
                f"pruning.enabled: {str(was).lower()}, and this config has pruning.enabled: {str(pruned).lower()}; "
                "a model cannot resume from the other kind's backup. Set pruning.enabled back to finish that "
                f"training, or delete {chief} (or pick another training.checkpoint_dir) to start afresh"
            )
    local_dir.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps({"pruned": pruned}), encoding="utf-8")
