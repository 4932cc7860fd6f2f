"""The SavedModel export as TF Serving sees it: its serving signature, and a REST predict request built from it.

TensorFlow Serving's REST API (https://www.tensorflow.org/tfx/serving/api_rest, "Predict API"):
`POST http://host:8501/v1/models/<name>[/versions/<n>]:predict` with a JSON body holding an optional
`signature_name` (default `serving_default`) and either `instances` (row format: one value per image when the
signature has one input) or `inputs` (columnar format: the whole batch as one tensor). The answer is
`{"predictions": [...]}` to the row format and `{"outputs": ...}` to the columnar one; with one output tensor,
its name is left out. Floats are JSON numbers.

No model server is installed here (manual/predict.md, "Serving" says why and how to run one): the tests feed the
body this module builds through the loaded SavedModel's signature, which is the function the server calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import tensorflow as tf

from .errors import ExportError

# The signature TF Serving calls when a request names none (api_rest: "If unspecified default serving signature
# is used"); Keras' model.export writes it beside `serve`, the same function.
DEFAULT_SIGNATURE = "serving_default"
# The model server's default REST port (tensorflow_model_server --rest_api_port; 8501 in the tensorflow/serving
# image: https://www.tensorflow.org/tfx/serving/docker).
REST_PORT = 8501


@dataclass(frozen=True)
class ServingSignature:
    """What a client must send and may expect back: the one input's name, shape (None = any) and dtype, and the
    names of the output tensors."""

    name: str
    input_name: str
    input_shape: tuple[int | None, ...]
    input_dtype: str
    output_names: tuple[str, ...]

    def check(self, images: np.ndarray) -> None:
        """Refuse a batch the signature would refuse, naming the shape it wants."""
        wanted = self.input_shape[1:]
        if images.ndim != len(self.input_shape) or any(
            w is not None and w != got for w, got in zip(wanted, images.shape[1:], strict=True)
        ):
            raise ExportError(
                f"signature '{self.name}' takes {self.input_name!r} of shape "
                f"{tuple('batch' if d is None else d for d in self.input_shape)}, got a batch of shape "
                f"{images.shape}"
            )


def read_signature(saved_model_dir: Path, name: str = DEFAULT_SIGNATURE) -> ServingSignature:
    """The named signature of a SavedModel on disk (the file TF Serving loads)."""
    loaded = tf.saved_model.load(str(saved_model_dir))
    if name not in loaded.signatures:
        raise ExportError(
            f"{saved_model_dir} has no signature '{name}'; it has {', '.join(sorted(loaded.signatures))}"
        )
    function = loaded.signatures[name]
    inputs = function.structured_input_signature[1]
    if len(inputs) != 1:
        # The row format below sends one bare value per instance, which only a one-input signature accepts.
        raise ExportError(
            f"signature '{name}' has {len(inputs)} inputs; this module builds one-input requests"
        )
    ((input_name, spec),) = inputs.items()
    return ServingSignature(
        name=name,
        input_name=input_name,
        input_shape=tuple(spec.shape.as_list()),
        input_dtype=spec.dtype.name,
        output_names=tuple(sorted(function.structured_outputs)),
    )


def predict_request(
    signature: ServingSignature, images: np.ndarray, form: Literal["instances", "inputs"] = "instances"
) -> dict[str, Any]:
    """The JSON body of a REST predict call for `images` (a batch): row format (`instances`, one image each) or
    columnar (`inputs`, the batch as one tensor). JSON-ready: plain lists of Python numbers."""
    signature.check(images)
    values = images.astype(signature.input_dtype).tolist()
    return {"signature_name": signature.name, form: values}


def predict_url(
    model_name: str, host: str = "localhost", port: int = REST_PORT, version: int | None = None
) -> str:
    """Where the body goes: `/v1/models/<name>[/versions/<n>]:predict` (api_rest, "Predict API")."""
    where = f"/versions/{version}" if version is not None else ""
    return f"http://{host}:{port}/v1/models/{model_name}{where}:predict"


def scores_from_response(signature: ServingSignature, response: Mapping[str, Any]) -> np.ndarray:
    """The class scores in a predict response: `predictions` (row format) or `outputs` (columnar); with several
    output tensors each holds them by name, and the first output name is taken."""
    if "error" in response:
        raise ExportError(f"TF Serving answered with an error: {response['error']}")
    key = "predictions" if "predictions" in response else "outputs"
    if key not in response:
        raise ExportError(f"a predict response holds 'predictions' or 'outputs'; got {', '.join(response)}")
    body = response[key]
    output = signature.output_names[0]
    if len(signature.output_names) > 1:
        body = [row[output] for row in body] if key == "predictions" else body[output]
    return np.asarray(body, dtype=np.float32)
