"""The GPU preflight's verdict and message (gpu_job.gpu_preflight) against a GPU machine's answers
(gpu_runner_testing.gpu_answers), and what it reads from this machine: nvidia-smi's output, NVML without a driver,
the process' memory map. A generated project runs the failure path with its real TensorFlow and its CLI
(tests/test_gpu_preflight.py there)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpu_job import gpu_preflight
from gpu_runner_testing.gpu_answers import GPU, T4, FakeGpuTf


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
