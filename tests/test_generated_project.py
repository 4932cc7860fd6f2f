"""Install baked projects from their lock and run their own lint and test suites, as a user would."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import bake_template, platform_git_env, write_config
from cookiecutter.main import cookiecutter

ROOT = Path(__file__).resolve().parent.parent
READ_BACK = Path(__file__).resolve().parent / "quick_start_read_back.py"

pytestmark = pytest.mark.generated

COMBINATIONS = {
    "defaults": {},
    # A long package name exercises line lengths the formatter must already accept; no licence file;
    # on-demand only; the AWS Batch backend; another branch prefix and default branch.
    "custom": {
        "project_name": "Retina Scan Classifier Experiments",
        "package_name": "retina_scan_classifier_experiments",
        "license": "Proprietary",
        "use_spot": False,
        "gpu_backend": "batch",
        "train_branch_prefix": "gpu/",
        "default_branch": "develop",
        "mlflow_experiment_name": 'retina "scans" — v2',
    },
}


# The platform's tests that no answer reaches (its doubles, stacks and runner lifecycle with settings made in
# code) are not in a bake at all: they run once, in platform/tests (`make test-platform`, issue 31).
# The custom bake skips the TensorFlow training modules (1 min 51 s of wall time on 2 workers, measured
# alone): between bakes their code differs only in the package name, which import_every_module checks on
# the custom bake by importing every module of its package (the training code included); the quoted
# experiment name is rendered into configs/train.yaml and the package's defaults.json, which test_config (both
# bakes) holds equal. With them, make test took 21 min 32 s on this machine's 2 cores (issue 13's tree), over
# the 20-minute budget.
TRAINING_MODULES = (
    "test_train.py", "test_pipeline.py", "test_callbacks.py", "test_runtime_and_model.py", "test_export.py",
    "test_predict.py", "test_predict_s3.py", "test_predict_registry.py",
    "test_pruning.py", "test_serving.py",
    # The dev environment (issue 17): the notebook trains an epoch in a kernel, the dev container's scripts
    # install and start Jupyter and MLflow (~1.5 min). Of the answers, only the package name reaches them.
    "test_notebook.py", "test_devcontainer.py",
    # Issue 18: two TensorFlow workers, alone and as a 2-node Batch job (~1.5 min of the custom bake's wall
    # time); of the answers, only the package name reaches them.
    "test_distributed.py",
    # Issue 31, to keep make test within 20 minutes with the platform's suite in it (22 min 38 s without
    # these on 2026-12-06): a sweep of four trials, the basic-auth server's promote (the study journal in S3,
    # the third, now runs once in platform/tests/job). Each names its own experiment and model, so no answer
    # but the package reaches them (test_served_files_story and test_gpu_preflight read the rendered configs
    # and lock: both bakes run them).
    "test_sweep.py", "test_promote_auth.py",
    # Issue 31 again (make test 18 to 20 minutes on 2026-12-07): two real trainings and promote's TensorFlow
    # evaluations of the held-out set (44 s of wall time on 2 workers alone, their servers' start included:
    # farm-bench, median of 3); each names its own model.
    "test_registry.py", "test_promote.py",
)  # fmt: skip
# The generated Makefile's test targets each bake runs; together they cover every test but e2e.
TIERS = {"defaults": ("test", "test-slow"), "custom": ("test-all",)}


def answers_named(source: str) -> set[str]:
    """The cookiecutter answers a template file's source names, the package name left out."""
    return set(re.findall(r"cookiecutter\.(\w+)", source)) - {"package_name"}


def test_the_modules_only_the_defaults_run_carry_no_answer_but_the_package_name() -> None:
    """What justifies TRAINING_MODULES: their source names no other answer (the custom bake imports every
    module of its package under its own name instead)."""
    tests = ROOT / "{{cookiecutter.project_slug}}" / "tests"
    named = {m: answers_named((tests / m).read_text(encoding="utf-8")) for m in TRAINING_MODULES}
    assert {module: answers for module, answers in named.items() if answers} == {}
    # The check can fail: the action contracts name the repository's owner and name.
    assert answers_named((tests / "test_action_contracts.py").read_text(encoding="utf-8")) == {
        "github_owner",
        "github_repo",
    }


def suite_args(name: str) -> str:
    ignores = [] if name == "defaults" else [f"--ignore=tests/{module}" for module in TRAINING_MODULES]
    return " ".join(["-q", "-p no:cacheprovider", *ignores])


