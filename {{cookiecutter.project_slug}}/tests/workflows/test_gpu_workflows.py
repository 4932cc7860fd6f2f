"""What the GPU workflows mean: train.yml runs start -> train -> stop, start and stop are the default
branch's reusable workflows, reap.yml runs hourly on the default branch, only the AWS jobs get an OIDC token,
and the local MLflow store is uploaded only where nobody else can download it."""

from __future__ import annotations

import math
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml
from step_scripts import gpu_runner_calls, run_bash, step_env, substitute
from workflow_files import (
    AWS_CREDENTIALS,
    LAUNCH_OUTPUTS,
    RUNNER_SYNC,
    SETUP_ACTION,
    TIMELINE_PHASES,
    TUNNEL_ACTION,
    TUNNEL_CREDENTIALS,
    WAIT_OUTPUTS,
    answers_of,
    as_expression,
    gpu_workflows,
    load_yaml,
    platform_action,
    platform_call,
    step_uses,
    steps_by_uses,
    tool,
    triggers,
    workflow_path,
)
from workflow_rules import cache_problems

# The caller check's verdict picks the launch role: predict.yml on the default branch has its own (setup/gpu-runner.yaml,
# PredictLaunchRole), every other caller the train role.
PREDICT_LAUNCH_ROLE_CHOICE = (
    "steps.caller.outputs.caller == 'predict' && vars.AWS_PREDICT_LAUNCH_ROLE_ARN || vars.AWS_ROLE_ARN"
)
CALLER_GUARD = (
    "Refuse callers other than train.yml, sweep.yml on their branches or predict.yml on the default branch"
)


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


def test_start_and_stop_run_the_default_branch_code(project: Path, tmp_path: Path) -> None:
    """Issue 13 item 2: a branch that rewrites train.yml cannot change what launches, registers, tears down.
    start/stop call the default branch's reusable workflows (`@<default_branch>`, not `./`), those check out
    the default branch (never the caller's commit), no job gets a GitHub credential, and the start workflow
    refuse any caller but train.yml on a train branch or sweep.yml on a sweep branch, before any credential."""
    workflows = gpu_workflows(project)
    jobs = workflows["train"]["jobs"]
    for name in ("start", "stop"):
        _, job = called_job(project, jobs[name], name)
        (checkout,) = steps_by_uses(job, "actions/checkout")
        assert checkout["with"] == {
            "persist-credentials": False,
            "ref": as_expression("steps.default.outputs.branch"),
        }
        assert job["steps"].index(checkout) < job["steps"].index(steps_by_uses(job, AWS_CREDENTIALS)[0])
    text = {n: workflow_path(project, n).read_text(encoding="utf-8") for n in workflows}
    for name, body in text.items():
        for secret in ("GPU_RUNNER_TOKEN", "GPU_RUNNER_APP_PRIVATE_KEY", "GPU_RUNNER_APP_ID"):
            assert secret not in body, f"{name}.yml still hands {secret} to a job"
        assert "secrets: inherit" not in body
    # The train job (branch code on the GPU) has no OIDC token: only the instance profile.
    assert "id-token" not in jobs["train"]["permissions"]
    for name in ("start", "stop"):
        _, job = called_job(project, jobs[name], name)
        (guard,) = [s for s in job["steps"] if s.get("name") == CALLER_GUARD]
        # The prefixes: the default branch's configs/gpu-runner.yaml, read by the step before (no credential yet).
        assert "run" in guard and guard["env"] == {
            "TRAIN_BRANCH_PREFIX": as_expression("steps.settings.outputs.train-branch-prefix"),
            "SWEEP_BRANCH_PREFIX": as_expression("steps.settings.outputs.sweep-branch-prefix"),
            "DEFAULT_BRANCH": as_expression("steps.default.outputs.branch"),
        }
        steps = job["steps"]
        assert steps.index(guard) < steps.index(steps_by_uses(job, AWS_CREDENTIALS)[0])
        assert all(
            "uses" not in s or step_uses(s) in ("actions/checkout", "astral-sh/setup-uv")
            for s in steps[: steps.index(guard)]
        )


