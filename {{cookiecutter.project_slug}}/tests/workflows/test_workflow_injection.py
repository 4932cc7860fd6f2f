"""No outsider-controlled value reaches a shell as code: expressions over branch names, inputs and outputs
appear only under `env:`, and every `run:` script of the project's GPU workflows, run with hostile values, keeps
them data (with a negative control: the unsafe way does run the payload). The platform's start, stop and
batch.yml are held to the same where they live (the template repository's
tests/test_platform_workflow_scripts.py)."""

from __future__ import annotations

from pathlib import Path

from gpu_runner_testing.workflow_checks.step_scripts import (
    ATTACK_REF,
    MARKER,
    PAYLOAD,
    run_bash,
    run_steps,
    step_env,
    substitute,
    untrusted_outside_env,
)
from gpu_runner_testing.workflow_checks.workflow_files import AWS_CREDENTIALS, TUNNEL_ACTION, gpu_workflows

# Expressions over outsider-shaped contexts allowed outside `env:`: inputs of JavaScript actions (no shell).
ALLOWED_WITH = {
    # The commit a resumed attempt checks out.
    ("actions/checkout", "inputs.commit || github.sha"),
    # The region of the AWS credentials action (and of the MLflow tunnel action, which hands it to that action):
    # the default branch's settings.
    (AWS_CREDENTIALS, "steps.settings.outputs.region"),
    (TUNNEL_ACTION, "steps.settings.outputs.region"),
}


def test_untrusted_expressions_only_under_env(project: Path) -> None:
    """Parsed train.yml, reap.yml, sweep.yml and sweep-trial.yml: in every step, an expression over a branch
    name, event payload, input or output appears only under `env:` (or in a step's `if:`, evaluated by the
    expression engine, no shell), or as one of the JavaScript actions' inputs above."""
    assert untrusted_outside_env(gpu_workflows(project), ALLOWED_WITH) == []


def test_hostile_branch_names_and_inputs_stay_data(project: Path, tmp_path: Path) -> None:
    """Run every `run:` script of the project's GPU workflows as GitHub would (expressions substituted, then
    bash) with the branch `train/$(touch${IFS}<MARKER>)` and every input and output set to a shell payload:
    nothing executes, and the payloads reach gpu-runner / the training CLI as single, unchanged arguments."""
    ran = 0
    for name, doc in gpu_workflows(project).items():
        for where, job, step in run_steps(doc):
            env = step_env(doc, job, step, "attack")
            workdir = tmp_path / f"{name}-{where}"
            code, calls = run_bash(substitute(step["run"], "attack"), env, workdir)
            ran += 1
            assert not list(workdir.rglob(MARKER)), f"{name}.yml {where}: the payload ran"
            assert code == 0, f"{name}.yml {where} failed"
            hostile = [a for argv in calls for a in argv if MARKER in a]
            # A whole argument, `--opt=value` or `--phase=name=value` (neither payload holds an "=").
            # The composed values: the checkpoint URI and the sweep's storage root around the bucket output.
            whole = (PAYLOAD, ATTACK_REF, f"s3://{PAYLOAD}/checkpoints", f"s3://{PAYLOAD}/sweeps")
            assert all(a.rpartition("=")[2] in whole for a in hostile), hostile
            if PAYLOAD in env.values():
                assert hostile, f"{name}.yml {where}: no hostile value reached a command (is the test stale?)"
    # train.yml's 6: the timeline, the GPU preflight, the training, the "MLflow store not kept" warning (issue
    # 13 item 10), the comment job's settings and comment (issue 17); reap.yml's 2 (settings, reap); sweep.yml's
    # 9 (settings, check, capacity, plan; settings, collect, next wave; the comment's settings and comment);
    # sweep-trial.yml's 3 (timeline, preflight, train).
    assert ran == 20


def test_injection_harness_catches_an_expression_in_run(project: Path, tmp_path: Path) -> None:
    """Negative control: the train step written the unsafe way (`${{ inputs.config }}` pasted into `run:`) and
    substituted by GitHub first does run the payload, so the test above would notice."""
    doc = gpu_workflows(project)["train"]
    _, job, step = next(x for x in run_steps(doc) if '--config="${CONFIG}"' in x[2]["run"])
    unsafe = step["run"].replace('"${CONFIG}"', '"${{ inputs.config }}"')
    assert unsafe != step["run"]
    workdir = tmp_path / "unsafe"
    run_bash(substitute(unsafe, "attack"), step_env(doc, job, step, "attack"), workdir)
    assert list(workdir.rglob(MARKER))
