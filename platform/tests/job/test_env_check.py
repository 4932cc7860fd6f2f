"""The environment check (gpu_job.env_check) against a uv.lock written here: which differences fail (Python's and
TensorFlow's minor version) and which are only reported, the table and the message with its fix, and a missing
or broken lock named. A generated project runs it against its real lock and its real TensorFlow (its
tests/test_env_check.py: `env-check`, and the GPU preflight stopping on another TensorFlow)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpu_job import env_check
from gpu_runner_testing.gpu_answers import FakeGpuTf

# The pieces of a uv.lock the check reads (uv's format: requires-python, then one [[package]] per name and
# version; a lock of the project's two extras names TensorFlow twice).
LOCK = """version = 1
requires-python = "==3.11.*"

[[package]]
name = "tensorflow"
version = "2.15.1"

[[package]]
name = "tensorflow-cpu"
version = "2.15.1"

[[package]]
name = "numpy"
version = "1.26.4"
"""


@pytest.mark.parametrize(
    ("tensorflow", "python", "numpy", "fails", "differs"),
    [
        ("2.15.0.post1", "3.11.7", "1.26.4", [], []),  # a TF image's patch release: the same API
        ("2.16.1", "3.11.7", "1.26.4", ["TensorFlow"], []),
        ("", "3.11.7", "1.26.4", ["TensorFlow"], []),
        ("2.15.1", "3.12.1", "1.26.4", ["Python"], []),
        ("2.15.1", "3.11.7", "1.26.0", [], ["numpy"]),  # reported, not fatal: the venv installs the lock's
    ],
)
def test_only_python_and_tensorflow_s_minor_version_fail(
    tensorflow: str, python: str, numpy: str, fails: list[str], differs: list[str]
) -> None:
    locked = {"tensorflow": {"2.15.1"}, "tensorflow-cpu": {"2.15.1"}, "keras": {"2.15.0"}}
    locked |= {"numpy": {"1.26.4"}, "protobuf": {"4.25.9"}}
    installed = {"keras": "2.15.0", "numpy": numpy, "protobuf": "4.25.9"}
    rows = env_check.compare("==3.11.*", locked, python, tensorflow, installed)
    parity = env_check.Check(rows, [])
    assert [row.name for row in parity.failed] == fails
    assert [row.name for row in rows if not row.ok and not row.fatal] == differs


def test_the_lock_is_read_per_name_and_a_missing_or_broken_one_is_named(tmp_path: Path) -> None:
    lock = tmp_path / "uv.lock"
    lock.write_text(LOCK)
    assert env_check.locked_versions(lock) == (
        "==3.11.*",
        {"tensorflow": {"2.15.1"}, "tensorflow-cpu": {"2.15.1"}, "numpy": {"1.26.4"}},
    )
    with pytest.raises(
        ValueError, match=r"uv\.lock: no such file \(run from the project root, or pass --lock\)"
    ):
        env_check.locked_versions(tmp_path / "elsewhere" / "uv.lock")
    lock.write_text("version = [")
    with pytest.raises(ValueError, match=r"not a uv\.lock"):
        env_check.locked_versions(lock)


def test_the_check_reports_every_row_and_names_the_fix(tmp_path: Path) -> None:
    """This interpreter against the lock, TensorFlow's answers from a GPU machine: Python and TensorFlow agree;
    keras and protobuf are not in this lock (reported, not fatal); the build's CUDA and cuDNN are listed."""
    lock = tmp_path / "uv.lock"
    lock.write_text(LOCK)
    parity = env_check.check(lock, tf=FakeGpuTf([]))
    assert sys.version_info[:2] == (3, 11)  # the lock's Python: the platform's own requires-python
    assert parity.failed == []
    table = parity.table()
    assert "| TensorFlow | 2.15.1 | 2.15.1 | ok |" in table
    assert "| keras |" in table and "| not in the lock | differs |" in table
    assert "| CUDA (TensorFlow's build) | 12.2 | | |" in table

    lock.write_text(LOCK.replace('"2.15.1"', '"2.16.1"'))
    failed = env_check.check(lock, tf=FakeGpuTf([]))
    assert [row.name for row in failed.failed] == ["TensorFlow"]
    assert "| TensorFlow | 2.15.1 | 2.16.1 | DIFFERS (fails) |" in failed.table()
    assert failed.error().startswith(
        "this environment is not the locked one: TensorFlow 2.15.1, but uv.lock pins 2.16.1. Fix: use the image "
        "or AMI whose TensorFlow has the locked minor version"
    )
