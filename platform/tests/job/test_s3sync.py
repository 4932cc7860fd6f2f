"""An S3 prefix mirrored to local disk (gpu_job.s3sync) on the moto server: what it downloads, what it skips, and
the refusals that name the bucket and the key. A generated project's data tests load images through it."""

from pathlib import Path

import boto3
import pytest

from gpu_job.errors import DataError
from gpu_job.s3sync import parse_s3_uri, sync_prefix
from gpu_runner_testing.s3_objects import upload_folder


def write_files(root: Path, classes: int = 3, per_class: int = 10) -> Path:
    """An image folder's shape (one folder per class) with distinct bytes in every file."""
    for label in range(classes):
        folder = root / f"class_{label}"
        folder.mkdir(parents=True)
        for index in range(per_class):
            (folder / f"{index}.bin").write_bytes(f"class {label} file {index}".encode() * (index + 1))
    return root


def test_parse_s3_uri() -> None:
    assert parse_s3_uri("s3://bucket/a/b") == ("bucket", "a/b/")
    assert parse_s3_uri("s3://bucket") == ("bucket", "")
    with pytest.raises(DataError, match="no bucket"):
        parse_s3_uri("s3:///x")


def test_s3_source_syncs_then_skips_unchanged(moto_endpoint: str, tmp_path: Path) -> None:
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="data-sync")
    count = upload_folder("data-sync", "digits/v1", write_files(tmp_path / "src"))
    dest = tmp_path / "cache"

    first = sync_prefix("s3://data-sync/digits/v1", dest, workers=4)
    assert (first.downloaded, first.skipped) == (count, 0)
    assert first.bytes_downloaded == sum(p.stat().st_size for p in (tmp_path / "src").rglob("*.bin"))
    assert (dest / "class_2" / "9.bin").read_bytes() == (tmp_path / "src" / "class_2" / "9.bin").read_bytes()

    second = sync_prefix("s3://data-sync/digits/v1", dest, workers=4)
    assert (second.downloaded, second.skipped) == (0, count)

    s3.put_object(Bucket="data-sync", Key="digits/v1/class_0/0.bin", Body=b"changed")
    third = sync_prefix("s3://data-sync/digits/v1", dest, workers=4)
    assert (third.downloaded, third.skipped) == (1, count - 1)
    assert (dest / "class_0" / "0.bin").read_bytes() == b"changed"


def test_s3_missing_bucket(moto_endpoint: str, tmp_path: Path) -> None:
    with pytest.raises(DataError, match="bucket 'no-such-bucket' does not exist"):
        sync_prefix("s3://no-such-bucket/x", tmp_path)


def test_s3_key_cannot_escape_the_cache(moto_endpoint: str, tmp_path: Path) -> None:
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="data-evil")
    s3.put_object(Bucket="data-evil", Key="p/../../escaped.png", Body=b"x")
    with pytest.raises(DataError, match="outside"):
        sync_prefix("s3://data-evil/p", tmp_path / "cache")
    assert not (tmp_path / "escaped.png").exists()
