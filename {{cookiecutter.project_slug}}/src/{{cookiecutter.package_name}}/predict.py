"""Batch prediction: an exported model over many images, written as Parquet shards, one row per input.

The inputs (the embedded digits, an image folder, an s3:// prefix; data.list_inputs, gpu_job.batch_io) are listed once, sorted by key,
and cut into shards of `shard_size`. Each shard's predictions go to `part-<n>.parquet` under the output (a folder
or an s3:// prefix), written whole, so a rerun after an interruption does only the shards without output. The
manifest beside them pins the input listing, the shard size and the model: a rerun with anything else is
refused instead of mixing two batches. An unreadable image is a row with its reason in `error` (and no class),
never the loss of its shard or of the batch.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from gpu_job import batch_io
from tqdm import tqdm

from . import export
from .config import DataConfig
from .data import DIGITS, IMAGE_SUFFIXES, UNREADABLE_IMAGE, decode_image, list_inputs, load_digits_images
from .errors import DataError, PredictError

MANIFEST = "_manifest.json"
SUMMARY = "_summary.json"
CLASS_NAMES = export.CLASS_NAMES_FILE
# Pillow names the file object it could not read, `<_io.BytesIO object at 0x7f...>`: an address that differs per
# run, so a rerun's reason would differ from the first run's for the same bytes.
_OBJECT_REPR = re.compile(r"<[\w.]+ object at 0x[0-9a-f]+>")
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
    """An export and what labels its outputs: `predict` maps float images of `input_shape` to class scores."""

    predict: Callable[[np.ndarray], np.ndarray]
    input_shape: tuple[int, ...]  # one image: (height, width, channels), read from the export itself
    class_names: tuple[str, ...]
    version: str


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


def check_model_files(path: Path) -> None:
    """What load_model needs on disk, checked without loading TensorFlow's model (the workflow's CPU job)."""
    if not path.exists():
        raise PredictError(
            f"--model '{path}': no such file or folder (a SavedModel folder, a .tflite file, or a registry "
            "alias or version such as champion, 3 or models:/<name>@<alias>)"
        )
    if not (path.parent / CLASS_NAMES).is_file():
        raise PredictError(
            f"--model '{path}': no {CLASS_NAMES} beside it; use the folder train exported (outputs/ or the run's "
            "exports/), which holds it"
        )
    if path.is_dir() and not (path / "saved_model.pb").is_file():
        raise PredictError(f"--model '{path}': a folder without saved_model.pb is not a SavedModel")
    if path.is_file() and path.suffix != ".tflite":
        raise PredictError(f"--model '{path}': expected a SavedModel folder or a .tflite file")


def load_model(path: Path, version: str | None = None) -> Model:
    """A SavedModel folder or a .tflite file from train's exports, labelled by the class_names.json train
    writes beside them (the training data's class folder names; digits: 0-9). Without a registry `version`,
    the model is named by its files' digest, so a rerun with another export is told apart."""
    check_model_files(path)
    class_names = tuple(json.loads((path.parent / CLASS_NAMES).read_text(encoding="utf-8")))
    version = version or f"sha256:{_digest(path)[:16]}"
    if path.is_dir():
        saved = export.SavedModelPredictor(path)
        return Model(saved, saved.input_shape, class_names, version)
    lite = export.TFLitePredictor(path)
    return Model(lite, lite.input_shape, class_names, version)


def _digest(path: Path) -> str:
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.relative_to(path.parent).as_posix().encode() + b"\0")
        with file.open("rb") as body:
            for block in iter(lambda body=body: body.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


# ---------------------------------------------------------------------- inputs
class ImageReader:
    """Reads a shard's inputs by key as the model's input: resized to its height and width, in its channels;
    an input that cannot be read or decoded is its reason instead (a DataError)."""

    def __init__(self, source: str, input_shape: tuple[int, ...]) -> None:
        height, width, channels = input_shape
        if channels not in (1, 3):
            raise PredictError(f"--model: an input of {channels} channels is not an image model's (1 or 3)")
        self.cfg = DataConfig(image_size=(height, width), channels=channels)
        self._files = None if source == DIGITS else batch_io.source_for(source, IMAGE_SUFFIXES)
        self._digits = load_digits_images(self.cfg)[0] if self._files is None else None

    def read(self, keys: Sequence[str]) -> Iterator[tuple[str, np.ndarray | DataError]]:
        if self._files is None:
            yield from ((key, self._digits[int(key.rsplit("/", 1)[1])]) for key in keys)  # type: ignore[index]
            return
        for key, body in self._files.read_many(keys):
            yield key, self._decode(body)

    def _decode(self, body: bytes | Exception) -> np.ndarray | DataError:
        if isinstance(body, Exception):
            return DataError(f"could not be read ({type(body).__name__}: {body})"[:300])
        try:
            array = decode_image(io.BytesIO(body), self.cfg.image_size, self.cfg.channels)
        except UNREADABLE_IMAGE as error:
            reason = _OBJECT_REPR.sub("the object", str(error))
            return DataError(f"not a readable image ({type(error).__name__}: {reason})"[:300])
        return array[..., np.newaxis] if array.ndim == 2 else array


# ---------------------------------------------------------------------- shards and output
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


def _check_manifest(sink: batch_io.Sink, wanted: dict[str, object]) -> None:
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
    model: Model, reader: ImageReader, keys: list[str], batch_size: int, summary: Summary
) -> pa.Table:
    rows: dict[str, list] = {name: [] for name in SCHEMA.names}
    good: list[tuple[str, np.ndarray]] = []
    for key, image in reader.read(keys):
        if isinstance(image, DataError):
            for name, value in zip(
                SCHEMA.names, (key, None, None, None, None, model.version, str(image)), strict=True
            ):
                rows[name].append(value)
        else:
            good.append((key, image))
    for batch in _batches(good, batch_size):
        images = np.stack([image for _, image in batch])
        started = time.perf_counter()
        scores = np.asarray(model.predict(images), dtype=np.float32)
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
    source: str,
    out: str | Path,
    shard_size: int = 512,
    batch_size: int = 256,
    progress: bool | None = True,
    keys: Sequence[str] | None = None,
) -> Summary:
    """Predict every input of `source` into Parquet shards under `out` (a folder or s3://); shards already
    there are kept. `keys`: the listing the caller made already (data.list_inputs), so a large prefix is listed once.
    `progress` None: a bar on a terminal only, not in a workflow's log (tqdm's disable=None)."""
    if shard_size < 1 or batch_size < 1:
        raise PredictError("--shard-size and --batch-size must be at least 1")
    keys = list(keys) if keys is not None else list_inputs(source)
    sink = batch_io.sink_for(str(out))
    sink.probe()
    _check_manifest(sink, _manifest(keys, shard_size, model, source))
    reader = ImageReader(source, model.input_shape)
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


def _summarise(sink: batch_io.Sink, shards: int, summary: Summary) -> None:
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
