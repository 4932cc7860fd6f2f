"""Running a workflow's `run:` scripts as GitHub does, with `uv` replaced by a recorder.

GitHub substitutes every `${{ }}` first, then runs `bash --noprofile --norc -eo pipefail` on the result; the
harness does the same for three scenarios (a dispatch with every input set, a push with none, and an attacker's
branch name, inputs and outputs), so the injection and CLI-contract tests see exactly the argv the real commands
would receive.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from gpu_runner_testing.workflow_checks.workflow_files import (
    as_expression,
    iter_steps,
    iter_strings,
    step_uses,
    tool,
)

# A stand-in for uv: records its argv (one JSON list per line) and prints $FAKE_UV_STDOUT. Every workflow
# script reaches the outside world through uv, so the recording is exactly what the real commands receive.
FAKE_UV = """\
import json, os, sys
with open(os.environ["FAKE_UV_LOG"], "a", encoding="utf-8") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
sys.stdout.write(os.environ.get("FAKE_UV_STDOUT", ""))
"""
EXPRESSION_RE = re.compile(r"\$\{\{\s*(.*?)\s*\}\}", re.DOTALL)
# Contexts an outsider (or anyone able to push a branch) can shape: branch names, event payloads, dispatch
# inputs, and outputs computed from them.
UNTRUSTED_RE = re.compile(
    r"\b(?:github\.(?:ref|ref_name|head_ref|base_ref|event)\b|inputs\.|needs\.|steps\.)"
)
# What the payload creates when it runs (a file of that name), and how the tests tell a planted value from the
# project's own: drawn when the tests start, so no answer baked into the project can hold it. A fixed word could:
# the project name `Zoë's "Vision" Lab $(touch /tmp/acc-pwned)` put `pwned` in the package name, and every call of
# the package looked injected (issue 30).
MARKER = f"pwned{secrets.token_hex(8)}"
# A branch name git accepts, and a payload that breaks out of quotes, substitutions and command lists.
ATTACK_REF = f"train/$(touch${{IFS}}{MARKER})"
PAYLOAD = f"$(touch {MARKER})`touch {MARKER}`\"; touch {MARKER}; echo \"';touch {MARKER};'"
BENIGN_OUTPUTS = {
    # The MLflow tunnel action's (the local end of the SSM session).
    "tracking-uri": "http://127.0.0.1:41234",
    "availability-zone": "eu-west-1b",
    "bucket": "your-org-ml-project-ml",
    "train-branch-prefix": "train/",
    "sweep-branch-prefix": "sweep/",
    # configs/gpu-runner.yaml's backend: batch, so batch.yml's checks pass and its later steps run too.
    "backend": "batch",
    # The caller check's verdict (gpu-runner-start/stop.yml): a later step runs only after it passed.
    "caller": "train",
    "runner-id": "4242",
    "runner-name": "ml-project-777-1",
    "label": "ml-project-777-1",
    "parameter": "/gpu-runner/ml-project/777-1",
    "instance-id": "i-0123456789abcdef0",
    "region": "eu-west-1",
    "instance-type": "g5.xlarge",
    "market": "spot",
    "interrupted": "true",
    "mlflow-run-id": "0123456789abcdef0123456789abcdef",
    # The timeline's moments (epoch seconds).
    "runner-online-at": "1796119985",
    "runner-online-seconds": "131",
    "boot-at": "1796119890",
    "image-ready-at": "1796119960",
    "runner-started-at": "1796119975",
    "job-started-at": "1796119990",
    "gpu-preflight": "ok",
    # sweep.yml's plan job: `sweep check`'s parallel, `gpu-runner capacity`'s runners, `sweep plan`'s wave.
    "parallel": "2",
    "runners": "2",
    "wave": "1",
    # workflow-settings' max_attempts, which sweep.yml's plan job hands to `sweep check`.
    "max-attempts": "3",
    # sweep.yml's plan job: the MLflow parent run (its comment job reports it).
    "parent-run-id": "fedcba9876543210fedcba9876543210",
    # batch.yml: `batch ship`'s archive and `batch submit`'s job.
    "source-uri": "s3://your-org-ml-project-ml/batch-src/0123456789abcdef0123456789abcdef01234567/"
    "b5bb9d8014a0f9b1d61e21e796d78dccdf1352f23cd32812f4850b878ae4944c.tar.gz",
    "source-sha256": "b5bb9d8014a0f9b1d61e21e796d78dccdf1352f23cd32812f4850b878ae4944c",
    "job-id": "4c5a0c8e-8a4e-4b7b-9c1e-0d2f3a4b5c6d",
    # batch.yml's sweep inputs (sweep plan's matrix) and `batch sweep-wave`'s outputs for it.
    "matrix": '{"include": [{"trial": 3, "attempt": 1}, {"trial": 5, "attempt": 2}]}',
    "trials": "3,5",
    "array-size": "2",
}
BENIGN_INPUTS = {
    "config": "configs/train.yaml", "instance-type": "g5.xlarge", "spot": "true", "attempt": "2",
    "commit": "0123456789abcdef0123456789abcdef01234567", "allow-cpu": "false",
    # sweep.yml's inputs of the reusable start/stop workflows (train.yml passes neither).
    "slot": "3", "resume": "none",
    # sweep.yml's dispatch inputs (the wave set by the collect job) and sweep-trial.yml's.
    "sweep": "configs/sweep.yaml", "wave": "2", "trial": "3",
    # batch.yml's kind (train.yml passes none: train; sweep.yml's batch job: sweep). The harness's caller is
    # train.yml; the caller check's verdict (steps.caller.outputs.kind) takes the sweep arm in this scenario.
    "kind": "train",
}  # fmt: skip


# The package a caller passes the platform's batch.yml (train.yml and sweep.yml pass their project's), which its
# caller check hands the submit step: the template's tests run batch.yml with this one.
CALLER_PACKAGE = "ml_project"


def untrusted_outside_env(docs: dict[str, dict[str, Any]], allowed_with: set[tuple[str, str]]) -> list[str]:
    """Every expression over an outsider-shaped context (UNTRUSTED_RE) that a step of `docs` holds outside `env:`
    and `if:` (evaluated by the expression engine, no shell), unless (the action the step uses, the expression) is
    in `allowed_with`: an input of a JavaScript action, which no shell reads. As `<file>.yml <where>.<key>: ${{ }}`."""
    found = []
    for name, doc in docs.items():
        for where, step in iter_steps(doc):
            for key, value in step.items():
                for expression in (e for text in iter_strings(value) for e in EXPRESSION_RE.findall(text)):
                    allowed = key in {"env", "if"} or (
                        key == "with" and (step_uses(step), expression) in allowed_with
                    )
                    if UNTRUSTED_RE.search(expression) and not allowed:
                        found.append(f"{name}.yml {where}.{key}: {as_expression(expression)}")
    return found


def context_value(name: str, scenario: str) -> str:
    """What an expression operand evaluates to in a scenario: `benign` (a dispatch with every input set and
    every launch output known), `empty` (a push: no inputs; or a launch that failed before any output) or
    `attack` (every outsider-controlled value is PAYLOAD, the branch is ATTACK_REF)."""
    if name.startswith(("secrets.", "vars.")):
        return "configured-value"
    if name == "github.run_id":
        return "777"
    if scenario == "attack" and name in {"github.ref_name", "github.head_ref"}:
        return ATTACK_REF
    if scenario == "attack" and name == "github.ref":
        return f"refs/heads/{ATTACK_REF}"
    if name == "github.ref_name":  # a push and a dispatch always have one
        return "train/demo"
    if not UNTRUSTED_RE.match(name):
        return f"<{name}>"
    if (
        name == "steps.caller.outputs.kind"
    ):  # batch.yml's caller check: a sweep's wave in a dispatch, else a training
        return "sweep" if scenario == "benign" else "train"
    if name == "github.event.repository.default_branch" and scenario != "attack":
        return "main"  # a push's and a dispatch's payload always name it
    if name == "steps.caller.outputs.package":
        return CALLER_PACKAGE  # a Python name, or the caller check refused the run
    if name == "steps.default.outputs.branch":
        # The repository's default branch as GitHub's event names it: a ref name only an admin sets (git refuses
        # control characters in one: git check-ref-format), never a pusher or a pull request. The step that names
        # it hands even a hostile value on as one output line (test_workflow_injection.py).
        return "main"
    if name.startswith("steps.tunnel-credentials.outputs."):
        # The tunnel role's credentials, as AWS STS returned them to configure-aws-credentials: no outsider's text.
        return f"<{name}>"
    if name.startswith(("steps.settings.outputs.", "steps.caller.outputs.")):
        # The default branch's configs/gpu-runner.yaml, validated by gpu-runner (a failed read ends the job), and
        # the caller check's verdict (its later steps run only once it passed): neither empty nor outsider-controlled.
        return BENIGN_OUTPUTS[name.rsplit(".", 1)[-1]]
    if scenario == "attack":
        return PAYLOAD
    if scenario == "empty":
        # batch.yml's package is a required input: GitHub refuses a call without it ("Reusing workflows").
        return CALLER_PACKAGE if name == "inputs.package" else ""
    key = name.rsplit(".", 1)[-1]
    if name == "inputs.package":
        return CALLER_PACKAGE
    if name.startswith("inputs.") and key in BENIGN_INPUTS:
        return BENIGN_INPUTS[key]
    # The reusable stop workflow gets the start and train jobs' outputs as inputs.
    return BENIGN_OUTPUTS["interrupted" if key == "train-interrupted" else key]


def evaluate(expression: str, scenario: str) -> str:
    """The subset of GitHub's expression language the env blocks use: operands joined by `||`."""
    for operand in (x.strip() for x in expression.split("||")):
        value = operand[1:-1] if operand[:1] == operand[-1:] == "'" else context_value(operand, scenario)
        if value:
            return value
    return ""


