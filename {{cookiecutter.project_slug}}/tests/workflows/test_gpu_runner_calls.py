"""Every `gpu-runner <subcommand> --option` the project's own workflows pass (train.yml's and sweep.yml's
comment jobs, reap.yml, sweep.yml's plan and collect) is in the CLI contract (workflow_checks.cli_contract),
passed as one `--opt=value` word, and accepted by the real CLI installed as those jobs install it (the runner
package alone, from the lock). The platform's start, stop and batch.yml are held to their half of the contract
where they live (the template repository's tests/test_platform_workflow_scripts.py)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from gpu_runner_testing.workflow_checks.cli_contract import (
    PROJECT_CLI_CONTRACT,
    cli_env,
    help_problems,
    loose_arguments,
    parse_problems,
)
from gpu_runner_testing.workflow_checks.step_scripts import recorded_gpu_runner_calls, run_workflow_steps
from gpu_runner_testing.workflow_checks.workflow_files import (
    LAUNCH_OUTPUTS,
    WAIT_OUTPUTS,
    answers_of,
    gpu_workflows,
    offline_env,
    tool,
)

PROJECT = Path(__file__).resolve().parents[2]


def test_gpu_runner_calls_follow_the_contract(project: Path, tmp_path: Path) -> None:
    """Every `gpu-runner <subcommand> --option` the workflows really pass (dispatch with every input set, and
    a push with none) is in the contract; every option of it is passed somewhere, in both."""
    own = gpu_workflows(project)
    full = recorded_gpu_runner_calls(own, "benign", tmp_path)
    bare = recorded_gpu_runner_calls(own, "empty", tmp_path)
    for calls in (full, bare):
        passed: dict[str, set[str]] = {}
        for call in calls:
            assert call.global_options == ["--settings"], call
            assert call.argv[:2] == ["--settings", "configs/gpu-runner.yaml"], call
            assert set(call.options) <= PROJECT_CLI_CONTRACT.get(call.subcommand, set()), call
            assert len(call.options) == len(set(call.options)), call
            passed.setdefault(call.subcommand, set()).update(call.options)
        assert passed == PROJECT_CLI_CONTRACT
    # train.yml reads only outputs the platform's start workflow passes on.
    text = (project / ".github" / "workflows" / "train.yml").read_text(encoding="utf-8")
    train_reads = set(re.findall(r"needs\.start\.outputs\.([\w-]+)", text))
    assert train_reads <= {*LAUNCH_OUTPUTS, *WAIT_OUTPUTS, "backend"}


@pytest.mark.slow
def test_every_value_reaches_a_cli_as_opt_equals_value(project: Path, tmp_path: Path) -> None:
    """Issue 13 item 5: a job output or dispatch input that starts with `--` (`mlflow-run-id=--x`, written by
    code on the GPU instance) must stay a value. Every option after the subcommand, of gpu-runner and of the
    project's CLI, is passed as one `--opt=value` word, so argparse can never read the value as an option."""
    package = answers_of(project)["package_name"]
    checked = 0
    for scenario in ("benign", "empty", "attack"):
        for step, _, recorded in run_workflow_steps(gpu_workflows(project), scenario, tmp_path):
            for argv in recorded:
                loose = loose_arguments(argv, package)
                if loose is None:
                    continue
                checked += 1
                assert not loose, f"{step} ({scenario}): {argv}"
    # each scenario: preflight and train of train.yml and sweep-trial.yml, reap, capacity, next-wave, comments
    assert checked >= 3 * 7, checked


@pytest.mark.slow
def test_gpu_runner_cli_help_matches_the_contract(runner_installed: Path) -> None:
    assert help_problems(PROJECT_CLI_CONTRACT, lambda *args: gpu_runner(runner_installed, *args)) == []


@pytest.mark.slow
def test_gpu_runner_cli_parses_every_workflow_command_line(
    project: Path, runner_installed: Path, tmp_path: Path
) -> None:
    """Each command line the workflows produce, given to the real CLI: argparse accepts it."""
    own = gpu_workflows(project)
    calls = recorded_gpu_runner_calls(own, "benign", tmp_path) + recorded_gpu_runner_calls(
        own, "empty", tmp_path
    )
    run_cli = lambda *args: gpu_runner(runner_installed, *args)  # noqa: E731
    assert parse_problems(calls, run_cli) == []
    # Negative control: an option the CLI does not have is rejected by the same check.
    bogus = calls[0]._replace(argv=[*calls[0].argv, "--bogus=1"])
    assert parse_problems([bogus], run_cli) != []


@pytest.fixture(scope="module")
def runner_installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An environment with only gpu-runner installed from the project's lock, as reap and the comment jobs
    install it (in a directory of its own: the project's .venv is left as it is)."""
    environment = tmp_path_factory.mktemp("runner-only") / "venv"
    env = {k: v for k, v in offline_env().items() if k not in {"VIRTUAL_ENV", "UV_PROJECT"}}
    env["UV_PROJECT_ENVIRONMENT"] = str(environment)
    sync = subprocess.run(
        [tool("uv"), "sync", "--locked", "--offline", "--only-group", "runner"],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert sync.returncode == 0, sync.stderr[-4000:]
    return environment


def gpu_runner(environment: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The console script of `environment`, run in the project, offline, with no GitHub repository, credentials
    or instance metadata."""
    env = cli_env() | {"UV_OFFLINE": "1", "UV_PROJECT_ENVIRONMENT": str(environment)}
    return subprocess.run(
        [tool("uv"), "run", "--no-sync", "gpu-runner", *args],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
