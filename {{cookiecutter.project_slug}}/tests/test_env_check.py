"""`env-check`: this interpreter against the project's real uv.lock, and the GPU preflight stopping on another
TensorFlow before it looks for a GPU (real TensorFlow, real lock; a doctored copy of the lock stands for an image
whose TensorFlow is not the locked one)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from gpu_job import env_check

from {{ cookiecutter.package_name }}.cli import main

PROJECT = Path(__file__).resolve().parent.parent
LOCK = PROJECT / "uv.lock"


def _lock_with_tensorflow(tmp_path: Path, version: str) -> Path:
    """The project's lock with both TensorFlow distributions pinned at `version` (what a relock to it says)."""
    text = LOCK.read_text()
    for name in env_check.TENSORFLOW:
        text, count = re.subn(rf'(?m)^(name = "{name}"\nversion = )"[^"]+"', rf'\g<1>"{version}"', text)
        assert count == 1, name
    path = tmp_path / "uv.lock"
    path.write_text(text)
    return path


def test_the_lock_pins_every_checked_piece_once() -> None:
    requires_python, locked = env_check.locked_versions(LOCK)
    assert requires_python == "==3.11.*"
    assert locked["tensorflow"] == locked["tensorflow-cpu"] == {"2.15.1"}
    for name in env_check.PACKAGES:
        assert len(locked[name]) == 1, (name, locked[name])


def test_this_environment_is_the_locked_one(capsys: pytest.CaptureFixture[str]) -> None:
    parity = env_check.check(LOCK)
    assert parity.failed == [] and all(row.ok for row in parity.rows), parity.table()
    assert [row.name for row in parity.rows] == ["Python", "TensorFlow", *env_check.PACKAGES]
    assert parity.build == [("CUDA / cuDNN (TensorFlow's build)", "none: a CPU-only TensorFlow build")]

    assert main(["env-check", "--lock", str(LOCK)]) == 0
    assert "| TensorFlow | 2.15.1 | 2.15.1 | ok |" in capsys.readouterr().out


def test_another_tensorflow_fails_with_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["env-check", "--lock", str(_lock_with_tensorflow(tmp_path, "2.16.1"))]) == 2
    out, err = capsys.readouterr()
    assert "| TensorFlow | 2.15.1 | 2.16.1 | DIFFERS (fails) |" in out
    assert "error: this environment is not the locked one: TensorFlow 2.15.1, but uv.lock pins 2.16.1" in err
    assert "Fix: use the image or AMI whose TensorFlow has the locked minor version" in err


def test_a_missing_or_broken_lock_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["env-check", "--lock", str(tmp_path / "uv.lock")]) == 2
    assert (
        f"error: {tmp_path / 'uv.lock'}: no such file (run from the project root" in capsys.readouterr().err
    )
    (tmp_path / "uv.lock").write_text("version = [")
    assert main(["env-check", "--lock", str(tmp_path / "uv.lock")]) == 2
    assert "not a uv.lock" in capsys.readouterr().err


def test_the_gpu_preflight_stops_on_another_tensorflow_before_looking_for_a_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    outputs, summary = tmp_path / "outputs", tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_OUTPUT", str(outputs))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    (tmp_path / "train.yaml").write_text("training:\n  allow_cpu: true\n")  # not even the CPU flag lets it on
    lock = _lock_with_tensorflow(tmp_path, "2.16.1")

    assert main(["gpu-preflight", "--config", str(tmp_path / "train.yaml"), "--lock", str(lock)]) == 2

    assert "TensorFlow 2.15.1, but uv.lock pins 2.16.1" in capsys.readouterr().err
    assert not outputs.exists()  # no gpu-preflight verdict: the GPU was never probed
    assert "### Environment check: failed" in summary.read_text()
