"""Does the model ever wait for data? The tf.data pipeline against a naive numpy feed, on the embedded digits.

    make bench
    uv run --locked --extra cpu python benchmarks/pipeline_throughput.py --epochs 20 --json bench.json

Every figure is a median over `--repeats` timed runs after a warm-up, in samples per second on this machine.
A benchmark, not a test: it reports what it measured and asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

# Must be set before TensorFlow is imported, or its C++ start-up chatter drowns the table.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

from {{ cookiecutter.package_name }} import data, runtime
from {{ cookiecutter.package_name }}.config import Config
from {{ cookiecutter.package_name }}.model import build_model
from {{ cookiecutter.package_name }}.pipeline import make_dataset

Row = tuple[str, float, str]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    defaults = Config().training
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10, help="epochs per timed run (default: 10)")
    parser.add_argument(
        "--batch-size", type=int, default=defaults.batch_size, help="default: the config's batch size"
    )
    parser.add_argument(
        "--repeats", type=int, default=5, help="timed runs per figure; the median is reported"
    )
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the figures here")
    args = parser.parse_args(argv)
    if args.epochs < 1 or args.batch_size < 1 or args.repeats < 1:
        parser.error("--epochs, --batch-size and --repeats must be positive")
    return args


Timed = tuple[int, Callable[[], object]]


def median_rates(runs: dict[str, Timed], repeats: int) -> dict[str, float]:
    """Median samples/s of each `(samples, run)`; the caller warms every run up first.

    The repeats interleave the runs, so a burst of background load hits all of them alike instead of one.
    """
    rates: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, (samples, run) in runs.items():
            start = time.perf_counter()
            run()
            rates[name].append(samples / (time.perf_counter() - start))
    return {name: statistics.median(values) for name, values in rates.items()}


def numpy_batches(
    images: np.ndarray, labels: np.ndarray, batch_size: int, rng: np.random.Generator
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """One shuffled epoch of numpy batches: the loop most people write before they meet tf.data."""
    order = rng.permutation(len(labels))
    for start in range(0, len(order), batch_size):
        index = order[start : start + batch_size]
        yield images[index], labels[index]


def naive_dataset(images: np.ndarray, labels: np.ndarray, batch_size: int, seed: int) -> tf.data.Dataset:
    """The common naive feed: a Python generator wrapped by from_generator, with no cache and no prefetch."""
    rng = np.random.default_rng(seed)
    signature = (
        tf.TensorSpec((None, *images.shape[1:]), tf.float32),
        tf.TensorSpec((None,), tf.int32),
    )
    # A fresh generator per iteration, so every epoch is reshuffled as with the real pipeline.
    return tf.data.Dataset.from_generator(
        lambda: numpy_batches(images, labels, batch_size, rng), output_signature=signature
    )


def drain(batches: Callable[[], Iterator[object]], epochs: int) -> None:
    for _ in range(epochs):
        for _batch in batches():
            pass


def compiled_model(cfg: Config, splits: data.Splits, plan: runtime.RuntimePlan) -> tf.keras.Model:
    """The model as train.py builds and compiles it (on one device, outside any multi-GPU strategy)."""
    net = build_model(splits.input_shape, splits.num_classes, cfg.model)
    net.compile(
        optimizer=tf.keras.optimizers.Adam(cfg.training.learning_rate),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
        jit_compile=plan.xla,
    )
    return net


def train_steps(
    net: tf.keras.Model, batch: tuple[tf.Tensor, tf.Tensor], plan: runtime.RuntimePlan, steps: int
) -> Callable[[], None]:
    """Bare train steps on one batch already on the device: what the model can eat when data costs nothing.

    One Python call per step, as fit() makes with steps_per_execution=1, so the dispatch cost is included.
    """
    step = tf.function(lambda: net.train_step(batch), jit_compile=plan.xla)

    def run() -> None:
        for _ in range(steps):
            logs = step()
        # GPU kernels run asynchronously; reading a result waits for the last step to finish.
        float(logs["loss"])

    return run


def measure(args: argparse.Namespace) -> tuple[dict[str, object], list[Row]]:
    cfg = Config()
    # Seeds, determinism and the float32 / mixed precision policy, exactly as a training run sets them.
    plan, _strategy = runtime.configure(cfg.training)
    if plan.multi_gpu:
        # train.py would use MirroredStrategy; one device keeps the per-step figures comparable.
        print(f"note: {plan.gpus} GPUs visible; these figures are for one device")
    splits = data.load_splits(cfg.data, cfg.training.seed)
    images, labels = splits.x_train, splits.y_train
    samples, epochs, seed = len(labels), args.epochs, cfg.training.seed
    steps_per_epoch = math.ceil(samples / args.batch_size)

    pipeline = make_dataset(
        images, labels, args.batch_size, training=True, seed=seed, shuffle_buffer=cfg.training.shuffle_buffer
    )
    naive = naive_dataset(images, labels, args.batch_size, seed)
    rng = np.random.default_rng(seed)
    feeds: dict[str, Callable[[], Iterator[object]]] = {
        "pipeline": lambda: iter(pipeline),
        "from_generator": lambda: iter(naive),
        "numpy": lambda: numpy_batches(images, labels, args.batch_size, rng),
    }
    for batches in feeds.values():
        drain(batches, 1)  # warm-up epoch: fills the pipeline's cache and lets AUTOTUNE settle
    rates = median_rates(
        {name: (samples * epochs, partial(drain, batches, epochs)) for name, batches in feeds.items()},
        args.repeats,
    )

    net = compiled_model(cfg, splits, plan)
    first_x, first_y = next(iter(pipeline))
    # Copied to the default device (the GPU when there is one) once, outside the timed loop.
    batch = (tf.identity(first_x), tf.identity(first_y))
    model_run = train_steps(net, batch, plan, steps_per_epoch * epochs)
    cached = tf.data.Dataset.from_tensors(batch).repeat(steps_per_epoch)
    fits = {"fit_pipeline": (pipeline, samples), "fit_naive": (naive, samples)}
    fits["fit_cached"] = (cached, steps_per_epoch * len(first_y))
    runs: dict[str, Timed] = {"model": (steps_per_epoch * epochs * len(first_y), model_run)}
    for name, (dataset, per_epoch) in fits.items():
        runs[name] = (per_epoch * epochs, partial(net.fit, dataset, epochs=epochs, verbose=0))
    # Warm-up: traces the train step and train_function once, before any clock starts.
    model_run()
    for dataset, _ in fits.values():
        net.fit(dataset, epochs=1, verbose=0)
    rates |= median_rates(runs, args.repeats)

    rows: list[Row] = [
        ("tf.data pipeline (make_dataset), iterated in Python", rates["pipeline"], "samples/s"),
        ("naive feed: numpy generator via from_generator", rates["from_generator"], "samples/s"),
        ("naive feed: plain numpy slicing (no tensors made)", rates["numpy"], "samples/s"),
        ("model consumption: train steps on a device batch", rates["model"], "samples/s"),
        ("pipeline / model consumption (>1: never waits)", rates["pipeline"] / rates["model"], "x"),
        ("model.fit on the tf.data pipeline", rates["fit_pipeline"], "samples/s"),
        ("model.fit on the naive from_generator feed", rates["fit_naive"], "samples/s"),
        ("model.fit on one cached batch (free input)", rates["fit_cached"], "samples/s"),
        ("fit: pipeline / naive feed", rates["fit_pipeline"] / rates["fit_naive"], "x"),
        ("fit: pipeline / cached batch", rates["fit_pipeline"] / rates["fit_cached"], "x"),
    ]
    meta: dict[str, object] = {
        "tensorflow": tf.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "gpus": plan.gpus,
        "train_samples": samples,
        "input_shape": list(splits.input_shape),
        "batch_size": args.batch_size,
        "epochs": epochs,
        "repeats": args.repeats,
    }
    return meta, rows


def format_value(value: float, unit: str) -> str:
    return f"{value:,.2f}" if unit == "x" else f"{value:,.0f}"


def format_table(rows: list[Row]) -> str:
    cells = [("figure", "value", "unit")] + [(name, format_value(v, unit), unit) for name, v, unit in rows]
    widths = [max(len(row[column]) for row in cells) for column in range(3)]
    lines = [f"{a:<{widths[0]}} | {b:>{widths[1]}} | {c}" for a, b, c in cells]
    lines.insert(1, f"{'-' * widths[0]}-+-{'-' * widths[1]}-+-{'-' * widths[2]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    meta, rows = measure(args)
    print(", ".join(f"{key}={value}" for key, value in meta.items()))
    print(format_table(rows))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {"meta": meta, "rows": [{"figure": n, "value": v, "unit": u} for n, v, u in rows]}
        args.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
