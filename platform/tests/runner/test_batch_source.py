"""The code of a Batch job (gpu_runner.batch.batch_source): the submitting job ships the commit to the
moto server's S3, the container fetches, checks and unpacks it. The attacks: an archive replaced or planted in the
bucket by code inside another job, and an archive whose entries leave their directory."""

from __future__ import annotations

import hashlib
import io
import sys
import tarfile
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest

from gpu_runner.batch import batch_source
from gpu_runner.batch.batch_source import BatchSourceError
from gpu_runner_testing.aws_constants import REGION
from gpu_runner_testing.batch_world import job_credentials
from gpu_runner_testing.git_repository import FILES, committed_repository, git


@pytest.fixture
def s3(moto_endpoint: str) -> Any:
    return boto3.Session(region_name=REGION).client("s3")


@pytest.fixture
def bucket(s3: Any) -> str:
    name = f"batch-src-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture
def repository(tmp_path: Path) -> tuple[Path, str]:
    return committed_repository(tmp_path / "repo")


def unpacked(dest: Path) -> dict[str, str]:
    return {p.relative_to(dest).as_posix(): p.read_text() for p in dest.rglob("*") if p.is_file()}


def test_the_commit_is_shipped_fetched_and_unpacked_as_committed(
    s3: Any, bucket: str, repository: tuple[Path, str], tmp_path: Path
) -> None:
    repo, commit = repository
    (repo / "uncommitted.txt").write_text("not in the commit")  # the work tree is not what ships

    shipped = batch_source.ship(s3, bucket, repo, commit)

    assert shipped.uploaded and shipped.uri == f"s3://{bucket}/batch-src/{commit}/{shipped.sha256}.tar.gz"
    body = s3.get_object(Bucket=bucket, Key=shipped.uri.split("/", 3)[3])["Body"].read()
    assert hashlib.sha256(body).hexdigest() == shipped.sha256 and len(body) == shipped.size
    dest = tmp_path / "job"
    batch_source.fetch(s3, shipped.uri, shipped.sha256, dest)
    assert unpacked(dest) == FILES
    assert (dest / "scripts/run.sh").stat().st_mode & 0o100  # still executable


def test_a_rerun_finds_the_same_archive_and_replaces_nothing(
    s3: Any, bucket: str, repository: tuple[Path, str]
) -> None:
    repo, commit = repository
    first = batch_source.ship(s3, bucket, repo, commit)
    again = batch_source.ship(s3, bucket, repo, commit)
    assert (again.uri, again.sha256, again.uploaded) == (first.uri, first.sha256, False)
    assert batch_source.pack(repo, commit) == batch_source.pack(repo, commit)


def test_an_archive_changed_after_shipping_is_refused_before_anything_is_unpacked(
    s3: Any, bucket: str, repository: tuple[Path, str], tmp_path: Path
) -> None:
    """Code inside another job (the runner role may write the bucket) replaces the archive between ship and fetch."""
    repo, commit = repository
    shipped = batch_source.ship(s3, bucket, repo, commit)
    git(repo, "commit", "-q", "--allow-empty", "-m", "other")
    evil = batch_source.pack(repo, git(repo, "rev-parse", "HEAD"))
    s3.put_object(
        Bucket=bucket, Key=shipped.uri.split("/", 3)[3], Body=evil + b"\n"
    )  # unconditional: replaced

    dest = tmp_path / "job"
    with pytest.raises(BatchSourceError, match=r"hashes to [0-9a-f]{64}, not .*changed after it was shipped"):
        batch_source.fetch(s3, shipped.uri, shipped.sha256, dest)
    assert not dest.exists()
    assert batch_source.main(["fetch", "--source-uri", shipped.uri, "--sha256", shipped.sha256,
                              "--dest", str(dest)]) == 1  # fmt: skip


def _hostile_archive() -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as archive:
        for name, kind in (("ok.txt", tarfile.REGTYPE), ("../escaped.txt", tarfile.REGTYPE),
                           ("link", tarfile.SYMTYPE)):  # fmt: skip
            member = tarfile.TarInfo(name)
            member.type = kind
            if kind == tarfile.SYMTYPE:
                member.linkname = "/etc/passwd"
                archive.addfile(member)
            else:
                member.size = 3
                archive.addfile(member, io.BytesIO(b"x\n\n"))
    return raw.getvalue()


def test_an_archive_that_would_write_outside_its_directory_is_refused(
    s3: Any, bucket: str, tmp_path: Path
) -> None:
    """Planted with the hash the fetch is given: the data filter still refuses `..` and links leaving the tree."""
    hostile = _hostile_archive()
    digest = hashlib.sha256(hostile).hexdigest()
    key = f"batch-src/{'a' * 40}/{digest}.tar.gz"
    s3.put_object(Bucket=bucket, Key=key, Body=hostile)
    dest = tmp_path / "deep" / "job"

    with pytest.raises(BatchSourceError, match="could not be unpacked safely"):
        batch_source.fetch(s3, f"s3://{bucket}/{key}", digest, dest)
    assert not (tmp_path / "deep" / "escaped.txt").exists()


