"""Every `gpu-runner <subcommand> --option` the workflows pass is in the CLI contract, passed as one
`--opt=value` word, and accepted by the real CLI installed as start/stop/reap install it (the runner package
alone, from the lock)."""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
from pathlib import Path

import pytest
from step_scripts import NESTED_SUBCOMMANDS, recorded_gpu_runner_calls, run_gpu_workflow_steps
from workflow_files import (
    LAUNCH_OUTPUTS,
    PROJECT,
    SETTINGS_OUTPUTS,
    WAIT_OUTPUTS,
    answers_of,
    offline_env,
    tool,
    workflow_path,
)

from gpu_runner.core.workflow_contract import (
    BatchOutput,
    CapacityOutput,
    LaunchOutput,
    SettingsOutput,
    TunnelOutput,
    WaitOutput,
)

# The gpu-runner CLI contract the workflows are written against:
#   gpu-runner [--settings FILE] <subcommand> [options]   (the global option precedes the subcommand)
# subcommand -> the options the workflows may pass.
# The real CLI is checked too (test_gpu_runner_cli_*): its --help, and a parse of every command line the
# workflows produce.
CLI_GLOBAL_OPTIONS = {"--settings"}
CLI_CONTRACT = {
    "launch": {"--instance-type", "--spot", "--commit", "--attempt", "--slot"},
    "wait": {"--region", "--instance-id", "--runner-id", "--slot"},
    "teardown": {
        "--region", "--instance-id", "--runner-id", "--parameter", "--mlflow-run-id", "--attempt", "--phase",
        "--slot",
    },
    "resume": {
        "--ref", "--attempt", "--train-interrupted", "--region", "--instance-id", "--commit", "--config",
        "--instance-type", "--mode",
    },
    "reap": set(),
    "workflow-settings": set(),
    # sweep.yml's plan job (how many runners the quota allows) and collect job (dispatch the next wave).
    "capacity": {"--wanted"},
    "next-wave": {"--ref", "--wave", "--sweep", "--config"},
    # The start job, before a launch: start the team MLflow server if its schedule stopped it.
    "mlflow-server wake": set(),
    # The tunnel's connect step written out in the stop job (no wake, at most 60 s) and batch.yml.
    "mlflow-server connect": {"--timeout", "--log-file", "--no-wake"},
    # batch.yml (backend: batch): ship the commit, open the MLflow run, submit, wait, and end the job on failure.
    "batch ship": {"--bucket", "--commit", "--repo-dir"},
    "batch open-run": {"--config", "--source-dir"},
    # (a sweep's wave: an array job, each child's cost to its trial's run)
    "batch sweep-wave": {"--sweep-matrix"},
    "batch submit": {"--name", "--env", "--array-size"},
    # (and each task of the job recorded as the run's branch's at its commit: checkpoint_owners.py)
    "batch wait": {"--job-id", "--mlflow-run-id", "--sweep-matrix", "--bucket", "--commit"},
    "batch cancel": {"--job-id"},
    # train.yml's and sweep.yml's comment jobs (the results on the branch's open pull request).
    "pr-comment": {"--kind", "--mlflow-run-id", "--branch", "--commit", "--config"},
}  # fmt: skip


