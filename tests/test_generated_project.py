"""Install baked projects from their lock and run their own lint and test suites, as a user would."""

from __future__ import annotations

import ast
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


# The custom bake skips these: they test the runner package, copied verbatim into every bake (`runner/*`
# and `tests/runner/*` are in cookiecutter.json's _copy_without_render), with settings made in code, so no
# answer changes their outcome; the defaults bake runs them. Without any skipped, `make test` took 18 min 36 s
# of CI's 20 on 2 cores (issue 12's tree); with the first 8 skipped and issue 13's tests added, 18 min 26 s.
# Whatever reads a rendered file (workflows, README, settings, the package) runs on both bakes; the
# test below fails if a listed module reads one.
BAKE_INDEPENDENT = (
    "test_lifecycle.py", "test_ec2.py", "test_aws_limits.py", "test_pricing.py", "test_cost_record.py",
    "test_cost_accounting.py", "test_mlflow_rest.py", "test_cost_report.py", "test_reaper.py",
    "test_timeline.py", "test_github.py", "test_offerings.py", "test_gpu_runner_cli.py",
    "test_error_codes.py", "test_jit_config_double.py", "test_network_scope.py", "test_runner_download.py",
    "test_supply_chain_settings.py", "test_oidc_subject.py", "test_batch_jobs.py", "test_batch_source.py",
    # Issue 31: the stacks' CloudFormation templates are package data (no answer reaches them), so the modules
    # that deploy or read them with settings made in code are bake-independent too.
    "test_stack_template.py", "test_trust_size.py", "test_ssm.py", "test_key_policies.py",
    "test_bucket_policy.py", "test_reaper_policy.py", "test_credential_check.py", "test_live_limit.py",
    "test_capacity.py", "test_slots.py", "test_crash_kill.py", "test_batch_imds.py", "test_backends.py",
)  # fmt: skip
# The custom bake also skips the TensorFlow training modules (1 min 51 s of wall time on 2 workers, measured
# alone): between bakes their code differs only in the package name, which import_every_module checks on
# the custom bake by importing every module of its package (the training code included); the quoted experiment
# name is exercised by test_tracking and test_registry, which both bakes run. With them, make test took
# 21 min 32 s on this machine's 2 cores (issue 13's tree), over the 20-minute budget.
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
)  # fmt: skip
# The generated Makefile's test targets each bake runs; together they cover every test but e2e.
TIERS = {"defaults": ("test", "test-slow"), "custom": ("test-all",)}
READS_RENDERED = re.compile(
    r"PROJECT_DIR|parents\[\d\]|\.cookiecutter\.json|README|pyproject|[\"'/](\.github|infra|src|configs)[\"'/]"
)


# Doubles those modules reach whose source matches READS_RENDERED although they read no rendered file: what
# each match is. Any other reached double that matches fails the test below (a double that reads the bake,
# like mlflow_server_stack's lock and configs, makes every module that imports it bake-bound).
NOT_A_RENDERED_READ = {
    "git_repository": "writes a synthetic commit (its own pyproject.toml, src/, configs/)",
    "github_double": "the word README in a comment",
    "gpu_runner_stack": "a temporary directory named infra",
}
# Where the doubles live: the project's own (tests/doubles, in the bake) and the platform's
# (gpu_runner_testing, installed from the pin: no Jinja, but a double there could still look for the project).
DOUBLE_PACKAGES = {
    "doubles": Path("{{cookiecutter.project_slug}}") / "tests" / "doubles",
    "gpu_runner_testing": Path("platform") / "src" / "gpu_runner_testing",
}


def doubles_reached(sources: list[Path]) -> dict[str, Path]:
    """The doubles (tests/doubles and gpu_runner_testing modules) that `sources` import, directly or through
    other doubles: module name -> file."""
    reached: dict[str, Path] = {}
    todo = list(sources)
    while todo:
        for node in ast.walk(ast.parse(todo.pop().read_text(encoding="utf-8"))):
            package = (node.module or "").split(".")[0] if isinstance(node, ast.ImportFrom) else ""
            if package not in DOUBLE_PACKAGES:
                continue
            folder = ROOT / DOUBLE_PACKAGES[package]
            names = [node.module.split(".")[1]] if "." in str(node.module) else [a.name for a in node.names]
            for name in names:
                module = name if (folder / f"{name}.py").exists() else "__init__"
                if module not in reached:
                    reached[module] = folder / f"{module}.py"
                    todo.append(reached[module])
    return reached


def rendered_reads(tests: Path, modules: list[str]) -> list[str]:
    """The doubles the runner test `modules` reach that read a rendered file, each with the match."""
    reached = doubles_reached([tests / "runner" / module for module in modules])
    return sorted(
        f"{double}: {match[0]!r}"
        for double, path in reached.items()
        if double not in NOT_A_RENDERED_READ
        and (match := READS_RENDERED.search(path.read_text(encoding="utf-8")))
    )


def suite_args(name: str) -> str:
    ignores = [] if name == "defaults" else [f"--ignore=tests/runner/{module}" for module in BAKE_INDEPENDENT]
    ignores += [] if name == "defaults" else [f"--ignore=tests/{module}" for module in TRAINING_MODULES]
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


def test_bake_independent_modules_are_copied_verbatim_and_read_no_rendered_file() -> None:
    verbatim = json.loads((ROOT / "cookiecutter.json").read_text())["_copy_without_render"]
    assert "tests/runner/*" in verbatim, verbatim
    runner_tests = ROOT / "{{cookiecutter.project_slug}}" / "tests" / "runner"
    for module in BAKE_INDEPENDENT:
        source = (runner_tests / module).read_text(encoding="utf-8")
        assert not READS_RENDERED.search(source), (module, READS_RENDERED.search(source))
    # The check can fail: a module that reads the bake's own files (its Makefile, its answers) is caught.
    assert READS_RENDERED.search((runner_tests / "test_batch_stack.py").read_text(encoding="utf-8"))
    # The fixtures they use are verbatim too, or carry no answer.
    assert "cookiecutter" not in (runner_tests.parent / "conftest.py").read_text(encoding="utf-8")
    # Nor does a double they import, directly or not (stack_deploy looked up the bake's package at import).
    assert rendered_reads(runner_tests.parent, list(BAKE_INDEPENDENT)) == []
    reached = doubles_reached([runner_tests / m for m in BAKE_INDEPENDENT])
    assert set(NOT_A_RENDERED_READ) <= set(reached), set(NOT_A_RENDERED_READ) - set(reached)
    # The platform's doubles are followed too.
    assert any(path.is_relative_to(ROOT / "platform") for path in reached.values())
    # The check can fail: the MLflow server's tests reach the double that reads the bake's lock and configs.
    assert rendered_reads(runner_tests.parent, ["test_mlflow_server.py"]) == [
        "mlflow_server_stack: 'PROJECT_DIR'"
    ]


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
