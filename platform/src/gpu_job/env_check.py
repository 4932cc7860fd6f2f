"""Environment parity: what this interpreter runs against what uv.lock pins (`make env-check`; the GPU preflight).

The article's rule is that code which works on the CPU box works on the GPU. That holds only while both run the
same stack: Python, TensorFlow, Keras, NumPy and protobuf from one uv.lock, and a TensorFlow whose CUDA/cuDNN
build fits the GPU. The one difference that fails the check is a TensorFlow of another minor version than the
lock's: 2.15.x kernels, Keras 2 and the SavedModel format are what the project is tested with, while a patch
release (a TF image's 2.15.0.post1 beside the locked 2.15.1) is the same API. Any other difference is reported,
not fatal: the GPU job's venv installs the lock's own Keras, NumPy and protobuf over the image's.
"""

from __future__ import annotations

import re
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from .gpu_preflight import TfBoundary

# The lock names TensorFlow twice: tensorflow (the gpu extra) and tensorflow-cpu (the cpu extra), one version.
TENSORFLOW = ("tensorflow", "tensorflow-cpu")
PACKAGES = ("keras", "numpy", "protobuf")
# uv writes requires-python = ">=3.11,<3.12" into uv.lock as "==3.11.*".
_PYTHON_PIN = re.compile(r"^==(\d+)\.(\d+)\.\*$")


@dataclass(frozen=True)
class Row:
    name: str
    installed: str
    locked: str
    ok: bool
    fatal: bool = False  # a difference here fails the check (TensorFlow's minor version)


def locked_versions(lock: Path) -> tuple[str, dict[str, set[str]]]:
    """uv.lock's requires-python and every version it pins per package name."""
    try:
        data = tomllib.loads(lock.read_text())
    except FileNotFoundError as error:
        raise ValueError(f"{lock}: no such file (run from the project root, or pass --lock)") from error
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{lock}: not a uv.lock ({error})") from error
    versions: dict[str, set[str]] = {}
    for package in data.get("package", []):
        versions.setdefault(package["name"], set()).add(str(package.get("version", "")))
    return str(data.get("requires-python", "")), versions


def minor(version: str) -> str:
    """ "2.15.1" -> "2.15" (also "3.11.0rc1" -> "3.11")."""
    return ".".join(version.split(".")[:2])


def _installed(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return ""


def compare(
    requires_python: str,
    locked: Mapping[str, set[str]],
    python: str,
    tensorflow: str,
    installed: Mapping[str, str],
) -> list[Row]:
    """One row per checked piece: the interpreter, TensorFlow (by minor version), then PACKAGES exactly."""
    pin = _PYTHON_PIN.match(requires_python)
    rows = [
        Row(
            "Python",
            python,
            requires_python or "not in the lock",
            bool(pin) and minor(python) == f"{pin[1]}.{pin[2]}",  # type: ignore[index]
            fatal=bool(pin),
        )
    ]
    tf_locked = sorted(set().union(*(locked.get(name, set()) for name in TENSORFLOW)))
    rows.append(
        Row(
            "TensorFlow",
            tensorflow or "not installed",
            ", ".join(tf_locked) or "not in the lock",
            bool(tensorflow) and minor(tensorflow) in {minor(v) for v in tf_locked},
            fatal=True,
        )
    )
    for name in PACKAGES:
        versions = sorted(locked.get(name, set()))
        have = installed.get(name, "")
        rows.append(
            Row(name, have or "not installed", ", ".join(versions) or "not in the lock", have in versions)
        )
    return rows


def build_rows(build: Mapping[str, Any]) -> list[tuple[str, str]]:
    """What TensorFlow was built for (tf.sysconfig.get_build_info()): reported, no lock entry to compare with."""
    if not build.get("is_cuda_build"):
        return [("CUDA / cuDNN (TensorFlow's build)", "none: a CPU-only TensorFlow build")]
    return [
        ("CUDA (TensorFlow's build)", str(build.get("cuda_version", "?"))),
        ("cuDNN (TensorFlow's build)", str(build.get("cudnn_version", "?"))),
    ]


@dataclass(frozen=True)
class Check:
    rows: list[Row]
    build: list[tuple[str, str]]

    @property
    def failed(self) -> list[Row]:
        return [row for row in self.rows if row.fatal and not row.ok]

    def error(self) -> str:
        """The message for a failed check: what differs, and the fix."""
        parts = [f"{row.name} {row.installed}, but uv.lock pins {row.locked}" for row in self.failed]
        return (
            "this environment is not the locked one: "
            + "; ".join(parts)
            + ". Fix: use the image or AMI whose "
            "TensorFlow has the locked minor version (manual/gpu-runtime.md), or `uv sync --locked` in a venv of "
            "the locked Python; change TensorFlow only by editing pyproject.toml and relocking, so every "
            "environment moves together"
        )

    def table(self) -> str:
        lines = ["| | installed | uv.lock | |", "|---|---|---|---|"]
        for row in self.rows:
            verdict = "ok" if row.ok else ("DIFFERS (fails)" if row.fatal else "differs")
            lines.append(f"| {row.name} | {row.installed} | {row.locked} | {verdict} |")
        lines += [f"| {name} | {value} | | |" for name, value in self.build]
        return "\n".join(lines)


def check(lock: Path, tf: TfBoundary | None = None) -> Check:
    """Compare this interpreter with `lock` (imports TensorFlow, through the preflight's boundary)."""
    requires_python, locked = locked_versions(lock)
    tf = tf or TfBoundary()
    python = ".".join(str(part) for part in sys.version_info[:3])
    rows = compare(requires_python, locked, python, tf.version(), {n: _installed(n) for n in PACKAGES})
    return Check(rows, build_rows(tf.build_info()))