DEFAULT_BRANCH_STEP = "Name the default branch"
# The workflows bound for the template repository write the platform's setup (`install: runner`) and mlflow-tunnel
# actions out: a file called by commit cannot call its own repository's actions at that commit.
WRITTEN_OUT_SETUP = ("gpu-runner-start", "gpu-runner-stop", "batch")


def test_the_written_out_setup_is_the_platform_setup_actions_runner_install(project: Path) -> None:
    """The same uv release and Python as the platform's setup action at the project's pin, its `runner` arm's
    command, no cache (these jobs hold AWS credentials), before anything runs gpu-runner."""
    action = load_yaml(platform_action("setup"))
    (install_uv,) = [s for s in action["runs"]["steps"] if step_uses(s) == "astral-sh/setup-uv"]
    (sync,) = [s for s in action["runs"]["steps"] if "runner)" in s.get("run", "")]
    assert RUNNER_SYNC in sync["run"]
    for name in WRITTEN_OUT_SETUP:
        (job,) = load_yaml(workflow_path(project, name))["jobs"].values()
        (uv,) = steps_by_uses(job, "astral-sh/setup-uv")
        assert uv["uses"] == install_uv["uses"], name
        assert uv["with"] == {
            "version": install_uv["with"]["version"],
            "enable-cache": "false",
            "python-version": action["inputs"]["python-version"]["default"],
        }, name
        runs = [s["run"] for s in job["steps"] if "run" in s]
        first_gpu_runner = next(i for i, run in enumerate(runs) if "gpu-runner" in run)
        assert runs.index(RUNNER_SYNC) < first_gpu_runner, name
        assert not steps_by_uses(job, SETUP_ACTION) and not steps_by_uses(job, TUNNEL_ACTION), name


def test_the_default_branch_is_the_events_and_nothing_else(project: Path, tmp_path: Path) -> None:
    """start, stop and batch.yml take nothing from the project's answers: the default branch they check out and
    guard with is the one GitHub's event names (a push's and a dispatch's `repository.default_branch`), or for
    a schedule the run's own ref (GitHub runs schedules on the default branch only). An event that names none
    fails the job before any checkout; the caller writes nothing this step reads."""
    scripts = {}
    for name in ("gpu-runner-start", "gpu-runner-stop", "batch"):
        (job,) = load_yaml(workflow_path(project, name))["jobs"].values()
        (step,) = [s for s in job["steps"] if s.get("name") == DEFAULT_BRANCH_STEP]
        assert job["steps"][0] == step, name  # before anything else, the checkout included
        assert step["env"] == {
            "EVENT_DEFAULT_BRANCH": as_expression("github.event.repository.default_branch")
        }
        (checkout, *_) = steps_by_uses(job, "actions/checkout")
        assert job["steps"].index(step) < job["steps"].index(checkout)
        assert checkout["with"]["ref"] == as_expression("steps.default.outputs.branch"), name
        scripts[name] = step["run"]
    assert len(set(scripts.values())) == 1, "one script in the three workflows"
    rows = [
        ({"EVENT_DEFAULT_BRANCH": "develop", "GITHUB_EVENT_NAME": "push", "GITHUB_REF": "refs/heads/train/x"}, "develop"),
        ({"EVENT_DEFAULT_BRANCH": "main", "GITHUB_EVENT_NAME": "workflow_dispatch", "GITHUB_REF": "refs/heads/sweep/y"}, "main"),
        ({"EVENT_DEFAULT_BRANCH": "", "GITHUB_EVENT_NAME": "schedule", "GITHUB_REF": "refs/heads/main"}, "main"),
        # An event without the payload's field, a schedule on no branch: refused, nothing guessed.
        ({"EVENT_DEFAULT_BRANCH": "", "GITHUB_EVENT_NAME": "push", "GITHUB_REF": "refs/heads/train/x"}, None),
        ({"EVENT_DEFAULT_BRANCH": "", "GITHUB_EVENT_NAME": "workflow_dispatch", "GITHUB_REF": "refs/heads/main"}, None),
        ({"EVENT_DEFAULT_BRANCH": "", "GITHUB_EVENT_NAME": "schedule", "GITHUB_REF": "refs/tags/v1"}, None),
    ]  # fmt: skip
    for i, (env, expected) in enumerate(rows):
        workdir = tmp_path / f"default-{i}"
        code, calls = run_bash(scripts["gpu-runner-start"], env, workdir)
        output = (workdir / "github_output").read_text() if (workdir / "github_output").exists() else ""
        assert calls == [], env
        if expected is None:
            assert code != 0 and output == "", env
        else:
            assert code == 0 and output == f"branch={expected}\n", env


