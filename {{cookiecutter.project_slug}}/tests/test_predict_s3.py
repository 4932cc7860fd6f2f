"""Batch prediction from and to S3 (the moto server, spoken to over HTTP by boto3): the Parquet shards as objects,
the rerun after an interruption, another batch refused on the same output, and inputs that vanish or are too
large as their own rows. The S3 listing, reads, writes and refusals themselves are the platform's
(gpu_job.batch_io, tested there)."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path

import boto3
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from gpu_job import batch_io, batch_predict
from PIL import Image

from {{ cookiecutter.package_name }} import predict
from {{ cookiecutter.package_name }}.config import Config
from {{ cookiecutter.package_name }}.data import list_inputs, load_digits_images
from {{ cookiecutter.package_name }}.errors import PredictError

IMAGES = 17


@pytest.fixture
def bucket(moto_endpoint: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh bucket with 17 digit PNGs under in/ (16 good, in/a/broken.png not an image), a text file and a
    folder marker that are not inputs, and an image outside the prefix."""
    s3 = boto3.client("s3")
    # Bucket names: 3-63 of a-z, 0-9, . and - (Amazon S3 User Guide, "General purpose bucket naming rules").
    name = ("predict-" + re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()))[:63].strip("-")
    s3.create_bucket(Bucket=name)
    images, _, _ = load_digits_images(Config().data)
    for index in range(IMAGES - 1):
        body = io.BytesIO()
        Image.fromarray((images[index, :, :, 0] * 255).astype(np.uint8)).save(body, format="PNG")
        s3.put_object(
            Bucket=name, Key=f"in/{'a' if index < 8 else 'b'}/{index:02d}.png", Body=body.getvalue()
        )
    s3.put_object(Bucket=name, Key="in/a/broken.png", Body=b"\x89PNG half an upload")
    s3.put_object(Bucket=name, Key="in/notes.txt", Body=b"not an input")
    s3.put_object(Bucket=name, Key="in/b/", Body=b"")  # the console's "folder"
    s3.put_object(Bucket=name, Key="elsewhere/00.png", Body=b"")
    yield name
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
        for item in page.get("Contents", []):
            s3.delete_object(Bucket=name, Key=item["Key"])
    s3.delete_bucket(Bucket=name)


def test_a_batch_from_s3_to_s3_survives_an_interruption_and_an_unreadable_image(
    bucket: str, exports: Path
) -> None:
    source, out = f"s3://{bucket}/in/", f"s3://{bucket}/predictions/first/"
    model = predict.load_model(exports / "model_int8.tflite", version="5")

    first = predict.run(model, source, out, shard_size=6, progress=False)

    assert (first.images, first.predicted, first.shards) == (IMAGES, IMAGES - 1, 3)
    assert list(first.skipped) == ["a/broken.png"] and "not a readable image" in first.skipped["a/broken.png"]
    rows = _rows(bucket, "predictions/first/")
    assert len(rows["key"]) == IMAGES and set(rows["model_version"]) == {"5"}
    broken = rows["key"].index("a/broken.png")
    assert rows["class"][broken] is None and rows["error"][broken] == first.skipped["a/broken.png"]
    written = _objects(bucket, "predictions/first/")
    assert batch_io.PROBE not in written and {batch_predict.MANIFEST, batch_predict.SUMMARY} <= set(written)

    # The runner was lost after shard 1's predictions were made but before it was written: a rerun does only it.
    boto3.client("s3").delete_object(Bucket=bucket, Key=f"predictions/first/{batch_predict.part_name(1)}")
    again = predict.run(model, source, out, shard_size=6, progress=False)

    assert (again.shards_done_before, again.predicted_now) == (
        2,
        5,
    )  # shard 1 holds a/broken.png and 5 images
    assert again.predicted == IMAGES - 1 and list(again.skipped) == ["a/broken.png"]
    assert _rows(bucket, "predictions/first/") == rows


def test_another_batch_on_the_same_output_is_refused_and_the_manifest_is_written_once(
    bucket: str, exports: Path
) -> None:
    source, out = f"s3://{bucket}/in/", f"s3://{bucket}/predictions/once/"
    predict.run(predict.load_model(exports / "saved_model", "1"), source, out, shard_size=6, progress=False)

    with pytest.raises(PredictError, match=r"another batch \(model, shard_size differ"):
        predict.run(
            predict.load_model(exports / "saved_model", "2"), source, out, shard_size=5, progress=False
        )

    assert sorted(_objects(bucket, "predictions/once/")) == sorted(
        [batch_predict.MANIFEST, batch_predict.SUMMARY, *(batch_predict.part_name(i) for i in range(3))]
    )


def test_an_image_removed_after_the_listing_is_its_own_row_not_the_batch(bucket: str, exports: Path) -> None:
    source = f"s3://{bucket}/in/"
    listed = list_inputs(source)
    boto3.client("s3").delete_object(Bucket=bucket, Key="in/b/09.png")

    summary = predict.run(
        predict.load_model(exports / "model_int8.tflite"),
        source,
        f"s3://{bucket}/predictions/gone/",
        shard_size=100,
        progress=False,
        keys=listed,
    )

    assert summary.predicted == IMAGES - 2
    assert "NoSuchKey" in summary.skipped["b/09.png"] and "could not be read" in summary.skipped["b/09.png"]


def test_an_object_too_large_to_be_an_image_is_skipped_unread(
    bucket: str, exports: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The limit lowered below a 4 KiB object (the digits' PNGs are a few hundred bytes), as 64 MiB would be for a
    # video named .png: the batch goes on without reading it.
    monkeypatch.setattr(batch_io, "MAX_IMAGE_BYTES", 4096)
    boto3.client("s3").put_object(Bucket=bucket, Key="in/b/huge.png", Body=b"\0" * 5000)

    summary = predict.run(
        predict.load_model(exports / "model_int8.tflite"),
        f"s3://{bucket}/in/",
        f"s3://{bucket}/predictions/huge/",
        shard_size=100,
        progress=False,
    )

    assert summary.predicted == IMAGES - 1 and set(summary.skipped) == {"a/broken.png", "b/huge.png"}
    assert (
        "ImageTooLarge: 5000 bytes, over the 4096 bytes an input may have; not read"
        in summary.skipped["b/huge.png"]
    )


def _objects(bucket: str, prefix: str) -> list[str]:
    listed = boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    return [item["Key"][len(prefix) :] for item in listed]


def _rows(bucket: str, prefix: str) -> dict[str, list]:
    s3 = boto3.client("s3")
    parts = sorted(name for name in _objects(bucket, prefix) if name.startswith("part-"))
    tables = [
        pq.read_table(pa.BufferReader(s3.get_object(Bucket=bucket, Key=prefix + name)["Body"].read()))
        for name in parts
    ]
    return pa.concat_tables(tables).to_pydict()
