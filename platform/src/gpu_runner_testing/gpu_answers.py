"""A GPU machine as gpu_job.gpu_preflight sees it, for tests on machines without one: the NVIDIA driver's report
and TensorFlow's answers (a TfBoundary). TensorFlow on a CPU cannot be made to list a logical GPU device, so the
success path of the preflight is only reachable through this double.

The driver's report is a test input in NVML's shape (a version string, the newest CUDA it supports, each GPU's
name and memory in MiB), not a claim about a particular driver release. TensorFlow's build is 2.15's: CUDA 12.2
and cuDNN 8 (TensorFlow's "Tested build configurations", https://www.tensorflow.org/install/source#gpu, the
table manual/gpu-runtime.md of a project quotes; build_info reports cuDNN by its major version).
"""

from __future__ import annotations

from gpu_job import gpu_preflight

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
