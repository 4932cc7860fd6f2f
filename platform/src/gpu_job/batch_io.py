"""Where a batch job's inputs come from and where its outputs go (a project's `predict`): a local folder or S3.

A source lists its inputs' keys (sorted, relative to the input; only names with the project's suffixes) and
reads them by key, in parallel on S3; a sink writes a named object whole, creates one only if it is absent, tells
whether it exists and reads it back. On a folder, whole means a temporary name then a rename;
on S3 a PutObject is whole by itself ("Amazon S3 never adds partial objects", Amazon S3 User Guide, "Amazon S3
data consistency model"), so a reader never sees half a shard on either.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import boto3
from botocore.config import Config as BotoConfig
from botocore.exceptions import BotoCoreError, ClientError

from .errors import PredictError

PROBE = ".write-check"
# Parallel GetObject calls while a shard is read: S3 answers each in tens of milliseconds, so one at a time would
# leave the GPU waiting; botocore's default pool holds 10 connections (botocore.config.Config
# max_pool_connections), raised to match.
READERS = 16
# The largest input read: far above any image a classifier is fed, and READERS of them still fit in a runner's
# memory. A larger object (a video, an archive, a crafted file) is its row's reason, never read into memory.
MAX_IMAGE_BYTES = 64 * 1024 * 1024


class ImageTooLarge(ValueError):
    """One input over MAX_IMAGE_BYTES: skipped unread, with its size."""


def _too_large(size: int) -> ImageTooLarge | None:
    if size <= MAX_IMAGE_BYTES:
        return None
    return ImageTooLarge(f"{size} bytes, over the {MAX_IMAGE_BYTES} bytes an input may have; not read")


def is_s3(uri: str) -> bool:
    return uri.startswith("s3://")


def split_s3(uri: str, option: str) -> tuple[str, str]:
    """`s3://bucket/some/prefix` -> ("bucket", "some/prefix/"); the prefix always ends in / (or is empty)."""
    bucket, _, prefix = uri[len("s3://") :].partition("/")
    if not bucket:
        raise PredictError(f"{option} '{uri}': no bucket; use s3://<bucket>/<prefix>/")
    return bucket, (prefix if not prefix or prefix.endswith("/") else prefix + "/")


def s3_client() -> Any:
    """One client per process (boto3 clients are thread-safe; boto3's "Multithreading or multiprocessing with
    clients" guide); AWS_ENDPOINT_URL, when set, points it elsewhere (the tests' moto server)."""
    return boto3.client("s3", config=BotoConfig(max_pool_connections=READERS, retries={"mode": "standard"}))


def _is_input(key: str, suffixes: Collection[str]) -> bool:
    return not key.endswith("/") and Path(key).suffix.lower() in suffixes


def _s3_failure(option: str, uri: str, error: Exception) -> PredictError:
    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "")
        if code == "NoSuchBucket":
            return PredictError(f"{option} '{uri}': the bucket does not exist; check the bucket name")
        if code in ("AccessDenied", "403", "Forbidden"):
            return PredictError(
                f"{option} '{uri}': access denied ({code}); the role may read the project bucket and write only "
                "under s3://<bucket>/predictions/ (manual/predict.md)"
            )
        return PredictError(f"{option} '{uri}': S3 refused the request ({code})")
    return PredictError(f"{option} '{uri}': S3 could not be reached ({type(error).__name__}: {error})")


# ---------------------------------------------------------------------- sources
class Source(Protocol):
    uri: str

    def keys(self) -> list[str]: ...

    def read_many(self, keys: Sequence[str]) -> Iterator[tuple[str, bytes | Exception]]: ...


class FolderSource:
    def __init__(self, uri: str, suffixes: Collection[str]) -> None:
        self.uri, self.root, self.suffixes = uri, Path(uri), suffixes

    def keys(self) -> list[str]:
        if not self.root.is_dir():
            raise PredictError(f"--input '{self.uri}': folder does not exist (a folder of images, or s3://)")
        return sorted(
            path.relative_to(self.root).as_posix()
            for path in self.root.rglob("*")
            if path.is_file() and _is_input(path.name, self.suffixes)
        )

    def read_many(self, keys: Sequence[str]) -> Iterator[tuple[str, bytes | Exception]]:
        for key in keys:
            try:
                path = self.root / key
                yield key, _too_large(path.stat().st_size) or path.read_bytes()
            except OSError as error:
                yield key, error


class S3Source:
    def __init__(
        self, uri: str, suffixes: Collection[str], client: Any | None = None, page_size: int = 1000
    ) -> None:
        self.uri, self.suffixes, self.page_size = uri, suffixes, page_size
        self.bucket, self.prefix = split_s3(uri, "--input")
        self.client = client or s3_client()

    def keys(self) -> list[str]:
        keys: list[str] = []
        try:
            # ListObjectsV2 returns at most 1,000 keys a page (Amazon S3 API Reference, ListObjectsV2 MaxKeys);
            # the paginator follows NextContinuationToken.
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix, PaginationConfig={"PageSize": self.page_size}
            )
            for page in pages:
                keys += [
                    o["Key"][len(self.prefix) :]
                    for o in page.get("Contents", [])
                    if _is_input(o["Key"], self.suffixes)
                ]
        except (ClientError, BotoCoreError) as error:
            raise _s3_failure("--input", self.uri, error) from None
        return sorted(keys)

    def _get(self, key: str) -> bytes | Exception:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self.prefix + key)
        except ClientError as error:
            # Gone since the listing, or not readable: this image only.
            if error.response.get("Error", {}).get("Code", "") in ("NoSuchKey", "AccessDenied"):
                return error
            raise _s3_failure("--input", self.uri, error) from None
        # GetObject's ContentLength is the object's size (Amazon S3 API Reference, GetObject): known before the
        # body is read, which a too large object never is.
        too_large = _too_large(response["ContentLength"])
        if too_large:
            response["Body"].close()
            return too_large
        return response["Body"].read()

    def read_many(self, keys: Sequence[str]) -> Iterator[tuple[str, bytes | Exception]]:
        with ThreadPoolExecutor(READERS) as pool:
            yield from zip(keys, pool.map(self._get, keys), strict=True)


