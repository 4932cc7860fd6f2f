"""Batch prediction with this project's exports: which model files load, and how an input becomes the model's input.

The platform's engine (gpu_job.batch_predict) cuts the inputs into Parquet shards, one row per input, resumes a
batch from the shards already written and refuses to mix two batches in one output; gpu_job.batch_io reads a
folder or S3 and writes the shards. This module brings what is the project's: the exports train writes
(SavedModel or TFLite, labelled by class_names.json) and the reader that decodes an image the way training
loaded it (the embedded digits as arrays; a file that is not a readable image is its row's reason).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
from gpu_job import batch_io, batch_predict
from gpu_job.batch_predict import Model, Summary

from . import export
from .config import DataConfig
from .data import DIGITS, IMAGE_SUFFIXES, UNREADABLE_IMAGE, decode_image, list_inputs, load_digits_images
from .errors import DataError, PredictError

CLASS_NAMES = export.CLASS_NAMES_FILE
# Pillow names the file object it could not read, `<_io.BytesIO object at 0x7f...>`: an address that differs per
# run, so a rerun's reason would differ from the first run's for the same bytes.
_OBJECT_REPR = re.compile(r"<[\w.]+ object at 0x[0-9a-f]+>")


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
    there are kept. `keys`: the listing the caller made already (data.list_inputs), so a large prefix is listed
    once."""
    keys = list(keys) if keys is not None else list_inputs(source)
    reader = ImageReader(source, model.input_shape)
    return batch_predict.run(
        model, reader, keys, batch_io.sink_for(str(out)), source, shard_size, batch_size, progress
    )