def test_gpu_runner_calls_follow_the_contract(project: Path, tmp_path: Path) -> None:
    """Every `gpu-runner <subcommand> --option` the workflows really pass (dispatch with every input set, and
    a push with none / a launch that produced nothing) is in the CLI contract; required ids always passed."""
    full = recorded_gpu_runner_calls(project, "benign", tmp_path)
    bare = recorded_gpu_runner_calls(project, "empty", tmp_path)
    for call in full + bare:
        assert call.global_options == ["--settings"], call
        assert call.argv[:2] == ["--settings", "configs/gpu-runner.yaml"], call
        assert call.subcommand in CLI_CONTRACT, call
        assert set(call.options) <= CLI_CONTRACT[call.subcommand], call
        # one --phase per timeline moment, one --env per variable of a Batch job
        repeatable = [o for o in call.options if o not in ("--phase", "--env")]
        assert len(repeatable) == len(set(repeatable)), call
    # Every option of the contract is passed somewhere (the union over a subcommand's calls: stop's connect
    # passes --no-wake, batch.yml's does not).
    passed: dict[str, set[str]] = {}
    for call in full:
        passed.setdefault(call.subcommand, set()).update(call.options)
    assert passed == CLI_CONTRACT
    # The stop job's teardown, and the start job's own when start fails (no timeline, no MLflow run yet).
    teardowns = [c for c in full if c.subcommand == "teardown"]
    (full_teardown,) = [c for c in teardowns if "--mlflow-run-id" in c.options]
    (own_teardown,) = [c for c in teardowns if c is not full_teardown]
    own_ids = {"--region", "--instance-id", "--runner-id", "--parameter", "--attempt", "--slot"}
    assert set(own_teardown.options) == own_ids, own_teardown
    phases = [a.removeprefix("--phase=") for a in full_teardown.argv if a.startswith("--phase=")]
    names = [p.split("=")[0] for p in phases]
    assert names == ["boot", "image-ready", "runner-started", "runner-online", "job-started"]
    assert all(p.split("=")[1].isdigit() for p in phases), phases
    # Without inputs, launch falls back to the settings file; teardown passes only the ids it has (and the
    # attempt, 1 for a push: the MLflow step of its cost). No slot (train.yml): no --slot, today's names.
    bare_passed: dict[str, set[str]] = {}
    for call in bare:
        bare_passed.setdefault(call.subcommand, set()).update(call.options)
    assert bare_passed == {
        **CLI_CONTRACT,
        "launch": {"--commit", "--attempt"},
        "wait": {"--region", "--instance-id", "--runner-id"},
        "teardown": {"--attempt"},
        # a push of a training (the caller check's kind): a single job, its cost to the run batch.yml opened
        "batch submit": {"--name", "--env"},
        "batch wait": {"--job-id", "--mlflow-run-id", "--bucket", "--commit"},
    }
    push_teardowns = [c for c in bare if c.subcommand == "teardown"]
    assert len(push_teardowns) == 2, push_teardowns
    assert all(c.argv[-1] == "--attempt=1" for c in push_teardowns), push_teardowns
    # The workflows read only outputs launch writes, and the start job passes every one of them on.
    start = workflow_path(project, "gpu-runner-start").read_text(encoding="utf-8")
    text = (project / ".github" / "workflows" / "train.yml").read_text(encoding="utf-8")
    assert set(re.findall(r"steps\.launch\.outputs\.([\w-]+)", start)) == set(LAUNCH_OUTPUTS)
    train_reads = set(re.findall(r"needs\.start\.outputs\.([\w-]+)", text))
    assert train_reads <= {*LAUNCH_OUTPUTS, *WAIT_OUTPUTS, "backend"}


# Switches written literally in a workflow (no value, so nothing a context could make an option): the stop
# job's tunnel connects without waking the server.
LITERAL_SWITCHES = {"--no-wake"}


@pytest.mark.slow
def test_every_value_reaches_a_cli_as_opt_equals_value(project: Path, tmp_path: Path) -> None:
    """Issue 13 item 5: a job output or dispatch input that starts with `--` (`mlflow-run-id=--x`, written by
    code on the GPU instance) must stay a value. Every option after the subcommand, of gpu-runner and of the
    project's CLI, is passed as one `--opt=value` word, so argparse can never read the value as an option."""
    package = answers_of(project)["package_name"]
    checked = 0
    for scenario in ("benign", "empty", "attack"):
        for step, _, recorded in run_gpu_workflow_steps(project, scenario, tmp_path):
            for argv in recorded:
                if argv[:3] == ["run", "--no-sync", "gpu-runner"]:
                    # after `--settings configs/gpu-runner.yaml <subcommand> [<action>]` (literals)
                    tail = argv[7:] if argv[5] in NESTED_SUBCOMMANDS else argv[6:]
                    # `batch submit ... -- <the job's argv>`: the argv's literal words (the separators, the two
                    # programs it runs) aside, its options are checked the same way below.
                    job_words = {
                        "--",
                        "python",
                        "-m",
                        "gpu_runner.batch.batch_source",
                        "run",
                        package,
                        "train",
                        "sweep",
                        "trial",
                    }
                    tail = [a for a in tail if a not in job_words] if "--" in tail else tail
                elif argv[:5] == ["run", "--no-sync", "python", "-m", package]:
                    # after the subcommand (`sweep` has its own: plan, trial, collect, check)
                    tail = argv[7:] if argv[5] == "sweep" else argv[6:]
                else:
                    continue
                checked += 1
                loose = [
                    a
                    for a in tail
                    if not re.fullmatch(r"--[a-z][a-z0-9-]*=.*", a, re.DOTALL) and a not in LITERAL_SWITCHES
                ]
                assert not loose, f"{step} ({scenario}): {argv}"
    assert checked >= 3 * 7, checked  # launch, wait, preflight, train, teardown, resume, reap; each scenario


def test_launch_outputs_match_the_runner_sources(project: Path) -> None:
    written = written_step_outputs(Path(importlib.util.find_spec("gpu_runner").origin).parent)
    assert written, "no write_outputs({...}) call found in the gpu_runner sources: update this test"
    # capacity's are for sweep.yml's plan job, connect's for the MLflow tunnel action, batch submit's for the
    # Batch backend's wait and cancel.
    assert written == set(LAUNCH_OUTPUTS + WAIT_OUTPUTS + SETTINGS_OUTPUTS) | {
        str(k) for k in (*CapacityOutput, *TunnelOutput, *BatchOutput)
    }


