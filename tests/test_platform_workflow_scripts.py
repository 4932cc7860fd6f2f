"""The `run:` scripts of the platform's reusable workflows (start, stop and batch.yml, in this repository's
.github/workflows/: issue 31), run as GitHub runs them (step_scripts.py: every `${{ }}` substituted, then bash
with a recording uv) for a dispatch with every input set, a push with none, and an attacker's branch name,
inputs and outputs. Checked here once; a bake checks its own workflows' scripts the same way (its
tests/workflows/test_workflow_injection.py and test_gpu_runner_calls.py).

- No outsider-controlled value reaches a shell as code (with a negative control).
- Every `gpu-runner` call is in the platform's half of the CLI contract (cli_contract.py), passes each value
  as one `--opt=value` word, and is accepted by the real CLI (the platform's own environment).
"""

from __future__ import annotations

import ast
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import bake_project
from gpu_runner.core.workflow_contract import (
    BatchOutput,
    CapacityOutput,
    LaunchOutput,
    SettingsOutput,
    TunnelOutput,
    WaitOutput,
)
from gpu_runner_testing.workflow_checks.cli_contract import (
    PLATFORM_CLI_CONTRACT,
    cli_env,
    help_problems,
    loose_arguments,
    parse_problems,
)
from gpu_runner_testing.workflow_checks.step_scripts import (
    ATTACK_REF,
    CALLER_PACKAGE,
    MARKER,
    PAYLOAD,
    GpuRunnerCall,
    recorded_gpu_runner_calls,
    run_bash,
    run_steps,
    run_workflow_steps,
    step_env,
    substitute,
    untrusted_outside_env,
)
from gpu_runner_testing.workflow_checks.workflow_files import (
    AWS_CREDENTIALS,
    LAUNCH_OUTPUTS,
    SETTINGS_OUTPUTS,
    WAIT_OUTPUTS,
    platform_workflows,
    tool,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
PLATFORM = platform_workflows(REPO_ROOT)
PLATFORM_SRC = REPO_ROOT / "platform" / "src" / "gpu_runner"

# Expressions over outsider-shaped contexts allowed outside `env:`: inputs of JavaScript actions (no shell).
ALLOWED_WITH = {
    # The branch the event names, which start, stop and batch.yml check out.
    ("actions/checkout", "steps.default.outputs.branch"),
    # batch.yml's second checkout: the commit it ships, as data (its own `path:`).
    ("actions/checkout", "inputs.commit || github.sha"),
    # The region of the default branch's settings (the launch, submit and tunnel roles' credentials).
    (AWS_CREDENTIALS, "steps.settings.outputs.region"),
    # The launch role chosen by the caller check's verdict (its own script's output).
    (
        AWS_CREDENTIALS,
        "steps.caller.outputs.caller == 'predict' && vars.AWS_PREDICT_LAUNCH_ROLE_ARN || vars.AWS_ROLE_ARN",
    ),
}
# The guard whose job is to refuse a hostile input: a branch's train.yml may pass batch.yml any `kind`.
REFUSES_A_HOSTILE_KIND = "Refuse callers other than train.yml and sweep.yml on their branches"


def test_untrusted_expressions_only_under_env() -> None:
    """In every step, an expression over a branch name, event payload, input or output appears only under
    `env:` (or in an `if:`, evaluated by the expression engine, no shell), or as one of the JavaScript
    actions' inputs listed above."""
    assert untrusted_outside_env(PLATFORM, ALLOWED_WITH) == []


def test_hostile_branch_names_and_inputs_stay_data(tmp_path: Path) -> None:
    """Every `run:` script, run with the branch `train/$(touch${IFS}<MARKER>)` and every input and output set
    to a shell payload: nothing executes, and the payloads reach gpu-runner as single, unchanged arguments."""
    ran = 0
    for name, doc in PLATFORM.items():
        for where, job, step in run_steps(doc):
            env = step_env(doc, job, step, "attack")
            workdir = tmp_path / f"{name}-{where}"
            code, calls = run_bash(substitute(step["run"], "attack"), env, workdir)
            ran += 1
            if env.get("KIND") == "train":  # batch.yml's steps that branch on the kind: the sweep arm too
                sweep_code, sweep_calls = run_bash(
                    substitute(step["run"], "attack"),
                    {**env, "KIND": "sweep"},
                    workdir.with_name(workdir.name + "-sweep"),
                )
                assert sweep_code == 0, f"{name}.yml {where} (sweep) failed"
                calls, ran = calls + sweep_calls, ran + 1
            assert not list(workdir.rglob(MARKER)), f"{name}.yml {where}: the payload ran"
            if step.get("name") == REFUSES_A_HOSTILE_KIND:  # batch.yml's `kind` input: only train or sweep
                assert code != 0 and not calls, f"{name}.yml {where} accepted the kind {PAYLOAD!r}"
                continue
            if (
                step.get("name") == "Name the default branch"
            ):  # no command: one output line, the value as data
                output = (workdir / "github_output").read_text(encoding="utf-8")
                assert code == 0 and not calls and output == f"branch={PAYLOAD}\n", (name, where, output)
                continue
            assert code == 0, f"{name}.yml {where} failed"
            hostile = [a for argv in calls for a in argv if MARKER in a]
            # A whole argument, `--opt=value` or `--phase=name=value` (neither payload holds an "=").
            assert all(a.rpartition("=")[2] in (PAYLOAD, ATTACK_REF) for a in hostile), hostile
            if PAYLOAD in env.values():
                assert hostile, f"{name}.yml {where}: no hostile value reached a command (is the test stale?)"
    # start: default branch, install, settings, caller check, backend choice, MLflow wake, launch, wait, its
    # own teardown; stop: default branch, install, settings, caller check, the
    # tunnel's connect, teardown, resume; batch.yml: default branch, install, settings, caller check, ship,
    # open-run, the tunnel's connect, wave, submit and wait (each with its sweep arm), cancel.
    assert ran == 29


def test_the_injection_harness_catches_an_expression_in_run(tmp_path: Path) -> None:
    """Negative control: start's launch step written the unsafe way (`${{ inputs.instance-type }}` pasted into
    `run:`) and substituted by GitHub first does run the payload, so the test above would notice."""
    doc = PLATFORM["gpu-runner-start"]
    _, job, step = next(x for x in run_steps(doc) if x[2].get("id") == "launch")
    unsafe = step["run"].replace(
        '"--instance-type=${INSTANCE_TYPE}"', "--instance-type=${{ inputs.instance-type }}"
    )
    assert unsafe != step["run"]
    workdir = tmp_path / "unsafe"
    run_bash(substitute(unsafe, "attack"), step_env(doc, job, step, "attack"), workdir)
    assert list(workdir.rglob(MARKER))


def test_gpu_runner_calls_follow_the_contract(tmp_path: Path) -> None:
    """Every `gpu-runner <subcommand> --option` the workflows really pass (a dispatch with every input set,
    and a push with none / a launch that produced nothing) is in the contract; required ids always passed."""
    full = recorded_gpu_runner_calls(PLATFORM, "benign", tmp_path)
    bare = recorded_gpu_runner_calls(PLATFORM, "empty", tmp_path)
    for call in full + bare:
        assert call.global_options == ["--settings"], call
        assert call.argv[:2] == ["--settings", "configs/gpu-runner.yaml"], call
        assert set(call.options) <= PLATFORM_CLI_CONTRACT.get(call.subcommand, set()), call
        # one --phase per timeline moment, one --env per variable of a Batch job
        repeatable = [o for o in call.options if o not in ("--phase", "--env")]
        assert len(repeatable) == len(set(repeatable)), call
    # Every option of the contract is passed somewhere (the union over a subcommand's calls: stop's connect
    # passes --no-wake, batch.yml's does not).
    assert passed_options(full) == PLATFORM_CLI_CONTRACT
    # The stop job's teardown, and the start job's own when start fails (no timeline, no MLflow run yet).
    teardowns = [c for c in full if c.subcommand == "teardown"]
    (full_teardown,) = [c for c in teardowns if "--mlflow-run-id" in c.options]
    (own_teardown,) = [c for c in teardowns if c is not full_teardown]
    assert set(own_teardown.options) == {
        "--region", "--instance-id", "--runner-id", "--parameter", "--attempt", "--slot",
    }, own_teardown  # fmt: skip
    phases = [a.removeprefix("--phase=") for a in full_teardown.argv if a.startswith("--phase=")]
    assert [p.split("=")[0] for p in phases] == [
        "boot",
        "image-ready",
        "runner-started",
        "runner-online",
        "job-started",
    ]
    assert all(p.split("=")[1].isdigit() for p in phases), phases
    # Without inputs, launch falls back to the settings file; teardown passes only the ids it has (and the
    # attempt, 1 for a push: the MLflow step of its cost). No slot (train.yml): no --slot, today's names.
    assert passed_options(bare) == {
        **PLATFORM_CLI_CONTRACT,
        "launch": {"--commit", "--attempt"},
        "wait": {"--region", "--instance-id", "--runner-id"},
        "teardown": {"--attempt"},
        # a push of a training (the caller check's kind): a single job, its cost to the run batch.yml opened
        "batch submit": {"--name", "--env"},
        "batch wait": {"--job-id", "--mlflow-run-id", "--bucket", "--commit"},
    }
    push_teardowns = [c for c in bare if c.subcommand == "teardown"]
    assert len(push_teardowns) == 2 and all(c.argv[-1] == "--attempt=1" for c in push_teardowns), (
        push_teardowns
    )


def passed_options(calls: list[GpuRunnerCall]) -> dict[str, set[str]]:
    passed: dict[str, set[str]] = {}
    for call in calls:
        passed.setdefault(call.subcommand, set()).update(call.options)
    return passed


def test_every_value_reaches_the_cli_as_opt_equals_value(tmp_path: Path) -> None:
    """Issue 13 item 5: a job output or dispatch input that starts with `--` (`mlflow-run-id=--x`, written by
    code on the GPU instance) must stay a value: every option after the subcommand is one `--opt=value`
    word."""
    checked = 0
    for scenario in ("benign", "empty", "attack"):
        for step, _, recorded in run_workflow_steps(PLATFORM, scenario, tmp_path):
            for argv in recorded:
                loose = loose_arguments(argv, CALLER_PACKAGE)
                if loose is not None:
                    checked += 1
                    assert not loose, f"{step} ({scenario}): {argv}"
    assert checked >= 3 * 8, (
        checked
    )  # launch, wait, teardown twice, resume, connect, submit, wait; each scenario


def test_the_outputs_the_workflows_read_are_the_ones_the_cli_writes() -> None:
    """start reads every output launch writes, and the sources write exactly the contract's keys."""
    start = (REPO_ROOT / ".github" / "workflows" / "gpu-runner-start.yml").read_text(encoding="utf-8")
    assert set(re.findall(r"steps\.launch\.outputs\.([\w-]+)", start)) == set(LAUNCH_OUTPUTS)
    written = written_step_outputs(PLATFORM_SRC)
    assert written, "no write_outputs({...}) call found in the gpu_runner sources: update this test"
    # capacity's are for sweep.yml's plan job, connect's for the MLflow tunnel, batch submit's for its wait.
    assert written == set(LAUNCH_OUTPUTS + WAIT_OUTPUTS + SETTINGS_OUTPUTS) | {
        str(k) for k in (*CapacityOutput, *TunnelOutput, *BatchOutput)
    }


def written_step_outputs(package: Path) -> set[str]:
    """Keys of every dict literal passed to `write_outputs(...)` in the gpu_runner sources (as the values of
    workflow_contract's members they name)."""
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
                for arg in (a for a in node.args if isinstance(a, ast.Dict)):
                    keys |= {k.value for k in arg.keys if isinstance(k, ast.Constant)}
                    keys |= {
                        members.get(ast.unparse(k).removeprefix("contract."), ast.unparse(k))
                        for k in arg.keys
                        if isinstance(k, ast.Attribute)
                    }
    return keys


# ---------------------------------------------------------------- the real CLI
@pytest.fixture(scope="module")
def settings_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A default bake (rendered, not installed): the jobs' working directory, whose configs/gpu-runner.yaml
    the command lines name."""
    return bake_project(tmp_path_factory.mktemp("settings"))


@pytest.fixture(scope="module")
def console_script() -> Path:
    """The platform's console script in its own environment (platform/uv.lock, as `make platform-env` syncs
    it): found once through uv, then run directly (uv's start-up on every call took half the check's
    time)."""
    found = subprocess.run(
        [tool("uv"), "run", "--project", str(REPO_ROOT / "platform"), "--locked", "python", "-c",
         "import shutil; print(shutil.which('gpu-runner'))"],
        env=cli_env(), capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert found.returncode == 0 and found.stdout.strip() not in ("", "None"), found.stderr[-2000:]
    return Path(found.stdout.strip())


def cli(script: Path, project: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """`gpu-runner <args>` run in `project` (whose configs/gpu-runner.yaml the command lines name)."""

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(script), *args], cwd=project, env=cli_env(), capture_output=True, text=True, timeout=120,
            check=False,
        )  # fmt: skip

    return run


def test_the_cli_help_has_the_whole_contract(console_script: Path, settings_project: Path) -> None:
    assert help_problems(PLATFORM_CLI_CONTRACT, cli(console_script, settings_project)) == []


def test_the_cli_parses_every_workflow_command_line(
    console_script: Path, settings_project: Path, tmp_path: Path
) -> None:
    calls = recorded_gpu_runner_calls(PLATFORM, "benign", tmp_path)
    calls += recorded_gpu_runner_calls(PLATFORM, "empty", tmp_path)
    run_cli = cli(console_script, settings_project)
    assert parse_problems(calls, run_cli) == []
    # Negative control: an option the CLI does not have is rejected by the same check.
    (launch, *_) = [c for c in calls if c.subcommand == "launch"]
    assert parse_problems([launch._replace(argv=[*launch.argv, "--bogus=1"])], run_cli) != []
    # The dispatch input `instance-type` is validated by the CLI before anything else happens.
    hostile = [c for c in recorded_gpu_runner_calls(PLATFORM, "attack", tmp_path) if c.subcommand == "launch"]
    assert [c.options for c in hostile] == [["--commit", "--attempt", "--instance-type", "--slot"]]
    proc = run_cli(*hostile[0].argv)
    assert proc.returncode == 1 and "is not an instance type" in proc.stderr, proc.stderr
    assert "GITHUB_REPOSITORY" not in proc.stderr
