"""Training checkpoints in S3: a resumable fit() survives the loss of its machine.

Keras' BackupAndRestore writes the backup (weights, optimizer state, epoch/batch counters) to local disk; this
module mirrors it to `<checkpoint_uri>/<branch>/<commit>-<config hash>/` after every backup, with a state file
holding the MLflow run id, and restores it before fit() on the next attempt of the same branch, commit and
config, so that attempt continues the same MLflow run at the right epoch. A finished training marks its prefix
complete: a later run of the same commit and config starts fresh instead of resuming a finished fit.

TensorFlow-free (boto3 and files): the Keras callback that pushes after each backup is callbacks.S3CheckpointSync.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import ClientError

from .errors import DataError
from .s3sync import parse_s3_uri

STATE = "state.json"
FILES = "files/"


def config_hash(resolved: Mapping[str, Any]) -> str:
    """Same config -> same checkpoint prefix; any change (epochs, model, data) starts a new one."""
    return hashlib.sha256(json.dumps(resolved, sort_keys=True).encode()).hexdigest()[:12]


def checkpoint_prefix(base_uri: str, branch: str, commit: str, digest: str) -> str:
    safe_branch = re.sub(r"[^A-Za-z0-9._-]+", "-", branch or "no-branch").strip("-") or "no-branch"
    return f"{base_uri.rstrip('/')}/{safe_branch}/{(commit or 'no-commit')[:12]}-{digest}"


@dataclass(frozen=True)
class Restored:
    run_id: str
    epochs_done: int
    files: int


class S3Checkpoints:
    """One checkpoint prefix in S3 and the local BackupAndRestore directory it mirrors."""

    def __init__(self, uri: str, local_dir: Path, client: Any | None = None) -> None:
        self.uri = uri
        self.bucket, self.prefix = parse_s3_uri(uri)
        self.local_dir = local_dir
        self.client = client or boto3.client("s3")

    def state(self) -> dict[str, Any] | None:
        """The state file beside the checkpoint (run id, epochs done, complete), or None when there is none."""
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self.prefix + STATE)["Body"].read()
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            if code in {"NoSuchKey", "404"}:
                return None
            if code == "NoSuchBucket":
                raise DataError(
                    f"training.checkpoint_uri '{self.uri}': bucket '{self.bucket}' does not exist "
                    "(create it with infra/, or clear checkpoint_uri to keep checkpoints on local disk)"
                ) from None
            raise
        return json.loads(body)

    def _keys(self) -> dict[str, int]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix + FILES
        )
        return {obj["Key"]: obj["Size"] for page in pages for obj in page.get("Contents", [])}

    def restore(self) -> Restored | None:
        """Download an unfinished checkpoint into the local backup directory; None when there is none."""
        state = self.state()
        if not state or state.get("complete"):
            return None
        keys = self._keys()
        for key in keys:
            relative = Path(key[len(self.prefix + FILES) :])
            if relative.is_absolute() or ".." in relative.parts:
                raise DataError(
                    f"refusing checkpoint key '{key}': it would be written outside {self.local_dir}"
                )
            target = self.local_dir / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            self.client.download_file(self.bucket, key, str(target))
        return Restored(str(state.get("run_id", "")), int(state.get("epochs_done", 0)), len(keys))

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
