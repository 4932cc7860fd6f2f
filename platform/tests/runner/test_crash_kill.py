"""The e2e crash (gpu_runner_testing.aws_fault_proxy.kill_matching) hits the launch process of its own story, and neither act,
whose command line names `...:role/gpu-runner` and `...-predict-launch` in its `--var`s, nor a story beside it."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_runner_testing.aws_fault_proxy import kill_matching

SLEEP = "import time; time.sleep(60)"


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen]]:
    started: list[subprocess.Popen] = []
    yield started
    for process in started:
        process.kill()
        process.wait()


def _start(started: list[subprocess.Popen], argv: list[str], cwd: Path) -> subprocess.Popen:
    cwd.mkdir(parents=True, exist_ok=True)
    started.append(subprocess.Popen(argv, cwd=cwd))
    return started[-1]


def test_only_the_story_s_own_launch_process_is_killed(
    tmp_path: Path, processes: list[subprocess.Popen]
) -> None:
    script = tmp_path / "bin" / "gpu-runner"  # what `uv run gpu-runner` runs: python .venv/bin/gpu-runner
    script.parent.mkdir()
    script.write_text(f"#!{sys.executable}\n{SLEEP}\n")
    script.chmod(0o755)
    story, other = tmp_path / "story", tmp_path / "other-story"
    launch = _start(processes, [sys.executable, str(script), "--settings", "x.yaml", "launch"], story / "job")
    beside = _start(processes, [sys.executable, str(script), "--settings", "x.yaml", "launch"], other / "job")
    act_like = _start(
        processes,
        [sys.executable, "-c", SLEEP, "--var", "AWS_ROLE_ARN=arn:aws:iam::123456789012:role/gpu-runner",
         "--var", "AWS_PREDICT_LAUNCH_ROLE_ARN=arn:aws:iam::123456789012:role/gpu-runner-predict-launch"],
        story,
    )  # fmt: skip
    teardown = _start(processes, [sys.executable, str(script), "teardown"], story / "job")

    killed = kill_matching("gpu-runner", "launch", under=story)

    assert killed == [launch.pid]
    assert launch.wait(timeout=10) == -signal.SIGKILL
    assert [p.poll() for p in (beside, act_like, teardown)] == [None, None, None]


def test_without_a_scope_every_matching_process_is_killed(
    tmp_path: Path, processes: list[subprocess.Popen]
) -> None:
    # A module name of this run only: an unscoped kill must not reach the same test running in another bake.
    package = f"pkg_under_test_kill_{uuid.uuid4().hex}"
    argv = [sys.executable, "-c", SLEEP, "-m", package, "predict"]
    first, second = (_start(processes, argv, tmp_path / name) for name in ("a", "b"))
    trainer = _start(processes, [sys.executable, "-c", SLEEP, "-m", package, "train"], tmp_path)

    killed = kill_matching("-m", package, "predict")

    assert sorted(killed) == sorted([first.pid, second.pid]), (killed, first.pid, second.pid)
    assert trainer.poll() is None
