"""Mirror an `s3://bucket/prefix` to local disk, in parallel, skipping files that have not changed.

Hand-written rather than `aws s3 sync` because the AWS CLI is not a Python dependency of the project and we want
a report (downloaded / skipped / bytes) and a clear error for a missing prefix.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import boto3
from botocore.exceptions import ClientError

from .errors import DataError

MANIFEST = ".s3sync.json"


@dataclass(frozen=True)
class SyncReport:
    downloaded: int
    skipped: int
    bytes_downloaded: int


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """`s3://bucket/some/prefix` -> ("bucket", "some/prefix/")."""
    if not uri.startswith("s3://"):
        raise DataError(f"data.source '{uri}' is not an s3:// URI")
    bucket, _, prefix = uri[5:].partition("/")
    if not bucket:
        raise DataError(f"data.source '{uri}' has no bucket: use s3://bucket/prefix")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return bucket, prefix


def _list_objects(client: Any, bucket: str, prefix: str, uri: str) -> list[dict[str, Any]]:
    paginator = client.get_paginator("list_objects_v2")
    objects: list[dict[str, Any]] = []
    try:
        for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
            objects.extend(obj for obj in page.get("Contents", []) if not obj["Key"].endswith("/"))
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "")
        if code == "NoSuchBucket":
            raise DataError(
                f"data.source '{uri}': bucket '{bucket}' does not exist; create it or fix the bucket name"
            ) from None
        if code in {"AccessDenied", "403"}:
            raise DataError(
                f"data.source '{uri}': access denied; grant s3:ListBucket on '{bucket}'"
            ) from None
        raise
    if not objects:
        raise DataError(
            f"data.source '{uri}': no objects under this prefix; upload the data "
            f"(one sub-folder per class) or fix the prefix"
        )
    return objects


def _local_path(dest: Path, prefix: str, key: str) -> Path:
    relative = PurePosixPath(key[len(prefix) :])
    # A key like "a/../../etc/x" must not escape the cache directory.
    if relative.is_absolute() or ".." in relative.parts:
        raise DataError(f"refusing S3 key '{key}': it would be written outside {dest}")
    return dest.joinpath(*relative.parts)


def _download(client: Any, bucket: str, key: str, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    client.download_file(bucket, key, str(partial))
    # Atomic: an interrupted sync never leaves a truncated file that would later be "unchanged".
    os.replace(partial, target)


def sync_prefix(uri: str, dest: Path, *, workers: int = 16, client: Any | None = None) -> SyncReport:
    """Download every object under the prefix into `dest`, keeping relative paths."""
    bucket, prefix = parse_s3_uri(uri)
    client = client or boto3.client("s3")
    objects = _list_objects(client, bucket, prefix, uri)
    dest.mkdir(parents=True, exist_ok=True)
    manifest_path = dest / MANIFEST
    manifest: dict[str, str] = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}

    todo: list[tuple[str, Path]] = []
    skipped = 0
    for obj in objects:
        key, target = obj["Key"], _local_path(dest, prefix, obj["Key"])
        unchanged = (
            target.exists() and target.stat().st_size == obj["Size"] and manifest.get(key) == obj["ETag"]
        )
        if unchanged:
            skipped += 1
        else:
            todo.append((key, target))

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(lambda item: _download(client, bucket, *item), todo))

    manifest = {obj["Key"]: obj["ETag"] for obj in objects}
    manifest_path.write_text(json.dumps(manifest, indent=0, sort_keys=True))
    size_by_key = {obj["Key"]: obj["Size"] for obj in objects}
    return SyncReport(
        downloaded=len(todo),
        skipped=skipped,
        bytes_downloaded=sum(size_by_key[key] for key, _ in todo),
    )
