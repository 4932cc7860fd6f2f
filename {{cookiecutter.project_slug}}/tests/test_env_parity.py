"""The three places the project runs name one stack: the dev container, CI and the GPU job. Python, uv and
TensorFlow come from uv.lock and the platform's setup action (at the project's pin); this test reads each file
and holds them to the lock, so a change in one place that the others do not follow fails here, not on a paid GPU.
(At run time the GPU preflight checks the same against the lock: tests/test_env_check.py.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from gpu_job import env_check
from gpu_runner_testing.platform_tree import platform_tree

PROJECT = Path(__file__).resolve().parent.parent
WORKFLOWS = PROJECT / ".github" / "workflows"
# The platform's setup action at the project's pin (gpu_runner_testing.platform_tree): what CI and the GPU job run.
PLATFORM_ACTIONS = platform_tree(PROJECT, PROJECT / ".e2e-cache") / ".github" / "actions"
SETUP = yaml.safe_load((PLATFORM_ACTIONS / "setup" / "action.yml").read_text())
# The workflows call it as <owner>/<template>/.github/actions/setup@<commit> (the pin: tests/workflows).
SETUP_CALL = re.compile(r"[\w.-]+/[\w.-]+/\.github/actions/setup@[0-9a-f]{40}")
REQUIRES_PYTHON, LOCKED = env_check.locked_versions(PROJECT / "uv.lock")
TF_MINOR = {env_check.minor(v) for name in env_check.TENSORFLOW for v in LOCKED[name]}
POST_CREATE = (PROJECT / ".devcontainer" / "post-create.sh").read_text()


def _steps(workflow: str, job: str) -> list[dict]:
    return yaml.safe_load((WORKFLOWS / workflow).read_text())["jobs"][job]["steps"]


def _setup(workflow: str, job: str) -> dict:
    (step,) = [s for s in _steps(workflow, job) if SETUP_CALL.fullmatch(str(s.get("uses", "")))]
    return step.get("with", {})


def _shell_value(name: str) -> str:
    match = re.search(rf'^(?:export )?{name}="?([^"\s]+)"?$', POST_CREATE, re.MULTILINE)
    assert match, f".devcontainer/post-create.sh sets no {name}"
    return match[1]


def test_one_tensorflow_minor_version_in_the_lock() -> None:
    assert len(TF_MINOR) == 1, LOCKED


def test_the_dev_container_image_is_the_lock_s_tensorflow_family() -> None:
    image = json.loads((PROJECT / ".devcontainer" / "devcontainer.json").read_text())["image"]
    match = re.fullmatch(r"tensorflow/tensorflow:(\d+\.\d+\.\d+)", image)
    assert match, f"the dev container's image is not a CPU tag of tensorflow/tensorflow: {image}"
    assert {env_check.minor(match[1])} == TF_MINOR


def test_python_is_the_lock_s_everywhere() -> None:
    lock_python = re.fullmatch(r"==(\d+\.\d+)\.\*", REQUIRES_PYTHON)
    assert lock_python, REQUIRES_PYTHON
    assert SETUP["inputs"]["python-version"]["default"] == lock_python[1]  # CI and the GPU job
    assert _shell_value("UV_PYTHON") == lock_python[1]  # the dev container


def test_uv_is_the_setup_action_s_release_in_the_dev_container() -> None:
    (install_uv,) = [
        s for s in SETUP["runs"]["steps"] if str(s.get("uses", "")).startswith("astral-sh/setup-uv@")
    ]
    assert _shell_value("UV_VERSION") == install_uv["with"]["version"]


def test_the_dev_container_and_ci_install_the_same_cpu_environment() -> None:
    # post-create runs `make install`: uv sync --locked --extra $(TF_EXTRA), TF_EXTRA's default cpu.
    assert re.search(r"^make install$", POST_CREATE, re.MULTILINE)
    makefile = (PROJECT / "Makefile").read_text()
    assert "TF_EXTRA ?= cpu" in makefile and "\tuv sync --locked --extra $(TF_EXTRA)" in makefile.replace(
        "$(UV)", "uv"
    )
    assert SETUP["inputs"]["install"]["default"] == "project" and SETUP["inputs"]["extra"]["default"] == "cpu"
    for job in ("test", "test-slow"):
        assert _setup("ci.yml", job) == {}, job  # the defaults: project, cpu


def test_every_gpu_job_installs_the_locked_gpu_extra_and_checks_it() -> None:
    for workflow, job in (("train.yml", "train"), ("sweep-trial.yml", "train"), ("predict.yml", "train")):
        assert _setup(workflow, job)["install"] == "gpu", (workflow, job)
        runs = " ".join(str(s.get("run", "")) for s in _steps(workflow, job))
        assert "gpu-preflight" in runs, (workflow, job)  # which first runs env-check against uv.lock
    assert {
        env_check.minor(v) for v in LOCKED["tensorflow"]
    } == TF_MINOR  # the gpu extra's tensorflow[and-cuda]


def test_the_suggested_gpu_image_is_the_same_family() -> None:
    settings = (PROJECT / "configs" / "gpu-runner.yaml").read_text()
    tags = re.findall(r"tensorflow/tensorflow:(\d+\.\d+)\.[\w.]*-gpu", settings)
    assert tags and set(tags) == TF_MINOR, tags
