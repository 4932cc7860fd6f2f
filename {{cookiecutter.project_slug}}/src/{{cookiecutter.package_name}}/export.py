"""Export the trained model for serving: a TF SavedModel and a dynamic-range-quantised TFLite model.

The TFLite model is only kept when it agrees with the Keras model on the test set, because quantisation can
silently change predictions.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tensorflow as tf

from .errors import ExportError


def export_saved_model(model: tf.keras.Model, path: Path) -> Path:
    """Inference-only SavedModel (serving signature `serve`), loadable by TF Serving."""
    model.export(str(path))
    return path


def export_tflite(saved_model_dir: Path, path: Path) -> Path:
    converter = tf.lite.TFLiteConverter.from_saved_model(str(saved_model_dir))
    # Optimize.DEFAULT without a representative data set = dynamic-range quantisation (int8 weights).
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    path.write_bytes(converter.convert())
    return path


def tflite_predict(tflite_path: Path, images: np.ndarray) -> np.ndarray:
    """Class predictions of a TFLite model for a whole batch in one invoke."""
    interpreter = tf.lite.Interpreter(model_path=str(tflite_path))
    input_detail = interpreter.get_input_details()[0]
    interpreter.resize_tensor_input(input_detail["index"], list(images.shape))
    interpreter.allocate_tensors()
    interpreter.set_tensor(input_detail["index"], images.astype(input_detail["dtype"]))
    interpreter.invoke()
    output = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    return np.argmax(output, axis=-1)


def check_agreement(keras_pred: np.ndarray, tflite_pred: np.ndarray, minimum: float) -> float:
    """Fraction of samples where both models predict the same class; raises when below `minimum`."""
    agreement = float(np.mean(keras_pred == tflite_pred))
    if agreement < minimum:
        raise ExportError(
            f"TFLite model agrees with the Keras model on {agreement:.1%} of the test set, below "
            f"export.tflite_min_agreement={minimum:.0%}; disable quantisation or lower the threshold"
        )
    return agreement
