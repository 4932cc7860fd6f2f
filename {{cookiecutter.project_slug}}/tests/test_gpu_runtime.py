"""The README's "2.15.1 everywhere" matches what the GPU job really runs (manual/gpu-runtime.md): the train job
installs the locked `gpu` extra on the host, whose TensorFlow is the CPU extra's version and whose CUDA/cuDNN
wheels are the ones TensorFlow 2.15 is built for; a container, if a user adds one, is pinned by digest."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

PROJECT = Path(__file__).resolve().parent.parent
# TensorFlow's tested build configurations (tensorflow.org/install/source#gpu, read 2026-12-01):
# tensorflow-2.15.0 | Python 3.9-3.11 | cuDNN 8.9 | CUDA 12.2.
TESTED_CUDA, TESTED_CUDNN = "12.2", "8.9"


def _locked() -> dict[str, str]:
    lock = tomllib.loads((PROJECT / "uv.lock").read_text(encoding="utf-8"))
    return {p["name"]: p["version"] for p in lock["package"]}


def _extra(name: str) -> list[str]:
    pyproject = tomllib.loads((PROJECT / "pyproject.toml").read_text(encoding="utf-8"))
    return pyproject["project"]["optional-dependencies"][name]


def test_gpu_and_cpu_extras_lock_the_same_tensorflow_the_readme_names() -> None:
    locked = _locked()
    assert _extra("gpu") == ["tensorflow[and-cuda]==2.15.1"] and _extra("cpu") == ["tensorflow-cpu==2.15.1"]
    assert locked["tensorflow"] == locked["tensorflow-cpu"] == "2.15.1"
    readme = (PROJECT / "README.md").read_text(encoding="utf-8")
    claim = re.search(r"TensorFlow is pinned to (\S+) everywhere", readme)
    assert claim and claim.group(1).rstrip(":") == locked["tensorflow"]
    # The claim must not name an image whose TensorFlow is another version as what the GPU host runs.
    assert "`tensorflow/tensorflow:2.15.0-gpu` image on\nthe GPU host" not in readme


def test_the_locked_cuda_wheels_are_the_ones_tensorflow_215_is_built_for() -> None:
    locked = _locked()
    assert locked["nvidia-cudnn-cu12"].startswith(TESTED_CUDNN + ".")
    for wheel in ("nvidia-cublas-cu12", "nvidia-cuda-runtime-cu12", "nvidia-cuda-nvrtc-cu12"):
        assert locked[wheel].startswith(TESTED_CUDA + "."), wheel
    # 2.15.0's extra pinned TensorRT wheels that do not exist (tensorflow PR #62520); 2.15.1's has none.
    assert not [name for name in locked if name.startswith("tensorrt")]


def test_the_train_job_installs_the_locked_gpu_extra_or_a_digest_pinned_image() -> None:
    train = yaml.safe_load((PROJECT / ".github" / "workflows" / "train.yml").read_text(encoding="utf-8"))
    job = train["jobs"]["train"]
    setup = next(s for s in job["steps"] if "/.github/actions/setup@" in s.get("uses", ""))
    assert setup["with"]["install"] == "gpu"
    container = job.get("container")
    image = (container or {}).get("image", "") if isinstance(container, dict) else (container or "")
    settings = yaml.safe_load((PROJECT / "configs" / "gpu-runner.yaml").read_text(encoding="utf-8"))
    # Host mode by default; an image (a user's choice) only by tag and digest, and the same one pre-pulled.
    assert image == settings["image"]
    if image:
        assert re.fullmatch(r"[^\s@]+:[^\s@]+@sha256:[0-9a-f]{64}", image), image