def substitute(text: str, scenario: str) -> str:
    """What GitHub does to a string before a step sees it: every `${{ }}` replaced by its value."""
    return EXPRESSION_RE.sub(lambda m: evaluate(m[1], scenario), text)


def run_bash(
    script: str, env: dict[str, str], workdir: Path, *, uv_prints: str = ""
) -> tuple[int, list[list[str]]]:
    """Run a `run:` script as GitHub does (`bash --noprofile --norc -eo pipefail <file>`) with a recording uv
    first on PATH; returns the exit code and uv's recorded calls (its stdout is kept in workdir/stdout). Only
    system tools besides the recorder."""
    bin_dir, repo = workdir / "bin", workdir / "repo"
    bin_dir.mkdir(parents=True)
    repo.mkdir()
    fake = bin_dir / "uv"
    fake.write_text(f"#!{sys.executable}\n{FAKE_UV}", encoding="utf-8")
    fake.chmod(0o755)
    (workdir / "step.sh").write_text(script, encoding="utf-8")
    log = workdir / "uv.log"
    full_env = {
        "PATH": f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "HOME": str(workdir),
        "LANG": "C.UTF-8",
        "FAKE_UV_LOG": str(log),
        "FAKE_UV_STDOUT": uv_prints,
        "GITHUB_OUTPUT": str(workdir / "github_output"),
        "GITHUB_STEP_SUMMARY": str(workdir / "step_summary"),
        **env,
    }
    proc = subprocess.run(
        [tool("bash"), "--noprofile", "--norc", "-eo", "pipefail", str(workdir / "step.sh")],
        cwd=repo,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # What the step printed (its ::error lines), for a test that reads the message.
    (workdir / "stdout").write_text(proc.stdout, encoding="utf-8")
    calls = (
        [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()] if log.exists() else []
    )
    return proc.returncode, calls


def run_steps(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(where, job, step) for every `run:` step of a workflow."""
    for job_id, job in (doc.get("jobs") or {}).items():
        for i, step in enumerate(job.get("steps") or []):
            if "run" in step:
                yield f"jobs.{job_id}.steps[{i}]", job, step


def step_env(doc: dict[str, Any], job: dict[str, Any], step: dict[str, Any], scenario: str) -> dict[str, str]:
    """The environment a step's shell gets: workflow, job and step `env:` after substitution, plus the default
    variables GitHub sets from the same (possibly hostile) event."""
    merged = {**(doc.get("env") or {}), **(job.get("env") or {}), **(step.get("env") or {})}
    env = {key: substitute(str(value), scenario) for key, value in merged.items()}
    ref_name = ATTACK_REF if scenario == "attack" else "train/demo"
    return {
        "GITHUB_REF_NAME": ref_name, "GITHUB_REF": f"refs/heads/{ref_name}",
        # The caller (train.yml on the branch), as GitHub describes it to a called workflow too.
        "GITHUB_EVENT_NAME": "workflow_dispatch" if scenario == "benign" else "push",
        "GITHUB_REPOSITORY": "octo-org/octo-repo",
        "GITHUB_WORKFLOW_REF": f"octo-org/octo-repo/.github/workflows/train.yml@refs/heads/{ref_name}",
        **env,
    }  # fmt: skip


# gpu-runner's subcommands whose first word after them is an action (`gpu-runner mlflow-server wake`).
NESTED_SUBCOMMANDS = {"mlflow-server", "batch"}


class GpuRunnerCall(NamedTuple):
    argv: list[str]  # after `gpu-runner`
    global_options: list[str]
    subcommand: str
    options: list[str]


def gpu_runner_calls(calls: list[list[str]]) -> list[GpuRunnerCall]:
    """Every `uv run --no-sync gpu-runner [--opt value]... <subcommand> [--opt value | --opt=value]...` call.
    (Every option of the contract takes a value.)"""
    found = []
    for argv in calls:
        if argv[:3] != ["run", "--no-sync", "gpu-runner"]:
            continue
        rest, global_options, i = argv[3:], [], 0
        while i < len(rest) and rest[i].startswith("--"):
            global_options.append(rest[i].split("=", 1)[0])
            i += 1 if "=" in rest[i] else 2
        subcommand, options = rest[i], []
        tail = rest[i + 1 :]
        if subcommand in NESTED_SUBCOMMANDS and tail:  # `mlflow-server wake`: the action is part of the name
            subcommand, tail = f"{subcommand} {tail[0]}", tail[1:]
        j = 0
        while j < len(tail) and tail[j] != "--":  # after `--`: a command's argv (`batch submit`), no options
            assert tail[j].startswith("--"), f"unexpected argument {tail[j]!r} in {argv}"
            options.append(tail[j].split("=", 1)[0])
            j += 1 if "=" in tail[j] else 2
        found.append(GpuRunnerCall(rest, global_options, subcommand, options))
    return found


def run_workflow_steps(
    docs: dict[str, dict[str, Any]], scenario: str, tmp_path: Path
) -> Iterator[tuple[str, int, list[list[str]]]]:
    """Every `run:` step of the workflows `docs` (by file stem), substituted for `scenario` and run with its env:
    yields (`<workflow>.yml <where>`, exit code, uv's recorded calls), each step in a directory of its own."""
    for name, doc in docs.items():
        for where, job, step in run_steps(doc):
            code, recorded = run_bash(
                substitute(step["run"], scenario),
                step_env(doc, job, step, scenario),
                tmp_path / scenario / f"{name}-{where}",
            )
            yield f"{name}.yml {where}", code, recorded


def recorded_gpu_runner_calls(
    docs: dict[str, dict[str, Any]], scenario: str, tmp_path: Path
) -> list[GpuRunnerCall]:
    calls = []
    for step, code, recorded in run_workflow_steps(docs, scenario, tmp_path):
        # Under attack a guard may refuse before it calls anything (batch.yml's kind check; which step may, and
        # that it must, is test_workflow_injection's).
        assert code == 0 or (scenario == "attack" and not recorded), f"{step} ({scenario})"
        calls += gpu_runner_calls(recorded)
    return calls
