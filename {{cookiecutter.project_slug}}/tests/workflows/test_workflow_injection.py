"""No outsider-controlled value reaches a shell as code: expressions over branch names, inputs and outputs
appear only under `env:`, and every `run:` script of the GPU workflows, run with hostile values, keeps them
data (with a negative control: the unsafe way does run the payload)."""

from __future__ import annotations

from pathlib import Path

from step_scripts import (
    ATTACK_REF,
    EXPRESSION_RE,
    MARKER,
    PAYLOAD,
    UNTRUSTED_RE,
    run_bash,
    run_steps,
    step_env,
    substitute,
)
from workflow_files import (
    AWS_CREDENTIALS,
    TUNNEL_ACTION,
    as_expression,
    gpu_workflows,
    iter_steps,
    iter_strings,
    step_uses,
)


def test_untrusted_expressions_only_under_env(project: Path) -> None:
    """Parsed train.yml and reap.yml: in every step, an expression over a branch name, event payload, input or
    output appears only under `env:` (or in a step's `if:`, evaluated by the expression engine, no shell)."""
    for name, doc in gpu_workflows(project).items():
        for where, step in iter_steps(doc):
            for key, value in step.items():
                for text in iter_strings(value):
                    for expression in EXPRESSION_RE.findall(text):
                        if UNTRUSTED_RE.search(expression):
                            # One input of a JavaScript action (never a shell): the commit a resumed
                            # attempt checks out.
                            checkout_ref = key == "with" and step.get("uses", "").startswith(
                                "actions/checkout@"
                            )
                            checkout_ref = checkout_ref and expression in (
                                "inputs.commit || github.sha",
                                "steps.default.outputs.branch",  # the branch the event names
                            )
                            # And the region of the AWS credentials action: the default branch's settings.
                            # (also the MLflow tunnel action's, which hands it to that action too).
                            region = key == "with" and step_uses(step) in (AWS_CREDENTIALS, TUNNEL_ACTION)
                            region = region and expression == "steps.settings.outputs.region"
                            # And the launch role chosen by the caller check's verdict (its own script's output).
                            role = key == "with" and step.get("uses", "").startswith(AWS_CREDENTIALS)
                            role = role and expression == (
                                "steps.caller.outputs.caller == 'predict' && vars.AWS_PREDICT_LAUNCH_ROLE_ARN"
                                " || vars.AWS_ROLE_ARN"
                            )
                            assert key in {"env", "if"} or checkout_ref or region or role, (
                                f"{name}.yml {where}.{key}: {as_expression(expression)}"
                            )


# The guard whose job is to refuse a hostile input: a branch's train.yml may pass batch.yml any `kind`.
REFUSES_A_HOSTILE_KIND = {"Refuse callers other than train.yml and sweep.yml on their branches"}


def test_hostile_branch_names_and_inputs_stay_data(project: Path, tmp_path: Path) -> None:
    """Run every `run:` script of train.yml and reap.yml as GitHub would (expressions substituted, then bash)
    with the branch `train/$(touch${IFS}<MARKER>)` and every input and output set to a shell payload: nothing
    executes, and the payloads reach gpu-runner / the training CLI as single, unchanged arguments."""
    ran = 0
    for name, doc in gpu_workflows(project).items():
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
            if step.get("name") in REFUSES_A_HOSTILE_KIND:  # batch.yml's `kind` input: only train or sweep
                assert code != 0 and not calls, f"{name}.yml {where} accepted the kind {PAYLOAD!r}"
                continue
            # No command: one output line, the value as data.
            if step.get("name") == "Name the default branch":
                output = (workdir / "github_output").read_text(encoding="utf-8")
                assert code == 0 and not calls and output == f"branch={PAYLOAD}\n", (name, where, output)
                continue
            assert code == 0, f"{name}.yml {where} failed"
            arguments = [a for argv in calls for a in argv]
            hostile = [a for a in arguments if MARKER in a]
            # A whole argument, `--opt=value` or `--phase=name=value` (neither payload holds an "=").
            # The composed values: the checkpoint URI and the sweep's storage root around the bucket output.
            whole = (PAYLOAD, ATTACK_REF, f"s3://{PAYLOAD}/checkpoints", f"s3://{PAYLOAD}/sweeps")
            assert all(a.rpartition("=")[2] in whole for a in hostile), hostile
            if PAYLOAD in env.values():
                assert hostile, f"{name}.yml {where}: no hostile value reached a command (is the test stale?)"
    # 8, + the start workflow's caller guard and its own teardown when it fails (item 2), + train's "MLflow
    # store not kept" warning (item 10), + the stop workflow's caller guard (issue 15), + sweep.yml's 7 (check,
    # settings, capacity, plan; settings, collect, next wave) and sweep-trial.yml's 3 (timeline, preflight, train),
    # + the start workflow's MLflow server wake, the pull-request comment of train.yml and of sweep.yml (issue 17)
    # + the comment jobs' settings (the tunnel's region), + batch.yml's 7 (settings, caller check, ship, open-run,
    # submit, wait, terminate) and the start workflow's backend choice (issue 18), + batch.yml's wave step and the
    # sweep arms of its submit and wait; + start's, stop's and batch.yml's default branch and written-out install,
    # and the tunnel's connect step of stop and batch.yml (issue 31: the platform's actions written out).
    assert ran == 49


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
