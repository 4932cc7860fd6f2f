"""The GPU preflight on this CPU machine with this project's TensorFlow and CLI: the failure path is real (real
TensorFlow, no GPU, no NVIDIA driver), and soft placement quietly runs an op asked for /GPU:0 on the CPU (caught,
with the real matmul). The success path cannot happen here: the platform's own tests drive it with a GPU machine's
answers (platform/tests/job/test_gpu_preflight.py in the template repository)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from gpu_job import gpu_preflight
from gpu_runner_testing.gpu_answers import GPU, T4

from {{ cookiecutter.package_name }}.cli import main
from {{ cookiecutter.package_name }}.errors import EXIT_NO_GPU

PROJECT = Path(__file__).resolve().parent.parent
LOCK = PROJECT / "uv.lock"  # the preflight first compares the stack with it (tests/test_env_check.py)


class ListsAGpuOnly(gpu_preflight.TfBoundary):
    """Real TensorFlow for everything except the device list, which claims a GPU."""

    def list_gpus(self) -> list[str]:
        return [GPU]


def test_real_tensorflow_without_a_gpu_fails_and_says_why() -> None:
    report = gpu_preflight.probe(image="tensorflow/tensorflow:2.15.0-gpu")
    assert (report.gpus, report.gpu_ok, report.result) == ((), False, "no-gpu")
    text = gpu_preflight.message(report)
    assert "no GPU visible to TensorFlow: TensorFlow lists no GPU" in text
    assert "image:        tensorflow/tensorflow:2.15.0-gpu" in text
    # This machine: tensorflow-cpu and no NVIDIA driver; both named, and the most basic one is the fix.
    assert "built for no CUDA (a CPU-only TensorFlow build)" in text
    assert "driver:       not found" in text
    assert "fix:          no NVIDIA driver is visible" in text
    assert "TensorFlow 2.15.1" in text


def test_a_listed_gpu_whose_matmul_lands_on_the_cpu_is_no_gpu() -> None:
    # The real matmul: asked for /GPU:0, soft placement runs it on the CPU. The device check catches it.
    report = gpu_preflight.probe(ListsAGpuOnly(), driver=T4)
    assert not report.gpu_ok
    assert (
        "the matmul asked for /GPU:0 ran on /job:localhost/replica:0/task:0/device:CPU:0"
        in report.matmul_error
    )


def _preflight(
    tmp_path: Path, *args: str, config: str = ""
) -> tuple[subprocess.CompletedProcess, Path, Path]:
    (tmp_path / "train.yaml").write_text(config)
    outputs, summary = tmp_path / "outputs", tmp_path / "summary.md"
    env = {**os.environ, "GITHUB_OUTPUT": str(outputs), "GITHUB_STEP_SUMMARY": str(summary)}
    env["GPU_RUNTIME_IMAGE"] = "registry.example/tf:2.15@sha256:" + "0" * 64
    result = subprocess.run(
        [sys.executable, "-m", "{{ cookiecutter.package_name }}", "gpu-preflight", "--config", "train.yaml", "--lock", str(LOCK), *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return result, outputs, summary


@pytest.mark.slow  # a fresh interpreter that imports TensorFlow
def test_cli_without_a_gpu_exits_with_its_own_status(tmp_path: Path) -> None:
    result, outputs, summary = _preflight(tmp_path)
    assert result.returncode == EXIT_NO_GPU == 78, result.stderr
    assert "error: no GPU visible to TensorFlow" in result.stderr
    assert "image:        registry.example/tf:2.15@sha256:" in result.stderr
    assert "Traceback" not in result.stderr
    assert outputs.read_text() == "gpu-preflight=no-gpu\n"
    assert "### GPU preflight: no GPU visible: training not started" in summary.read_text()


@pytest.mark.slow  # a fresh interpreter that imports TensorFlow
def test_cli_allows_cpu_only_when_asked(tmp_path: Path) -> None:
    result, outputs, summary = _preflight(tmp_path, "--allow-cpu", "true")
    assert result.returncode == 0, result.stderr
    assert "warning: no GPU visible" in result.stderr and "CPU training ALLOWED" in result.stderr
    assert outputs.read_text() == "gpu-preflight=cpu-allowed\n"
    assert "CPU training allowed (debugging flag)" in summary.read_text()


@pytest.mark.slow  # a fresh interpreter that imports TensorFlow
def test_cli_allows_cpu_from_the_train_config(tmp_path: Path) -> None:
    result, outputs, _ = _preflight(tmp_path, config="training:\n  allow_cpu: true\n")
    assert result.returncode == 0, result.stderr
    assert outputs.read_text() == "gpu-preflight=cpu-allowed\n"


def test_cli_rejects_a_bad_flag_before_touching_tensorflow(tmp_path: Path) -> None:
    result, outputs, _ = _preflight(tmp_path, "--allow-cpu", "yes")
    assert result.returncode == 2
    assert "error: allow-cpu: must be true or false (got 'yes')" in result.stderr
    assert not outputs.exists()


def test_in_process_main_returns_the_status(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "train.yaml").write_text("")
    monkeypatch.delenv("GITHUB_OUTPUT", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    assert (
        main(["gpu-preflight", "--config", str(tmp_path / "train.yaml"), "--lock", str(LOCK)]) == EXIT_NO_GPU
    )
