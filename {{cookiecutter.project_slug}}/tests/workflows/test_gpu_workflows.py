"""What the project's GPU workflows mean: train.yml runs start -> train -> stop, start and stop are the
platform's reusable workflows at the pinned commit (what they run is tested where they live: the template
repository's tests/test_platform_workflows.py), reap.yml runs hourly on the default branch, only the AWS jobs get
an OIDC token, and the local MLflow store is uploaded only where nobody else can download it."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import yaml
from gpu_runner_testing.workflow_checks.workflow_files import (
    AWS_CREDENTIALS,
    LAUNCH_OUTPUTS,
    SETUP_ACTION,
    TIMELINE_PHASES,
    TUNNEL_ACTION,
    WAIT_OUTPUTS,
    answers_of,
    as_expression,
    gpu_workflows,
    load_yaml,
    platform_call,
    steps_by_uses,
    triggers,
    workflow_path,
)
from gpu_runner_testing.workflow_checks.workflow_rules import cache_problems

# The GitHub App's and a token's secrets: no GPU workflow hands them to a job (the runner's registration is
# gpu-runner's, on the default branch's code).
GITHUB_CREDENTIALS = ("GPU_RUNNER_TOKEN", "GPU_RUNNER_APP_PRIVATE_KEY", "GPU_RUNNER_APP_ID")
# Inputs of gpu-runner-stop.yml only sweep.yml sets, with the defaults that keep train.yml's behaviour.
SWEEP_ONLY_STOP_INPUTS = {"slot": "", "resume": "dispatch"}


def test_train_triggers_and_concurrency(project: Path) -> None:
    train = gpu_workflows(project)["train"]
    # Exactly: pushes to the training branches, and a manual dispatch. Never a pull request (fork code would
    # run on the self-hosted GPU runner with the AWS role).
    assert triggers(train) == {"push", "workflow_dispatch"}
    assert train["on"]["push"] == {"branches": [f"{train_branch_prefix(project)}**"]}
    inputs = train["on"]["workflow_dispatch"]["inputs"]
    assert {name: spec.get("default") for name, spec in inputs.items()} == {
        "config": "configs/train.yaml",
        "instance-type": "",
        "spot": "default",
        # Set by the stop job's re-dispatch after a spot interruption.
        "attempt": "1",
        "commit": "",
        # Debugging only: train on the CPU when the GPU preflight finds no GPU. A dispatch needs write access,
        # and train.yml has no pull_request trigger (above): a fork's pull request cannot set it.
        "allow-cpu": "false",
    }
    assert inputs["spot"]["type"] == "choice" and inputs["spot"]["options"] == ["default", "true", "false"]
    assert inputs["allow-cpu"]["type"] == "choice" and inputs["allow-cpu"]["options"] == ["false", "true"]
    # One training per branch; a running one is never cancelled.
    assert train["concurrency"] == {"group": "train-${{ github.ref }}", "cancel-in-progress": False}
    assert train["permissions"] == {}


def test_start_and_stop_are_the_platforms_at_the_pin(project: Path) -> None:
    """Issue 13 item 2, issue 31: a branch that rewrites train.yml cannot change what launches, registers, tears
    down. start and stop are the platform's reusable workflows at the commit the project pins (what they run,
    and that they refuse every other caller, is tested where they live: the template repository's
    tests/test_platform_workflows.py); no GitHub credential is handed to them or to any GPU job; the train job
    (branch code on the GPU) has no OIDC token, only the instance profile."""
    jobs = gpu_workflows(project)["train"]["jobs"]
    for name in ("start", "stop"):
        assert jobs[name]["uses"] == platform_call(project, f"gpu-runner-{name}")
    for name in gpu_workflows(project):
        body = workflow_path(project, name).read_text(encoding="utf-8")
        for secret in (*GITHUB_CREDENTIALS, "secrets: inherit"):
            assert secret not in body, f"{name}.yml hands {secret} to a job"
    assert "id-token" not in jobs["train"]["permissions"]


def test_train_job_graph(project: Path) -> None:
    jobs = gpu_workflows(project)["train"]["jobs"]
    # + the pull-request comment (test_pr_comment_jobs.py)
    # + the batch backend's job (issue 18: test_batch_workflow.py)
    assert list(jobs) == ["start", "train", "stop", "batch", "comment"]
    caller_start, train, caller_stop = jobs["start"], jobs["train"], jobs["stop"]
    # What the platform's start and stop at the pin declare (what they do is tested where they live).
    start_doc, stop_doc = called(project, caller_start, "start"), called(project, caller_stop, "stop")
    # The permissions the called jobs ask for, granted by the caller (GitHub grants a called job no more).
    for caller, doc in ((caller_start, start_doc), (caller_stop, stop_doc)):
        ((_, called_job),) = doc["jobs"].items()
        assert caller["permissions"] == called_job["permissions"]
    assert caller_start["permissions"] == {"contents": "read", "id-token": "write"}
    # train.yml reads start's outputs: the launch's (the runner's label, the instance type, the market).
    assert set(start_doc["on"]["workflow_call"]["outputs"]) >= {*LAUNCH_OUTPUTS, *WAIT_OUTPUTS, "backend"}
    assert caller_start["with"] == {
        "instance-type": "${{ inputs.instance-type || '' }}", "spot": "${{ inputs.spot || 'default' }}",
        "commit": "${{ inputs.commit || '' }}", "attempt": "${{ inputs.attempt || '1' }}",
    }  # fmt: skip

    # train: on this run's own runner label, on the host (manual/gpu-runtime.md: no container, the locked gpu
    # extra), only `contents: read`.
    assert train["needs"] == "start"
    assert train["runs-on"] == "${{ needs.start.outputs.label }}"
    assert "container" not in train
    assert train["permissions"] == {"contents": "read"}
    gpu_settings = yaml.safe_load((project / "configs" / "gpu-runner.yaml").read_text(encoding="utf-8"))
    # GitHub's timeout ends the job before the instance's max lifetime (counted from boot) ends it under the
    # job: the job starts up to wait_timeout_seconds after boot, plus minutes for scheduling and cancellation.
    assert gpu_settings["max_runtime_minutes"] == int(answers_of(project)["max_runtime_minutes"])
    boot_margin = math.ceil(gpu_settings["wait_timeout_seconds"] / 60) + 5
    assert 0 < train["timeout-minutes"] <= gpu_settings["max_runtime_minutes"] - boot_margin
    assert gpu_settings["image"] == "", "host mode: no image to pre-pull"
    (setup,) = steps_by_uses(train, SETUP_ACTION)
    assert setup["with"] == {"install": "gpu", "enable-cache": "false"}
    package = answers_of(project)["package_name"]
    # The GPU preflight comes right after the install, before training, and nothing lets the job skip past it:
    # no `if:`, no continue-on-error; only the allow-cpu dispatch input (or the config) lets it pass on CPU.
    names = [s.get("name") for s in train["steps"]]
    preflight = train["steps"][names.index("GPU preflight")]
    assert names.index("GPU preflight") == train["steps"].index(setup) + 1 < names.index("Train")
    assert "if" not in preflight and "continue-on-error" not in preflight
    assert f"python -m {package} gpu-preflight" in preflight["run"]
    assert preflight["run"].lstrip().startswith("code=0\ntimeout ")
    assert preflight["env"] == {
        "ALLOW_CPU": "${{ inputs.allow-cpu }}",
        "CONFIG": "${{ inputs.config || 'configs/train.yaml' }}",
    }
    assert "if" not in train["steps"][names.index("Train")]
    train_step = train["steps"][names.index("Train")]
    assert f"python -m {package} train" in train_step["run"]
    assert '--config="${CONFIG}" --checkpoint-uri="${CHECKPOINT_URI}"' in train_step["run"]
    # Exit status 75 (spot interruption notice) becomes the job output the stop job's resume step reads.
    # The MLflow run id, written by the training CLI as soon as the run exists: stop logs the cost there.
    assert train["outputs"] == {
        "interrupted": "${{ steps.train.outputs.interrupted }}",
        "mlflow-run-id": "${{ steps.train.outputs.mlflow-run-id }}",
        **{f"{p}-at": as_expression(f"steps.timeline.outputs.{p}-at") for p in TIMELINE_PHASES},
        "gpu-preflight": "${{ steps.preflight.outputs.gpu-preflight }}",
    }
    # The boot timeline step runs before checkout and passes on only known names with digits.
    timeline = next(s for s in train["steps"] if s.get("id") == "timeline")
    assert train["steps"].index(timeline) < train["steps"].index(train_step)
    assert "job-started-at=$(date +%s)" in timeline["run"] and "=~ ^[0-9]{1,12}$" in timeline["run"]
    env = train_step["env"]
    assert env["CONFIG"] == "${{ inputs.config || 'configs/train.yaml' }}"
    assert env["GPU_INSTANCE_TYPE"] == "${{ needs.start.outputs.instance-type }}"
    assert env["GPU_MARKET"] == "${{ needs.start.outputs.market }}"
    assert {"MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"} <= set(env)

    # stop: always (failure, cancel, timeout), after both, whenever start created anything.
    assert set(caller_stop["needs"]) == {"start", "train"}
    condition = caller_stop["if"]
    assert condition.startswith("${{ always() && ")
    for output in ("instance-id", "runner-id"):
        assert f"needs.start.outputs.{output} != ''" in condition
    # actions: write = dispatching the next attempt after a spot interruption, with the run's own token.
    assert caller_stop["permissions"] == {"contents": "read", "id-token": "write", "actions": "write"}
    # What the caller passes: every input the stop workflow declares, from the start and train jobs, except
    # sweep.yml's two, whose defaults are train.yml's behaviour (no slot; re-dispatch after an interruption).
    passed = caller_stop["with"]
    declared = stop_doc["on"]["workflow_call"]["inputs"]
    assert set(passed) == set(declared) - set(SWEEP_ONLY_STOP_INPUTS)
    assert {name: declared[name]["default"] for name in SWEEP_ONLY_STOP_INPUTS} == SWEEP_ONLY_STOP_INPUTS
    assert "slot" not in caller_start["with"]
    for name in ("region", "instance-id", "runner-id", "parameter", "runner-online-at"):
        assert passed[name] == as_expression(f"needs.start.outputs.{name}")
    assert passed["mlflow-run-id"] == "${{ needs.train.outputs.mlflow-run-id }}"
    assert passed["train-interrupted"] == "${{ needs.train.outputs.interrupted }}"
    assert passed["gpu-preflight"] == "${{ needs.train.outputs.gpu-preflight }}"
    assert passed["attempt"] == "${{ inputs.attempt || '1' }}"
    assert passed["commit"] == "${{ inputs.commit || github.sha }}"
    assert caller_stop["secrets"] == {
        name: as_expression(f"secrets.{name}")
        for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")
    }


def test_reap_meaning(project: Path) -> None:
    reap = gpu_workflows(project)["reap"]
    assert triggers(reap) == {"schedule", "workflow_dispatch"}
    # Hourly (issue 13 item 12): the AWS side runs every 15 minutes inside AWS; 96 GitHub jobs a day cost
    # ~2,900 minutes a month in a private repository.
    assert reap["on"]["schedule"] == [{"cron": "17 * * * *"}]
    assert reap["permissions"] == {}
    assert reap["concurrency"]["cancel-in-progress"] is False
    (job,) = reap["jobs"].values()
    # Only the default branch: a scheduled run always is (its payload has no repository.default_branch), a
    # dispatch must have picked it.
    assert job["if"] == (
        "${{ github.event_name == 'schedule' || "
        "github.ref == format('refs/heads/{0}', github.event.repository.default_branch) }}"
    )
    assert job["runs-on"] == "ubuntu-latest"
    assert job["permissions"] == {"contents": "read", "id-token": "write"}
    assert 0 < job["timeout-minutes"] <= 30
    (setup,) = steps_by_uses(job, SETUP_ACTION)
    assert setup["with"] == {"install": "runner", "enable-cache": "false"}
    assert [s["run"].strip() for s in job["steps"] if "run" in s] == [
        "uv run --no-sync gpu-runner --settings configs/gpu-runner.yaml workflow-settings",
        "uv run --no-sync gpu-runner --settings configs/gpu-runner.yaml reap",
    ]


def test_local_mlflow_store_is_uploaded_only_for_private_repositories_or_on_opt_in(project: Path) -> None:
    """Issue 13 item 10: without an MLflow server the local store (model, checkpoints, database) would be an
    artifact anyone may download from a public repository. Uploaded only when the event's repository is
    private or on the MLFLOW_LOCAL_STORE_ARTIFACT opt-in; otherwise a warning step says why. Evaluated over
    every case."""
    train = gpu_workflows(project)["train"]["jobs"]["train"]
    (upload,) = [s for s in train["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact@")]
    (warning,) = [s for s in train["steps"] if s.get("name") == "Say why the local MLflow store was not kept"]
    assert (
        "mlflow.db" in upload["with"]["path"] and "::warning title=MLflow store not kept::" in warning["run"]
    )
    cases = 0
    for uri in ("", "https://mlflow.example.com"):
        # None: the payload has no repository.private (GitHub's push and workflow_dispatch payloads always
        # do).
        for private in (True, False, None):
            for opt_in in ("", "true", "false"):
                values = {"vars.MLFLOW_TRACKING_URI": uri, "github.event.repository.private": private,
                          "vars.MLFLOW_LOCAL_STORE_ARTIFACT": opt_in}  # fmt: skip
                expected = uri == "" and (private is True or opt_in == "true")
                assert _expression_value(upload["if"], values) is expected, values
                assert _expression_value(warning["if"], values) is (uri == "" and not expected), values
                cases += 1
    assert cases == 18


def test_aws_jobs_use_oidc_and_no_cache(project: Path) -> None:
    """Exactly the jobs that configure AWS credentials ask for an OIDC token; they do so with the repository
    variable and the rendered region, install only the light runner package, and restore no cache. (The
    platform's start, stop and batch.yml are held to the same where they live.)"""
    aws_jobs = []
    for name, doc in gpu_workflows(project).items():
        for job_id, job in doc["jobs"].items():
            if "uses" in job:  # a caller of a reusable workflow: its job is checked in that file
                continue
            aws_steps = steps_by_uses(job, AWS_CREDENTIALS)
            # Or the MLflow tunnel action (its role's credentials stay inside it: test_mlflow_tunnel_steps.py).
            tunnel = steps_by_uses(job, TUNNEL_ACTION)
            assert ("id-token" in job["permissions"]) == bool(aws_steps or tunnel), f"{name}.{job_id}"
            if not aws_steps:
                continue
            aws_jobs.append(f"{name}.{job_id}")
            (aws,) = aws_steps
            # The reaper has its own role (the gpu-runner stack: default branch only, no launch rights), and so
            # have sweep.yml's plan and collect jobs (SweepRole: the studies under sweeps/ and the quota look-ups).
            role = {"reap": "AWS_REAPER_ROLE_ARN", "sweep": "AWS_SWEEP_ROLE_ARN"}[name]
            assert aws["with"]["role-to-assume"] == as_expression(f"vars.{role}")
            # The region of the default branch's configs/gpu-runner.yaml, read by the step before it.
            assert aws["with"]["aws-region"] == as_expression("steps.settings.outputs.region")
            settings_step = next(s for s in job["steps"] if s.get("id") == "settings")
            assert settings_step["run"].endswith(
                "gpu-runner --settings configs/gpu-runner.yaml workflow-settings"
            )
            assert job["steps"].index(settings_step) < job["steps"].index(aws)
            (setup,) = steps_by_uses(job, SETUP_ACTION)
            # sweep.yml's jobs run the ML package (the study, MLflow) with this branch's code: the project.
            install = {} if name == "sweep" else {"install": "runner"}
            assert setup["with"] == {**install, "enable-cache": "false"}
            # Credentials exist only after the set-up, and no third-party code runs after them.
            assert job["steps"].index(setup) < job["steps"].index(aws)
            later = job["steps"][job["steps"].index(aws) + 1 :]
            assert all("run" in s for s in later), f"{name}.{job_id}: only our own commands hold the role"
        assert not cache_problems(doc), cache_problems(doc)
    assert aws_jobs == ["reap.reap", "sweep.plan", "sweep.collect"]


def called(project: Path, caller: dict[str, Any], name: str) -> dict[str, Any]:
    """The reusable workflow a train.yml job calls: the platform's gpu-runner-<name>.yml, at the commit the
    project pins (issue 13 item 2, issue 31), read in the pinned tree."""
    assert caller["uses"] == platform_call(project, f"gpu-runner-{name}")
    return load_yaml(workflow_path(project, f"gpu-runner-{name}"))


def _expression_value(condition: str, values: dict[str, Any]) -> bool:
    """GitHub's expression syntax for the operators these `if:`s use (&&, ||, ==, !=, literals,
    `!cancelled()`), with each context name replaced by its value: null (None) equals neither true nor ''
    there, as in GitHub."""
    text = condition.strip().removeprefix("${{").removesuffix("}}")
    text = text.replace("!cancelled()", "True").replace("&&", " and ").replace("||", " or ")
    text = re.sub(r"(?<!')\btrue\b(?!')", "True", text)  # the literal, not the string 'true'
    text = re.sub(r"\b(?:vars|github)\.[\w.]+", lambda m: repr(values[m[0]]), text)
    return bool(eval(text, {"__builtins__": {}}))  # the test's own workflow, every name replaced


def train_branch_prefix(project: Path) -> str:
    """The train branch prefix of the project's settings (its one source: configs/gpu-runner.yaml)."""
    return branch_prefix(project, "train")


def branch_prefix(project: Path, kind: str) -> str:
    """`<kind>_branch_prefix` (train, sweep) of the project's settings, their one source."""
    return str(load_yaml(project / "configs" / "gpu-runner.yaml")[f"{kind}_branch_prefix"])
