"""Batch prediction's engine (a project's `predict`): a model over many inputs, written as Parquet shards, one row
per input.

The inputs' keys (listed once by the caller, sorted) are cut into shards of `shard_size`. Each shard's
predictions go to `part-<n>.parquet` under the output (a folder or an s3:// prefix: batch_io), written whole, so
a rerun after an interruption does only the shards without output. The manifest beside them pins the input
listing, the shard size and the model: a rerun with anything else is refused instead of mixing two batches. An
input the project's reader could not turn into the model's input is a row with its reason in `error` (and no
class), never the loss of its shard or of the batch. `_summary.json` holds the counts over every shard.

The project brings the model (`Model`: its predict function, input shape, class names and version) and the
reader that decodes its inputs (`Reader`); this module knows neither TensorFlow nor images.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from .batch_io import Sink
from .errors import PredictError

MANIFEST = "_manifest.json"
SUMMARY = "_summary.json"
SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("class", pa.string()),
        ("class_index", pa.int32()),
        ("confidence", pa.float32()),
        ("probabilities", pa.list_(pa.float32())),
        ("model_version", pa.string()),
        ("error", pa.string()),
    ]
)


@dataclass(frozen=True)
class Model:
    """A model and what labels its outputs: `predict` maps a batch of inputs of `input_shape` to class scores."""

    predict: Callable[[np.ndarray], np.ndarray]
    input_shape: tuple[int, ...]  # one input, e.g. (height, width, channels), read from the export itself
    class_names: tuple[str, ...]
    version: str


class Reader(Protocol):
    """The project's: each key's input as the model takes it, or an exception that is that input's reason."""

    def read(self, keys: Sequence[str]) -> Iterator[tuple[str, np.ndarray | Exception]]: ...


@dataclass
class Summary:
    images: int = 0
    predicted: int = 0
    skipped: dict[str, str] = field(default_factory=dict)  # key -> reason
    class_counts: dict[str, int] = field(default_factory=dict)
    mean_confidence: float = float("nan")
    shards: int = 0
    shards_done_before: int = 0
    predicted_now: int = 0  # by this run (a rerun skips the shards an earlier one wrote)
    batch_ms: list[float] = field(default_factory=list)
    seconds: float = 0.0

    def figures(self) -> dict[str, float]:
        """What the inference run logs: counts, throughput and the batch latency percentiles of this run."""
        latencies = sorted(self.batch_ms)
        figures = {
            "images": float(self.images),
            "predicted": float(self.predicted),
            "skipped": float(len(self.skipped)),
            "mean_confidence": self.mean_confidence,
            "shards": float(self.shards),
            "shards_done_before": float(self.shards_done_before),
        }
        if latencies:
            quantiles = (
                statistics.quantiles(latencies, n=100, method="inclusive") if len(latencies) > 1 else None
            )
            figures["batch_latency_ms_p50"] = quantiles[49] if quantiles else latencies[0]
            figures["batch_latency_ms_p95"] = quantiles[94] if quantiles else latencies[0]
        if self.seconds > 0:
            figures["images_per_second"] = self.predicted_now / self.seconds
        return figures

    def report(self) -> dict[str, object]:
        """The batch's `_summary.json`: over every shard, also those an earlier run wrote."""
        return {
            "images": self.images,
            "predicted": self.predicted,
            "class_counts": self.class_counts,
            "mean_confidence": self.mean_confidence,
            "skipped": self.skipped,
        }


def shards_of(keys: Sequence[str], shard_size: int) -> list[list[str]]:
    return [list(keys[start : start + shard_size]) for start in range(0, len(keys), shard_size)]


def part_name(index: int) -> str:
    return f"part-{index:05d}.parquet"


def _manifest(keys: Sequence[str], shard_size: int, model: Model, source: str) -> dict[str, object]:
    digest = hashlib.sha256("\n".join(keys).encode()).hexdigest()
    return {
        "input": source,
        "keys": len(keys),
        "keys_sha256": digest,
        "shard_size": shard_size,
        "model": model.version,
    }


