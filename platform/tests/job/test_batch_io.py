"""A batch job's inputs and outputs (gpu_job.batch_io) on a folder and on S3 (the moto server, spoken to over
HTTP by boto3): the paginated listing of only the inputs under the prefix, parallel reads where one missing or
oversized object is that input's reason, whole writes, the create-once manifest, and S3's refusals turned into
messages that name the option and the fix. A project's predict runs on them (its own tests run a batch)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from gpu_job import batch_io
from gpu_job.errors import PredictError

SUFFIXES = {".png", ".jpg"}


@pytest.fixture
def bucket(moto_endpoint: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """17 inputs under in/ (a/00.png .. b/15.png and a/16.jpg), a text file and a folder marker that are not
    inputs, and an input outside the prefix."""
    s3 = boto3.client("s3")
    # Bucket names: 3-63 of a-z, 0-9, . and - (Amazon S3 User Guide, "General purpose bucket naming rules").
    name = ("batch-io-" + re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()))[:63].strip("-")
    s3.create_bucket(Bucket=name)
    for index in range(16):
        s3.put_object(
            Bucket=name, Key=f"in/{'a' if index < 8 else 'b'}/{index:02d}.png", Body=bytes([index]) * 10
        )
    s3.put_object(Bucket=name, Key="in/a/16.JPG", Body=b"upper-case suffix")
    s3.put_object(Bucket=name, Key="in/notes.txt", Body=b"not an input")
    s3.put_object(Bucket=name, Key="in/b/", Body=b"")  # the console's "folder"
    s3.put_object(Bucket=name, Key="elsewhere/00.png", Body=b"")
    yield name
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
        for item in page.get("Contents", []):
            s3.delete_object(Bucket=name, Key=item["Key"])
    s3.delete_bucket(Bucket=name)


def test_the_listing_follows_every_page_and_keeps_only_inputs_under_the_prefix(bucket: str) -> None:
    client = batch_io.s3_client()
    calls: list[str] = []
    client.meta.events.register("before-call.s3.ListObjectsV2", lambda **kw: calls.append(kw["model"].name))

    keys = batch_io.S3Source(f"s3://{bucket}/in", SUFFIXES, client=client, page_size=7).keys()

    # 20 objects under in/ (17 inputs, the text file, the folder marker): three pages of at most 7.
    assert calls == ["ListObjectsV2"] * 3
    assert len(keys) == 17 and keys == sorted(keys)
    assert keys[:2] == ["a/00.png", "a/01.png"] and "a/16.JPG" in keys and "notes.txt" not in keys


def test_reads_come_back_in_order_and_a_missing_or_oversized_object_is_its_own_reason(
    bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The limit lowered below a 4 KiB object, as 64 MiB would be for a video named .png: never read.
    monkeypatch.setattr(batch_io, "MAX_IMAGE_BYTES", 4096)
    s3 = boto3.client("s3")
    s3.put_object(Bucket=bucket, Key="in/b/huge.png", Body=b"\0" * 5000)
    source = batch_io.S3Source(f"s3://{bucket}/in/", SUFFIXES)
    keys = source.keys()
    s3.delete_object(Bucket=bucket, Key="in/b/09.png")  # removed after the listing

    read = dict(source.read_many(keys))

    assert list(read) == keys
    assert read["a/03.png"] == bytes([3]) * 10
    assert "NoSuchKey" in str(read["b/09.png"])
    assert isinstance(read["b/huge.png"], batch_io.ImageTooLarge)
    assert str(read["b/huge.png"]) == "5000 bytes, over the 4096 bytes an input may have; not read"


def test_a_folder_lists_reads_and_writes_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batch_io, "MAX_IMAGE_BYTES", 4)
    (tmp_path / "in" / "x").mkdir(parents=True)
    (tmp_path / "in" / "x" / "1.png").write_bytes(b"one")
    (tmp_path / "in" / "2.jpg").write_bytes(b"big one")
    (tmp_path / "in" / "readme.md").write_text("not an input")
    source = batch_io.source_for(str(tmp_path / "in"), SUFFIXES)
    assert source.keys() == ["2.jpg", "x/1.png"]
    read = dict(source.read_many(["x/1.png", "2.jpg", "gone.png"]))
    assert read["x/1.png"] == b"one"
    assert isinstance(read["2.jpg"], batch_io.ImageTooLarge) and isinstance(
        read["gone.png"], FileNotFoundError
    )

    sink = batch_io.sink_for(str(tmp_path / "out" / "deep"))
    sink.probe()  # makes the folder, leaves nothing in it
    assert list((tmp_path / "out" / "deep").iterdir()) == []
    sink.write("part-00000.parquet", b"rows")
    assert (sink.exists("part-00000.parquet"), sink.read("part-00000.parquet"), sink.read("absent")) == (
        True,
        b"rows",
        None,
    )
    assert [p.name for p in (tmp_path / "out" / "deep").iterdir()] == [
        "part-00000.parquet"
    ]  # no .partial left
    assert sink.create("_manifest.json", b"{}") is True
    assert sink.create("_manifest.json", b'{"model": "other"}') is False
    assert sink.read("_manifest.json") == b"{}"


def test_s3_writes_are_whole_and_the_manifest_is_created_once(bucket: str) -> None:
    sink = batch_io.sink_for(f"s3://{bucket}/predictions/race/")
    sink.probe()
    assert batch_io.PROBE not in [
        o["Key"] for o in boto3.client("s3").list_objects_v2(Bucket=bucket).get("Contents", [])
    ]
    assert (sink.exists("part-00000.parquet"), sink.read("part-00000.parquet")) == (False, None)
    sink.write("part-00000.parquet", b"rows")
    assert (sink.exists("part-00000.parquet"), sink.read("part-00000.parquet")) == (True, b"rows")
    # Two runs started at once on one output: the conditional put (If-None-Match: *) lets only the first write.
    assert sink.create("_manifest.json", b"{}") is True
    assert sink.create("_manifest.json", b'{"model": "other"}') is False
    assert sink.read("_manifest.json") == b"{}"


@pytest.mark.parametrize(
    ("source", "out", "message"),
    [
        (
            "s3://{bucket}/nothing/",
            "s3://{bucket}/predictions/x/",
            r"--input 's3://.*/nothing/': no images \(.jpg, .png\)",
        ),
        ("s3:///in/", "s3://{bucket}/predictions/x/", r"--input 's3:///in/': no bucket; use s3://<bucket>/"),
        (
            "s3://no-such-bucket-9/in/",
            "s3://{bucket}/p/",
            r"--input .*: the bucket does not exist; check the",
        ),
        ("{tmp}/no-such-folder", "s3://{bucket}/p/", r"--input '.*no-such-folder': folder does not exist"),
        (
            "s3://{bucket}/in/",
            "s3://{bucket}",
            r"--output 's3://.*': no prefix; use s3://<bucket>/predictions/",
        ),
        ("s3://{bucket}/in/", "s3://no-such-bucket-9/p/", r"--output .*: the bucket does not exist"),
    ],
)
def test_bad_input_or_output_names_the_option_and_the_fix(
    bucket: str, tmp_path: Path, source: str, out: str, message: str
) -> None:
    with pytest.raises(PredictError, match=message):
        batch_io.list_keys(source.format(bucket=bucket, tmp=tmp_path), SUFFIXES)
        batch_io.check_writable(out.format(bucket=bucket))


def test_an_unwritable_folder_is_named_before_anything_runs(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("a file, not a folder")
    with pytest.raises(
        PredictError, match=r"--output '.*file/out': cannot be written \(.*\); choose a writable"
    ):
        batch_io.check_writable(str(tmp_path / "file" / "out"))


def test_an_output_the_role_may_not_write_is_named(bucket: str) -> None:
    """moto does not enforce IAM, so S3's answer to a role without s3:PutObject there is stubbed: botocore's
    Stubber checks the call against the S3 service model and returns the AccessDenied error S3 sends."""
    client = boto3.client("s3")
    with Stubber(client) as stub:
        stub.add_client_error("put_object", "AccessDenied", "Access Denied", 403)
        with pytest.raises(PredictError, match=r"access denied \(AccessDenied\); the role may .* write"):
            batch_io.S3Sink(f"s3://{bucket}/checkpoints/", client=client).probe()
