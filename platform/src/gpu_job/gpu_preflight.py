"""GPU preflight: before a paid GPU trains, TensorFlow must list a GPU and run a small op on it.

The train job's first project step on the GPU runner (`python -m <package> gpu-preflight`). When TensorFlow sees
no GPU it stops the job at once with exit status EXIT_NO_GPU and one message naming the image, the driver, the
CUDA/cuDNN versions TensorFlow was built for and the ones found, and the fix; only an explicit flag
(`training.allow_cpu: true` in the train config, or the `allow-cpu` dispatch input) lets it go on on CPU.

Why a preflight at all: `tensorflow/tensorflow:2.15.0-gpu` has an open report that TensorFlow sees no GPU while
nvidia-smi does (tensorflow/tensorflow#62412, read 2026-12-01), and TensorFlow then silently trains on the CPU.
Everything TensorFlow-specific goes through `TfBoundary`, the one place a test may replace (no GPU here).

The one module of the platform that imports TensorFlow (the `tensorflow` contract in platform/pyproject.toml): whether
TensorFlow can train on this GPU is a question only TensorFlow answers. The imports sit inside TfBoundary's
methods so that the CLI and tracking (which read `Driver`) import this module without loading TensorFlow.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import EXIT_NO_GPU

__all__ = ["EXIT_NO_GPU", "Driver", "Report", "TfBoundary", "probe"]
# The matmul the check runs on /GPU:0: small, exact in float32, and its result is checked, not only its device.
_A = [[1.0, 2.0], [3.0, 4.0]]
_B = [[5.0, 6.0], [7.0, 8.0]]
_PRODUCT = [[19.0, 22.0], [43.0, 50.0]]
# Shared libraries whose presence in this process says which CUDA stack TensorFlow really loaded.
_CUDA_LIBRARIES = ("libcuda.so", "libcudart.so", "libcudnn.so", "libcublas.so", "libnvidia-ml.so")


@dataclass(frozen=True)
class Driver:
    """What the NVIDIA driver says (NVML through nvidia-ml-py, else nvidia-smi); empty when there is none."""

    version: str = ""
    cuda_version: str = ""  # the newest CUDA the driver supports (NVML's cuda driver version)
    gpus: tuple[dict[str, str], ...] = ()  # name, memory_total_mib per GPU
    source: str = ""
    error: str = ""


@dataclass(frozen=True)
class Report:
    """Everything the preflight found; `ok` is the verdict."""

    gpus: tuple[str, ...]
    matmul_device: str
    matmul_error: str
    build: Mapping[str, Any]
    loaded: tuple[str, ...]
    driver: Driver
    image: str
    allow_cpu: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def gpu_ok(self) -> bool:
        return bool(self.gpus) and not self.matmul_error and "GPU:0" in self.matmul_device.upper()

    @property
    def result(self) -> str:
        """The train job's `gpu-preflight` output: ok, cpu-allowed (the debugging flag) or no-gpu."""
        if self.gpu_ok:
            return "ok"
        return "cpu-allowed" if self.allow_cpu else "no-gpu"


class TfBoundary:
    """The calls into TensorFlow. Tests on a machine without a GPU replace this object, nothing else."""

    def list_gpus(self) -> list[str]:
        import tensorflow as tf

        return [device.name for device in tf.config.list_physical_devices("GPU")]

    def matmul_on(self, device: str) -> tuple[str, list[list[float]]]:
        """Run the matmul placed on `device`; returns the device the result lives on and its value.

        TensorFlow's soft placement (on by default) quietly runs an op on the CPU when the asked device does not
        exist, so the caller checks the returned device, never only that the call did not raise."""
        import tensorflow as tf

        with tf.device(device):
            product = tf.linalg.matmul(tf.constant(_A), tf.constant(_B))
        return product.device, product.numpy().tolist()

    def build_info(self) -> dict[str, Any]:
        import tensorflow as tf

        return dict(tf.sysconfig.get_build_info())

    def version(self) -> str:
        import tensorflow as tf

        return tf.__version__


