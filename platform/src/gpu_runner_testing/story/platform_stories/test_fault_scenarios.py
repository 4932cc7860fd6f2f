"""`make e2e`, part two: the story with one fault each. Every story must end with no running instance, no
runner registration and no runner-config parameter (after the reaper where that is the designed path); each
adds a row to the fault table printed at the end of the run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from gpu_runner.core.workflow_contract import LaunchOutput
from gpu_runner_testing.story.harness import REAPER_ROLE_ARN, ROLE_ARN
from gpu_runner_testing.story.report import record
from gpu_runner_testing.story.stories import (
    FAST_TRAIN,
    HOSTILE_RUN_ID,
    SCENARIOS,
    Stack,
    Story,
    assert_start_tore_down,
    run_story,
)

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[f"{s.number:02d}" for s in SCENARIOS])
def test_fault_scenario(scenario, stack: Stack, tmp_path: Path) -> None:
    story = run_story(stack, scenario, tmp_path, run_id=str(1000 + scenario.number))
    record("faults", story.row())
    context = f"act log: {story.run.log if story.run else None}\n{story.row()}"
    assert story.simulator is not None and not story.simulator.errors, context
    globals()[f"check_{scenario.number}"](story)  # defined below the tests
    assert (story.instances_left, story.runners_left, story.params_left) == (0, 0, 0), context


def _log(story: Story) -> str:
    assert story.run is not None
    return story.run.log.read_text()


def _calls(story: Story, method: str, status: int) -> int:
    return sum(1 for m, path, s in story.github_calls if m == method and s == status and "/runners/" in path)


def _console(story: Story) -> str:
    assert story.simulator is not None
    return "".join((i.sim_dir / "console.log").read_text() for i in story.simulator.instances)


def check_1(story: Story) -> None:
    assert story.proxy and story.proxy.killed, "the launch process was not killed"
    assert story.proxy.count("RunInstances") == 1
    assert story.run and LaunchOutput.INSTANCE_ID not in story.run.outputs.get("start", {})
    assert_start_tore_down(story)
    # No instance-id output, yet start's own teardown ended the instance: found by the run key in its tags.
    assert re.search(r"instance i-\w+: (shutting-down|terminated)", _log(story)), story.run.log


def check_2(story: Story) -> None:
    assert "did not come online within 8 s" in _log(story)
    assert "--- console output of" in _log(story)
    assert_start_tore_down(story)


def check_3(story: Story) -> None:
    assert story.run and story.run.results["train"] == "failure"
    assert "data/no-such-folder" in _log(story)
    assert story.run.results.get("stop") == "success"


def check_4(story: Story) -> None:
    assert story.fired == ["cancel"]
    assert story.run and story.run.results.get("train") != "success"
    # The stop job ran in full after the cancellation: teardown with its code, tools and credentials.
    assert story.run.results.get("stop") == "success"
    assert story.epochs_lost() in {"0", "1"}


def check_5(story: Story) -> None:
    assert story.proxy and story.proxy.killed, "the teardown process was not killed"
    assert story.run and story.run.results.get("stop") == "failure"
    assert "shutdown -h now failed" in _console(story)
    assert story.reap_run and story.reap_run.results.get("reap") == "success"
    assert "its runner is gone" in story.reap_run.log.read_text()
    # Each workflow assumes its own role (gpu_runner/setup/gpu-runner.yaml): the reaper's cannot launch.
    assert f"assumed {REAPER_ROLE_ARN} as gpu-runner-reap-" in story.reap_run.log.read_text()
    assert f"assumed {ROLE_ARN} as gpu-runner-start-" in story.run.log.read_text()


def check_6(story: Story) -> None:
    assert story.run and story.run.lifecycle_results == {
        "start": "success",
        "train": "success",
        "stop": "success",
    }
    listed = [s for m, path, s in story.github_calls if m == "GET" and path.endswith("/actions/runners")]
    assert listed[:3] == [502, 502, 200], listed  # the stop job's look for this run's runners, retried


def check_7(story: Story) -> None:
    assert story.run and story.run.lifecycle_results == {
        "start": "success",
        "train": "success",
        "stop": "success",
    }
    assert story.proxy
    assert story.proxy.count("RunInstances", "RequestLimitExceeded") == 2
    assert story.proxy.count("PutParameter", "ThrottlingException") == 1
    assert story.proxy.count("TerminateInstances", "RequestLimitExceeded") == 2


def check_8(story: Story) -> None:
    assert story.fired == ["instance dies"]
    assert story.run and story.run.results.get("train") == "failure"
    assert story.checkpoint_state().get("epochs_done", 0) >= 2
    assert story.epochs_lost() in {"0", "1"}
    assert story.run.results.get("stop") == "success"


def check_9(story: Story) -> None:
    assert story.run and story.run.lifecycle_results == {
        "start": "success",
        "train": "success",
        "stop": "success",
    }
    assert story.run.outputs["start"][LaunchOutput.MARKET] == "on-demand"
    assert story.proxy and story.proxy.count("RunInstances", "InsufficientInstanceCapacity") == len(
        story.stack.settings["instance_types"]
    )


def check_10(story: Story) -> None:
    assert story.proxy and story.proxy.count("RunInstances") == 1
    assert "Service Quotas" in _log(story)
    assert story.run and story.run.results.get("start") == "failure"
    assert story.simulator is not None and story.simulator.instances == []


def check_11(story: Story) -> None:
    second = story.second_teardown
    assert second is not None and second.returncode == 0, (second.stdout, second.stderr) if second else None
    # Runner and parameter: gone already. The instance: terminated already, or asked again (idempotent).
    # A re-run of the stop job (attempt 2) is handed attempt 1's ids: this run's, so checked and accepted.
    pattern = (
        r"runner -: already gone; instance i-\w+: (already gone|shutting-down|terminated); "
        r"parameter \S+(, \S+)*: already gone"
    )
    assert re.search(pattern, second.stdout), second.stdout


def check_12(story: Story) -> None:
    assert "no job started within 2 s" in _console(story)
    assert story.run and "train" not in story.run.results


def check_13(story: Story) -> None:
    first, second = story.run, story.resumed_run
    assert first and first.results.get("train") == "failure" and first.results.get("stop") == "success"
    assert story.github and len(story.github.dispatches) == 1, (
        story.github.dispatches if story.github else None
    )
    inputs = story.github.dispatches[0]["inputs"]
    assert (inputs["attempt"], inputs["commit"], inputs["spot"]) == ("2", story.head_sha, "default")
    assert second and second.lifecycle_results == {
        "start": "success",
        "train": "success",
        "stop": "success",
    }, second.log
    state = story.checkpoint_state()
    assert state.get("complete") is True
    client = MlflowClient(story.stack.mlflow_uri)
    run = client.get_run(state["run_id"])
    assert run.info.status == "FINISHED"
    assert (run.data.tags["train.attempt"], run.data.tags["git.commit"]) == ("2", story.head_sha)
    epochs = FAST_TRAIN["training"]["epochs"]
    assert sorted({m.step for m in client.get_metric_history(run.info.run_id, "val_loss")}) == list(
        range(epochs)
    )
    # At most one checkpoint interval (an epoch) of training was lost.
    assert story.epochs_lost() in {"0", "1"}
    # Each attempt's stop job logged that attempt's cost to the same run: step 1, then step 2.
    for key in ("billed_seconds", "cost_usd", "overhead_seconds"):
        assert sorted(m.step for m in client.get_metric_history(run.info.run_id, key)) == [1, 2], key
    assert "**GPU cost (attempt 1)**" in "".join(first.summaries.get("stop", [])), first.summaries
    assert "**GPU cost (attempt 2)**" in "".join(second.summaries.get("stop", [])), second.summaries


def check_14(story: Story) -> None:
    run = story.run
    assert run and run.lifecycle_results == {"start": "success", "train": "failure", "stop": "success"}, (
        run.results if run else None
    )
    log = _log(story)
    # The preflight's own exit status and message: what TensorFlow was built for, the driver, the fix.
    assert "exit status 78" in log, "the preflight did not end the job with its status 78"
    for part in ("no GPU visible to TensorFlow: TensorFlow lists no GPU", "driver:       not found", "fix:"):
        assert part in log, part
    # It ended the job within seconds, before any training.
    assert run.step_seconds("train", "GPU preflight") < 30
    assert story.epochs_started == 0
    assert run.outputs.get("train", {}).get("gpu-preflight") == "no-gpu"
    assert "no GPU visible" in "".join(run.summaries.get("stop", [])), run.summaries.get("stop")


def check_15(story: Story) -> None:
    run = story.run
    assert run and run.lifecycle_results == {"start": "success", "train": "success", "stop": "success"}, (
        run.results if run else None
    )
    # The hostile value reached the stop job as the train job's output, and stayed a value (--opt=value).
    assert run.outputs.get("train", {}).get("mlflow-run-id") == HOSTILE_RUN_ID, run.outputs.get("train")
    log = _log(story)
    assert f"cost not logged to MLflow: --mlflow-run-id: '{HOSTILE_RUN_ID}' is not an MLflow run id" in log
    assert "usage: gpu-runner" not in log  # argparse never saw it as an option
    assert re.search(
        r"runner (\d+|-): (deleted|already gone); instance i-\w+: (shutting-down|terminated|already gone)",
        log,
    ), log
    # The attempt was still priced in the job summary; only the MLflow logging was skipped.
    assert "**GPU cost (attempt 1)**" in "".join(run.summaries.get("stop", [])), run.summaries.get("stop")
    # The comment job got the same value: refused by name before any MLflow or GitHub call, the step continues
    # on error, so the run keeps the training's result.
    comment = "".join(r.get("msg", "") for r in run.records if r.get("jobID") == "comment")
    assert f"--mlflow-run-id: '{HOSTILE_RUN_ID}' is not an MLflow run id" in comment, comment[-2000:]
    assert run.results.get("comment") == "success" and run.returncode == 0, run.results
    assert not [c for c in story.github_calls if "/pulls" in c[1] or "/issues/" in c[1]], story.github_calls
