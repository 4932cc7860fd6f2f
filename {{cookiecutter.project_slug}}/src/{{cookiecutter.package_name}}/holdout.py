"""The held-out set promote measures candidate and champion on (`registry.holdout` of the default branch's config).

- `s3://<bucket>/holdout/<folder>/`: an image folder (one sub-folder per class) that admins write and the promote
  role reads; no training role may write there (gpu_runner/setup/gpu-runner.yaml), and no training reads it. This is the
  real thing: images no branch trained on, labels no branch chose.
- `digits` (the packaged default): the test split the DEFAULT branch's config makes of the packaged digits
  (its data fractions and seed). Weaker, and only a demo: the digits ship inside the package, so a branch can
  train on the very images promote holds out (another seed or split puts them in its training set) and score
  high on them. A real project puts its held-out images under holdout/.

The images are read into memory and their files deleted before any model is loaded: a SavedModel is a program
(TensorFlow's SECURITY.md), and its graph could otherwise look the labels up in the folder names on disk.
"""

from __future__ import annotations

import io
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from botocore.exceptions import BotoCoreError, NoCredentialsError
from gpu_job.s3sync import sync_prefix

from .config import Config, DataConfig
from .data import IMAGE_SUFFIXES, UNREADABLE_IMAGE, decode_image, load_digits_images, split
from .errors import DataError

Shape = tuple[int, int, int]


@dataclass
class HeldOut:
    """The held-out images' labels (class names), and the images themselves at any model's input shape."""

    source: str
    labels: tuple[str, ...]
    _decode: Callable[[Shape], np.ndarray]
    _cache: dict[Shape, np.ndarray] = field(default_factory=dict)

    def images(self, shape: Shape) -> np.ndarray:
        """Float images in [0, 1] of (height, width, channels), as training and predict make them."""
        if shape[2] not in (1, 3):
            raise DataError(f"a model input of {shape[2]} channels is not an image model's (1 or 3)")
        if shape not in self._cache:
            self._cache[shape] = self._decode(shape)
        return self._cache[shape]


def load(cfg: Config) -> HeldOut:
    """The held-out set `cfg` (the default branch's config) names, or a DataError naming registry.holdout."""
    source = cfg.registry.holdout
    if source != "digits":
        return _from_s3(source, cfg.data.sync_workers)
    if cfg.data.source != "digits":
        raise DataError(
            f"registry.holdout 'digits' holds out part of the packaged digits, but data.source is "
            f"'{cfg.data.source}': set registry.holdout to s3://<bucket>/holdout/<folder>/ with held-out images of "
            "your classes"
        )
    return _digits(cfg)


def _digits(cfg: Config) -> HeldOut:
    """The default branch's own test split of the packaged digits: its fractions and seed pick the indices."""
    _, labels, names = load_digits_images(DataConfig())
    indices = split(np.arange(len(labels)), labels, names, cfg.data, cfg.training.seed).x_test

    def decode(shape: Shape) -> np.ndarray:
        images, _, _ = load_digits_images(DataConfig(image_size=shape[:2], channels=shape[2]))
        return images[indices]

    return HeldOut("digits", tuple(names[label] for label in labels[indices]), decode)


def _from_s3(uri: str, workers: int) -> HeldOut:
    """Every image under the prefix, by class folder, read into memory; the local copy is gone on return."""
    scratch = Path(tempfile.mkdtemp(prefix="holdout-"))
    try:
        try:
            sync_prefix(uri, scratch, workers=workers)
        except DataError as error:
            raise DataError(
                str(error).replace(f"data.source '{uri}'", f"registry.holdout '{uri}'", 1)
            ) from None
        except NoCredentialsError:
            raise DataError(
                f"registry.holdout '{uri}': no AWS credentials to read it: in promote.yml set the variable "
                "AWS_PROMOTE_ROLE_ARN (make bootstrap prints it); locally, use credentials that may read holdout/"
            ) from None
        except BotoCoreError as error:
            raise DataError(f"registry.holdout '{uri}': could not be read ({error})") from None
        files, labels = _class_files(uri, scratch)
        bodies = [path.read_bytes() for path in files]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    def decode(shape: Shape) -> np.ndarray:
        images = []
        for name, body in zip(files, bodies, strict=True):
            try:
                pixels = decode_image(io.BytesIO(body), shape[:2], shape[2])
            except UNREADABLE_IMAGE as error:
                raise DataError(
                    f"registry.holdout '{uri}': {name.relative_to(scratch)} is not a readable image ({error}); "
                    "replace or delete it"
                ) from None
            images.append(pixels[..., np.newaxis] if pixels.ndim == 2 else pixels)
        return np.stack(images).astype(np.float32)

    return HeldOut(uri, tuple(labels), decode)


def _class_files(uri: str, root: Path) -> tuple[list[Path], list[str]]:
    classes = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if len(classes) < 2:
        raise DataError(
            f"registry.holdout '{uri}': found {len(classes)} class sub-folder(s); put each class's held-out "
            "images in its own sub-folder, named as in training (at least 2 classes)"
        )
    files: list[Path] = []
    labels: list[str] = []
    for folder in classes:
        images = sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
        files += images
        labels += [folder.name] * len(images)
    if not files:
        raise DataError(f"registry.holdout '{uri}': no images ({', '.join(sorted(IMAGE_SUFFIXES))}) under it")
    return files, labels
