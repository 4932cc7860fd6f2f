"""Batch prediction with real exports of a briefly trained digits model: Parquet shards, a model named by its
files, an unreadable image among good ones, and the bad-input messages. The engine's resume and refusals are the
platform's (gpu_job.batch_predict, tested there with a toy model)."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from gpu_job import batch_io, batch_predict
from PIL import Image

from {{ cookiecutter.package_name }} import cli, predict, predict_model
from {{ cookiecutter.package_name }}.config import Config
from {{ cookiecutter.package_name }}.data import load_digits_images
from {{ cookiecutter.package_name }}.errors import PredictError

DIGITS = 1797  # scikit-learn's load_digits(): 1,797 images


def test_the_digits_become_one_row_each_in_parquet_shards(exports: Path, tmp_path: Path) -> None:
    model = predict.load_model(exports / "model_int8.tflite", version="7")
    summary = predict.run(model, "digits", tmp_path, shard_size=500, progress=False)

    parts = sorted(tmp_path.glob("part-*.parquet"))
    assert [p.name for p in parts] == [batch_predict.part_name(i) for i in range(4)]
    table = _rows(tmp_path)
    assert len(table["key"]) == DIGITS and table["key"] == sorted(table["key"])
    assert set(table["model_version"]) == {"7"} and set(table["error"]) == {None}
    assert all(len(p) == 10 for p in table["probabilities"])
    _, labels, _ = load_digits_images(Config().data)
    predicted = np.array([int(c) for c in table["class"]])
    assert float(np.mean(predicted == labels)) > 0.8  # chance is 0.1
    assert summary.predicted == summary.predicted_now == DIGITS and not summary.skipped
    assert sum(summary.class_counts.values()) == DIGITS
    written = json.loads((tmp_path / batch_predict.SUMMARY).read_text())
    assert written["class_counts"] == summary.class_counts and written["predicted"] == DIGITS
    figures = summary.figures()
    assert (
        figures["images_per_second"] > 0
        and figures["batch_latency_ms_p95"] >= figures["batch_latency_ms_p50"] > 0
    )


def test_an_export_without_a_registry_version_is_named_by_its_files(exports: Path, tmp_path: Path) -> None:
    """The engine refuses a rerun with another model (gpu_job.batch_predict); without a registry version a model
    is its files' digest, so another export on the same output is another batch."""
    predict.run(
        predict.load_model(exports / "model_int8.tflite"), "digits", tmp_path, shard_size=500, progress=False
    )
    saved_model = predict.load_model(exports / "saved_model")
    assert saved_model.version.startswith("sha256:")
    with pytest.raises(PredictError, match=r"another batch \(model differ"):
        predict.run(saved_model, "digits", tmp_path, shard_size=500, progress=False)
    assert len(list(tmp_path.glob("part-*.parquet"))) == 4


def test_an_unreadable_image_is_listed_with_its_reason_and_the_rest_predicted(
    exports: Path, tmp_path: Path
) -> None:
    images, _, _ = load_digits_images(Config().data)
    folder = tmp_path / "in"
    (folder / "batch").mkdir(parents=True)
    for index in range(6):
        Image.fromarray((images[index, :, :, 0] * 255).astype(np.uint8)).save(
            folder / "batch" / f"{index}.png"
        )
    (folder / "batch" / "3.png").write_bytes(b"not a png")  # truncated upload
    # A header claiming 20,000 x 20,000 pixels: Pillow refuses to decode it (a decompression bomb), which must
    # cost that image, not the batch (every rerun would stop at it again).
    (folder / "batch" / "5.png").write_bytes(_png_header(20_000, 20_000))
    model = predict.load_model(exports / "model_int8.tflite")

    summary = predict.run(model, str(folder), tmp_path / "out", shard_size=4, progress=False)

    assert summary.predicted == 4 and list(summary.skipped) == ["batch/3.png", "batch/5.png"]
    assert "not a readable image" in summary.skipped["batch/3.png"]
    assert "DecompressionBombError" in summary.skipped["batch/5.png"]
    rows = _rows(tmp_path / "out")
    assert rows["key"] == [f"batch/{i}.png" for i in range(6)]
    assert rows["class"][3] is None and rows["error"][3] == summary.skipped["batch/3.png"]


def test_a_file_too_large_to_be_an_image_is_skipped_unread(
    exports: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(batch_io, "MAX_IMAGE_BYTES", 4096)
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "video.png").write_bytes(b"\0" * 5000)
    Image.fromarray(np.zeros((8, 8), dtype=np.uint8)).save(folder / "blank.png")

    summary = predict.run(predict.load_model(exports / "model_int8.tflite"), str(folder), tmp_path / "out")

    assert summary.predicted == 1 and list(summary.skipped) == ["video.png"]
    assert "ImageTooLarge: 5000 bytes, over the 4096 bytes" in summary.skipped["video.png"]


def _png_header(width: int, height: int) -> bytes:
    """A PNG signature, IHDR (8-bit greyscale) and IEND, no pixel data (PNG specification, sections 5.2-5.3)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IEND", b"")


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("no-model", r"--model '.*missing.tflite': no such file"),
        ("no-class-names", r"no class_names.json beside it"),
        ("empty-folder", r"--input '.*': no images"),
        ("no-folder", r"--input '.*': folder does not exist"),
        ("output-not-writable", r"--output '.*': cannot be written"),
    ],
)
def test_bad_input_names_the_option_and_the_fix(
    exports: Path, tmp_path: Path, case: str, message: str
) -> None:
    model, source, out = exports / "model_int8.tflite", "digits", tmp_path / "out"
    if case == "no-model":
        model = exports / "missing.tflite"
    if case == "no-class-names":
        (tmp_path / "lone").mkdir()
        model = tmp_path / "lone" / "model.tflite"
        model.write_bytes((exports / "model_int8.tflite").read_bytes())
    if case == "empty-folder":
        (tmp_path / "empty").mkdir()
        source = str(tmp_path / "empty")
    if case == "no-folder":
        source = str(tmp_path / "nowhere")
    if case == "output-not-writable":
        (tmp_path / "a-file").write_text("")
        out = tmp_path / "a-file" / "predictions"  # below a file: root may write anywhere else
    with pytest.raises(PredictError, match=message):
        predict.run(predict.load_model(model), source, out, progress=False)


def test_the_command_line_says_what_it_did(
    exports: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "out"
    args = ["predict", f"--model={exports / 'model_int8.tflite'}", "--input=digits", f"--output={out}"]
    assert cli.main([*args, "--shard-size=1000"]) == 0
    said = capsys.readouterr().out
    assert (
        f"{DIGITS} of {DIGITS} images predicted into {out} (2 shards, 0 kept" in said
        and "classes: 0=" in said
    )
    assert cli.main([*args[:1], f"--model={tmp_path / 'none.tflite'}"]) == 2
    assert "error: --model" in capsys.readouterr().err


def test_the_cli_offers_each_export_train_writes() -> None:
    assert ("auto", *predict_model.EXPORT_FILES) == cli.PREDICT_EXPORTS


def _rows(out: Path) -> dict[str, list]:
    return pa.concat_tables([pq.read_table(part) for part in sorted(out.glob("part-*.parquet"))]).to_pydict()
