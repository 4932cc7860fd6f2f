"""The SavedModel's serving signature, and a TF Serving REST predict body built from it fed through that signature.

No model server runs here (none installs from PyPI or Debian: manual/predict.md, "Serving"); the loaded SavedModel's
signature is the function TF Serving calls with the body's tensor, so the request is tested up to the wire.
"""

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from {{ cookiecutter.package_name }} import serving
from {{ cookiecutter.package_name }}.config import config_from_dict
from {{ cookiecutter.package_name }}.data import load_splits
from {{ cookiecutter.package_name }}.errors import ExportError
from {{ cookiecutter.package_name }}.export import export_saved_model
from {{ cookiecutter.package_name }}.model import build_model


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory):
    """A digits model after one epoch, exported as train exports it."""
    cfg = config_from_dict({})
    splits = load_splits(cfg.data, cfg.training.seed)
    model = build_model(splits.input_shape, splits.num_classes, cfg.model)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.fit(splits.x_train, splits.y_train, epochs=1, batch_size=64, verbose=0)
    path = export_saved_model(model, tmp_path_factory.mktemp("serving") / "saved_model")
    return model, splits, path


@pytest.mark.slow  # trains and exports a model (the fixture)
def test_the_signature_is_what_a_client_sends_and_gets(exported) -> None:
    _, _, path = exported
    signature = serving.read_signature(path)
    # The Keras input's name (model.py), any batch size, one float32 8x8x1 image each; one output tensor.
    assert signature == serving.ServingSignature(
        name="serving_default",
        input_name="image",
        input_shape=(None, 8, 8, 1),
        input_dtype="float32",
        output_names=("output_0",),
    )
    # `serve` is the same function under Keras' own name.
    assert serving.read_signature(path, "serve").input_name == "image"
    with pytest.raises(ExportError, match=r"has no signature 'predict'; it has serve, serving_default"):
        serving.read_signature(path, "predict")


@pytest.mark.slow
@pytest.mark.parametrize("form", ["instances", "inputs"])
def test_the_request_body_through_the_signature_predicts_like_keras(exported, form: str) -> None:
    model, splits, path = exported
    signature = serving.read_signature(path)
    images = splits.x_test[:5]
    body = json.loads(json.dumps(serving.predict_request(signature, images, form)))  # what goes on the wire
    assert set(body) == {"signature_name", form}
    # What the server does with it: the body's tensor into the named signature, by the signature's input name.
    loaded = tf.saved_model.load(str(path))
    tensor = tf.constant(np.asarray(body[form], dtype=signature.input_dtype))
    outputs = loaded.signatures[body["signature_name"]](**{signature.input_name: tensor})
    assert tuple(sorted(outputs)) == signature.output_names
    expected = model.predict(images, verbose=0)
    np.testing.assert_allclose(outputs["output_0"].numpy(), expected, atol=1e-5)
    # And the answer as TF Serving words it (one output: no name) reads back to the same scores.
    key = "predictions" if form == "instances" else "outputs"
    response = json.loads(json.dumps({key: outputs["output_0"].numpy().tolist()}))
    np.testing.assert_allclose(serving.scores_from_response(signature, response), expected, atol=1e-5)


@pytest.mark.slow  # trains and exports a model (the fixture)
def test_a_batch_of_the_wrong_shape_is_refused_with_the_shape_wanted(exported) -> None:
    _, _, path = exported
    signature = serving.read_signature(path)
    with pytest.raises(ExportError, match=r"takes 'image' of shape \('batch', 8, 8, 1\), got .*\(2, 8, 8\)"):
        serving.predict_request(signature, np.zeros((2, 8, 8)))
    with pytest.raises(ExportError, match=r"TF Serving answered with an error: Servable not found"):
        serving.scores_from_response(signature, {"error": "Servable not found for request: Latest(x)"})


def test_the_predict_url() -> None:
    assert serving.predict_url("digits") == "http://localhost:8501/v1/models/digits:predict"
    assert serving.predict_url("digits", "127.0.0.1", 9000, 3) == (
        "http://127.0.0.1:9000/v1/models/digits/versions/3:predict"
    )


@pytest.mark.slow  # trains and exports a model (the fixture)
def test_the_body_is_plain_json(exported, tmp_path: Path) -> None:
    _, splits, path = exported
    body = serving.predict_request(serving.read_signature(path), splits.x_test[:2])
    # Python floats in nested lists (no numpy scalars): json.dumps takes it as it is, as curl -d would send it.
    (tmp_path / "request.json").write_text(json.dumps(body))
    assert np.asarray(json.loads((tmp_path / "request.json").read_text())["instances"]).shape == (2, 8, 8, 1)
