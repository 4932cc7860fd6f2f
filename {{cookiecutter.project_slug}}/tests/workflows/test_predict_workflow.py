"""predict.yml (issue 16): its triggers and jobs, the check that refuses a run off the default branch or outside
S3 before any credential, and hostile inputs that stay data (as test_workflow_injection.py holds the other
GPU workflows)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gpu_runner_testing.workflow_checks.step_scripts import (
    EXPRESSION_RE,
    MARKER,
    PAYLOAD,
    UNTRUSTED_RE,
    run_bash,
    run_steps,
    step_env,
    substitute,
)
from gpu_runner_testing.workflow_checks.workflow_files import (
    AWS_CREDENTIALS,
    GITHUB_HOSTED_RE,
    PR_EVENTS,
    TUNNEL_ACTION,
    answers_of,
    as_expression,
    iter_steps,
    iter_strings,
    load_yaml,
    platform_call,
    step_uses,
    steps_by_uses,
    triggers,
)

REFUSE = "Refuse a run off the default branch, or an input or output outside S3"
CHECK = "Check the model, the input and the output"


def predict_yml(project: Path) -> dict[str, Any]:
    return load_yaml(project / ".github" / "workflows" / "predict.yml")


def step_named(job: dict[str, Any], name: str) -> dict[str, Any]:
    (step,) = [s for s in job["steps"] if s.get("name") == name]
    return step


def test_a_dispatch_only_with_the_issue_inputs_and_no_permission_by_default(project: Path) -> None:
    doc = predict_yml(project)
    # A dispatch needs write access; no pull request of any kind, no workflow_run (a fork's code never starts it).
    assert triggers(doc) <= {"workflow_dispatch", "schedule"} and "workflow_dispatch" in triggers(doc)
    assert not triggers(doc) & {*PR_EVENTS, "workflow_run", "workflow_call", "issue_comment"}
    inputs = doc["on"]["workflow_dispatch"]["inputs"]
    assert {name: spec.get("default") for name, spec in inputs.items()} == {
        "model": "champion", "input": None, "output": None, "device": "cpu", "shard-size": "512",
    }  # fmt: skip
    assert inputs["input"]["required"] and inputs["output"]["required"]
    assert inputs["device"]["type"] == "choice" and inputs["device"]["options"] == ["cpu", "gpu"]
    assert doc["permissions"] == {}
    assert doc["concurrency"] == {"group": "predict-${{ inputs.output }}", "cancel-in-progress": False}


def test_resolve_comes_first_and_only_the_gpu_path_reaches_a_self_hosted_runner(project: Path) -> None:
    jobs = predict_yml(project)["jobs"]
    assert set(jobs) == {"resolve", "predict", "start", "train", "stop"}
    assert jobs["resolve"]["runs-on"] == "ubuntu-latest" and "needs" not in jobs["resolve"]
    assert jobs["resolve"]["outputs"] == {
        key: as_expression(f"steps.check.outputs.{key}") for key in ("model", "export", "images")
    }
    assert jobs["predict"]["needs"] == "resolve" and jobs["predict"]["if"] == "${{ inputs.device != 'gpu' }}"
    assert jobs["start"]["needs"] == "resolve" and jobs["start"]["if"] == "${{ inputs.device == 'gpu' }}"
    for name in ("start", "stop"):
        assert jobs[name]["uses"] == platform_call(project, f"gpu-runner-{name}")
    # The runner's job-started hook accepts a job called train only; it runs the version resolve pinned.
    train = jobs["train"]
    assert train["needs"] == ["resolve", "start"] and train["runs-on"] == "${{ needs.start.outputs.label }}"
    # S3 with the predict role through OIDC: the instance profile (the runner role) may write no prediction.
    assert train["permissions"] == {"contents": "read", "id-token": "write"}
    credentials = step_named(train, "AWS credentials (OIDC, the predict role)")
    assert credentials["with"]["role-to-assume"] == "${{ vars.AWS_PREDICT_ROLE_ARN }}"
    assert credentials["with"]["aws-region"] == "${{ needs.start.outputs.region }}"
    # The whole job's time limit (its credentials must not expire under a long batch), within IAM's 12 hours.
    assert train["timeout-minutes"] * 60 < credentials["with"]["role-duration-seconds"] <= 43200
    steps = [step.get("name") for step in train["steps"]]
    assert steps.index("AWS credentials (OIDC, the predict role)") < steps.index("Predict")
    predict = step_named(train, "Predict")
    assert predict["env"]["MODEL"] == "${{ needs.resolve.outputs.model }}"
    assert predict["env"]["EXPORT"] == "${{ needs.resolve.outputs.export }}"
    assert train["outputs"]["mlflow-run-id"] == "${{ steps.predict.outputs.mlflow-run-id }}"
    assert "always()" in jobs["stop"]["if"] and jobs["stop"]["with"]["resume"] == "none"
    assert jobs["stop"]["with"]["mlflow-run-id"] == "${{ needs.train.outputs.mlflow-run-id }}"
    # Every other job that runs steps is on a hosted runner.
    for name, job in jobs.items():
        if name != "train" and "uses" not in job:
            assert GITHUB_HOSTED_RE.match(job["runs-on"]), name


def test_the_refusal_comes_before_any_credential_in_resolve(project: Path) -> None:
    steps = predict_yml(project)["jobs"]["resolve"]["steps"]
    names = [s.get("name") for s in steps]
    (credentials,) = steps_by_uses({"steps": steps}, AWS_CREDENTIALS)
    assert names.index(REFUSE) < steps.index(credentials) < names.index(CHECK)
    assert credentials["with"]["role-to-assume"] == "${{ vars.AWS_PREDICT_ROLE_ARN }}"


@pytest.mark.parametrize(
    ("ref", "model", "source", "out", "refused"),
    [
        ("{default}", "champion", "s3://b/in/", "s3://b/predictions/x/", None),
        ("{default}", "models:/m/3", "s3://other/in/", "s3://b/predictions/2026/12/", None),
        # A run of another branch's copy (its pusher may edit it): refused even before the role would be.
        ("train/x", "champion", "s3://b/in/", "s3://b/predictions/x/", "runs on the default branch only"),
        ("{default}-x", "champion", "s3://b/in/", "s3://b/predictions/x/", "runs on the default branch only"),
        # Local paths would read the runner's disk or write into the checkout.
        ("{default}", "champion", "/etc", "s3://b/predictions/x/", "input '/etc': use s3://"),
        ("{default}", "champion", "s3://", "s3://b/predictions/x/", "input 's3://': use s3://"),
        ("{default}", "champion", "s3://b/in/", "outputs/x", "output 'outputs/x': use s3://b/predictions/"),
        # Outside the one prefix the role may write, or predictions/ itself (no batch of its own).
        ("{default}", "champion", "s3://b/in/", "s3://b/checkpoints/x/", "the only prefix the predict role"),
        ("{default}", "champion", "s3://b/in/", "s3://other/predictions/x/", "the only prefix the predict role"),
        ("{default}", "champion", "s3://b/in/", "s3://b/predictions/", "the only prefix the predict role"),
        # A newline would let a later error line start a workflow command of its own.
        ("{default}", "champion", "s3://b/in/\n::add-mask::x", "s3://b/predictions/x/", "a control character"),
        ("{default}", "x\n::stop-commands::y", "s3://b/in/", "s3://b/predictions/x/", "a control character"),
    ],
)  # fmt: skip
def test_a_run_off_the_default_branch_or_outside_s3_is_refused_with_the_fix(
    project: Path, tmp_path: Path, ref: str, model: str, source: str, out: str, refused: str | None
) -> None:
    default = answers_of(project)["default_branch"]
    step = step_named(predict_yml(project)["jobs"]["resolve"], REFUSE)
    env = {"GITHUB_REF": f"refs/heads/{ref.format(default=default)}", "MODEL": model, "INPUT": source,
           "OUTPUT": out, "DEVICE": "gpu", "BUCKET": "b"}  # fmt: skip
    code, calls = run_bash(step["run"], env, tmp_path / "refuse")
    assert calls == []  # nothing asked of AWS, MLflow or uv
    said = (tmp_path / "refuse" / "stdout").read_text().splitlines()
    if refused is None:
        assert code == 0
    else:
        # One line: no workflow command smuggled in after it.
        assert code == 1 and len(said) == 1, said
        assert said[0].startswith("::error title=predict::") and refused in said[0]


def test_expressions_over_inputs_and_outputs_appear_only_under_env(project: Path) -> None:
    for where, step in iter_steps(predict_yml(project)):
        for key, value in step.items():
            for text in iter_strings(value):
                for expression in EXPRESSION_RE.findall(text):
                    # The AWS credentials action's region: the default branch's settings, no input, read by this
                    # job or by the start job (gpu-runner-start.yml at the default branch, for the GPU job); and
                    # the MLflow tunnel action's, which hands it to that action. An action input, never shell.
                    region = key == "with" and step_uses(step) in (AWS_CREDENTIALS, TUNNEL_ACTION)
                    region = region and expression in {
                        "steps.settings.outputs.region",
                        "needs.start.outputs.region",
                    }
                    if UNTRUSTED_RE.search(expression):
                        assert key in {"env", "if"} or region, (
                            f"predict.yml {where}.{key}: {as_expression(expression)}"
                        )


def test_hostile_inputs_reach_the_predict_command_as_whole_values(project: Path, tmp_path: Path) -> None:
    """Every run: step with every input and output a shell payload (and the model `--config=/etc/passwd`, an
    option in disguise): nothing executes, and each reaches `predict` as one --opt=value argument."""
    doc = predict_yml(project)
    package = answers_of(project)["package_name"]
    commands = 0
    for where, job, step in run_steps(doc):
        env = step_env(doc, job, step, "attack")
        if "MODEL" in env:
            env["MODEL"] = "--config=/etc/passwd"
        workdir = tmp_path / where
        code, calls = run_bash(substitute(step["run"], "attack"), env, workdir)
        assert not list(workdir.rglob(MARKER)), f"predict.yml {where}: the payload ran"
        for argv in calls:
            if argv[:6] != ["run", "--no-sync", "python", "-m", package, "predict"]:
                continue  # also the GPU preflight, which takes no input
            commands += 1
            options = argv[6:]
            assert all(a.startswith("--") and ("=" in a or a == "--check") for a in options), options
            values = dict(a[2:].split("=", 1) for a in options if "=" in a)
            assert values["model"] in ("--config=/etc/passwd", PAYLOAD), values
            assert values["input"] == PAYLOAD and values["output"] == PAYLOAD, values
        if step.get("name") == REFUSE:
            assert code == 1  # the payload is no s3:// URI: refused before any credential
    assert commands == 3  # resolve's check, the CPU job's and the GPU job's predict
