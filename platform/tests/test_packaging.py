"""What the platform's distribution ships beside the product, and what that must never do where it is installed.

The job library (gpu_job) and the doubles (gpu_runner_testing) ship in the same wheel as gpu_runner, so every job
that installs the platform has them on disk. Held here: nothing loads the doubles unasked (no `pytest11` entry
point: the plugin points AWS at fake credentials and drops MLFLOW_TRACKING_URI when imported), importing the
product leaves the environment alone, the job library loads none of the launch code, and the reaper Lambda's zip,
built from gpu_runner/, holds neither of the other two packages.
"""

from __future__ import annotations

import importlib.metadata
import io
import json
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from gpu_runner.setup import lambda_zip

PYPROJECT = tomllib.loads(
    (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8")
)
# What a fresh interpreter reports after an import: the AWS key and tracking URI it sees, and whether any module
# of the doubles was loaded.
PROBE = (
    "import json, os, sys, importlib; importlib.import_module(sys.argv[1]); print(json.dumps({"
    "'key': os.environ.get('AWS_ACCESS_KEY_ID'), 'uri': os.environ.get('MLFLOW_TRACKING_URI'), "
    "'doubles': sorted(m for m in sys.modules if m.startswith('gpu_runner_testing'))}))"
)


def probe(module: str) -> dict:
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "the-teams-own", "MLFLOW_TRACKING_URI": "http://mlflow.example"}
    result = subprocess.run(
        [sys.executable, "-c", PROBE, module],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(result.stdout)


def test_the_wheel_holds_the_three_packages_side_by_side() -> None:
    packages = PYPROJECT["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    assert packages == ["src/gpu_runner", "src/gpu_job", "src/gpu_runner_testing"]


# Every module of the job library, imported in one fresh interpreter: what else it loaded.
JOB_PROBE = (
    "import json, pkgutil, sys, importlib, gpu_job; "
    "[importlib.import_module(f'gpu_job.{m.name}') for m in pkgutil.iter_modules(gpu_job.__path__)]; "
    "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & set(sys.argv[1:]))))"
)


def test_the_job_library_loads_neither_the_launch_code_nor_tensorflow() -> None:
    """A training job imports gpu_job beside its own TensorFlow; a CPU launch job never needs it. Importing
    every module of it loads no gpu_runner, no doubles and no TensorFlow (this environment has none: the check
    is that nothing asks for it), and leaves AWS and MLflow settings alone."""
    watched = ["gpu_runner", "gpu_runner_testing", "tensorflow", "keras"]
    result = subprocess.run(
        [sys.executable, "-c", JOB_PROBE, *watched], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(result.stdout) == []
    # The probe sees an import when there is one.
    control = JOB_PROBE.replace("gpu_job; ", "gpu_job, gpu_runner.cli; ")
    seen = subprocess.run(
        [sys.executable, "-c", control, *watched], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(seen.stdout) == ["gpu_runner"]


def test_no_entry_point_loads_the_doubles() -> None:
    assert "pytest11" not in PYPROJECT["project"].get("entry-points", {})
    installed = importlib.metadata.distribution("gpu-runner").entry_points
    assert {(ep.group, ep.name) for ep in installed} == {("console_scripts", "gpu-runner")}


def test_importing_the_product_leaves_aws_and_mlflow_as_they_were() -> None:
    assert probe("gpu_runner.cli") == {"key": "the-teams-own", "uri": "http://mlflow.example", "doubles": []}
    # The probe sees a change when there is one: the plugin, imported by name, swaps both.
    plugin = probe("gpu_runner_testing.pytest_plugin")
    assert (plugin["key"], plugin["uri"]) == ("testing", None)


def test_the_reaper_lambdas_zip_holds_no_double() -> None:
    names = zipfile.ZipFile(io.BytesIO(lambda_zip.build_zip())).namelist()
    assert "gpu_runner/ec2_runner/reaper_lambda.py" in names
    assert [name for name in names if not name.startswith("gpu_runner/")] == []