def test_only_train_yml_on_a_train_branch_and_sweep_yml_on_a_sweep_branch_may_start_or_stop(
    project: Path, tmp_path: Path
) -> None:
    """The caller check of gpu-runner-start.yml and gpu-runner-stop.yml, run as GitHub runs it: exactly three
    (workflow, branch) pairs pass: train.yml and sweep.yml under their prefixes on a push or a workflow_dispatch,
    predict.yml on exactly the default branch on a workflow_dispatch or a schedule. Every other row is an attack a branch pusher or
    a pull request could try: the other workflow on the other prefix, a third workflow on either prefix, a
    pull request (also one whose head branch is under a prefix), a branch outside both, a workflow file read at
    another ref than the prefix's. Each refusal is one ::error line naming both allowed pairs."""
    jobs = gpu_workflows(project)["train"]["jobs"]
    train, sweep = branch_prefix(project, "train"), branch_prefix(project, "sweep")
    base = "o/r/.github/workflows/"
    on_train, on_sweep = f"refs/heads/{train}x", f"refs/heads/{sweep}x"
    on_default = f"refs/heads/{answers_of(project)['default_branch']}"
    rows = [
        ("push", on_train, f"train.yml@{on_train}", "train"),
        ("workflow_dispatch", on_train, f"train.yml@{on_train}", "train"),
        ("push", on_sweep, f"sweep.yml@{on_sweep}", "sweep"),
        ("workflow_dispatch", on_sweep, f"sweep.yml@{on_sweep}", "sweep"),
        ("push", f"refs/heads/{train}a/b", f"train.yml@refs/heads/{train}a/b", "train"),
        # The pairs crossed: each workflow on the other one's branches.
        ("push", on_train, f"sweep.yml@{on_train}", None),
        ("workflow_dispatch", on_train, f"sweep.yml@{on_train}", None),
        ("push", on_sweep, f"train.yml@{on_sweep}", None),
        ("workflow_dispatch", on_sweep, f"train.yml@{on_sweep}", None),
        # Another workflow on either prefix (a pusher adds one), and look-alike file names.
        ("push", on_train, f"steal.yml@{on_train}", None),
        ("push", on_sweep, f"steal.yml@{on_sweep}", None),
        ("push", on_sweep, f"sweep.yml.bak@{on_sweep}", None),
        ("push", on_sweep, f"my-sweep.yml@{on_sweep}", None),
        ("push", on_train, f"train.yaml@{on_train}", None),
        # Pull requests: their own ref, or a head branch under a prefix; and pull_request_target.
        ("pull_request", "refs/pull/1/merge", "train.yml@refs/pull/1/merge", None),
        ("pull_request", "refs/pull/1/merge", "sweep.yml@refs/pull/1/merge", None),
        ("pull_request", on_sweep, f"sweep.yml@{on_sweep}", None),
        ("pull_request_target", on_train, f"train.yml@{on_train}", None),
        ("pull_request_target", on_sweep, f"sweep.yml@{on_sweep}", None),
        ("workflow_run", on_sweep, f"sweep.yml@{on_sweep}", None),
        # Outside both prefixes, the default branch, a tag.
        ("push", "refs/heads/feature", "train.yml@refs/heads/feature", None),
        ("push", "refs/heads/feature", "sweep.yml@refs/heads/feature", None),
        ("push", "refs/heads/main", "sweep.yml@refs/heads/main", None),
        ("push", f"refs/tags/{sweep}v1", f"sweep.yml@refs/tags/{sweep}v1", None),
        # The file read at another ref than the run's prefix (the workflow ref is the caller's file and ref).
        ("push", on_sweep, "sweep.yml@refs/heads/main", None),
        ("push", on_train, f"train.yml@{on_sweep}", None),
        # Another repository's file of the same name.
        ("push", on_sweep, f"sweep.yml@{on_sweep}", "evil"),
        # predict.yml: the default branch's copy, dispatched or scheduled.
        ("workflow_dispatch", on_default, f"predict.yml@{on_default}", "predict"),
        ("schedule", on_default, f"predict.yml@{on_default}", "predict"),
        # A pusher's own predict.yml on a branch, or the default branch's run reading another ref's file.
        ("workflow_dispatch", on_train, f"predict.yml@{on_train}", None),
        ("workflow_dispatch", "refs/heads/feature", "predict.yml@refs/heads/feature", None),
        ("workflow_dispatch", on_default, "predict.yml@refs/heads/feature", None),
        ("workflow_dispatch", f"{on_default}-x", f"predict.yml@{on_default}-x", None),  # exact, no prefix
        ("workflow_dispatch", on_default, f"predict.yml@{on_default}", "evil"),
        # Events outside each caller's triggers: no schedule for train or sweep, no push or PR for predict.
        ("schedule", on_train, f"train.yml@{on_train}", None),
        ("schedule", on_sweep, f"sweep.yml@{on_sweep}", None),
        ("push", on_default, f"predict.yml@{on_default}", None),
        ("pull_request", on_default, f"predict.yml@{on_default}", None),
        ("pull_request_target", on_default, f"predict.yml@{on_default}", None),
        ("workflow_dispatch", on_default, f"train.yml@{on_default}", None),
    ]
    for name in ("start", "stop"):
        _, job = called_job(project, jobs[name], name)
        (guard,) = [s for s in job["steps"] if s.get("name") == CALLER_GUARD]
        for i, (event, ref, caller, expected) in enumerate(rows):
            workflow_ref = base + caller
            if expected == "evil":
                workflow_ref, expected = "evil/r/.github/workflows/" + caller, None
            env = {"TRAIN_BRANCH_PREFIX": train, "SWEEP_BRANCH_PREFIX": sweep, "GITHUB_EVENT_NAME": event,
                   "GITHUB_REF": ref, "GITHUB_REPOSITORY": "o/r", "GITHUB_WORKFLOW_REF": workflow_ref,
                   "DEFAULT_BRANCH": answers_of(project)["default_branch"]}  # fmt: skip
            workdir = tmp_path / f"{name}-{i}"
            code, calls = run_bash(guard["run"], env, workdir)
            row = (name, event, ref, workflow_ref)
            assert calls == [], row  # the check calls nothing
            output = (workdir / "github_output").read_text() if (workdir / "github_output").exists() else ""
            if expected is None:
                assert code != 0 and output == "", row
            else:
                assert code == 0 and output == f"caller={expected}\n", row
    # One check in two files: the same script but for the workflow's name and verb in its messages.
    guards = {}
    for name in ("start", "stop"):
        _, job = called_job(project, jobs[name], name)
        (guards[name],) = [s["run"] for s in job["steps"] if s.get("name") == CALLER_GUARD]
    as_start = guards["stop"].replace("gpu-runner-stop", "gpu-runner-start")
    assert (
        as_start.replace("may stop", "may start").replace("may not stop", "may not start") == guards["start"]
    )
    # A refusal is one ::error line that names both allowed pairs and what came instead.
    _, start = called_job(project, jobs["start"], "start")
    (guard,) = [s for s in start["steps"] if s.get("name") == CALLER_GUARD]
    env = {"TRAIN_BRANCH_PREFIX": train, "SWEEP_BRANCH_PREFIX": sweep, "GITHUB_EVENT_NAME": "push",
           "GITHUB_REF": on_train, "GITHUB_REPOSITORY": "o/r", "GITHUB_WORKFLOW_REF": f"{base}sweep.yml@{on_train}",
           "DEFAULT_BRANCH": on_default.removeprefix("refs/heads/")}  # fmt: skip
    proc = subprocess.run(
        [tool("bash"), "--noprofile", "--norc", "-eo", "pipefail", "-c", guard["run"]],
        env={**env, "PATH": "/usr/bin:/bin", "GITHUB_OUTPUT": str(tmp_path / "out")},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        f"::error::gpu-runner-start: only train.yml on a refs/heads/{train}* branch, sweep.yml on a "
        f"refs/heads/{sweep}* branch or predict.yml on {on_default} may start a GPU runner "
        f"(got {base}sweep.yml@{on_train} on {on_train})"
    ]
    # An empty prefix (settings not read) or no default branch refuses everything, also the right pair.
    right = {**env, "GITHUB_WORKFLOW_REF": f"{base}train.yml@{on_train}"}
    assert run_bash(guard["run"], right, tmp_path / "right")[0] == 0
    code, _ = run_bash(guard["run"], {**right, "SWEEP_BRANCH_PREFIX": ""}, tmp_path / "empty-prefix")
    assert code != 0
    code, _ = run_bash(guard["run"], {**right, "DEFAULT_BRANCH": ""}, tmp_path / "no-default-branch")
    assert code != 0


