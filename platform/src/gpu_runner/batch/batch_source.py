"""A Batch job's code: the commit, shipped by the submitting workflow job to S3 and fetched inside the container.

A Batch job has no GitHub runner to check out the branch, so the job that submits (the default branch's workflow,
holding the submit role) packs the commit with `git archive` and puts it under `batch-src/` in the project's
bucket; the container's first command fetches it, checks it and unpacks it. The archive is only data for the
submitting job: nothing in it runs there, next to the submit role's credentials.

Trust: code inside any job (the job role, like the runner role, may write the bucket) could overwrite an archive
another job is about to fetch. So the key is content-addressed (batch-src/<commit>/<sha256>.tar.gz), the put is
conditional (If-None-Match: *, never replacing an object), and the fetch recomputes the SHA-256 and compares it
with the one the submitting job passed in the job's environment (which code inside a job cannot change): a
changed archive is refused before anything is unpacked. Unpacking uses tarfile's `data` filter (PEP 706: no
absolute paths, no `..`, no links leaving the directory, no device files), so even a checked archive cannot write
outside its directory.

Deterministic: the same commit packs to the same bytes (git archive takes every mtime from the commit, and the
gzip header's time is fixed at 0), so a re-run of the workflow finds its archive already there.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from gpu_runner.core.errors import RunnerError
from gpu_runner.core.workflow_contract import COMMIT

PREFIX = "batch-src"
SHA256 = re.compile(r"[0-9a-f]{64}")
# A project's sources (the lock file is the largest part) are a few MB; a bigger archive is a mistake (data or
# a model committed), and the container holds it in memory while it checks it.
MAX_ARCHIVE_BYTES = 256 * 1024 * 1024
# No f-string: its doubled braces would read as unrendered template syntax in a bake (tests/test_bake.py).
URI = re.compile(
    r"s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/"
    r"(?P<key>" + PREFIX + r"/[0-9a-f]{40}/(?P<sha256>[0-9a-f]{64})\.tar\.gz)"
)


class BatchSourceError(RunnerError):
    """The commit cannot be shipped, or the fetched archive is not the one shipped."""


@dataclass(frozen=True)
class Shipped:
    uri: str
    sha256: str
    size: int
    uploaded: bool  # False: the same archive was already there (a re-run)


def pack(repository: Path, commit: str) -> bytes:
    """The commit's tree as a gzipped tar, byte for byte the same on every call."""
    if not COMMIT.fullmatch(commit):
        raise BatchSourceError(
            f"commit: {commit!r} is not a full 40-hex commit SHA; pass the one GitHub gives (github.sha)"
        )
    try:
        tar = subprocess.run(
            ["git", "-C", str(repository), "archive", "--format=tar", commit],
            check=True, capture_output=True, timeout=300,
        ).stdout  # fmt: skip
    except subprocess.CalledProcessError as error:
        reason = error.stderr.decode(errors="replace").strip()
        raise BatchSourceError(
            f"commit: git archive of {commit} in {repository} failed ({reason}); check out the repository with "
            "that commit (actions/checkout with fetch-depth 0 or ref: the commit) before shipping"
        ) from None
    packed = gzip.compress(tar, mtime=0)
    if len(packed) > MAX_ARCHIVE_BYTES:
        raise BatchSourceError(
            f"commit: {commit} packs to {len(packed)} bytes, over {MAX_ARCHIVE_BYTES}: keep data and models out "
            "of git (the bucket's data/ and the MLflow artifacts are where they go)"
        )
    return packed


def ship(s3: Any, bucket: str, repository: Path, commit: str) -> Shipped:
    """Put the commit's archive under batch-src/ unless the same bytes are already there."""
    packed = pack(repository, commit)
    digest = hashlib.sha256(packed).hexdigest()
    key = f"{PREFIX}/{commit}/{digest}.tar.gz"
    uploaded = True
    try:
        # S3 checks the body against the checksum, and If-None-Match: * never replaces an object (S3 User Guide,
        # "Add preconditions to S3 operations with conditional requests": 412 PreconditionFailed when the key
        # exists).
        s3.put_object(Bucket=bucket, Key=key, Body=packed, IfNoneMatch="*", ChecksumAlgorithm="SHA256",
                      ContentType="application/gzip")  # fmt: skip
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "PreconditionFailed":
            raise
        uploaded = False  # what is there is checked by the fetch, byte for byte
    return Shipped(f"s3://{bucket}/{key}", digest, len(packed), uploaded)


