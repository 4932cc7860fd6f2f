"""The project's fixtures: models exported from a brief training run, a scratch directory, and the e2e report.

The servers every test shares (moto, the Batch host, MLflow's tracking servers) and the fake AWS environment come
from the platform's pytest plugin (gpu_runner_testing, the `testing` extra of gpu-runner): loaded here, before any
test module is imported, so no test can reach a real AWS account.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

import pytest
from gpu_runner_testing.story.report import begin_run, render, report_file, this_run

# The platform's servers and doubles, and its stories' fixtures (the shared stack, the order of `make e2e`).
pytest_plugins = ["gpu_runner_testing.pytest_plugin", "gpu_runner_testing.story.fixtures"]

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def pytest_configure(config: pytest.Config) -> None:
    begin_run()  # here, not in tests/e2e/: an xdist controller collects nothing, so it loads no deeper conftest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    report = this_run()
    if report:  # only a run that told stories prints (and owns) the report
        terminalreporter.section("e2e report")
        terminalreporter.write_line(render(report))
        terminalreporter.write_line(f"(saved in {report_file()})")


def _package_module(name: str) -> ModuleType:
    """A module of the project's package, found rather than named: no template answer in this file
    (tests/test_generated_project.py)."""
    import importlib

    package = next(
        p.name
        for p in (Path(__file__).resolve().parents[1] / "src").iterdir()
        if (p / "__init__.py").exists()
    )
    return importlib.import_module(f"{package}.{name}")


@pytest.fixture(scope="session")
def exports(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What train leaves in outputs/ after a brief training run on the digits: the SavedModel, the int8 TFLite
    model and class_names.json beside them (the prediction tests' models)."""
    import json

    import tensorflow as tf

    export = _package_module("export")
    cfg = _package_module("config").Config()
    images, labels, names = _package_module("data").load_digits_images(cfg.data)
    out = tmp_path_factory.mktemp("exports")
    tf.keras.utils.set_random_seed(0)
    model = _package_module("model").build_model(images.shape[1:], len(names), cfg.model)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(images, labels, epochs=3, batch_size=64, verbose=0)
    saved = export.export_saved_model(model, out / "saved_model")
    export.export_tflite(saved, out / "model_int8.tflite", images[:200])
    (out / export.CLASS_NAMES_FILE).write_text(json.dumps(list(names)))
    return out


@pytest.fixture(scope="session")
def untrained_exports(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same files of a digits model that was never trained (about 10% right): a worse model than `exports`,
    with both TFLite copies (promote's tests: a candidate that claims what it is not)."""
    import json

    import tensorflow as tf

    export = _package_module("export")
    cfg = _package_module("config").Config()
    images, _, names = _package_module("data").load_digits_images(cfg.data)
    out = tmp_path_factory.mktemp("untrained-exports")
    tf.keras.utils.set_random_seed(1)
    model = _package_module("model").build_model(images.shape[1:], len(names), cfg.model)
    saved = export.export_saved_model(model, out / "saved_model")
    export.export_tflite(saved, out / "model.tflite")
    export.export_tflite(saved, out / "model_int8.tflite", images[:100])
    (out / export.CLASS_NAMES_FILE).write_text(json.dumps(list(names)))
    return out


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in an empty directory so outputs, checkpoints and local MLflow stores never touch the project."""
    monkeypatch.chdir(tmp_path)
    return tmp_path
