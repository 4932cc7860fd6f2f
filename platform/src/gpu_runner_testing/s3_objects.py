"""A local folder uploaded to the tests' S3 (the moto server the plugin points boto3 at), key by relative path:
a data source or a prefix to sync, as a team's bucket would hold it."""

from __future__ import annotations

from pathlib import Path

import boto3


def upload_folder(bucket: str, prefix: str, root: Path) -> int:
    """Every file under `root` to `s3://bucket/prefix/<relative path>`; returns how many."""
    s3 = boto3.client("s3")
    files = [p for p in root.rglob("*") if p.is_file()]
    for path in files:
        s3.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(root).as_posix()}")
    return len(files)
