"""Batch prediction's engine (gpu_job.batch_predict) with a toy model and reader: Parquet shards with one row per
input in key order, an unreadable input as its row's reason, the rerun that does only the shards without output,
the manifest that refuses to mix two batches, and the summary over every shard. The project's tests run it with
its real exports and images."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import boto3
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpu_job import batch_io, batch_predict
from gpu_job.batch_predict import Model
from gpu_job.errors import PredictError

KEYS = [f"in/{index:02d}" for index in range(11)]


class ToyReader:
    """Each key's input: a 3-vector whose largest entry is its class (index % 3), or the reason it cannot be read."""

    def __init__(self, unreadable: Sequence[str] = ()) -> None:
        self.unreadable, self.reads = set(unreadable), 0

    def read(self, keys: Sequence[str]) -> Iterator[tuple[str, np.ndarray | Exception]]:
        for key in keys:
            self.reads += 1
            if key in self.unreadable:
                yield key, ValueError("not a readable image (truncated)")
            else:
                yield key, np.eye(3, dtype=np.float32)[int(key[-2:]) % 3] * 2 + 0.5


def toy_model(version: str = "1") -> Model:
    def softmax(inputs: np.ndarray) -> np.ndarray:
        exp = np.exp(inputs)
        return exp / exp.sum(axis=1, keepdims=True)

    return Model(softmax, (3,), ("a", "b", "c"), version)


def rows(out: Path) -> dict[str, list]:
    parts = sorted(out.glob("part-*.parquet"))
    return pa.concat_tables([pq.read_table(part) for part in parts]).to_pydict()


def run(out: Path | str, reader: ToyReader | None = None, model: Model | None = None, keys=KEYS, **options):
    options = {"shard_size": 4, "batch_size": 3, "progress": False, **options}
    sink = batch_io.sink_for(str(out))
    return batch_predict.run(model or toy_model(), reader or ToyReader(), keys, sink, "toy://in", **options)


def test_every_input_is_one_row_in_key_order_and_an_unreadable_one_keeps_its_reason(tmp_path: Path) -> None:
    summary = run(tmp_path, ToyReader(unreadable=["in/05"]), keys=list(reversed(KEYS)))

    assert sorted(p.name for p in tmp_path.glob("part-*")) == [batch_predict.part_name(i) for i in range(3)]
    table = rows(tmp_path)
    # Shards are cut from the listing as given (the caller sorts it); each shard's rows are in key order.
    assert table["key"][:4] == ["in/07", "in/08", "in/09", "in/10"] and len(table["key"]) == 11
    by_key = {key: index for index, key in enumerate(table["key"])}
    for key, index in by_key.items():
        if key == "in/05":
            assert (table["class"][index], table["error"][index]) == (
                None,
                "not a readable image (truncated)",
            )
            continue
        assert table["class"][index] == "abc"[int(key[-2:]) % 3] and table["error"][index] is None
        assert table["class_index"][index] == int(key[-2:]) % 3 and len(table["probabilities"][index]) == 3
        assert table["confidence"][index] == pytest.approx(max(table["probabilities"][index]))
    assert set(table["model_version"]) == {"1"}
    assert (summary.images, summary.predicted, summary.predicted_now, list(summary.skipped)) == (
        11,
        10,
        10,
        ["in/05"],
    )
    assert summary.class_counts == {"a": 4, "b": 4, "c": 2}  # in/00..in/10 by index % 3, in/05 (c) unread
    assert json.loads((tmp_path / batch_predict.SUMMARY).read_text()) == json.loads(
        json.dumps(summary.report())
    )
    figures = summary.figures()
    # Batches of at most 3 within a shard: 4 readable (3 + 1), 3 readable beside in/05 (3), 3 (3).
    assert len(summary.batch_ms) == 4
    assert (
        figures["batch_latency_ms_p95"] >= figures["batch_latency_ms_p50"] > 0
        and figures["images_per_second"] > 0
    )
    manifest = json.loads((tmp_path / batch_predict.MANIFEST).read_text())
    assert (manifest["input"], manifest["keys"], manifest["shard_size"], manifest["model"]) == (
        "toy://in",
        11,
        4,
        "1",
    )


def test_a_rerun_after_an_interruption_does_only_the_shards_without_output(tmp_path: Path) -> None:
    run(tmp_path)
    before = rows(tmp_path)
    # Stopped while it wrote shard 1: that shard is missing, half of it lies under a temporary name.
    (tmp_path / batch_predict.part_name(1)).unlink()
    (tmp_path / (batch_predict.part_name(1) + ".partial")).write_bytes(b"PAR1 half a shard")
    reader = ToyReader()

    again = run(tmp_path, reader)

    assert (again.shards_done_before, again.predicted_now, reader.reads) == (2, 4, 4)
    assert again.predicted == 11 and rows(tmp_path) == before


@pytest.mark.parametrize(
    ("changes", "differ"),
    [
        ({"model": toy_model("2")}, "model"),
        ({"shard_size": 5}, "shard_size"),
        ({"keys": KEYS[:-1]}, "keys, keys_sha256"),
        ({"keys": [*KEYS[:-1], "in/99"]}, "keys_sha256"),
    ],
)
def test_another_batch_on_the_same_output_is_refused_before_it_writes(
    tmp_path: Path, changes: dict, differ: str
) -> None:
    run(tmp_path)
    written = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    with pytest.raises(PredictError) as refused:
        run(tmp_path, **changes)
    assert str(refused.value) == (
        f"--output '{tmp_path}': it holds predictions of another batch ({differ} differ from this run's); use a "
        "new output, or rerun with the same input, shard size and model to finish it"
    )
    assert {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()} == written


@pytest.mark.parametrize("sizes", [{"shard_size": 0}, {"batch_size": 0}])
def test_sizes_below_one_are_refused_before_anything_is_written(tmp_path: Path, sizes: dict) -> None:
    with pytest.raises(PredictError, match="--shard-size and --batch-size must be at least 1"):
        run(tmp_path / "out", **sizes)
    assert not (tmp_path / "out").exists()


def test_the_shards_are_objects_on_s3(moto_endpoint: str) -> None:
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="batch-predict")
    summary = run("s3://batch-predict/predictions/toy/")
    listed = s3.list_objects_v2(Bucket="batch-predict", Prefix="predictions/toy/")["Contents"]
    names = sorted(item["Key"].rsplit("/", 1)[1] for item in listed)
    assert names == sorted(
        [batch_predict.MANIFEST, batch_predict.SUMMARY, *(batch_predict.part_name(i) for i in range(3))]
    )
    assert summary.predicted == 11 and run("s3://batch-predict/predictions/toy/").shards_done_before == 3
