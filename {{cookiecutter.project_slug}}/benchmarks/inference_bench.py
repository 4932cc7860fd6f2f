"""What each export costs to serve on this machine's CPU: batched images per second and single-image latency of
the SavedModel, the dynamic-range TFLite model and the full-integer int8 TFLite model, with their sizes on disk
and gzipped; then the same three exports of a magnitude-pruned copy (pruning.py, `--sparsity`), whose zeros take as
many bytes on disk as any weight and only show in the gzip size (what a download or an image layer costs).

    make bench
    uv run --locked --extra cpu python benchmarks/inference_bench.py --epochs 3 --json inference-bench.json

The model is trained briefly on the embedded digits with the shipped configs/train.yaml (its model and export
settings), exported as train.py exports it, and every figure is a median over `--repeats` timed passes over the
test set after a warm-up. With a GPU visible, the SavedModel is also timed on it. A benchmark, not a test: it
reports what it measured and asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# Must be set before TensorFlow is imported, or its C++ start-up chatter drowns the table.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

from {{ cookiecutter.package_name }} import data, export, pruning
from {{ cookiecutter.package_name }}.config import PruningConfig, load_config
from {{ cookiecutter.package_name }}.model import build_model

CONFIG = Path(__file__).resolve().parent.parent / "configs" / "train.yaml"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--epochs", type=int, default=3, help="training epochs before the exports (default: 3)"
    )
    parser.add_argument("--batch-size", type=int, default=256, help="images per batched call (default: 256)")
    parser.add_argument(
        "--repeats", type=int, default=5, help="timed passes per figure; the median is reported"
    )
    parser.add_argument(
        "--sparsity", type=float, default=0.5, help="final sparsity of the pruned copy; 0 = no pruned copy"
    )
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the figures here")
    args = parser.parse_args(argv)
    if min(args.epochs, args.batch_size, args.repeats) < 1:
        parser.error("--epochs, --batch-size and --repeats must be positive")
    if not 0 <= args.sparsity < 1:
        parser.error("--sparsity must be in [0, 1)")
    return args


def images_per_second(
    predict: Callable[[np.ndarray], object], images: np.ndarray, batch: int, repeats: int
) -> float:
    """Median throughput of passes over `images` in batches of `batch` (a warm-up pass first, untimed)."""
    batches = [images[start : start + batch] for start in range(0, len(images), batch)]

    def one_pass() -> float:
        started = time.perf_counter()
        for chunk in batches:
            predict(chunk)
        return len(images) / (time.perf_counter() - started)

    one_pass()
    return statistics.median(one_pass() for _ in range(repeats))


def gzip_bytes(path: Path) -> int:
    """A file's gzip size (level 9), or a directory's (a SavedModel) summed over its files."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return sum(len(gzip.compress(f.read_bytes(), compresslevel=9)) for f in files)


def trained_exports(
    epochs: int, out: Path, sparsity: float = 0.0
) -> tuple[tf.keras.Model, data.Splits, dict[str, Path]]:
    """The shipped config's model after `epochs`, and its exports; with `sparsity`, pruned as train prunes
    (the schedule over all but the last epoch, so the last one trains at the final sparsity)."""
    cfg = load_config(CONFIG)
    splits = data.load_splits(cfg.data, cfg.training.seed)
    model = build_model(splits.input_shape, splits.num_classes, cfg.model)
    callbacks = []
    if sparsity:
        schedule = PruningConfig(enabled=True, final_sparsity=sparsity, end_epoch=max(1, epochs - 1))
        per_epoch = pruning.steps_per_epoch(len(splits.y_train), cfg.training.batch_size)
        model, callbacks = pruning.wrap(model, schedule, per_epoch), pruning.callbacks()
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(
        splits.x_train,
        splits.y_train,
        epochs=epochs,
        batch_size=cfg.training.batch_size,
        callbacks=callbacks,
        verbose=0,
    )
    if sparsity:
        model = pruning.strip(model)
    saved_model = export.export_saved_model(model, out / "saved_model")
    paths = {
        "saved_model": saved_model,
        "tflite": export.export_tflite(saved_model, out / "model.tflite"),
        "tflite_int8": export.export_tflite(
            saved_model, out / "model_int8.tflite", splits.x_train[: cfg.export.representative_samples]
        ),
    }
    return model, splits, paths