@pytest.mark.slow
def test_gpu_runner_cli_help_matches_the_contract(runner_installed: Path) -> None:
    top = gpu_runner(runner_installed, "--help")
    assert top.returncode == 0, top.stderr
    assert help_options(top.stdout) >= CLI_GLOBAL_OPTIONS
    for subcommand, options in CLI_CONTRACT.items():
        assert subcommand.split(" ")[0] in top.stdout
        sub = gpu_runner(runner_installed, *subcommand.split(" "), "--help")
        assert sub.returncode == 0, sub.stderr
        assert options <= help_options(sub.stdout), (subcommand, sub.stdout)


@pytest.mark.slow
def test_gpu_runner_cli_parses_every_workflow_command_line(
    project: Path, runner_installed: Path, tmp_path: Path
) -> None:
    """Each command line the workflows produce, given to the real CLI: argparse accepts it (exit 2 with
    `usage:` would mean it did not). With no GITHUB_REPOSITORY the CLI stops right after loading the settings,
    before any API call; the settings file and the dispatch's instance type are validated on the way."""
    calls = recorded_gpu_runner_calls(project, "benign", tmp_path)
    calls += recorded_gpu_runner_calls(project, "empty", tmp_path)
    seen = set()
    for call in calls:
        if call.subcommand == "wait" and "" in call.argv:
            continue  # only runs after a launch that wrote its outputs
        if call.subcommand == "capacity" and "--wanted=" in call.argv:
            continue  # only runs after `sweep check` wrote parallel
        if tuple(call.argv) in seen:
            continue
        seen.add(tuple(call.argv))
        proc = gpu_runner(runner_installed, *call.argv)
        assert proc.returncode != 2 and "usage:" not in proc.stderr, (call.argv, proc.stderr)
        # capacity and the tunnel's connect need no repository: they stop at the first AWS call, unsigned.
        if call.subcommand in ("capacity", "mlflow-server connect"):
            assert "Unable to locate credentials" in proc.stderr, (call.argv, proc.stderr)
            continue
        assert "GITHUB_REPOSITORY" in proc.stderr, (call.argv, proc.stderr)
    # Negative control: an option the CLI does not have is rejected by the same check.
    proc = gpu_runner(runner_installed, "--settings", "configs/gpu-runner.yaml", "launch", "--bogus=1")
    assert proc.returncode == 2 and "usage:" in proc.stderr
    # The dispatch input `instance-type` is validated by the CLI before anything else happens.
    hostile = [c for c in recorded_gpu_runner_calls(project, "attack", tmp_path) if c.subcommand == "launch"]
    assert [c.options for c in hostile] == [["--commit", "--attempt", "--instance-type", "--slot"]]
    proc = gpu_runner(runner_installed, *hostile[0].argv)
    assert proc.returncode == 1 and "is not an instance type" in proc.stderr, proc.stderr
    assert "GITHUB_REPOSITORY" not in proc.stderr


def written_step_outputs(package: Path) -> set[str]:
    """Keys of every dict literal passed to `write_outputs(...)` in the gpu_runner sources (as the values of
    workflow_contract's LaunchOutput / WaitOutput / SettingsOutput members they name)."""
    members = {
        f"{enum.__name__}.{member.name}": str(member)
        for enum in (LaunchOutput, WaitOutput, SettingsOutput, CapacityOutput, TunnelOutput, BatchOutput)
        for member in enum
    }
    keys: set[str] = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == (
                "write_outputs"
            ):
                for arg in node.args:
                    if isinstance(arg, ast.Dict):
                        keys |= {k.value for k in arg.keys if isinstance(k, ast.Constant)}
                        keys |= {
                            members.get(ast.unparse(k).removeprefix("contract."), ast.unparse(k))
                            for k in arg.keys
                            if isinstance(k, ast.Attribute)
                        }
    return keys


@pytest.fixture(scope="module")
def runner_installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An environment with only gpu-runner installed from the project's lock, as start/stop/reap install it
    (in a directory of its own: the project's .venv is left as it is)."""
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
    env = {
        k: v
        for k, v in offline_env().items()
        if k not in {"VIRTUAL_ENV", "UV_PROJECT", "GITHUB_REPOSITORY"} and not k.startswith(("AWS_", "GPU_"))
    }
    env |= {
        "UV_OFFLINE": "1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "UV_PROJECT_ENVIRONMENT": str(environment),
    }
    return subprocess.run(
        [tool("uv"), "run", "--no-sync", "gpu-runner", *args],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def help_options(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text)) - {"--help"}