# Inputs of gpu-runner-stop.yml only sweep.yml sets, with the defaults that keep train.yml's behaviour.
SWEEP_ONLY_STOP_INPUTS = {"slot": "", "resume": "dispatch"}


def test_the_slot_and_resume_inputs_reach_gpu_runner_through_env_only(project: Path, tmp_path: Path) -> None:
    """Issue 15: the slot goes to every gpu-runner call of start (launch, wait, its own teardown) and to stop's
    teardown, the resume mode to stop's resume step; each as an env value (never `${{ }}` inside run:)."""
    workflows = gpu_workflows(project)
    (start,) = workflows["gpu-runner-start"]["jobs"].values()
    (stop,) = workflows["gpu-runner-stop"]["jobs"].values()
    calls = {
        (name, re.search(r"gpu-runner --settings \S+ ([a-z-]+)", step["run"])[1]): step
        for name, job in (("start", start), ("stop", stop))
        for step in job["steps"]
        if "gpu-runner --settings" in step.get("run", "")
    }
    slotted = [key for key in calls if key[1] in {"launch", "wait", "teardown"}]
    assert sorted(slotted) == [
        ("start", "launch"),
        ("start", "teardown"),
        ("start", "wait"),
        ("stop", "teardown"),
    ]
    for key in slotted:
        step = calls[key]
        assert step["env"]["SLOT"] == "${{ inputs.slot }}", key
        assert 'args+=("--slot=${SLOT}")' in step["run"] and "inputs." not in step["run"], key
    resume = calls[("stop", "resume")]
    assert resume["env"]["RESUME"] == "${{ inputs.resume || 'dispatch' }}"
    assert resume["env"]["CALLER"] == "${{ steps.caller.outputs.caller }}"
    assert '--mode="${RESUME}"' in resume["run"] and "inputs." not in resume["run"]
    # Run as GitHub would: sweep.yml's resume: none reaches the CLI as --mode=none, train.yml's (no input) as
    # --mode=dispatch; a slot reaches launch as --slot=3, no slot as no flag.
    for (key, scenario), expected in {
        (("stop", "resume"), "benign"): "--mode=none",
        (("stop", "resume"), "empty"): "--mode=dispatch",
        (("start", "launch"), "benign"): "--slot=3",
        (("start", "launch"), "empty"): None,
    }.items():
        doc = workflows[f"gpu-runner-{key[0]}"]
        job = start if key[0] == "start" else stop
        step = calls[key]
        code, recorded = run_bash(
            substitute(step["run"], scenario),
            step_env(doc, job, step, scenario),
            tmp_path / f"{key[1]}-{scenario}",
        )
        (call,) = gpu_runner_calls(recorded)
        assert code == 0 and call.subcommand == key[1], (key, scenario)
        flag = "--mode" if key[1] == "resume" else "--slot"
        assert [a for a in call.argv if a.startswith(f"{flag}=")] == ([expected] if expected else []), call
    # A sweep branch's caller never re-dispatches (that would be train.yml on a sweep branch), whatever it passes:
    # the caller check's verdict turns its mode into none.
    step = calls[("stop", "resume")]
    for caller, expected in (("train", "--mode=dispatch"), ("sweep", "--mode=none")):
        env = {**step_env(workflows["gpu-runner-stop"], stop, step, "empty"), "CALLER": caller}
        code, recorded = run_bash(substitute(step["run"], "empty"), env, tmp_path / f"resume-{caller}")
        (call,) = gpu_runner_calls(recorded)
        assert code == 0 and [a for a in call.argv if a.startswith("--mode=")] == [expected], caller