def _parse(uri: str, sha256: str) -> tuple[str, str]:
    if not SHA256.fullmatch(sha256):
        raise BatchSourceError(f"sha256: {sha256!r} is not 64 lowercase hex digits; pass batch ship's output")
    match = URI.fullmatch(uri)
    if not match:
        raise BatchSourceError(
            f"source-uri: {uri!r} is not s3://<bucket>/{PREFIX}/<commit>/<sha256>.tar.gz; pass batch ship's output"
        )
    if match["sha256"] != sha256:
        raise BatchSourceError(f"sha256: {sha256} is not the hash the source-uri names ({match['sha256']})")
    return match["bucket"], match["key"]


def fetch(s3: Any, uri: str, sha256: str, dest: Path) -> list[str]:
    """Download, check and unpack the archive into the empty or new directory `dest`; returns the paths."""
    bucket, key = _parse(uri, sha256)
    if dest.exists() and any(dest.iterdir()):
        raise BatchSourceError(f"dest: {dest} is not empty; unpack into a new directory")
    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"]
        packed = body.read(MAX_ARCHIVE_BYTES + 1)
    except (ClientError, BotoCoreError) as error:
        raise BatchSourceError(
            f"source-uri: {uri} could not be read ({error}); the job role reads the bucket"
        ) from None
    if len(packed) > MAX_ARCHIVE_BYTES:
        raise BatchSourceError(
            f"source-uri: {uri} is over {MAX_ARCHIVE_BYTES} bytes: not an archive batch ship made"
        )
    found = hashlib.sha256(packed).hexdigest()
    if found != sha256:
        raise BatchSourceError(
            f"source-uri: {uri} hashes to {found}, not {sha256}: it was changed after it was shipped; nothing was "
            "unpacked. Someone who may write the bucket replaced it (its CloudTrail data events say who); a re-run "
            "ships the same bytes to the same key and cannot replace it: delete it with admin credentials (aws s3 "
            f"rm {uri}), then re-run the workflow"
        )
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(fileobj=io.BytesIO(packed), mode="r:gz") as archive:
            names = archive.getnames()
            archive.extractall(dest, filter="data")
    except (tarfile.TarError, OSError) as error:
        raise BatchSourceError(f"source-uri: {uri} could not be unpacked safely: {error}") from None
    return names


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m gpu_runner.batch.batch_source fetch|run ...`: the container's first command, before any settings exist
    (they are in the archive). `run` then replaces itself with COMMAND inside the unpacked tree (exec: the job's
    exit code and signals are the command's). The region is the job's AWS_DEFAULT_REGION, which the submitting
    job sets."""
    parser = argparse.ArgumentParser(prog="python -m gpu_runner.batch.batch_source")
    actions = parser.add_subparsers(dest="action", required=True)
    get = actions.add_parser("fetch", help="download, check and unpack the job's code")
    run = actions.add_parser("run", help="fetch, then exec COMMAND (after --) in the unpacked tree")
    for action in (get, run):
        action.add_argument("--source-uri", required=True)
        action.add_argument("--sha256", required=True)
        action.add_argument("--dest", type=Path, required=True)
    run.add_argument("command", nargs="+", metavar="COMMAND", help="after --: the argv to exec (no shell)")
    args = parser.parse_args(argv)
    import boto3

    try:
        names = fetch(boto3.client("s3"), args.source_uri, args.sha256, args.dest)
    except BatchSourceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"unpacked {len(names)} entries of {args.sha256[:12]} into {args.dest}", flush=True)
    if args.action == "run":
        os.chdir(args.dest)
        os.execvp(args.command[0], args.command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
