"""Export the trained model for serving: a TF SavedModel, a dynamic-range TFLite model and a full-integer (int8)
TFLite model, each measured the same way (size on disk, agreement with the Keras model, CPU latency).

A TFLite model is only kept when it agrees with the Keras model on the test set, because quantisation can
silently change predictions. The int8 model is what runs on a cheap CPU (or an edge accelerator): int8 inputs,
weights, activations and outputs, calibrated on a representative sample of the training images
(https://www.tensorflow.org/lite/performance/post_training_integer_quant).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tensorflow as tf

from .errors import ExportError

# Written beside the exports by train (the training data's class names, in output order); read by predict and
# promote (model_files names every file a run serves).
from .model_files import CLASS_NAMES_FILE as CLASS_NAMES_FILE


def export_saved_model(model: tf.keras.Model, path: Path) -> Path:
    """Inference-only SavedModel (serving signature `serve`), loadable by TF Serving."""
    model.export(str(path))
    return path


def export_tflite(saved_model_dir: Path, path: Path, representative: np.ndarray | None = None) -> Path:
    """Dynamic-range quantisation (int8 weights, float activations) without `representative`; with it,
    full-integer quantisation: the converter calibrates every activation's range on those images."""
    converter = tf.lite.TFLiteConverter.from_saved_model(str(saved_model_dir))
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if representative is not None:
        converter.representative_dataset = _samples(representative)
        # Only int8 kernels: conversion fails instead of silently keeping a float op.
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = tf.int8
        converter.inference_output_type = tf.int8
    path.write_bytes(converter.convert())
    return path


def _samples(images: np.ndarray) -> Callable[[], Iterator[list[np.ndarray]]]:
    def generate() -> Iterator[list[np.ndarray]]:
        for image in images:
            yield [image[np.newaxis].astype(np.float32)]

    return generate


class TFLitePredictor:
    """One TFLite interpreter, resized to each batch it is given; float images in, class scores out (int8 models
    quantise their input and dequantise their output with the scale and zero point the converter chose)."""

    def __init__(self, path: Path) -> None:
        self.interpreter = tf.lite.Interpreter(model_path=str(path))
        self.input = self.interpreter.get_input_details()[0]
        self.output = self.interpreter.get_output_details()[0]
        self._batch_shape: tuple[int, ...] | None = None

    @property
    def input_shape(self) -> tuple[int, ...]:
        """One image's shape (height, width, channels), as the converter fixed it."""
        return tuple(int(d) for d in self.input["shape"][1:])

    @property
    def quantized(self) -> bool:
        return np.issubdtype(self.input["dtype"], np.integer)

    def __call__(self, images: np.ndarray) -> np.ndarray:
        if self._batch_shape != images.shape:
            self.interpreter.resize_tensor_input(self.input["index"], list(images.shape))
            self.interpreter.allocate_tensors()
            self._batch_shape = images.shape
        self.interpreter.set_tensor(self.input["index"], self._to_input(images))
        self.interpreter.invoke()
        scores = self.interpreter.get_tensor(self.output["index"])
        if np.issubdtype(scores.dtype, np.integer):
            scale, zero_point = self.output["quantization"]
            return (scores.astype(np.float32) - zero_point) * scale
        return scores

    def _to_input(self, images: np.ndarray) -> np.ndarray:
        dtype = self.input["dtype"]
        if not self.quantized:
            return images.astype(dtype)
        scale, zero_point = self.input["quantization"]
        limits = np.iinfo(dtype)
        return np.clip(np.round(images / scale + zero_point), limits.min, limits.max).astype(dtype)


def tflite_predict(tflite_path: Path, images: np.ndarray) -> np.ndarray:
    """Class predictions of a TFLite model for a whole batch in one invoke."""
    return np.argmax(TFLitePredictor(tflite_path)(images), axis=-1)


class SavedModelPredictor:
    """The SavedModel's `serve` endpoint as a function of float images (what TF Serving runs)."""

    def __init__(self, path: Path) -> None:
        # The loaded object owns the variables: keep it, not only its `serve` attribute.
        self.loaded = tf.saved_model.load(str(path))
        spec = next(iter(self.loaded.signatures["serving_default"].structured_input_signature[1].values()))
        self.input_shape = tuple(int(d) for d in spec.shape[1:])

    def __call__(self, images: np.ndarray) -> np.ndarray:
        return self.loaded.serve(tf.constant(images, tf.float32)).numpy()


class Disagrees(ExportError):
    """An export below the agreement rule. train fails the run for the SavedModel (the model of record) and
    drops a TFLite export, keeping the run."""

    def __init__(self, message: str, agreement: float) -> None:
        super().__init__(message)
        self.agreement = agreement


def check_agreement(
    keras_pred: np.ndarray, tflite_pred: np.ndarray, minimum: float, name: str = "TFLite"
) -> float:
    """Fraction of samples where both models predict the same class; raises Disagrees when below `minimum`."""
    agreement = float(np.mean(keras_pred == tflite_pred))
    if agreement < minimum:
        raise Disagrees(
            f"the {name} model agrees with the Keras model on {agreement:.1%} of the test set, below "
            f"export.tflite_min_agreement={minimum:.0%}; disable that export or lower the threshold",
            agreement,
        )
    return agreement


def cpu_latency_ms(
    predict: Callable[[np.ndarray], object],
    image: np.ndarray,
    runs: int,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Median wall time of one single-image prediction, in ms, after one warm-up call (graph tracing, tensor
    allocation). One image at a time is what an online CPU service sees; batch throughput is predict's figure."""
    batch = image[np.newaxis]
    predict(batch)
    times = []
    for _ in range(runs):
        started = clock()
        predict(batch)
        times.append((clock() - started) * 1000)
    return statistics.median(times)


def size_bytes(path: Path) -> int:
    """A file's size, or a directory's (a SavedModel) summed over its files."""
    return (
        path.stat().st_size
        if path.is_file()
        else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    )


@dataclass(frozen=True)
class Measured:
    """One export's figures, logged as `<name>_size_bytes`, `<name>_agreement`, `<name>_latency_ms`."""

    name: str
    size_bytes: int
    agreement: float
    latency_ms: float

    def metrics(self) -> dict[str, float]:
        return {
            f"{self.name}_size_bytes": float(self.size_bytes),
            f"{self.name}_agreement": self.agreement,
            f"{self.name}_latency_ms": self.latency_ms,
        }
