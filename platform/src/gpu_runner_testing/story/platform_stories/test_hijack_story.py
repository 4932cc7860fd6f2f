"""`make e2e`, security: a second workflow targets the GPU runner's label while the instance boots (issue 13,
item 1: the runner hijack).

The simulated instance runs the real user-data, and its stand-in runner honours ACTIONS_RUNNER_HOOK_JOB_STARTED as
the actions runner does (harness.RUN_SH). The hijacker's job takes the runner the moment it connects, before this
run's train job can be queued (it needs the start job). Its steps would prove it ran (a marker file) and read the
instance's credentials; the hook must fail it before any step, the instance must halt, the start job must say
"runner was taken", the stop job must tear down, and nothing may be left running.
"""

from __future__ import annotations

import pytest

from gpu_runner_testing.story.report import record
from gpu_runner_testing.story.stories import FAST_TRAIN, Scenario, Stack, assert_start_tore_down, run_story

pytestmark = pytest.mark.e2e
RUN_ID = "5151"


# The attacker's own workflow run in the same repository (a fork pull request's, once approved): another run id,
# another workflow file and event. Only the label matches (the attacker learnt it somehow).
def hijacker_env(repository: str) -> dict[str, str]:
    return {
        "GITHUB_REPOSITORY": repository,
        "GITHUB_RUN_ID": "6161",
        "GITHUB_RUN_ATTEMPT": "1",
        "GITHUB_JOB": "steal",
        "GITHUB_WORKFLOW_REF": f"{repository}/.github/workflows/steal.yml@refs/pull/7/merge",
        "GITHUB_EVENT_NAME": "pull_request",
    }


HIJACKER_STEPS = """touch "$SIM_DIR/hijacker-step-ran"
aws sts get-caller-identity >"$SIM_DIR/hijacker-credentials" 2>&1 || true
"""


def test_a_second_workflow_cannot_use_the_gpu_runner(stack: Stack, tmp_path) -> None:
    hijack = Scenario(
        16, "another workflow's job takes the runner while it boots", "hook refuses it; halt; start cleans up",
        train=FAST_TRAIN, hijack_job=(hijacker_env(stack.repository), HIJACKER_STEPS),
    )  # fmt: skip
    story = run_story(stack, hijack, tmp_path, run_id=RUN_ID)
    record("faults", story.row())
    assert story.simulator is not None and not story.simulator.errors, story.simulator
    assert story.run is not None
    context = f"act log: {story.run.log}\n{story.row()}"
    (instance,) = story.simulator.instances
    calls = [what for _, what in story.simulator.calls(instance)]
    console = (instance.sim_dir / "console.log").read_text()

    # The hijacker's job got the runner, and its hook refused it: none of its steps ran.
    assert "job-refused" in calls and "job-accepted" not in calls, calls
    assert not (instance.sim_dir / "hijacker-step-ran").exists(), context
    assert not (instance.sim_dir / "hijacker-credentials").exists(), context
    assert "hook: REFUSED a job (runner was taken): GITHUB_RUN_ID is '6161', expected '5151'" in console, (
        console
    )
    # The instance halted itself (the hook's refusal, then the runner's exit: `shutdown -h now`, which the stub
    # turns into TerminateInstances unless the start job's own teardown got there first), and the start job said why.
    assert "shutdown -h now" in calls[calls.index("job-refused") :], calls
    log = story.run.log.read_text()
    assert "runner was taken: another workflow's job reached runner" in log, context
    assert story.run.results.get("train") in (None, "skipped"), story.run.results
    assert_start_tore_down(story)
    # The label's random part appears in no log: only the start job's outputs carry it.
    label = story.run.outputs.get("start", {}).get("label", "")
    assert label.startswith(f"gpu-runner-{RUN_ID}-1-") and len(label) == len(f"gpu-runner-{RUN_ID}-1-") + 16
    nonce = label.rsplit("-", 1)[1]
    assert nonce not in console
    printed = [
        rec["msg"] for rec in story.run.records if rec.get("raw_output") and nonce in rec.get("msg", "")
    ]
    assert printed == [], printed
    # Nothing left: no instance, no registration, no runner config.
    assert (story.instances_left, story.runners_left, story.params_left) == (0, 0, 0), context