def source_for(uri: str, suffixes: Collection[str]) -> Source:
    """The inputs under an s3:// prefix or in a folder whose names end in one of `suffixes` (lower case)."""
    return S3Source(uri, suffixes) if is_s3(uri) else FolderSource(uri, suffixes)


# ---------------------------------------------------------------------- sinks
class Sink(Protocol):
    uri: str

    def probe(self) -> None: ...

    def exists(self, name: str) -> bool: ...

    def read(self, name: str) -> bytes | None: ...

    def write(self, name: str, body: bytes) -> None: ...

    def create(self, name: str, body: bytes) -> bool: ...


class FolderSink:
    def __init__(self, uri: str) -> None:
        self.uri, self.root = uri, Path(uri)

    def probe(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            (self.root / PROBE).write_bytes(b"")
            (self.root / PROBE).unlink()
        except OSError as error:
            raise PredictError(
                f"--output '{self.uri}': cannot be written ({error.strerror}); choose a writable folder"
            ) from None

    def exists(self, name: str) -> bool:
        return (self.root / name).exists()

    def read(self, name: str) -> bytes | None:
        path = self.root / name
        return path.read_bytes() if path.exists() else None

    def write(self, name: str, body: bytes) -> None:
        partial = self.root / (name + ".partial")
        partial.write_bytes(body)
        os.replace(partial, self.root / name)

    def create(self, name: str, body: bytes) -> bool:
        """Write `name` unless it exists; whether this call wrote it."""
        if self.exists(name):
            return False
        self.write(name, body)
        return True


class S3Sink:
    def __init__(self, uri: str, client: Any | None = None) -> None:
        self.uri = uri
        self.bucket, self.prefix = split_s3(uri, "--output")
        if not self.prefix:
            raise PredictError(f"--output '{uri}': no prefix; use s3://<bucket>/predictions/<batch>/")
        self.client = client or s3_client()

    def _call(self, method: str, **kwargs: Any) -> Any:
        try:
            return getattr(self.client, method)(Bucket=self.bucket, **kwargs)
        except (ClientError, BotoCoreError) as error:
            raise _s3_failure("--output", self.uri, error) from None

    def probe(self) -> None:
        """A put and a delete of a probe object: what the run needs (a role that may only read fails here, before
        a model is loaded or a GPU launched)."""
        self._call("put_object", Key=self.prefix + PROBE, Body=b"")
        self._call("delete_object", Key=self.prefix + PROBE)

    def exists(self, name: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=self.prefix + name)
        except ClientError as error:
            # HeadObject has no body, so a missing key is the bare status: "404" (botocore), not NoSuchKey.
            if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise _s3_failure("--output", self.uri, error) from None
        return True

    def read(self, name: str) -> bytes | None:
        try:
            return self.client.get_object(Bucket=self.bucket, Key=self.prefix + name)["Body"].read()
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") == "NoSuchKey":
                return None
            raise _s3_failure("--output", self.uri, error) from None

    def write(self, name: str, body: bytes) -> None:
        self._call("put_object", Key=self.prefix + name, Body=body)

    def create(self, name: str, body: bytes) -> bool:
        """A conditional PutObject (If-None-Match: *; Amazon S3 User Guide, "Add preconditions to S3 operations
        with conditional requests"): of two runs started on one output at once, only one writes the manifest."""
        try:
            self.client.put_object(Bucket=self.bucket, Key=self.prefix + name, Body=body, IfNoneMatch="*")
        except ClientError as error:
            # 412 PreconditionFailed: the object exists; 409 ConditionalRequestConflict: a concurrent write won.
            if error.response.get("Error", {}).get("Code") in (
                "PreconditionFailed",
                "ConditionalRequestConflict",
            ):
                return False
            raise _s3_failure("--output", self.uri, error) from None
        return True


def sink_for(uri: str) -> Sink:
    return S3Sink(uri) if is_s3(uri) else FolderSink(uri)


def list_keys(source: str, suffixes: Collection[str]) -> list[str]:
    """Every input's key, sorted: its path relative to the folder or the s3:// prefix (any depth); an input with
    nothing under it is refused."""
    keys = source_for(source, suffixes).keys()
    if not keys:
        raise PredictError(
            f"--input '{source}': no images ({', '.join(sorted(suffixes))}) under it; nothing to predict"
        )
    return keys


def check_writable(out: str) -> None:
    """Before any model is loaded (or any GPU launched): the output can be created and written."""
    sink_for(str(out)).probe()