def nvml_driver() -> Driver:
    """The driver through NVML (nvidia-ml-py, the library MLflow's GPU system metrics use)."""
    try:
        import pynvml
    except ImportError:
        return Driver(error="nvidia-ml-py is not installed")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:  # no driver, or no GPU passed to the container
        return Driver(source="NVML", error=f"NVML: {error}")
    try:
        cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total // (1024 * 1024)
            gpus.append(
                {
                    "name": name.decode() if isinstance(name, bytes) else str(name),
                    "memory_total_mib": str(memory),
                }
            )
        version = pynvml.nvmlSystemGetDriverVersion()
        return Driver(
            version=version.decode() if isinstance(version, bytes) else str(version),
            cuda_version=f"{cuda // 1000}.{cuda % 1000 // 10}",
            gpus=tuple(gpus),
            source="NVML",
        )
    finally:
        pynvml.nvmlShutdown()


def smi_driver(run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> Driver:
    """The driver through nvidia-smi, when NVML could not be asked."""
    if not shutil.which("nvidia-smi"):
        return Driver(error="nvidia-smi: not found")
    query = ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits"]
    try:
        out = run(query, capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError) as error:
        return Driver(source="nvidia-smi", error=f"nvidia-smi: {error}")
    rows = [[cell.strip() for cell in line.split(",")] for line in out.splitlines() if line.strip()]
    gpus = tuple({"name": r[0], "memory_total_mib": r[1]} for r in rows if len(r) == 3)
    return Driver(version=rows[0][2] if rows and len(rows[0]) == 3 else "", gpus=gpus, source="nvidia-smi")


def find_driver() -> Driver:
    driver = nvml_driver()
    if driver.version:
        return driver
    fallback = smi_driver()
    if fallback.version:
        return fallback
    return Driver(error="; ".join(e for e in (driver.error, fallback.error) if e))


def loaded_cuda_libraries(maps: str = "/proc/self/maps") -> tuple[str, ...]:
    """The CUDA libraries this process has loaded (file names with their version suffix), from the memory map."""
    try:
        with open(maps, encoding="utf-8", errors="replace") as handle:
            paths = {line.split()[-1] for line in handle if "/" in line}
    except OSError:
        return ()
    names = {os.path.basename(p) for p in paths}
    return tuple(sorted(n for n in names if n.startswith(_CUDA_LIBRARIES)))


def probe(
    tf: TfBoundary | None = None, driver: Driver | None = None, image: str = "", allow_cpu: bool = False
) -> Report:
    """Ask TensorFlow for its GPUs and run the matmul on /GPU:0; collect what explains a failure."""
    tf = tf or TfBoundary()
    gpus = tuple(tf.list_gpus())
    device, error = "", ""
    if gpus:
        try:
            device, value = tf.matmul_on("/GPU:0")
            if value != _PRODUCT:
                error = f"the matmul on /GPU:0 returned {value}, expected {_PRODUCT}"
            elif "GPU:0" not in device.upper():
                error = f"the matmul asked for /GPU:0 ran on {device or 'an unknown device'}"
        except Exception as failure:  # any TF/CUDA error here is the finding, reported with its text
            error = f"the matmul on /GPU:0 failed: {type(failure).__name__}: {failure}"
    else:
        error = "TensorFlow lists no GPU"
    return Report(
        gpus=gpus,
        matmul_device=device,
        matmul_error=error,
        build=tf.build_info(),
        loaded=loaded_cuda_libraries(),
        driver=driver if driver is not None else find_driver(),
        image=image,
        allow_cpu=allow_cpu,
        notes=(f"TensorFlow {tf.version()}",),
    )


def _built_for(build: Mapping[str, Any]) -> str:
    if not build.get("is_cuda_build"):
        return "no CUDA (a CPU-only TensorFlow build)"
    return f"CUDA {build.get('cuda_version', '?')}, cuDNN {build.get('cudnn_version', '?')}"


def fix(report: Report) -> str:
    """The one thing to change, from the most basic missing piece up."""
    if not report.driver.version:
        return (
            "no NVIDIA driver is visible: launch from the Deep Learning Base OSS Nvidia Driver GPU AMI "
            "(ami_parameter in configs/gpu-runner.yaml) on a GPU instance type; in a container, run it with "
            "`--gpus all` (train.yml's container options)"
        )
    if not report.build.get("is_cuda_build"):
        return (
            "this TensorFlow is a CPU-only build: on the GPU runner install the locked `gpu` extra "
            "(`uv sync --locked --extra gpu`: tensorflow[and-cuda]==2.15.1 with its CUDA 12 libraries), or use an "
            "image whose TensorFlow is a CUDA build"
        )
    built_major = _major(str(report.build.get("cuda_version", "")))
    driver_major = _major(report.driver.cuda_version)
    if built_major and driver_major and driver_major < built_major:
        return (
            f"the driver {report.driver.version} supports CUDA up to {report.driver.cuda_version}, older than the "
            f"CUDA {report.build.get('cuda_version')} TensorFlow was built for: use a current Deep Learning Base "
            "OSS Nvidia Driver AMI (ami_parameter) or a driver for CUDA 12"
        )
    if report.image:
        return (
            f"TensorFlow in {report.image} was built for {_built_for(report.build)} but could not use the GPU: "
            "remove the container and use host mode (the locked `gpu` extra, tensorflow[and-cuda]==2.15.1, brings "
            "exactly those CUDA/cuDNN libraries as pip wheels); tensorflow/tensorflow:2.15.0-gpu is known not to "
            "see the GPU (tensorflow/tensorflow#62412). See manual/gpu-runtime.md"
        )
    return (
        f"TensorFlow was built for {_built_for(report.build)} but did not load it (found: "
        f"{', '.join(report.loaded) or 'no CUDA library'}): reinstall the locked `gpu` extra "
        "(`uv sync --locked --extra gpu`: its nvidia-*-cu12 wheels hold those libraries) and check that nothing "
        "sets LD_LIBRARY_PATH to other CUDA libraries. See manual/gpu-runtime.md"
    )


def _major(version: str) -> int:
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else 0


def message(report: Report) -> str:
    """What the job log and summary say when the preflight fails (or is overridden)."""
    driver = report.driver
    gpus = ", ".join(f"{g['name']} ({g['memory_total_mib']} MiB)" for g in driver.gpus) or "none"
    found = ", ".join(report.loaded) or "none loaded"
    lines = [
        f"no GPU visible to TensorFlow: {report.matmul_error}",
        f"  image:        {report.image or 'none (host mode: the runner machine itself)'}",
        f"  driver:       {driver.version or 'not found'}"
        + (f" via {driver.source}, supports CUDA up to {driver.cuda_version}" if driver.cuda_version else "")
        + (f" ({driver.error})" if driver.error else ""),
        f"  GPUs (driver): {gpus}",
        f"  TensorFlow:   {'; '.join(report.notes)}, built for {_built_for(report.build)}",
        f"  found:        {found}",
        f"  fix:          {fix(report)}",
    ]
    if report.allow_cpu:
        lines.append(
            "  CPU training ALLOWED by the allow-cpu flag (debugging): the run is tagged gpu.allow_cpu=true"
        )
    else:
        lines.append(
            "  (to train on the CPU anyway, for debugging: training.allow_cpu: true in the train config, or the "
            "allow-cpu dispatch input)"
        )
    return "\n".join(lines)


def summary(report: Report) -> str:
    """Markdown for the job summary."""
    if report.gpu_ok:
        names = ", ".join(g["name"] for g in report.driver.gpus) or ", ".join(report.gpus)
        return f"### GPU preflight\n\nTensorFlow sees {len(report.gpus)} GPU(s) ({names}); the matmul ran on {report.matmul_device}.\n"
    title = (
        "no GPU visible: CPU training allowed (debugging flag)"
        if report.allow_cpu
        else "no GPU visible: training not started"
    )
    return f"### GPU preflight: {title}\n\n```\n{message(report)}\n```\n"


def parse_flag(value: str, name: str = "allow-cpu") -> bool:
    """The dispatch input as the workflow passes it: '' (push: not given), 'true' or 'false'."""
    normalized = value.strip().lower()
    if normalized in ("", "false"):
        return False
    if normalized == "true":
        return True
    raise ValueError(f"{name}: must be true or false (got {value!r})")
