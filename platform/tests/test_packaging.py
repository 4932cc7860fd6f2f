"""What the platform's distribution ships beside the product, and what that must never do where it is installed.

The doubles (gpu_runner_testing) ship in the same wheel as gpu_runner, so every job that installs the platform
has them on disk. Held here: nothing loads them unasked (no `pytest11` entry point: the plugin points AWS at fake
credentials and drops MLFLOW_TRACKING_URI when imported), importing the product leaves the environment alone,
and the reaper Lambda's zip, built from gpu_runner/, holds none of them.
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


def test_the_wheel_holds_the_two_packages_side_by_side() -> None:
    packages = PYPROJECT["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    assert packages == ["src/gpu_runner", "src/gpu_runner_testing"]


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
