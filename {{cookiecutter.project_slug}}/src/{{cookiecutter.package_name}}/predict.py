"""Batch prediction: an exported model over many images, written as Parquet shards, one row per input.

The inputs (the embedded digits, an image folder) are listed once, sorted by key, and cut into shards of
`shard_size`. Each shard's predictions go to `part-<n>.parquet` under the output folder, written whole (to a
temporary name, then renamed), so a rerun after an interruption does only the shards without output. The
manifest beside them pins the input listing, the shard size and the model: a rerun with anything else is
refused instead of mixing two batches. An unreadable image is a row with its reason in `error` (and no class),
never the loss of its shard or of the batch.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from sklearn.datasets import load_digits
from tqdm import tqdm

from . import export
from .config import DataConfig
from .data import IMAGE_SUFFIXES, UNREADABLE_IMAGE, decode_image, load_digits_images
from .errors import DataError

MANIFEST = "_manifest.json"
SUMMARY = "_summary.json"
CLASS_NAMES = export.CLASS_NAMES_FILE
DIGITS = "digits"
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


class PredictError(ValueError):
    """Bad input to `predict`: the message names the option and the fix."""


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


def load_model(path: Path, version: str | None = None) -> Model:
    """A SavedModel folder or a .tflite file from train's exports, labelled by the class_names.json train
    writes beside them (the training data's class folder names; digits: 0-9). Without a registry `version`,
    the model is named by its files' digest, so a rerun with another export is told apart."""
    if not path.exists():
        raise PredictError(
            f"--model '{path}': no such file or folder (a SavedModel folder or a .tflite file)"
        )
    names_file = path.parent / CLASS_NAMES
    if not names_file.is_file():
        raise PredictError(
            f"--model '{path}': no {CLASS_NAMES} beside it; use the folder train exported (outputs/ or the run's "
            "exports/), which holds it"
        )
    class_names = tuple(json.loads(names_file.read_text(encoding="utf-8")))
    version = version or f"sha256:{_digest(path)[:16]}"
    if path.is_dir():
        if not (path / "saved_model.pb").is_file():
            raise PredictError(f"--model '{path}': a folder without saved_model.pb is not a SavedModel")
        saved = export.SavedModelPredictor(path)
        return Model(saved, saved.input_shape, class_names, version)
    if path.suffix != ".tflite":
        raise PredictError(f"--model '{path}': expected a SavedModel folder or a .tflite file")
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
def list_keys(source: str) -> list[str]:
    """Every input's key, sorted: `digits/<index>` for the embedded digits, else image paths relative to the
    folder (every image under it, any depth)."""
    if source == DIGITS:
        return [f"{DIGITS}/{index:04d}" for index in range(len(load_digits().images))]
    root = Path(source)
    if not root.is_dir():
        raise PredictError(f"--input '{source}': folder does not exist (a folder of images, or 'digits')")
    keys = sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES
    )
    if not keys:
        raise PredictError(
            f"--input '{source}': no images ({', '.join(sorted(IMAGE_SUFFIXES))}) under it; nothing to predict"
        )
    return keys


class ImageReader:
    """Reads one input by key as the model's input: resized to its height and width, in its channels."""

    def __init__(self, source: str, input_shape: tuple[int, ...]) -> None:
        height, width, channels = input_shape
        if channels not in (1, 3):
            raise PredictError(f"--model: an input of {channels} channels is not an image model's (1 or 3)")
        self.source, self.cfg = source, DataConfig(image_size=(height, width), channels=channels)
        self._digits = load_digits_images(self.cfg)[0] if source == DIGITS else None

    def __call__(self, key: str) -> np.ndarray:
        if self._digits is not None:
            return self._digits[int(key.rsplit("/", 1)[1])]
        try:
            array = decode_image(Path(self.source) / key, self.cfg.image_size, self.cfg.channels)
        except UNREADABLE_IMAGE as error:
            raise DataError(f"not a readable image ({type(error).__name__}: {error})"[:300]) from None
        return array[..., np.newaxis] if array.ndim == 2 else array


# ---------------------------------------------------------------------- shards and output
def check_writable(out: Path) -> None:
    """Before any model is loaded (or any GPU launched): the output folder can be created and written."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-check"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise PredictError(
            f"--output '{out}': cannot be written ({error.strerror}); choose a writable folder"
        ) from None


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


def _check_manifest(out: Path, wanted: dict[str, object]) -> None:
    """First run: write the manifest. A rerun: the same inputs, shard size and model, or a clear refusal."""
    path = out / MANIFEST
    if not path.exists():
        _write_atomically(path, json.dumps(wanted, indent=2).encode())
        return
    found = json.loads(path.read_text(encoding="utf-8"))
    changed = sorted(k for k in wanted if found.get(k) != wanted[k])
    if changed:
        raise PredictError(
            f"--output '{out}': it holds predictions of another batch ({', '.join(changed)} differ from this "
            "run's); use a new output folder, or rerun with the same input, shard size and model to finish it"
        )


def _write_atomically(path: Path, body: bytes) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(body)
    os.replace(partial, path)  # a reader never sees half a shard


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
    for key in keys:
        try:
            good.append((key, reader(key)))
        except DataError as error:
            for name, value in zip(
                SCHEMA.names, (key, None, None, None, None, model.version, str(error)), strict=True
            ):
                rows[name].append(value)
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
    out: Path,
    shard_size: int = 512,
    batch_size: int = 256,
    progress: bool = True,
) -> Summary:
    """Predict every input of `source` into Parquet shards under `out`; shards already there are kept."""
    if shard_size < 1 or batch_size < 1:
        raise PredictError("--shard-size and --batch-size must be at least 1")
    keys = list_keys(source)
    check_writable(out)
    _check_manifest(out, _manifest(keys, shard_size, model, source))
    reader = ImageReader(source, model.input_shape)
    shards = shards_of(keys, shard_size)
    summary = Summary(images=len(keys), shards=len(shards))
    started = time.perf_counter()
    for index, shard in enumerate(tqdm(shards, desc="shards", unit="shard", disable=not progress)):
        target = out / part_name(index)
        if target.exists():
            summary.shards_done_before += 1
            continue
        table = _predict_shard(model, reader, shard, batch_size, summary)
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        _write_atomically(target, sink.getvalue().to_pybytes())
    summary.seconds = time.perf_counter() - started
    _summarise(out, len(shards), summary)
    return summary


def _summarise(out: Path, shards: int, summary: Summary) -> None:
    """Counts over every shard of the batch (also those an earlier run wrote), into the summary file."""
    table = pa.concat_tables(
        [pq.read_table(out / part_name(index), schema=SCHEMA) for index in range(shards)]
    )
    rows = table.to_pydict()
    classes = [c for c in rows["class"] if c is not None]
    confidences = [c for c in rows["confidence"] if c is not None]
    summary.predicted = len(classes)
    summary.skipped = {k: e for k, e in zip(rows["key"], rows["error"], strict=True) if e is not None}
    summary.class_counts = dict(sorted(Counter(classes).items()))
    summary.mean_confidence = float(np.mean(confidences)) if confidences else float("nan")
    report = {
        "images": summary.images,
        "predicted": summary.predicted,
        "class_counts": summary.class_counts,
        "mean_confidence": summary.mean_confidence,
        "skipped": summary.skipped,
    }
    _write_atomically(out / SUMMARY, json.dumps(report, indent=2).encode())