@pytest.mark.parametrize(
    ("uri", "sha256", "message"),
    [
        ("s3://b-ucket/batch-src/" + "a" * 40 + "/" + "b" * 64 + ".tar.gz", "B" * 64, "sha256: 'BBB"),
        (
            "s3://b-ucket/batch-src/" + "a" * 40 + "/" + "b" * 64 + ".tar.gz",
            "c" * 64,
            "not the hash the source-uri",
        ),
        ("s3://b-ucket/data/train.npz", "b" * 64, r"source-uri: .* is not s3://<bucket>/batch-src/"),
        ("https://b-ucket.s3.amazonaws.com/batch-src/x", "b" * 64, "source-uri"),
    ],
)
def test_a_bad_fetch_request_names_the_field(uri: str, sha256: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(BatchSourceError, match=message):
        batch_source.fetch(None, uri, sha256, tmp_path / "job")  # refused before any S3 call


def test_a_fetch_into_a_used_directory_is_refused(s3: Any, bucket: str, repository: tuple[Path, str],
                                                  tmp_path: Path) -> None:  # fmt: skip
    shipped = batch_source.ship(s3, bucket, *repository)
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "mine.txt").write_text("kept")
    with pytest.raises(BatchSourceError, match="is not empty"):
        batch_source.fetch(s3, shipped.uri, shipped.sha256, tmp_path / "job")
    assert unpacked(tmp_path / "job") == {"mine.txt": "kept"}


@pytest.mark.parametrize(
    ("commit", "message"),
    [("abc123", "not a full 40-hex commit SHA"), ("f" * 40, r"git archive of f{40} .* failed")],
)
def test_a_commit_that_cannot_be_packed_is_named(
    repository: tuple[Path, str], commit: str, message: str
) -> None:
    with pytest.raises(BatchSourceError, match=message):
        batch_source.pack(repository[0], commit)


# ------------------------------------------------------------------------------------- as the container runs it
@pytest.fixture
def on_batch_host(batch_world: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """S3, Batch and Logs clients of the batch host (gpu_runner_testing/batch_host.py), a bucket there, and the job
    environment standing in for the job role's credentials (a container gets them from ECS, not from its env)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", batch_world)
    clients = {name: boto3.client(name, region_name=REGION) for name in ("s3", "batch", "logs")}
    bucket = f"batch-src-{uuid.uuid4().hex[:12]}"
    clients["s3"].create_bucket(Bucket=bucket)
    return {**clients, "bucket": bucket, "env": job_credentials(batch_world)}


def _run_shipped(host: dict[str, Any], shipped: batch_source.Shipped) -> tuple[Any, list[str]]:
    """A Batch job whose command is the fetch-and-run entry, then the shipped tree's own script."""
    from gpu_runner.batch import batch_jobs, batch_wait

    command = (sys.executable, "-m", "gpu_runner.batch.batch_source", "run", "--source-uri", shipped.uri,
               "--sha256", shipped.sha256, "--dest", "code", "--", "bash", "scripts/run.sh")  # fmt: skip
    request = batch_jobs.JobRequest(name="shipped", queue="gpu", definition="train", command=command,
                                    environment=host["env"])  # fmt: skip
    submitted = batch_jobs.submit(host["batch"], request)
    lines: list[str] = []
    outcome = batch_wait.wait(host["batch"], host["logs"], submitted.job_id, poll_seconds=0.2,
                              timeout_seconds=120, emit=lines.append)  # fmt: skip
    return outcome, lines


def test_a_batch_job_runs_the_shipped_commit(
    on_batch_host: dict[str, Any], repository: tuple[Path, str]
) -> None:
    shipped = batch_source.ship(on_batch_host["s3"], on_batch_host["bucket"], *repository)

    outcome, lines = _run_shipped(on_batch_host, shipped)

    assert (outcome.status, outcome.exit_code) == ("SUCCEEDED", 0), lines
    assert any(line.startswith("[job] unpacked ") and shipped.sha256[:12] in line for line in lines), lines
    assert "[job] run" in lines  # scripts/run.sh of the commit, run inside the unpacked tree


def test_a_batch_job_refuses_an_archive_replaced_before_it_started(
    on_batch_host: dict[str, Any], repository: tuple[Path, str]
) -> None:
    s3, bucket = on_batch_host["s3"], on_batch_host["bucket"]
    shipped = batch_source.ship(s3, bucket, *repository)
    replaced = io.BytesIO()
    with tarfile.open(fileobj=replaced, mode="w:gz") as archive:
        member = tarfile.TarInfo("scripts/run.sh")
        payload = b"echo pwned\n"
        member.size = len(payload)
        archive.addfile(member, io.BytesIO(payload))
    s3.put_object(Bucket=bucket, Key=shipped.uri.split("/", 3)[3], Body=replaced.getvalue())

    outcome, lines = _run_shipped(on_batch_host, shipped)

    assert outcome.status == "FAILED" and outcome.exit_code != 0
    assert any("changed after it was shipped; nothing was unpacked" in line for line in lines), lines
    assert "[job] pwned" not in lines
