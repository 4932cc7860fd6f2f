"""Load a labelled image data set into memory and split it (train / validation / test), stratified and seeded."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np
from gpu_job import batch_io
from gpu_job.s3sync import sync_prefix
from PIL import Image, UnidentifiedImageError
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from .config import DataConfig
from .errors import DataError

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp"}
# The embedded data set, as `data.source` and as predict's --input.
DIGITS = "digits"


@dataclass(frozen=True)
class Splits:
    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    class_names: tuple[str, ...]

    @property
    def input_shape(self) -> tuple[int, int, int]:
        return tuple(self.x_train.shape[1:])  # type: ignore[return-value]

    @property
    def num_classes(self) -> int:
        return len(self.class_names)


def _resize(images: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Resize float images in [0, 1] of shape (N, H, W) to (N, *size) with bilinear filtering."""
    if images.shape[1:3] == size:
        return images
    height, width = size
    return np.stack(
        [
            np.asarray(
                Image.fromarray(img.astype(np.float32)).resize((width, height), Image.Resampling.BILINEAR)
            )
            for img in images
        ]
    )


def _with_channels(images: np.ndarray, channels: int) -> np.ndarray:
    images = images[..., np.newaxis] if images.ndim == 3 else images
    if images.shape[-1] == 1 and channels == 3:
        images = np.repeat(images, 3, axis=-1)
    return images.astype(np.float32)


def load_digits_images(cfg: DataConfig) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """scikit-learn's 1,797 real 8x8 handwritten digits, shipped inside the package: offline and fast."""
    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)
    images = _with_channels(_resize(images, cfg.image_size), cfg.channels)
    return images, digits.target.astype(np.int32), tuple(str(name) for name in digits.target_names)


# What Pillow raises for a file that is not a readable image (truncated, wrong format, bad header).
# What Pillow raises for a file it cannot decode; DecompressionBombError (an image over twice
# Image.MAX_IMAGE_PIXELS, ~179 million pixels, refused before decoding) subclasses Exception alone.
UNREADABLE_IMAGE = (UnidentifiedImageError, Image.DecompressionBombError, OSError, SyntaxError, ValueError)


def decode_image(path: Path | IO[bytes], image_size: tuple[int, int], channels: int) -> np.ndarray:
    """One image file (or its bytes, opened) as float pixels in [0, 1], resized to `image_size`: (H, W) for 1
    channel, (H, W, 3) for 3. Raises one of UNREADABLE_IMAGE; training and predict word the error for their own
    input."""
    mode = "L" if channels == 1 else "RGB"
    height, width = image_size
    with Image.open(path) as img:
        img.load()
        pixels = img.convert(mode).resize((width, height), Image.Resampling.BILINEAR)
    return np.asarray(pixels, dtype=np.float32) / 255.0


def _read_image(path: Path, cfg: DataConfig) -> np.ndarray:
    try:
        return decode_image(path, cfg.image_size, cfg.channels)
    except UNREADABLE_IMAGE as error:
        raise DataError(
            f"data.source '{cfg.source}': {path} is not a readable image; delete or replace the file ({error})"
        ) from None


def load_image_folder(root: Path, cfg: DataConfig) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """A folder with one sub-folder per class, each holding that class's images."""
    if not root.is_dir():
        raise DataError(
            f"data.source '{root}': folder does not exist (fix the path, relative to the working directory, "
            f"or use 'digits' for the embedded data set)"
        )
    class_dirs = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if len(class_dirs) < 2:
        raise DataError(
            f"data.source '{root}': found {len(class_dirs)} class sub-folder(s); "
            f"put each class's images in its own sub-folder (at least 2 classes)"
        )
    images: list[np.ndarray] = []
    labels: list[int] = []
    for label, class_dir in enumerate(class_dirs):
        files = sorted(p for p in class_dir.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
        if not files:
            raise DataError(
                f"data.source '{root}': class folder '{class_dir}' has no images "
                f"({', '.join(sorted(IMAGE_SUFFIXES))}); add images or remove the folder"
            )
        for file in files:
            images.append(_read_image(file, cfg))
            labels.append(label)
    stacked = _with_channels(np.stack(images), cfg.channels)
    return stacked, np.asarray(labels, dtype=np.int32), tuple(p.name for p in class_dirs)


def load_images(cfg: DataConfig) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """Dispatch on `data.source`: 'digits', an s3:// URI (synced to the cache first) or a local folder."""
    if cfg.source == "digits":
        return load_digits_images(cfg)
    if cfg.source.startswith("s3://"):
        local = cfg.cache_dir / cfg.source[5:].strip("/")
        report = sync_prefix(cfg.source, local, workers=cfg.sync_workers)
        print(
            f"synced {cfg.source} -> {local}: {report.downloaded} downloaded "
            f"({report.bytes_downloaded} bytes), {report.skipped} unchanged"
        )
        return load_image_folder(local, cfg)
    return load_image_folder(Path(cfg.source), cfg)


def split(
    images: np.ndarray, labels: np.ndarray, class_names: tuple[str, ...], cfg: DataConfig, seed: int
) -> Splits:
    """Stratified, seeded train / validation / test split."""
    holdout = cfg.validation_fraction + cfg.test_fraction
    try:
        x_train, x_rest, y_train, y_rest = train_test_split(
            images, labels, test_size=holdout, random_state=seed, stratify=labels
        )
        x_val, x_test, y_val, y_test = train_test_split(
            x_rest, y_rest, test_size=cfg.test_fraction / holdout, random_state=seed, stratify=y_rest
        )
    except ValueError as error:
        raise DataError(
            f"cannot split {len(labels)} images over {len(class_names)} classes into train/validation/test "
            f"({error}); add images to the smallest classes"
        ) from None
    return Splits(x_train, y_train, x_val, y_val, x_test, y_test, class_names)


def load_splits(cfg: DataConfig, seed: int) -> Splits:
    images, labels, class_names = load_images(cfg)
    return split(images, labels, class_names, cfg, seed)


def list_inputs(source: str) -> list[str]:
    """A batch's inputs (predict's --input), sorted: `digits/<index>` for the embedded digits, else every image's
    path under the folder or the s3:// prefix, any depth (the platform's gpu_job.batch_io lists them)."""
    if source == DIGITS:
        return [f"{DIGITS}/{index:04d}" for index in range(len(load_digits().images))]
    return batch_io.list_keys(source, IMAGE_SUFFIXES)