def measure(
    name: str,
    device: str,
    predict: Callable[[np.ndarray], np.ndarray],
    path: Path,
    splits: data.Splits,
    keras_pred: np.ndarray,
    args: argparse.Namespace,
) -> dict[str, object]:
    predicted = np.argmax(predict(splits.x_test), axis=-1)
    return {
        "export": name,
        "device": device,
        "size_bytes": export.size_bytes(path),
        "gzip_bytes": gzip_bytes(path),
        "agreement": float(np.mean(predicted == keras_pred)),
        "images_per_second": images_per_second(predict, splits.x_test, args.batch_size, args.repeats),
        "latency_ms": export.cpu_latency_ms(predict, splits.x_test[0], 50),
    }


def main(argv: list[str] | None = None) -> dict[str, object]:
    args = parse_args(argv)
    rows = []
    sparsity_of: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as scratch:
        # The plain model last: the GPU figure below is of its SavedModel.
        variants = {**({"pruned": args.sparsity} if args.sparsity else {}), "plain": 0.0}
        for variant, sparsity in variants.items():
            model, splits, paths = trained_exports(args.epochs, Path(scratch) / variant, sparsity)
            keras_pred = np.argmax(model.predict(splits.x_test, verbose=0), axis=-1)
            sparsity_of[variant] = pruning.saved_model_sparsity(paths["saved_model"])
            with tf.device("/CPU:0"):
                predictors = {
                    "saved_model": export.SavedModelPredictor(paths["saved_model"]),
                    "tflite": export.TFLitePredictor(paths["tflite"]),
                    "tflite_int8": export.TFLitePredictor(paths["tflite_int8"]),
                }
                for name, predict in predictors.items():
                    row = measure(name, "cpu", predict, paths[name], splits, keras_pred, args)
                    rows.append({**row, "export": f"{name} ({variant})" if sparsity else name})
        if tf.config.list_physical_devices("GPU"):
            with tf.device("/GPU:0"):
                predict = export.SavedModelPredictor(paths["saved_model"])
                rows.append(
                    measure("saved_model", "gpu", predict, paths["saved_model"], splits, keras_pred, args)
                )
    report = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "tensorflow": tf.__version__},
        "test_images": len(splits.x_test),
        "batch_size": args.batch_size,
        "gpu": any(row["device"] == "gpu" for row in rows),
        # Fraction of exact zeros in each SavedModel's kernels (pruning.saved_model_sparsity).
        "kernel_sparsity": sparsity_of,
        "rows": rows,
    }
    print(
        f"Inference on {len(splits.x_test)} test images, batches of {args.batch_size} ({os.cpu_count()} CPUs):"
    )
    print(
        f"{'export':<21} {'device':<6} {'size (KB)':>10} {'gzip (KB)':>10} {'agreement':>10} {'images/s':>10} "
        f"{'1-image ms':>11}"
    )
    for row in rows:
        print(
            f"{row['export']:<21} {row['device']:<6} {row['size_bytes'] / 1024:>10.1f} "
            f"{row['gzip_bytes'] / 1024:>10.1f} {row['agreement']:>10.3f} {row['images_per_second']:>10.0f} "
            f"{row['latency_ms']:>11.3f}"
        )
    print("kernel sparsity: " + ", ".join(f"{name} {value:.1%}" for name, value in sparsity_of.items()))
    if not report["gpu"]:
        print("no GPU visible: the GPU figure is measured only where one is")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