def test_train_job_graph(project: Path) -> None:
    jobs = gpu_workflows(project)["train"]["jobs"]
    # + the pull-request comment (test_pr_comment_jobs.py)
    # + the batch backend's job (issue 18: test_batch_workflow.py)
    assert list(jobs) == ["start", "train", "stop", "batch", "comment"]
    caller_start, train, caller_stop = jobs["start"], jobs["train"], jobs["stop"]
    start_doc, start = called_job(project, caller_start, "start")
    stop_doc, stop = called_job(project, caller_stop, "stop")
    assert caller_start["permissions"] == {"contents": "read", "id-token": "write"}
    # Every output of the start job is an output of the reusable workflow, hence of train.yml's start job.
    assert start_doc["on"]["workflow_call"]["outputs"] == {
        name: {"value": as_expression(f"jobs.start.outputs.{name}")}
        for name in (*LAUNCH_OUTPUTS, *WAIT_OUTPUTS, "backend")
    }
    assert caller_start["with"] == {
        "instance-type": "${{ inputs.instance-type || '' }}", "spot": "${{ inputs.spot || 'default' }}",
        "commit": "${{ inputs.commit || '' }}", "attempt": "${{ inputs.attempt || '1' }}",
    }  # fmt: skip

    # start: a GitHub-hosted runner launches the instance and waits for its runner; every launch output is a
    # job output, so `stop` knows whatever `start` created even when it failed half-way.
    assert start["runs-on"] == "ubuntu-latest"
    assert start["permissions"] == {"contents": "read", "id-token": "write"}
    assert start["outputs"] == {
        **{name: as_expression(f"steps.launch.outputs.{name}") for name in LAUNCH_OUTPUTS},
        **{name: as_expression(f"steps.wait.outputs.{name}") for name in WAIT_OUTPUTS},
        "backend": as_expression("steps.backend.outputs.backend"),
    }
    launch = next(s for s in start["steps"] if s.get("id") == "launch")
    assert re.search(r"gpu-runner --settings \S+ launch ", launch["run"])
    wait = start["steps"][start["steps"].index(launch) + 1]
    assert re.search(r"gpu-runner --settings \S+ wait ", wait["run"])
    assert 0 < start["timeout-minutes"] <= 30

    # train: on this run's own runner label, on the host (docs/gpu-runtime.md: no container, the locked gpu
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
    assert stop["if"] == "always()"
    assert stop["runs-on"] == "ubuntu-latest"
    # actions: write = dispatching the next attempt after a spot interruption, with the run's own token.
    assert caller_stop["permissions"] == {"contents": "read", "id-token": "write", "actions": "write"}
    assert stop["permissions"] == caller_stop["permissions"]
    # What the caller passes: every input the stop workflow declares, from the start and train jobs, except
    # sweep.yml's two, whose defaults are train.yml's behaviour (no slot; re-dispatch after an interruption).
    passed = caller_stop["with"]
    declared = stop_doc["on"]["workflow_call"]["inputs"]
    assert set(passed) == set(declared) - set(SWEEP_ONLY_STOP_INPUTS)
    assert {name: declared[name]["default"] for name in SWEEP_ONLY_STOP_INPUTS} == SWEEP_ONLY_STOP_INPUTS
    assert (
        "slot" not in caller_start["with"]
        and start_doc["on"]["workflow_call"]["inputs"]["slot"]["default"] == ""
    )
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
    # After "Cancel workflow" only `if: always()` steps run: every step of stop must say so. Those after the
    # caller check also need it to have passed (`always()` alone would run them after a refusal); the re-dispatch
    # of train.yml happens for train.yml's calls only (the resume step's mode, below).
    names = [step["name"] for step in stop["steps"]]
    guard_at = names.index(CALLER_GUARD)
    assert all(step["if"] == "always()" for step in stop["steps"][: guard_at + 1]), stop["steps"]
    after = {step["name"]: step["if"] for step in stop["steps"][guard_at + 1 :]}
    assert after == {
        # Only with a tunnel role set, and the connect step only with its credentials
        # (tests/workflows/test_mlflow_tunnel_steps.py).
        "Tunnel role credentials (OIDC, as step outputs only)": (
            "${{ always() && steps.caller.outcome == 'success' && vars.MLFLOW_TUNNEL_ROLE_ARN != '' }}"
        ),
        "Tunnel to the team MLflow server": (
            "${{ always() && steps.caller.outcome == 'success' && steps.tunnel-credentials.outcome == 'success' }}"
        ),
        "AWS credentials (OIDC)": "${{ always() && steps.caller.outcome == 'success' }}",
        "Tear down the runner and the instance": "${{ always() && steps.caller.outcome == 'success' }}",
        "Start the next attempt after a spot interruption": "${{ always() && steps.caller.outcome == 'success' }}",
    }
    # After the default branch, the install, the settings, the caller check and the tunnel's connect step.
    *_, teardown, resume = [s for s in stop["steps"] if "run" in s]
    assert re.search(r"gpu-runner --settings \S+ teardown ", teardown["run"])
    assert re.search(r"gpu-runner --settings \S+ resume ", resume["run"])
    assert resume["env"]["GITHUB_TOKEN"] == "${{ github.token }}"
    assert resume["env"]["TRAIN_INTERRUPTED"] == "${{ inputs.train-interrupted }}"
    for name, output in (
        ("REGION", "region"),
        ("INSTANCE_ID", "instance-id"),
        ("RUNNER_ID", "runner-id"),
        ("PARAMETER", "parameter"),
    ):
        assert teardown["env"][name] == as_expression(f"inputs.{output}")
    # After teardown, the attempt's cost goes to the training run: its id, the attempt (its step) and MLflow.
    assert teardown["env"]["MLFLOW_RUN_ID"] == "${{ inputs.mlflow-run-id }}"
    # The stop job's summary says when the preflight stopped the training.
    assert teardown["env"]["GPU_PREFLIGHT"] == "${{ inputs.gpu-preflight }}"
    assert '"${GPU_PREFLIGHT}" == "no-gpu"' in teardown["run"] and "no GPU visible" in teardown["run"]
    # A caller on a branch may pass anything, also nothing: the defaults hold in the called workflow too.
    assert teardown["env"]["ATTEMPT"] == resume["env"]["ATTEMPT"] == "${{ inputs.attempt || '1' }}"
    # Through the team server's tunnel when it opened (tests/workflows/test_mlflow_tunnel_steps.py).
    assert teardown["env"]["MLFLOW_TRACKING_URI"] == (
        "${{ steps.mlflow.outputs.tracking-uri || vars.MLFLOW_TRACKING_URI }}"
    )
    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        assert teardown["env"][name] == as_expression(f"secrets.{name}")
    assert '"--mlflow-run-id=${MLFLOW_RUN_ID}"' in teardown["run"]
    assert '--attempt="${ATTEMPT}"' in teardown["run"]


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
    variable and the rendered region, install only the light runner package, and restore no cache."""
    aws_jobs = []
    for name, doc in gpu_workflows(project).items():
        for job_id, job in doc["jobs"].items():
            if "uses" in job:  # a caller of a reusable workflow: its job is checked in that file
                continue
            aws_steps = [s for s in steps_by_uses(job, AWS_CREDENTIALS) if s.get("id") != TUNNEL_CREDENTIALS]
            # Or the MLflow tunnel's (its role's credentials stay inside that action, or inside its written-out
            # credentials step: test_mlflow_tunnel_steps.py).
            tunnel = steps_by_uses(job, TUNNEL_ACTION) + [
                s for s in steps_by_uses(job, AWS_CREDENTIALS) if s.get("id") == TUNNEL_CREDENTIALS
            ]
            assert ("id-token" in job["permissions"]) == bool(aws_steps or tunnel), f"{name}.{job_id}"
            if not aws_steps:
                continue
            aws_jobs.append(f"{name}.{job_id}")
            (aws,) = aws_steps
            # The reaper has its own role (setup/gpu-runner.yaml: default branch only, no launch rights), and so have sweep.yml's
            # plan and collect jobs (SweepRole: the studies under sweeps/ and the quota look-ups only).
            # batch.yml: the Batch stack's submit role (gpu_runner/batch/batch.yaml SubmitRole).
            roles = {
                "reap": "AWS_REAPER_ROLE_ARN",
                "sweep": "AWS_SWEEP_ROLE_ARN",
                "batch": "AWS_BATCH_ROLE_ARN",
            }
            role = roles.get(name, "AWS_ROLE_ARN")
            if name in ("gpu-runner-start", "gpu-runner-stop"):  # predict.yml's runs: the predict launch role
                assert aws["with"]["role-to-assume"] == as_expression(PREDICT_LAUNCH_ROLE_CHOICE)
            else:
                assert aws["with"]["role-to-assume"] == as_expression(f"vars.{role}")
            # The region of the default branch's configs/gpu-runner.yaml, read by the step before it.
            assert aws["with"]["aws-region"] == as_expression("steps.settings.outputs.region")
            settings_step = next(s for s in job["steps"] if s.get("id") == "settings")
            assert settings_step["run"].endswith(
                "gpu-runner --settings configs/gpu-runner.yaml workflow-settings"
            )
            assert job["steps"].index(settings_step) < job["steps"].index(aws)
            if name in WRITTEN_OUT_SETUP:  # the setup action's `install: runner`, written out (its own test)
                (uv,) = steps_by_uses(job, "astral-sh/setup-uv")
                assert uv["with"]["enable-cache"] == "false"
                (setup,) = [s for s in job["steps"] if s.get("run", "").strip() == RUNNER_SYNC]
            else:
                (setup,) = steps_by_uses(job, SETUP_ACTION)
                # sweep.yml's jobs run the ML package (the study, MLflow) with this branch's code: the project.
                install = {} if name == "sweep" else {"install": "runner"}
                assert setup["with"] == {**install, "enable-cache": "false"}
            # Credentials exist only after the set-up, and no third-party code runs after them.
            assert job["steps"].index(setup) < job["steps"].index(aws)
            later = job["steps"][job["steps"].index(aws) + 1 :]
            assert all("run" in s for s in later), f"{name}.{job_id}: only our own commands hold the role"
        assert not cache_problems(doc), cache_problems(doc)
    assert aws_jobs == [
        "gpu-runner-start.start",
        "gpu-runner-stop.stop",
        "reap.reap",
        "sweep.plan",
        "sweep.collect",
        "batch.batch",
    ]


def called_job(project: Path, caller: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the reusable workflow, its one job) a train.yml job calls: the platform's, at the commit the project pins
    (issue 13 item 2, issue 31)."""
    assert caller["uses"] == platform_call(project, f"gpu-runner-{name}")
    doc = gpu_workflows(project)[f"gpu-runner-{name}"]
    assert triggers(doc) == {"workflow_call"} and doc["permissions"] == {}
    (job_id,) = doc["jobs"]
    assert job_id == name  # act logs jobs by this id: the e2e stories read `start` / `stop`
    return doc, doc["jobs"][job_id]


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
