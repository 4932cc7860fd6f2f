"""What the platform's reusable GPU workflows mean: start, stop and batch.yml, in this repository's
.github/workflows/ (issue 31). A bake calls them as `<owner>/<template>/.github/workflows/<file>@<commit>`;
the launch, predict launch and Batch submit roles trust exactly these files at that commit. Checked here once
(a bake checks its calls: what train.yml, sweep.yml and predict.yml pass and read, tests/workflows/ there):

- They run the default branch's code, named by GitHub's event (never an answer, never the caller's commit).
- Their caller check lets exactly train.yml and sweep.yml on their branches, and predict.yml on the default
  branch, start, stop or submit; every other row is an attack (the tables below, run as GitHub runs the step).
- Credentials come after every third-party step, from OIDC, for one role each; nothing is cached.
- start passes on whatever it created, stop always runs and tears down, the tunnel never blocks the teardown.

Their linters (actionlint, zizmor, the schema, the structural rules, checkov) are tests/test_workflows.py's
and tests/test_checkov.py's; their scripts under attack and the CLI contract are
tests/test_platform_workflow_scripts.py's.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

from gpu_runner_testing.workflow_checks.step_scripts import (
    PAYLOAD,
    gpu_runner_calls,
    run_bash,
    step_env,
    substitute,
)
from gpu_runner_testing.workflow_checks.tunnel_rules import (
    THROUGH_TUNNEL_OR_VARIABLE,
    URI,
    is_tunnel,
    tunnel_problems,
    with_tunnel,
)
from gpu_runner_testing.workflow_checks.workflow_files import (
    AWS_CREDENTIALS,
    LAUNCH_OUTPUTS,
    RUNNER_SYNC,
    SETUP_ACTION,
    TUNNEL_ACTION,
    TUNNEL_CREDENTIALS,
    WAIT_OUTPUTS,
    as_expression,
    load_yaml,
    platform_workflows,
    step_uses,
    steps_by_uses,
    tool,
    triggers,
)
from gpu_runner_testing.workflow_checks.workflow_rules import cache_problems

REPO_ROOT = Path(__file__).resolve().parents[1]
PLATFORM = platform_workflows(REPO_ROOT)
SETUP = REPO_ROOT / ".github" / "actions" / "setup" / "action.yml"
DEFAULT_BRANCH_STEP = "Name the default branch"
CALLER_GUARD = (
    "Refuse callers other than train.yml, sweep.yml on their branches or predict.yml on the default branch"
)
BATCH_GUARD = "Refuse callers other than train.yml and sweep.yml on their branches"
# The caller check's verdict picks the launch role: predict.yml on the default branch has its own
# (PredictLaunchRole of the gpu-runner stack), every other caller the train role.
PREDICT_LAUNCH_ROLE_CHOICE = (
    "steps.caller.outputs.caller == 'predict' && vars.AWS_PREDICT_LAUNCH_ROLE_ARN || vars.AWS_ROLE_ARN"
)
# Inputs of gpu-runner-stop.yml only sweep.yml sets, with the defaults that keep train.yml's behaviour.
SWEEP_ONLY_STOP_INPUTS = {"slot": "", "resume": "dispatch"}


def job_of(name: str) -> dict[str, Any]:
    """The one job of the platform's workflow `name`; each is called, holds no permission at the top, and
    names its job as act logs it (the stories read `start`, `stop`, `batch`)."""
    doc = PLATFORM[name]
    assert triggers(doc) == {"workflow_call"} and doc["permissions"] == {}, name
    ((job_id, job),) = doc["jobs"].items()
    assert job_id == name.removeprefix("gpu-runner-"), name
    return job


def step_named(job: dict[str, Any], name: str) -> dict[str, Any]:
    (step,) = [s for s in job["steps"] if s.get("name") == name]
    return step


def output_of(workdir: Path) -> str:
    path = workdir / "github_output"
    return path.read_text(encoding="utf-8") if path.exists() else ""


# ---------------------------------------------------------------- the default branch's code
def test_start_and_stop_run_the_default_branch_code() -> None:
    """Issue 13 item 2: a branch that rewrites train.yml cannot change what launches, registers, tears down.
    start and stop check out the default branch (never the caller's commit), before any credential; no GitHub
    credential is handed to them; their caller check runs before the credentials, after nothing but the
    checkout and uv."""
    for name in ("gpu-runner-start", "gpu-runner-stop"):
        job = job_of(name)
        steps = job["steps"]
        (checkout,) = steps_by_uses(job, "actions/checkout")
        assert checkout["with"] == {
            "persist-credentials": False,
            "ref": as_expression("steps.default.outputs.branch"),
        }
        credentials = steps.index(steps_by_uses(job, AWS_CREDENTIALS)[0])
        assert steps.index(checkout) < credentials
        body = (REPO_ROOT / ".github" / "workflows" / f"{name}.yml").read_text(encoding="utf-8")
        for secret in (
            "GPU_RUNNER_TOKEN",
            "GPU_RUNNER_APP_PRIVATE_KEY",
            "GPU_RUNNER_APP_ID",
            "secrets: inherit",
        ):
            assert secret not in body, f"{name}.yml hands {secret} to a job"
        guard = step_named(job, CALLER_GUARD)
        # The prefixes: the default branch's configs/gpu-runner.yaml, read by the step before (no credential).
        assert "run" in guard and guard["env"] == {
            "TRAIN_BRANCH_PREFIX": as_expression("steps.settings.outputs.train-branch-prefix"),
            "SWEEP_BRANCH_PREFIX": as_expression("steps.settings.outputs.sweep-branch-prefix"),
            "DEFAULT_BRANCH": as_expression("steps.default.outputs.branch"),
        }
        assert steps.index(guard) < credentials
        assert all(
            "uses" not in s or step_uses(s) in ("actions/checkout", "astral-sh/setup-uv")
            for s in steps[: steps.index(guard)]
        ), name


def test_the_written_out_setup_is_the_setup_actions_runner_install() -> None:
    """A workflow called by commit cannot call its own repository's actions at that commit, so start, stop and
    batch.yml write the setup action's `install: runner` out: the same uv release and Python, its command, no
    cache (these jobs hold AWS credentials), before anything runs gpu-runner."""
    action = load_yaml(SETUP)
    (install_uv,) = [s for s in action["runs"]["steps"] if step_uses(s) == "astral-sh/setup-uv"]
    (sync,) = [s for s in action["runs"]["steps"] if "runner)" in s.get("run", "")]
    assert RUNNER_SYNC in sync["run"]
    for name in PLATFORM:
        job = job_of(name)
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


def test_the_default_branch_is_the_events_and_nothing_else(tmp_path: Path) -> None:
    """The default branch they check out and guard with is the one GitHub's event names (a push's and a
    dispatch's `repository.default_branch`), or for a schedule the run's own ref (GitHub runs schedules on the
    default branch only). An event that names none fails the job before any checkout; the caller writes
    nothing this step reads."""
    scripts = {}
    for name in PLATFORM:
        job = job_of(name)
        step = step_named(job, DEFAULT_BRANCH_STEP)
        assert job["steps"][0] == step, name  # before anything else, the checkout included
        assert step["env"] == {
            "EVENT_DEFAULT_BRANCH": as_expression("github.event.repository.default_branch")
        }
        for checkout in steps_by_uses(job, "actions/checkout"):  # batch.yml's second one: the commit, as data
            if checkout["with"].get("path") != "job-source":
                assert checkout["with"]["ref"] == as_expression("steps.default.outputs.branch"), name
        scripts[name] = step["run"]
    assert len(set(scripts.values())) == 1, "one script in the three workflows"
    rows = [
        # (the payload's repository.default_branch, the event, the run's ref) -> the branch, or None: refused
        ("develop", "push", "refs/heads/train/x", "develop"),
        ("main", "workflow_dispatch", "refs/heads/sweep/y", "main"),
        ("", "schedule", "refs/heads/main", "main"),
        # An event without the payload's field, a schedule on no branch: refused, nothing guessed.
        ("", "push", "refs/heads/train/x", None),
        ("", "workflow_dispatch", "refs/heads/main", None),
        ("", "schedule", "refs/tags/v1", None),
    ]
    for i, (named, event, ref, expected) in enumerate(rows):
        env = {"EVENT_DEFAULT_BRANCH": named, "GITHUB_EVENT_NAME": event, "GITHUB_REF": ref}
        workdir = tmp_path / f"default-{i}"
        code, calls = run_bash(scripts["gpu-runner-start"], env, workdir)
        assert calls == [], env
        if expected is None:
            assert code != 0 and output_of(workdir) == "", env
        else:
            assert code == 0 and output_of(workdir) == f"branch={expected}\n", env


# ---------------------------------------------------------------- who may call them
def caller_rows(train: str, sweep: str, default: str) -> list[tuple[str, str, str, str | None]]:
    """(event, ref, the caller's file@ref, expected verdict) for start's and stop's caller check: exactly
    three (workflow, branch) pairs pass; every other row is an attack a branch pusher or a pull request
    could try. `evil`: the right file of another repository."""
    on_train, on_sweep, on_default = f"refs/heads/{train}x", f"refs/heads/{sweep}x", f"refs/heads/{default}"
    return [
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
        ("push", on_default, f"sweep.yml@{on_default}", None),
        ("push", f"refs/tags/{sweep}v1", f"sweep.yml@refs/tags/{sweep}v1", None),
        # The file read at another ref than the run's prefix (the workflow ref is the caller's file and ref).
        ("push", on_sweep, f"sweep.yml@{on_default}", None),
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


# The settings a team may choose (configs/gpu-runner.yaml's prefixes, the repository's default branch): the
# template's defaults and the custom answers its bakes use.
SETTINGS = [("train/", "sweep/", "main"), ("gpu/", "exp/", "develop")]


def test_only_train_yml_on_a_train_branch_and_sweep_yml_on_a_sweep_branch_may_start_or_stop(
    tmp_path: Path,
) -> None:
    """The caller check of gpu-runner-start.yml and gpu-runner-stop.yml, run as GitHub runs it, over every row
    of caller_rows for each setting; it calls nothing and writes its verdict only when it passes."""
    base = "o/r/.github/workflows/"
    checked = 0
    for name in ("gpu-runner-start", "gpu-runner-stop"):
        guard = step_named(job_of(name), CALLER_GUARD)
        for train, sweep, default in SETTINGS:
            for i, (event, ref, caller, expected) in enumerate(caller_rows(train, sweep, default)):
                workflow_ref = base + caller
                if expected == "evil":
                    workflow_ref, expected = "evil/r/.github/workflows/" + caller, None
                env = {"TRAIN_BRANCH_PREFIX": train, "SWEEP_BRANCH_PREFIX": sweep, "GITHUB_EVENT_NAME": event,
                       "GITHUB_REF": ref, "GITHUB_REPOSITORY": "o/r", "GITHUB_WORKFLOW_REF": workflow_ref,
                       "DEFAULT_BRANCH": default}  # fmt: skip
                workdir = tmp_path / f"{name}-{default}-{i}"
                code, calls = run_bash(guard["run"], env, workdir)
                row = (name, event, ref, workflow_ref)
                assert calls == [], row
                if expected is None:
                    assert code != 0 and output_of(workdir) == "", row
                else:
                    assert code == 0 and output_of(workdir) == f"caller={expected}\n", row
                checked += 1
    assert checked == 2 * len(SETTINGS) * 40


def test_a_refused_caller_gets_one_line_naming_what_may_call() -> None:
    """One check in two files (but for the workflow's name and verb); a refusal is one ::error line naming the
    allowed pairs and what came instead; an empty prefix or no default branch refuses everything."""
    guards = {
        name: step_named(job_of(f"gpu-runner-{name}"), CALLER_GUARD)["run"] for name in ("start", "stop")
    }
    as_start = guards["stop"].replace("gpu-runner-stop", "gpu-runner-start")
    assert (
        as_start.replace("may stop", "may start").replace("may not stop", "may not start") == guards["start"]
    )
    on_train, base = "refs/heads/train/x", "o/r/.github/workflows/"
    env = {"TRAIN_BRANCH_PREFIX": "train/", "SWEEP_BRANCH_PREFIX": "sweep/", "GITHUB_EVENT_NAME": "push",
           "GITHUB_REF": on_train, "GITHUB_REPOSITORY": "o/r", "DEFAULT_BRANCH": "main",
           "GITHUB_WORKFLOW_REF": f"{base}sweep.yml@{on_train}"}  # fmt: skip

    def run(overrides: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [tool("bash"), "--noprofile", "--norc", "-eo", "pipefail", "-c", guards["start"]],
            env={**env, **overrides, "PATH": "/usr/bin:/bin", "GITHUB_OUTPUT": "/dev/null"},
            capture_output=True, text=True, check=False,
        )  # fmt: skip

    refused = run({})
    assert refused.returncode == 1
    assert refused.stdout.splitlines() == [
        "::error::gpu-runner-start: only train.yml on a refs/heads/train/* branch, sweep.yml on a "
        "refs/heads/sweep/* branch or predict.yml on refs/heads/main may start a GPU runner "
        f"(got {base}sweep.yml@{on_train} on {on_train})"
    ]
    right = {"GITHUB_WORKFLOW_REF": f"{base}train.yml@{on_train}"}
    assert run(right).returncode == 0
    assert run({**right, "SWEEP_BRANCH_PREFIX": ""}).returncode != 0
    assert run({**right, "DEFAULT_BRANCH": ""}).returncode != 0


# ---------------------------------------------------------------- what start and stop hand on
def test_the_slot_and_resume_inputs_reach_gpu_runner_through_env_only(tmp_path: Path) -> None:
    """Issue 15: the slot goes to every gpu-runner call of start (launch, wait, its own teardown) and to
    stop's teardown, the resume mode to stop's resume step; each as an env value (never `${{ }}` inside
    run:)."""
    start, stop = job_of("gpu-runner-start"), job_of("gpu-runner-stop")
    calls = {
        (name, re.search(r"gpu-runner --settings \S+ ([a-z-]+)", step["run"])[1]): step
        for name, job in (("start", start), ("stop", stop))
        for step in job["steps"]
        if "gpu-runner --settings" in step.get("run", "")
    }
    slotted = sorted(key for key in calls if key[1] in {"launch", "wait", "teardown"})
    assert slotted == [("start", "launch"), ("start", "teardown"), ("start", "wait"), ("stop", "teardown")]
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
        doc, job = PLATFORM[f"gpu-runner-{key[0]}"], (start if key[0] == "start" else stop)
        step = calls[key]
        workdir = tmp_path / f"{key[1]}-{scenario}"
        code, recorded = run_bash(
            substitute(step["run"], scenario), step_env(doc, job, step, scenario), workdir
        )
        (call,) = gpu_runner_calls(recorded)
        assert code == 0 and call.subcommand == key[1], (key, scenario)
        flag = "--mode" if key[1] == "resume" else "--slot"
        assert [a for a in call.argv if a.startswith(f"{flag}=")] == ([expected] if expected else []), call
    # A sweep branch's caller never re-dispatches (that would be train.yml on a sweep branch), whatever it
    # passes: the caller check's verdict turns its mode into none.
    step = calls[("stop", "resume")]
    for caller, expected in (("train", "--mode=dispatch"), ("sweep", "--mode=none")):
        env = {**step_env(PLATFORM["gpu-runner-stop"], stop, step, "empty"), "CALLER": caller}
        code, recorded = run_bash(substitute(step["run"], "empty"), env, tmp_path / f"resume-{caller}")
        (call,) = gpu_runner_calls(recorded)
        assert code == 0 and [a for a in call.argv if a.startswith("--mode=")] == [expected], caller


def test_start_launches_waits_and_passes_on_whatever_it_created() -> None:
    """A GitHub-hosted runner launches the instance and waits for its runner; every launch and wait output is
    a job output and an output of the workflow, so stop knows whatever start created even when it failed
    half-way. No slot unless sweep.yml passes one."""
    doc, start = PLATFORM["gpu-runner-start"], job_of("gpu-runner-start")
    outputs = (*LAUNCH_OUTPUTS, *WAIT_OUTPUTS, "backend")
    assert doc["on"]["workflow_call"]["outputs"] == {
        name: {"value": as_expression(f"jobs.start.outputs.{name}")} for name in outputs
    }
    assert start["outputs"] == {
        **{name: as_expression(f"steps.launch.outputs.{name}") for name in LAUNCH_OUTPUTS},
        **{name: as_expression(f"steps.wait.outputs.{name}") for name in WAIT_OUTPUTS},
        "backend": as_expression("steps.backend.outputs.backend"),
    }
    assert start["runs-on"] == "ubuntu-latest"
    assert start["permissions"] == {"contents": "read", "id-token": "write"}
    assert 0 < start["timeout-minutes"] <= 30
    launch = next(s for s in start["steps"] if s.get("id") == "launch")
    assert re.search(r"gpu-runner --settings \S+ launch ", launch["run"])
    wait = start["steps"][start["steps"].index(launch) + 1]
    assert re.search(r"gpu-runner --settings \S+ wait ", wait["run"])
    assert doc["on"]["workflow_call"]["inputs"]["slot"]["default"] == ""


def test_stop_always_runs_tears_down_and_logs_the_cost() -> None:
    """After "Cancel workflow" only `if: always()` steps run: every step of stop says so; those after the
    caller check also need it to have passed. The teardown gets the ids start passed on, the attempt and the
    MLflow run for the cost; the resume step re-dispatches with the run's own token."""
    doc, stop = PLATFORM["gpu-runner-stop"], job_of("gpu-runner-stop")
    assert stop["if"] == "always()" and stop["runs-on"] == "ubuntu-latest"
    # actions: write = dispatching the next attempt after a spot interruption, with the run's own token.
    assert stop["permissions"] == {"contents": "read", "id-token": "write", "actions": "write"}
    declared = doc["on"]["workflow_call"]["inputs"]
    assert {name: declared[name]["default"] for name in SWEEP_ONLY_STOP_INPUTS} == SWEEP_ONLY_STOP_INPUTS
    assert set(doc["on"]["workflow_call"]["secrets"]) == {
        "MLFLOW_TRACKING_USERNAME",
        "MLFLOW_TRACKING_PASSWORD",
    }
    names = [step["name"] for step in stop["steps"]]
    guard_at = names.index(CALLER_GUARD)
    assert all(step["if"] == "always()" for step in stop["steps"][: guard_at + 1]), stop["steps"]
    after = {step["name"]: step["if"] for step in stop["steps"][guard_at + 1 :]}
    passed = "${{ always() && steps.caller.outcome == 'success' }}"
    assert after == {
        # Only with a tunnel role set, and the connect step only with its credentials (tunnel tests below).
        "Tunnel role credentials (OIDC, as step outputs only)": (
            "${{ always() && steps.caller.outcome == 'success' && vars.MLFLOW_TUNNEL_ROLE_ARN != '' }}"
        ),
        "Tunnel to the team MLflow server": (
            "${{ always() && steps.caller.outcome == 'success' "
            "&& steps.tunnel-credentials.outcome == 'success' }}"
        ),
        "AWS credentials (OIDC)": passed,
        "Tear down the runner and the instance": passed,
        "Start the next attempt after a spot interruption": passed,
    }
    *_, teardown, resume = [s for s in stop["steps"] if "run" in s]
    assert re.search(r"gpu-runner --settings \S+ teardown ", teardown["run"])
    assert re.search(r"gpu-runner --settings \S+ resume ", resume["run"])
    assert resume["env"]["GITHUB_TOKEN"] == "${{ github.token }}"
    assert resume["env"]["TRAIN_INTERRUPTED"] == "${{ inputs.train-interrupted }}"
    for name, output in (
        ("REGION", "region"), ("INSTANCE_ID", "instance-id"), ("RUNNER_ID", "runner-id"),
        ("PARAMETER", "parameter"),
    ):  # fmt: skip
        assert teardown["env"][name] == as_expression(f"inputs.{output}")
    # After teardown, the attempt's cost goes to the training run: its id, the attempt (its step) and MLflow.
    assert teardown["env"]["MLFLOW_RUN_ID"] == "${{ inputs.mlflow-run-id }}"
    # The stop job's summary says when the preflight stopped the training.
    assert teardown["env"]["GPU_PREFLIGHT"] == "${{ inputs.gpu-preflight }}"
    assert '"${GPU_PREFLIGHT}" == "no-gpu"' in teardown["run"] and "no GPU visible" in teardown["run"]
    # A caller on a branch may pass anything, also nothing: the defaults hold in the called workflow too.
    assert teardown["env"]["ATTEMPT"] == resume["env"]["ATTEMPT"] == "${{ inputs.attempt || '1' }}"
    assert teardown["env"][URI] == THROUGH_TUNNEL_OR_VARIABLE
    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        assert teardown["env"][name] == as_expression(f"secrets.{name}")
    assert (
        '"--mlflow-run-id=${MLFLOW_RUN_ID}"' in teardown["run"]
        and '--attempt="${ATTEMPT}"' in teardown["run"]
    )


# ---------------------------------------------------------------- credentials
def test_aws_jobs_use_oidc_one_role_each_and_no_cache() -> None:
    """Each job asks for an OIDC token and assumes one role: the launch role (or predict.yml's, by the caller
    check's verdict) for start and stop, the Batch submit role for batch.yml; in the region of the default
    branch's settings, read before; after the written-out install; only this repository's commands after
    it."""
    roles = {
        "gpu-runner-start": PREDICT_LAUNCH_ROLE_CHOICE,
        "gpu-runner-stop": PREDICT_LAUNCH_ROLE_CHOICE,
        "batch": "vars.AWS_BATCH_ROLE_ARN",
    }
    for name, doc in PLATFORM.items():
        job = job_of(name)
        steps = job["steps"]
        assert job["permissions"]["id-token"] == "write", name
        (aws,) = [s for s in steps_by_uses(job, AWS_CREDENTIALS) if s.get("id") != TUNNEL_CREDENTIALS]
        assert aws["with"]["role-to-assume"] == as_expression(roles[name]), name
        assert aws["with"]["aws-region"] == as_expression("steps.settings.outputs.region"), name
        settings = next(s for s in steps if s.get("id") == "settings")
        assert settings["run"].endswith("gpu-runner --settings configs/gpu-runner.yaml workflow-settings")
        (setup,) = [s for s in steps if s.get("run", "").strip() == RUNNER_SYNC]
        assert steps.index(setup) < steps.index(settings) < steps.index(aws), name
        assert all("run" in s for s in steps[steps.index(aws) + 1 :]), (
            f"{name}: only our own commands hold it"
        )
        assert not cache_problems(doc), cache_problems(doc)


# ---------------------------------------------------------------- batch.yml
def batch_guard(
    tmp_path: Path,
    kind: str,
    event: str,
    ref: str,
    caller: str,
    backend: str = "batch",
    package: str = "ml_project",
) -> tuple[int, str, str]:
    """batch.yml's caller step's exit code, what it wrote to GITHUB_OUTPUT and what it printed, for one
    run's context."""
    step = step_named(job_of("batch"), BATCH_GUARD)
    workdir = tmp_path / f"guard-{len(list(tmp_path.iterdir()))}"
    env = {
        "TRAIN_BRANCH_PREFIX": "train/", "SWEEP_BRANCH_PREFIX": "sweep/", "BACKEND": backend, "KIND": kind,
        "GITHUB_EVENT_NAME": event, "GITHUB_REF": ref, "GITHUB_REPOSITORY": "o/r",
        "GITHUB_WORKFLOW_REF": f"o/r/.github/workflows/{caller}", "DEFAULT_BRANCH": "main",
        "PACKAGE": package,
    }  # fmt: skip
    code, calls = run_bash(step["run"], env, workdir)
    assert calls == []  # the check calls nothing
    printed = (workdir / "stdout").read_text() if (workdir / "stdout").exists() else ""
    return code, output_of(workdir), printed


TRAIN, SWEEP = "refs/heads/train/x", "refs/heads/sweep/y"


def test_only_train_yml_and_sweep_yml_on_their_branches_may_submit(tmp_path: Path) -> None:
    rows = [
        # (kind, event, ref, the caller's file@ref, accepted)
        ("train", "push", TRAIN, f"train.yml@{TRAIN}", True),
        ("train", "workflow_dispatch", TRAIN, f"train.yml@{TRAIN}", True),
        ("sweep", "push", SWEEP, f"sweep.yml@{SWEEP}", True),
        ("sweep", "workflow_dispatch", SWEEP, f"sweep.yml@{SWEEP}", True),
        # A branch's workflow naming the other kind, or the other file.
        ("sweep", "push", TRAIN, f"train.yml@{TRAIN}", False),
        ("train", "push", SWEEP, f"sweep.yml@{SWEEP}", False),
        ("train", "push", TRAIN, f"evil.yml@{TRAIN}", False),
        ("train", "push", TRAIN, f"sweep.yml@{TRAIN}", False),
        # The caller's file read at another ref than the run's, or a run outside both prefixes.
        ("train", "push", TRAIN, "train.yml@refs/heads/main", False),
        ("train", "push", "refs/heads/main", "train.yml@refs/heads/main", False),
        ("sweep", "push", "refs/heads/feature", "sweep.yml@refs/heads/feature", False),
        ("train", "push", "refs/tags/train/v1", "train.yml@refs/tags/train/v1", False),
        # Events outside train.yml's and sweep.yml's triggers.
        ("train", "pull_request", TRAIN, f"train.yml@{TRAIN}", False),
        ("train", "pull_request_target", TRAIN, f"train.yml@{TRAIN}", False),
        ("sweep", "schedule", SWEEP, f"sweep.yml@{SWEEP}", False),
        ("train", "workflow_run", TRAIN, f"train.yml@{TRAIN}", False),
    ]
    for kind, event, ref, caller, accepted in rows:
        code, output, _ = batch_guard(tmp_path, kind, event, ref, caller)
        row = (kind, event, ref, caller)
        if accepted:
            assert code == 0 and output == f"kind={kind}\npackage=ml_project\n", row
        else:
            assert code != 0 and output == "", row


def test_the_default_branch_must_say_batch_and_a_hostile_kind_or_package_is_not_printed(
    tmp_path: Path,
) -> None:
    code, output, printed = batch_guard(tmp_path, "train", "push", TRAIN, f"train.yml@{TRAIN}", "runner")
    assert code != 0 and output == ""
    assert "configs/gpu-runner.yaml on main says backend: runner, not batch" in printed
    # The package the job runs `python -m <package>` on: a Python name, never a word the shell would split.
    for package in ("ml project", "ml;id", "-m", f"x\n::error::{PAYLOAD}", ""):
        code, output, printed = batch_guard(
            tmp_path, "train", "push", TRAIN, f"train.yml@{TRAIN}", package=package
        )
        assert code != 0 and output == "" and "input package is not a Python package name" in printed, package
        assert PAYLOAD not in printed
    hostile = f"train\n::error::{PAYLOAD}"
    code, output, printed = batch_guard(tmp_path, hostile, "push", TRAIN, f"train.yml@{TRAIN}")
    assert code != 0 and output == "" and "input kind is neither train nor sweep" in printed
    assert PAYLOAD not in printed  # a caller's text never reaches the log as a workflow command


def test_batch_yml_holds_the_submit_role_only_after_every_third_party_step() -> None:
    """The commit is checked out (as data) and the MLflow tunnel opened before the submit role's credentials;
    after them only this repository's own commands run; the last step ends the Batch job on failure, timeout
    or cancel; the job runs the package the caller check passed on, never the input as given."""
    job = job_of("batch")
    steps = job["steps"]
    (aws,) = [s for s in steps if step_uses(s) == AWS_CREDENTIALS and s.get("id") != TUNNEL_CREDENTIALS]
    index = steps.index(aws)
    (commit,) = [s for s in steps if s.get("with", {}).get("path") == "job-source"]
    assert steps.index(commit) < index and commit["with"]["persist-credentials"] is False
    assert job["permissions"] == {"contents": "read", "id-token": "write"}
    last = steps[-1]
    assert last["if"] == as_expression("(failure() || cancelled()) && steps.submit.outputs.job-id != ''")
    assert "batch cancel" in last["run"]
    (submit,) = [s for s in steps if s.get("id") == "submit"]
    assert submit["env"]["PACKAGE"] == as_expression("steps.caller.outputs.package")
    assert PLATFORM["batch"]["on"]["workflow_call"]["inputs"]["package"]["required"] is True


def test_no_password_goes_to_the_job_in_its_request() -> None:
    """SubmitJob's environment is readable by anyone allowed batch:DescribeJobs: the password comes from the
    job definition's secrets (the Batch stack), never from a workflow secret passed with --env."""
    (submit,) = [s for s in job_of("batch")["steps"] if s.get("id") == "submit"]
    assert not [value for value in submit["env"].values() if "secrets." in value], submit["env"]
    assert "PASSWORD" not in submit["run"] and "USERNAME" not in submit["run"]


# ---------------------------------------------------------------- the MLflow tunnel written out
def test_stop_and_batch_reach_mlflow_through_the_tunnel() -> None:
    assert tunnel_problems(PLATFORM) == []
    assert with_tunnel(PLATFORM) == {("gpu-runner-stop", "stop"), ("batch", "batch")}


def test_a_written_out_tunnels_credentials_reach_the_connect_step_alone() -> None:
    """stop and batch.yml write the platform action's two steps out: as in the action, the tunnel role's
    credentials are the credentials step's outputs (never the job's environment) and only the connect step
    reads them; the job's later steps hold exactly the credentials they held without the tunnel."""
    for name in ("gpu-runner-stop", "batch"):
        steps = job_of(name)["steps"]
        (credentials,) = [s for s in steps if s.get("id") == TUNNEL_CREDENTIALS]
        assert step_uses(credentials) == AWS_CREDENTIALS, name
        assert credentials["with"]["output-env-credentials"] == "false", name
        assert credentials["with"]["output-credentials"] == "true", name
        readers = [
            s.get("id") for s in steps if f"steps.{TUNNEL_CREDENTIALS}.outputs" in str(s.get("env", {}))
        ]
        assert readers == ["mlflow"], (name, readers)
        assert not any("GITHUB_ENV" in s.get("run", "") for s in steps), name


def test_the_tunnel_never_delays_or_blocks_the_teardown() -> None:
    stop = job_of("gpu-runner-stop")
    (tunnel,) = [s for s in stop["steps"] if is_tunnel(s)]
    (credentials,) = [s for s in stop["steps"] if s.get("id") == TUNNEL_CREDENTIALS]
    assert "vars.MLFLOW_TUNNEL_ROLE_ARN != ''" in credentials["if"]
    assert "steps.tunnel-credentials.outcome == 'success'" in tunnel["if"]
    for step in (credentials, tunnel):
        assert step["continue-on-error"] is True and "always()" in step["if"]
    assert "--no-wake" in tunnel["run"] and "--timeout=60 " in tunnel["run"]
