"""`make e2e`, security: a branch's train.yml calls the default branch's stop with another run's ids (issue 30,
item 5).

The victim is this story's run of the real train.yml. While it trains, an attacker who may push a train branch
runs its own train.yml: a single `stop` job that calls gpu-runner-stop.yml at the default branch, as train.yml's
stop job does, but with the victim's `region`, `instance-id`, `runner-id` and `parameter` (the victim's start job
printed them in its log; here they are read from its step outputs, as its log shows them). The attacker's run is
a real `act` run of that file against the same moto server and GitHub double; the victim waits meanwhile (its log
is not read, so its training pauses), then carries on. The default branch's teardown runs in the attacker's run:
it must refuse all three ids, naming each and why, and the victim must keep running, finish its training and be
torn down by its own stop job, leaving nothing behind.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpu_runner.core.workflow_contract import LaunchOutput
from gpu_runner_testing.story.harness import LIVE, REUSABLE, run_workflow
from gpu_runner_testing.story.report import record
from gpu_runner_testing.story.stories import FAST_TRAIN, Scenario, Stack, Story, run_story

pytestmark = pytest.mark.e2e
RUN_ID = "5252"
ATTACKER_RUN_ID = "6262"
ATTACKER_BRANCH = "train/attacker"
FOREIGN = (LaunchOutput.REGION, LaunchOutput.INSTANCE_ID, LaunchOutput.RUNNER_ID, LaunchOutput.PARAMETER)


def attacker_workflow(train_yml: str, ids: dict[str, str]) -> str:
    """A train.yml whose only job calls the default branch's stop with `ids` (the same `uses:` line as train.yml's
    own stop job, so it is the file the launch role trusts)."""
    (target,) = {m.groups() for m in REUSABLE.finditer(train_yml) if "gpu-runner-stop.yml" in m[0]}
    repository, ref = target
    with_lines = "".join(f"      {key}: '{value}'\n" for key, value in ids.items())
    return (
        "name: Train on a GPU\n"
        "on:\n  push:\n    branches: ['train/**']\n"
        "permissions: {}\n"
        "jobs:\n"
        "  stop:\n"
        f"    uses: {repository}/.github/workflows/gpu-runner-stop.yml@{ref}\n"
        "    permissions:\n      contents: read\n      id-token: write\n      actions: write\n"
        "    with:\n" + with_lines
    )


@dataclass
class Attack:
    """The trigger: collects the victim's start outputs from its log, then, once it trains, runs the attacker."""

    outputs: dict[str, str] = field(default_factory=dict)
    run: Any = None
    victim_during_attack: dict[str, Any] = field(default_factory=dict)

    def __call__(self, story: Story, rec: dict[str, Any], process: subprocess.Popen) -> None:
        if rec.get("command") == "set-output" and rec.get("jobID") == "start":
            self.outputs[rec["name"]] = rec["arg"]
        if self.run is None and rec.get("jobID") == "train" and story.epochs_started >= 2:
            self.run = self._attack(story)
            self.victim_during_attack = self._victim(story)

    def _attack(self, story: Story) -> Any:
        assert story.github is not None and story.proxy is not None
        ids = {key: self.outputs[key] for key in FOREIGN}
        scratch = story.scratch / "attacker"
        (scratch / "workflows").mkdir(parents=True)
        repo = story.scratch / "repo"
        workflow = scratch / "workflows" / "train.yml"
        workflow.write_text(
            attacker_workflow((repo / ".github" / "workflows" / "train.yml").read_text(), ids)
        )
        stack = story.stack
        return run_workflow(
            scratch=scratch, moto_endpoint=stack.moto_endpoint, mlflow_uri=stack.mlflow_uri, github=story.github,
            simulator=None, repo=repo, workflow=workflow, head_sha=story.head_sha, repository=stack.repository,
            image_bin=stack.image_bin, run_id=ATTACKER_RUN_ID, aws_endpoint=story.proxy.url, map_label=False,
            branch=ATTACKER_BRANCH,
        )  # fmt: skip

    def _victim(self, story: Story) -> dict[str, Any]:
        assert story.github is not None
        instance_id = self.outputs[LaunchOutput.INSTANCE_ID]
        reply = story.stack.client("ec2").describe_instances(InstanceIds=[instance_id])
        runner = story.github.runners.get(int(self.outputs[LaunchOutput.RUNNER_ID]))
        return {
            "instance": reply["Reservations"][0]["Instances"][0]["State"]["Name"],
            "runner": (runner or {}).get("status"),
            "busy": (runner or {}).get("busy"),
        }


def test_a_branchs_stop_call_with_another_runs_ids_ends_nothing_of_it(stack: Stack, tmp_path) -> None:
    attack = Attack()
    scenario = Scenario(
        17, "a branch's stop call passes another run's ids", "ids refused; the victim trains on, tears down itself",
        train=FAST_TRAIN, trigger=attack,
    )  # fmt: skip
    story = run_story(stack, scenario, tmp_path, run_id=RUN_ID)
    record("faults", story.row())
    assert story.run is not None and story.simulator is not None and attack.run is not None
    context = f"act log: {story.run.log}\nattacker's act log: {attack.run.log}\n{story.row()}"

    # Right after the attack the victim still ran, and its runner still held its train job.
    assert attack.victim_during_attack == {"instance": "running", "runner": "online", "busy": True}, context
    # The attacker's stop ran the default branch's teardown and refused each id, naming it and why.
    assert attack.run.results.get("stop") == "failure", (attack.run.results, context)
    log = attack.run.log.read_text()
    for key in (LaunchOutput.INSTANCE_ID, LaunchOutput.RUNNER_ID, LaunchOutput.PARAMETER):
        assert f"refused --{key}={attack.outputs[key]}: " in log, (key, context)
    assert f"gpu-runner:run-id is '{RUN_ID}', not this run's '{ATTACKER_RUN_ID}'" in log, context

    # The victim finished its training and was torn down by its own stop job.
    assert story.run.lifecycle_results == {"start": "success", "train": "success", "stop": "success"}, context
    assert story.checkpoint_state().get("complete") is True, context
    assert not story.simulator.errors, context
    assert (story.instances_left, story.runners_left, story.params_left) == (0, 0, 0), context
    # The attacker's run launched nothing and left nothing.
    reservations = stack.client("ec2").describe_instances(
        Filters=[{"Name": "tag:gpu-runner:run-id", "Values": [ATTACKER_RUN_ID]}]
    )["Reservations"]
    assert [i["InstanceId"] for r in reservations for i in r["Instances"] if i["State"]["Name"] in LIVE] == []