def import_every_module(project: Path) -> list[str]:
    """Import every module of the baked package in the project's own environment; returns their names."""
    package = json.loads((project / ".cookiecutter.json").read_text())["cookiecutter"]["package_name"]
    script = (
        f"import importlib, pkgutil, {package}\n"
        # __main__ runs the CLI when imported.
        f"names = [m.name for m in pkgutil.walk_packages({package}.__path__, '{package}.')"
        " if not m.name.endswith('.__main__')]\n"
        "for name in names:\n    importlib.import_module(name)\n"
        "print(' '.join(names))"
    )
    result = subprocess.run(
        [str(project / ".venv" / "bin" / "python"), "-c", script], cwd=project, capture_output=True,
        text=True, env=project_env(), timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.split()


def project_env(**extra: str) -> dict[str, str]:
    """A baked project is its own world: no outer venv, no MAKEFLAGS/MAKELEVEL from the template's make, and
    no MLFLOW_TRACKING_URI, so `make train` logs to the README's default local store."""
    inherited = ("VIRTUAL_ENV", "UV_PROJECT", "MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MLFLOW_TRACKING_URI")
    kept = {k: v for k, v in os.environ.items() if not k.startswith(inherited)}
    return {**kept, **platform_git_env(), **extra}  # the pinned platform from this checkout (conftest)


def make(project: Path, *targets: str, timeout: int = 1200) -> subprocess.CompletedProcess:
    result = subprocess.run(
        ["make", *targets], cwd=project, capture_output=True, text=True, env=project_env(), timeout=timeout
    )
    assert result.returncode == 0, (
        f"make {' '.join(targets)} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    )
    return result


# ---------------------------------------------------------------------- the README's quick start, as written
def quick_start_targets(readme: str) -> list[str]:
    """The make targets of the README's numbered quick start (`1. `make install` — ...`), in order."""
    match = re.search(r"^## Quick start\b.*?$(.*?)^#", readme, flags=re.MULTILINE | re.DOTALL)
    assert match, "the generated README has no '## Quick start' section"
    commands = re.findall(r"^\d+\. `([^`]+)`", match.group(1), flags=re.MULTILINE)
    assert commands, f"no numbered `command` steps in the quick start:\n{match.group(1)}"
    targets = []
    for command in commands:
        words = command.split()
        assert len(words) == 2 and words[0] == "make", f"quick-start step {command!r} is not `make <target>`"
        targets.append(words[1])
    return targets


def flat_keys(data: dict[str, Any], prefix: str = "") -> set[str]:
    """Dotted keys of a nested mapping (lists are leaves), as the run logs the config as params."""
    keys: set[str] = set()
    for key, value in data.items():
        name = f"{prefix}{key}"
        keys |= flat_keys(value, f"{name}.") if isinstance(value, dict) else {name}
    return keys


def train_step(project: Path, state: dict[str, Any]) -> None:
    """`make train`: trains, logs to sqlite:///mlflow.db, ends with the run id, metrics and how to open it."""
    started = time.monotonic()
    out = make(project, "train").stdout
    state["train_seconds"] = time.monotonic() - started
    tail = "\n".join(out.splitlines()[-20:])
    run = re.search(r"^MLflow run ([0-9a-f]{32})$", tail, flags=re.MULTILINE)
    assert run, f"make train did not end with the run id:\n{tail}"
    assert "tracking: sqlite:///mlflow.db" in tail and "test_accuracy" in tail and "open:" in tail, tail
    assert (project / "mlflow.db").is_file()
    state["run_id"] = run.group(1)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def serving(project: Path, target: str, timeout: float = 180.0) -> Iterator[str]:
    """`make <target> MLFLOW_PORT=<free>` in its own process group, up once /health answers; stopped after."""
    port = free_port()
    log = project / f"{target}.log"
    # Machine load only, not what is served: job execution spawns workers (~2 GB of memory) the UI does not
    # need to show a run; one web worker (MLFLOW_WORKERS, the variable of `--workers`) starts faster than 4.
    env = project_env(MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false", MLFLOW_WORKERS="1")
    with log.open("w") as handle:
        process = subprocess.Popen(
            ["make", target, f"MLFLOW_PORT={port}"],
            cwd=project,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            assert process.poll() is None, (
                f"make {target} exited {process.returncode}:\n{log.read_text()[-3000:]}"
            )
            assert time.monotonic() < deadline, (
                f"make {target} not up in {timeout:.0f} s:\n{log.read_text()[-3000:]}"
            )
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2):
                    break
            except OSError:
                time.sleep(0.5)
        yield uri
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def read_back(project: Path, uri: str, run_id: str, *, promote: bool = False) -> dict[str, Any]:
    """The run as the served UI's API shows it; with `promote`, after the README's promote command ran on the
    default local store."""
    python = str(project / ".venv" / "bin" / "python")
    if promote:
        package = json.loads((project / ".cookiecutter.json").read_text())["cookiecutter"]["package_name"]
        moved = subprocess.run(
            [python, "-m", package, "promote", f"--run-id={run_id}"],
            cwd=project, capture_output=True, text=True, env=project_env(), timeout=300, check=False,
        )  # fmt: skip
        assert moved.returncode == 0, moved.stdout[-2000:] + moved.stderr[-4000:]
    out = subprocess.run(
        [python, str(READ_BACK), uri, run_id],
        cwd=project, capture_output=True, text=True, env=project_env(), timeout=300, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.splitlines()[-1])


def mlflow_ui_step(project: Path, state: dict[str, Any]) -> None:
    """`make mlflow-ui`: the run `make train` printed is there as the README lists it: the whole resolved
    config as params, per-epoch and system metrics, plots, exports, the logged model and the champion."""
    with serving(project, "mlflow-ui") as uri:
        run = read_back(project, uri, state["run_id"])
        # Training only proposes (issue 13 item 7); the README's promote command moves the alias.
        promoted = read_back(project, uri, state["run_id"], promote=True)
    assert run["status"] == "FINISHED"
    resolved = yaml.safe_load((project / "outputs" / "resolved_config.yaml").read_text(encoding="utf-8"))
    assert flat_keys(resolved) <= set(run["params"]), flat_keys(resolved) - set(run["params"])
    assert run["params"]["data.source"] == "digits"
    metrics = run["metrics"]
    assert metrics["test_accuracy"] > 0.5, metrics  # chance is 0.1
    assert run["val_loss_points"] == metrics["epochs_run"] >= 1
    assert any(name.startswith("system/") for name in metrics), sorted(metrics)
    expected = {"plots/confusion_matrix.png", "plots/learning_curves.png", "exports/model.tflite"}
    assert expected | {"exports/model_int8.tflite"} <= set(run["artifacts"]), run["artifacts"]
    # The shipped config exports every form, each measured (the road to CPU inference: issue 16).
    latencies = {f"{export}_latency_ms" for export in ("saved_model", "tflite", "tflite_int8")}
    assert latencies <= set(metrics), sorted(metrics)
    assert "exports/saved_model/saved_model.pb" in run["artifacts"], run["artifacts"]
    assert run["logged_models"] == ["model"]
    # A fresh project: its first run is a candidate and says so in strings; training registers nothing
    # (issue 30).
    assert run["tags"]["champion.decision"] == "candidate", run["tags"]
    assert "registry.version" not in run["tags"]
    assert run["champion"] is None, run["champion"]
    # After `promote --run-id=<that run>` promote's copy of it is version 1 and holds the alias.
    assert promoted["champion"] is not None, promoted["tags"]
    champion = promoted["champion"]
    assert champion["version"] == "1", champion
    assert champion["tags"]["promote.candidate_run_id"] == state["run_id"], champion
    assert champion["tags"]["decision"] == "first" and len(champion["tags"]["files.manifest_sha256"]) == 64


# A small study over the shipped training config: two trials, one epoch each, the shipped sweep's own space
# (configs/sweep.yaml, a copy with only trials, parallel and budget changed), so the step takes seconds.
SMALL_SWEEP = {"trials": 2, "parallel": 2, "budget": {"epochs_per_trial": 1}}
SWEEP_READ_BACK = """
import json, sys
from mlflow.tracking import MlflowClient
client = MlflowClient("sqlite:///mlflow.db")
ids = [e.experiment_id for e in client.search_experiments()]
parents = client.search_runs(ids, "tags.`sweep.role` = 'parent'")
parent = parents[0].info.run_id if parents else ""
children = client.search_runs(ids, f"tags.`mlflow.parentRunId` = '{parent}'") if parents else []
print(json.dumps({
    "parents": [(p.info.status, p.data.tags) for p in parents],
    "children": sorted(c.data.tags.get("sweep.trial", "") for c in children),
    "artifacts": [a.path for a in client.list_artifacts(parent, "plots")] if parents else [],
}))
"""


def sweep_step(project: Path, state: dict[str, Any]) -> None:
    """`make sweep`: the shipped study (fewer, shorter trials) on the CPU into sqlite:///mlflow.db: one parent
    run, a child run per trial, the best trial named, Optuna's plots logged."""
    shipped = yaml.safe_load((project / "configs" / "sweep.yaml").read_text(encoding="utf-8"))
    small = {**shipped, **SMALL_SWEEP, "budget": {**shipped["budget"], **SMALL_SWEEP["budget"]}}
    (project / "small-sweep.yaml").write_text(yaml.safe_dump(small), encoding="utf-8")
    out = make(project, "sweep", "SWEEP=small-sweep.yaml").stdout
    assert "**Best trial" in out and "Finished: all 2 trials asked" in out, out[-3000:]
    read = subprocess.run(
        [str(project / ".venv" / "bin" / "python"), "-c", SWEEP_READ_BACK],
        cwd=project, capture_output=True, text=True, env=project_env(), timeout=300, check=False,
    )  # fmt: skip
    assert read.returncode == 0, read.stderr[-4000:]
    found = json.loads(read.stdout.splitlines()[-1])
    ((status, tags),) = found["parents"]
    assert status == "FINISHED" and tags["sweep.study"] == shipped["study_name"], tags
    assert tags["sweep.best_trial"] in ("0", "1"), tags
    assert found["children"] == ["0", "1"], found
    assert set(found["artifacts"]) == {"plots/optimization_history.png", "plots/parallel_coordinates.png"}


# What this test does for each quick-start step after `make install` and `make test` (which every combination
# runs); a step the README adds fails the test until it is checked here.
QUICK_START_STEPS: dict[str, Callable[[Path, dict[str, Any]], None]] = {
    "train": train_step,
    "mlflow-ui": mlflow_ui_step,
    "sweep": sweep_step,
}


def check_test_summary(result: subprocess.CompletedProcess) -> None:
    summary = re.findall(r"^=*\s*(\d+ passed.*?)\s*=*$", result.stdout, flags=re.MULTILINE)
    assert summary, result.stdout[-2000:]
    assert "failed" not in summary[-1] and "error" not in summary[-1], summary[-1]


def test_quick_start_targets_are_read_from_the_readme() -> None:
    readme = (ROOT / "{{cookiecutter.project_slug}}" / "README.md").read_text(encoding="utf-8")
    targets = quick_start_targets(readme)
    assert targets[:2] == ["install", "test"], targets
    assert set(targets[2:]) <= set(QUICK_START_STEPS), set(targets[2:]) - set(QUICK_START_STEPS)
    planted = readme.replace("3. `make train`", "3. `make train-everything`")
    assert quick_start_targets(planted)[2] == "train-everything"
    with pytest.raises(AssertionError, match="is not `make <target>`"):
        quick_start_targets(readme.replace("3. `make train`", "3. `uv run train`"))


@pytest.mark.parametrize("name", COMBINATIONS)
def test_baked_project_installs_lints_and_passes_its_own_tests(name: str, tmp_path: Path) -> None:
    project = Path(
        cookiecutter(
            str(bake_template()),
            no_input=True,
            output_dir=str(tmp_path),
            extra_context=COMBINATIONS[name],
            config_file=str(write_config(tmp_path / "cookiecutter")),
        )
    )
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    steps = quick_start_targets((project / "README.md").read_text(encoding="utf-8"))
    assert steps[:2] == ["install", "test"], steps
    make(project, "lock-check")
    make(project, "install")
    make(project, "lint")
    # The defaults run both tiers as the generated CI does (`make test` on every push, `make test-slow` beside
    # it), which also proves the push tier passes without the slow one; the custom bake runs both in one
    # session (`make test-all`), one start of TensorFlow and the servers fewer.
    for target in TIERS[name]:
        check_test_summary(make(project, target, f"PYTEST_ARGS={suite_args(name)}"))
    if name != "defaults":
        # What the skipped training modules import, under this bake's package name.
        package = COMBINATIONS[name]["package_name"]
        modules = import_every_module(project)
        trained = {f"{package}.{m}" for m in ("train", "model", "pipeline", "runtime", "callbacks")}
        assert trained <= set(modules), modules
        return
    # The rest of the README's quick start on the defaults, against the default local store (no server).
    state: dict[str, Any] = {}
    for target in steps[2:]:
        assert target in QUICK_START_STEPS, (
            f"the README's quick start runs `make {target}`, which no test checks"
        )
        QUICK_START_STEPS[target](project, state)
    print(f"make train: {state.get('train_seconds', 0):.0f} s")