def _check_manifest(sink: Sink, wanted: dict[str, object]) -> None:
    """First run: write the manifest. A rerun: the same inputs, shard size and model, or a clear refusal."""
    if sink.create(MANIFEST, json.dumps(wanted, indent=2).encode()):
        return
    found = json.loads(sink.read(MANIFEST) or b"{}")
    changed = sorted(k for k in wanted if found.get(k) != wanted[k])
    if changed:
        raise PredictError(
            f"--output '{sink.uri}': it holds predictions of another batch ({', '.join(changed)} differ from "
            "this run's); use a new output, or rerun with the same input, shard size and model to finish it"
        )


def _batches(
    items: Sequence[tuple[str, np.ndarray]], size: int
) -> Iterator[Sequence[tuple[str, np.ndarray]]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _predict_shard(
    model: Model, reader: Reader, keys: list[str], batch_size: int, summary: Summary
) -> pa.Table:
    rows: dict[str, list] = {name: [] for name in SCHEMA.names}
    good: list[tuple[str, np.ndarray]] = []
    for key, item in reader.read(keys):
        if isinstance(item, Exception):
            for name, value in zip(
                SCHEMA.names, (key, None, None, None, None, model.version, str(item)), strict=True
            ):
                rows[name].append(value)
        else:
            good.append((key, item))
    for batch in _batches(good, batch_size):
        inputs = np.stack([item for _, item in batch])
        started = time.perf_counter()
        scores = np.asarray(model.predict(inputs), dtype=np.float32)
        summary.batch_ms.append((time.perf_counter() - started) * 1000)
        summary.predicted_now += len(batch)
        for (key, _), probabilities in zip(batch, scores, strict=True):
            index = int(np.argmax(probabilities))
            values = (key, model.class_names[index], index, float(probabilities[index]), probabilities.tolist(),
                      model.version, None)  # fmt: skip
            for name, value in zip(SCHEMA.names, values, strict=True):
                rows[name].append(value)
    order = np.argsort(rows["key"], kind="stable")  # the shard's rows in key order, skipped ones in place
    return pa.table({name: [rows[name][i] for i in order] for name in SCHEMA.names}, schema=SCHEMA)


def run(
    model: Model,
    reader: Reader,
    keys: Sequence[str],
    sink: Sink,
    source: str,
    shard_size: int = 512,
    batch_size: int = 256,
    progress: bool | None = True,
) -> Summary:
    """Predict every key (read by `reader`) into Parquet shards in `sink`; shards already there are kept.
    `source` names the input in the manifest. `progress` None: a bar on a terminal only, not in a workflow's log
    (tqdm's disable=None)."""
    if shard_size < 1 or batch_size < 1:
        raise PredictError("--shard-size and --batch-size must be at least 1")
    sink.probe()
    _check_manifest(sink, _manifest(keys, shard_size, model, source))
    shards = shards_of(keys, shard_size)
    summary = Summary(images=len(keys), shards=len(shards))
    started = time.perf_counter()
    for index, shard in enumerate(
        tqdm(shards, desc="shards", unit="shard", disable=None if progress is None else not progress)
    ):
        if sink.exists(part_name(index)):
            summary.shards_done_before += 1
            continue
        table = _predict_shard(model, reader, shard, batch_size, summary)
        body = pa.BufferOutputStream()
        pq.write_table(table, body)
        sink.write(part_name(index), body.getvalue().to_pybytes())
    summary.seconds = time.perf_counter() - started
    _summarise(sink, len(shards), summary)
    return summary


def _summarise(sink: Sink, shards: int, summary: Summary) -> None:
    """Counts over every shard of the batch (also those an earlier run wrote), into the summary file."""
    tables = [
        pq.read_table(pa.BufferReader(sink.read(part_name(i)) or b""), schema=SCHEMA) for i in range(shards)
    ]
    rows = pa.concat_tables(tables).to_pydict()
    classes = [c for c in rows["class"] if c is not None]
    confidences = [c for c in rows["confidence"] if c is not None]
    summary.predicted = len(classes)
    summary.skipped = {k: e for k, e in zip(rows["key"], rows["error"], strict=True) if e is not None}
    summary.class_counts = dict(sorted(Counter(classes).items()))
    summary.mean_confidence = float(np.mean(confidences)) if confidences else float("nan")
    sink.write(SUMMARY, json.dumps(summary.report(), indent=2).encode())
