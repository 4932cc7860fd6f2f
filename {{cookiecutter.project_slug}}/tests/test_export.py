"""The export helpers that need no trained model: the latency figure, sizes and the agreement rule's message
(the exports themselves are checked on a real training in test_train.py)."""

from pathlib import Path

import numpy as np
import pytest

from {{ cookiecutter.package_name }}.errors import ExportError
from {{ cookiecutter.package_name }}.export import Measured, check_agreement, cpu_latency_ms, size_bytes


def test_latency_is_the_median_of_single_image_calls_after_a_warm_up() -> None:
    calls: list[tuple[int, ...]] = []
    ticks = iter([0.0, 0.004, 1.0, 1.002, 2.0, 2.009])  # three timed calls: 4, 2 and 9 ms

    latency = cpu_latency_ms(
        lambda batch: calls.append(batch.shape), np.zeros((8, 8, 1)), 3, clock=lambda: next(ticks)
    )

    assert calls == [(1, 8, 8, 1)] * 4  # one warm-up, untimed, then the three
    assert latency == pytest.approx(4.0)


def test_a_directory_export_is_sized_by_its_files(tmp_path: Path) -> None:
    (tmp_path / "variables").mkdir()
    (tmp_path / "saved_model.pb").write_bytes(b"x" * 10)
    (tmp_path / "variables" / "variables.data-00000-of-00001").write_bytes(b"y" * 32)
    assert size_bytes(tmp_path) == 42
    assert size_bytes(tmp_path / "saved_model.pb") == 10


def test_the_agreement_rule_names_the_export_and_the_field() -> None:
    keras = np.arange(100) % 10
    int8 = keras.copy()
    int8[:10] = (int8[:10] + 1) % 10
    with pytest.raises(
        ExportError, match=r"the tflite_int8 model agrees .* 90\.0% .* export\.tflite_min_agreement=95%"
    ):
        check_agreement(keras, int8, 0.95, "tflite_int8")


def test_figures_are_logged_under_the_exports_name() -> None:
    assert Measured("tflite_int8", 20_000, 0.99, 0.3).metrics() == {
        "tflite_int8_size_bytes": 20_000.0,
        "tflite_int8_agreement": 0.99,
        "tflite_int8_latency_ms": 0.3,
    }
