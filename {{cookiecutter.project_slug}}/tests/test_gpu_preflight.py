"""The GPU preflight on this CPU machine: the failure path is real (real TensorFlow, no GPU, no NVIDIA driver).

The success path cannot happen here, so those tests replace `TfBoundary` (the only TensorFlow calls) with a fake
that reports a GPU; TensorFlow on CPU cannot be made to list a logical GPU device, and soft placement quietly runs
an op asked for /GPU:0 on the CPU (tested below with the real matmul)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from {{ cookiecutter.package_name }} import gpu_preflight
from {{ cookiecutter.package_name }}.cli import main
from {{ cookiecutter.package_name }}.errors import EXIT_NO_GPU

PROJECT = Path(__file__).resolve().parent.parent
LOCK = PROJECT / "uv.lock"  # the preflight first compares the stack with it (tests/test_env_check.py)
GPU = "/physical_device:GPU:0"
T4 = gpu_preflight.Driver(
    version="595.91.07",
    cuda_version="13.2",
    gpus=({"name": "Tesla T4", "memory_total_mib": "15360"},),
    source="NVML",
)
CUDA_BUILD = {"is_cuda_build": True, "cuda_version": "12.2", "cudnn_version": "8"}


class FakeGpuTf(gpu_preflight.TfBoundary):
    """TensorFlow as it answers on a GPU machine where the GPU works (or, with `device`, where it does not)."""

    def __init__(self, gpus: list[str], device: str = "/job:localhost/replica:0/task:0/device:GPU:0") -> None:
        self.gpus, self.device = gpus, device

    def list_gpus(self) -> list[str]:
        return self.gpus

    def matmul_on(self, device: str) -> tuple[str, list[list[float]]]:
        return self.device, [[19.0, 22.0], [43.0, 50.0]]

    def build_info(self) -> dict:
        return dict(CUDA_BUILD)

    def version(self) -> str:
        return "2.15.1"


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


def test_a_gpu_that_runs_the_matmul_passes() -> None:
    report = gpu_preflight.probe(FakeGpuTf([GPU]), driver=T4)
    assert (report.gpu_ok, report.result) == (True, "ok")
    assert "TensorFlow sees 1 GPU(s) (Tesla T4)" in gpu_preflight.summary(report)


def test_a_wrong_matmul_result_is_no_gpu() -> None:
    class Wrong(FakeGpuTf):
        def matmul_on(self, device: str) -> tuple[str, list[list[float]]]:
            return self.device, [[0.0, 0.0], [0.0, 0.0]]

    report = gpu_preflight.probe(Wrong([GPU]), driver=T4)
    assert not report.gpu_ok and "expected [[19.0, 22.0], [43.0, 50.0]]" in report.matmul_error


def test_a_cuda_error_in_the_matmul_is_reported_not_raised() -> None:
    class Broken(FakeGpuTf):
        def matmul_on(self, device: str) -> tuple[str, list[list[float]]]:
            raise RuntimeError("CUDA_ERROR_NO_BINARY_FOR_GPU")

    report = gpu_preflight.probe(Broken([GPU]), driver=T4)
    assert report.matmul_error == "the matmul on /GPU:0 failed: RuntimeError: CUDA_ERROR_NO_BINARY_FOR_GPU"


def test_the_fix_follows_what_is_missing() -> None:
    no_gpu = FakeGpuTf([])
    # Driver there, TensorFlow in an image a CUDA build that cannot use it: the #62412 case (2.15.0-gpu).
    image = "tensorflow/tensorflow:2.15.0-gpu@sha256:" + "0" * 64
    text = gpu_preflight.message(gpu_preflight.probe(no_gpu, driver=T4, image=image))
    assert "driver:       595.91.07 via NVML, supports CUDA up to 13.2" in text
    assert "GPUs (driver): Tesla T4 (15360 MiB)" in text
    assert "built for CUDA 12.2, cuDNN 8" in text
    assert "tensorflow/tensorflow#62412" in text and "tensorflow[and-cuda]==2.15.1" in text
    # The same on the host (the gpu extra installed): the CUDA libraries it did not load.
    assert "reinstall the locked `gpu` extra" in gpu_preflight.fix(gpu_preflight.probe(no_gpu, driver=T4))
    # A driver older than the CUDA TensorFlow was built for.
    old = gpu_preflight.Driver(version="470.256.02", cuda_version="11.4", gpus=T4.gpus, source="NVML")
    assert "supports CUDA up to 11.4, older than the CUDA 12.2" in gpu_preflight.fix(
        gpu_preflight.probe(no_gpu, driver=old)
    )

    class CpuBuild(FakeGpuTf):
        def build_info(self) -> dict:
            return {"is_cuda_build": False}

    assert "CPU-only build" in gpu_preflight.fix(gpu_preflight.probe(CpuBuild([]), driver=T4))


def test_nvidia_smi_output_is_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_preflight.shutil, "which", lambda name: "/usr/bin/nvidia-smi")

    def run(cmd: list[str], **_kwargs) -> subprocess.CompletedProcess:
        return subprocess.CompletedProcess(cmd, 0, stdout="Tesla T4, 15360, 595.91.07\n")

    driver = gpu_preflight.smi_driver(run)
    assert (driver.version, driver.gpus, driver.source) == (
        "595.91.07",
        ({"name": "Tesla T4", "memory_total_mib": "15360"},),
        "nvidia-smi",
    )


def test_no_driver_here_is_reported_from_both_sources() -> None:
    driver = gpu_preflight.find_driver()
    assert driver.version == "" and "NVML" in driver.error and "nvidia-smi: not found" in driver.error


def test_loaded_libraries_come_from_the_memory_map(tmp_path: Path) -> None:
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f01 r-xp 0 08:01 1 /venv/nvidia/cudnn/lib/libcudnn.so.8\n"
        "7f01-7f02 r-xp 0 08:01 2 /usr/lib/x86_64-linux-gnu/libcuda.so.595.91.07\n"
        "7f02-7f03 r-xp 0 08:01 3 /usr/lib/libc.so.6\n"
        "7f03-7f04 rw-p 0 00:00 0 [heap]\n"
    )
    assert gpu_preflight.loaded_cuda_libraries(str(maps)) == ("libcuda.so.595.91.07", "libcudnn.so.8")


@pytest.mark.parametrize(
    ("value", "expected"), [("", False), ("false", False), ("true", True), (" TRUE ", True)]
)
def test_allow_cpu_flag_values(value: str, expected: bool) -> None:
    assert gpu_preflight.parse_flag(value) is expected


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
