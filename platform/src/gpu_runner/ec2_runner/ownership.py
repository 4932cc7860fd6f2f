"""Which instances, runners and JIT-config parameters belong to the calling workflow run (issue 30, item 5).

Teardown acts on nothing else. Its caller passes ids (instance-id, runner-id, parameter), but a branch's workflow
may call the platform's gpu-runner-stop.yml (at the pinned commit) with another run's ids (a run prints them in its log): the ids
are claims, checked here; what teardown ends it finds through the run key. That key is GitHub's, never an input:
GITHUB_REPOSITORY, GITHUB_RUN_ID and GITHUB_RUN_ATTEMPT of the job running gpu-runner, which in a called workflow
are the CALLER's ("When a reusable workflow is triggered by a caller workflow, the github context is always
associated with the caller workflow": GitHub Docs, "Reuse workflows", read 2026-12-06; the default variables
mirror that context). A branch's stop call so carries its own run's key whatever ids it passes.

The run's attempts 1..GITHUB_RUN_ATTEMPT all belong to it: "Jobs that aren't included [in a re-run] keep their
outputs from the previous attempt, which the newly run jobs can use" (GitHub Docs, "Re-running workflows and
jobs", read 2026-12-06), so a re-run of the stop job alone is handed the start job's ids of an earlier attempt.
A later attempt's resources are not this attempt's. The slot (a sweep's trial) is part of the key: one leg never
ends another's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpu_runner.core import naming
from gpu_runner.core.errors import RunnerError
from gpu_runner.core.github import GitHubRunners
from gpu_runner.ec2_runner import ec2

# GitHub's run ids and attempts are positive integers (REST "Get a workflow run": `id`, `run_attempt`).
_NUMBER = re.compile(r"[1-9][0-9]*")
# EC2's instance states other than terminated (EC2 API Reference, InstanceState: pending, running, shutting-down,
# terminated, stopping, stopped): an instance in any of them may still be ended.
NOT_TERMINATED = ["pending", "running", "shutting-down", "stopping", "stopped"]
# Stands for the attempt in a name built by naming's functions (no run id, slot or attempt holds a brace).
_ANY_ATTEMPT = "{attempt}"


@dataclass(frozen=True)
class RunScope:
    """The calling run: its key (repository, run id, attempt, slot) and the stack's project and SSM prefix."""

    ctx: naming.RunContext
    project: str
    ssm_prefix: str

    def __post_init__(self) -> None:
        if not _NUMBER.fullmatch(self.ctx.run_id):
            raise RunnerError(
                f"GITHUB_RUN_ID {self.ctx.run_id!r} is not a workflow run id: teardown ends only the resources of "
                "the run that calls it (GitHub Actions sets it; by hand, export GITHUB_RUN_ID and "
                "GITHUB_RUN_ATTEMPT from the instance's gpu-runner:run-id and run-attempt tags, or run "
                "`gpu-runner reap`)"
            )
        if not _NUMBER.fullmatch(self.ctx.run_attempt):
            raise RunnerError(
                f"GITHUB_RUN_ATTEMPT {self.ctx.run_attempt!r} is not an attempt number (GitHub Actions sets it)"
            )
        naming.check_slot(self.ctx.slot)

    @property
    def attempt(self) -> int:
        return int(self.ctx.run_attempt)

    def describe(self) -> str:
        """`octo-org/octo-repo run 4321 attempt 2` (and `slot 3`): how the messages name this run."""
        slot = f" slot {self.ctx.slot}" if self.ctx.slot else ""
        return f"{self.ctx.repository} run {self.ctx.run_id} attempt {self.attempt}{slot}"

    # ------------------------------------------------------------------ names derived from the key
    def runner_name(self, attempt: int) -> str:
        return naming.runner_name(self._at(str(attempt)))

    def parameter(self, attempt: int) -> str:
        return naming.parameter_name(self.ssm_prefix, self._at(str(attempt)))

    def _at(self, attempt: str) -> naming.RunContext:
        # naming's own functions build every name, so what teardown accepts is exactly what launch creates.
        return naming.RunContext(
            repository=self.ctx.repository, run_id=self.ctx.run_id, run_attempt=attempt, branch="", commit="",
            slot=self.ctx.slot,
        )  # fmt: skip

    def _attempt_in(self, name: str, template: str) -> int | None:
        """The attempt of `name` when it is `template` for one of this run's attempts 1..GITHUB_RUN_ATTEMPT."""
        head, _, tail = template.rpartition(_ANY_ATTEMPT)
        if not (name.startswith(head) and name.endswith(tail)) or len(name) <= len(head) + len(tail):
            return None
        attempt = name[len(head) : len(name) - len(tail)]
        return int(attempt) if _NUMBER.fullmatch(attempt) and int(attempt) <= self.attempt else None

    def runner_attempt(self, name: str) -> int | None:
        """The attempt whose runner is called `name`, or None when no attempt of this run's is."""
        return self._attempt_in(name, naming.runner_name(self._at(_ANY_ATTEMPT)))

    def parameter_attempt(self, name: str) -> int | None:
        """The attempt whose JIT config parameter is `name`, or None when no attempt of this run's is."""
        return self._attempt_in(name, naming.parameter_name(self.ssm_prefix, self._at(_ANY_ATTEMPT)))

    # ------------------------------------------------------------------ claims
    def runner_refusal(self, runner_id: int, name: str) -> str | None:
        if self.runner_attempt(name) is not None:
            return None
        return (
            f"runner {runner_id} is named {name!r}, not {self.runner_name(self.attempt)!r} (or an earlier attempt's "
            "runner of this run)"
        )

    def parameter_refusal(self, name: str) -> str | None:
        if self.parameter_attempt(name) is not None:
            return None
        return f"this run's JIT config is {self.parameter(self.attempt)} (or an earlier attempt's)"

    def instance_refusal(self, tags: Mapping[str, str]) -> str | None:
        """Why an instance with these tags is not this run's (the first tag that differs), or None when it is."""
        if naming.MANAGED_BY_KEY not in tags:
            return f"it has no {naming.MANAGED_BY_KEY} tag (not an instance gpu-runner launched)"
        expected = {
            naming.MANAGED_BY_KEY: (naming.MANAGED_BY_VALUE, ""),
            naming.TAG_PROJECT: (self.project, "this project's "),
            naming.TAG_REPOSITORY: (self.ctx.repository, ""),
            naming.TAG_RUN_ID: (self.ctx.run_id, "this run's "),
        }
        for key, (value, whose) in expected.items():
            found = tags.get(key)
            if found != naming.tag_value(value):
                return f"{_tag(key, found)}, not {whose}{naming.tag_value(value)!r}"
        slot = tags.get(naming.TAG_SLOT, "")
        if slot != self.ctx.slot:
            this_leg = f"this leg's {self.ctx.slot!r}" if self.ctx.slot else "this teardown's (no --slot)"
            return f"{_tag(naming.TAG_SLOT, slot or None)}, not {this_leg}"
        attempt = tags.get(naming.TAG_RUN_ATTEMPT)
        if attempt is None or not _NUMBER.fullmatch(attempt):
            return f"{_tag(naming.TAG_RUN_ATTEMPT, attempt)}, not an attempt number"
        if int(attempt) > self.attempt:
            return f"{_tag(naming.TAG_RUN_ATTEMPT, attempt)}, later than this attempt ({self.attempt})"
        return None

    def instance_filters(self) -> list[dict[str, object]]:
        """DescribeInstances filters that narrow the search to this run's instances not yet terminated (EC2 lists
        a terminated one for about an hour; a claimed one is still described and priced): instance_refusal then
        decides."""
        return [
            {"Name": "instance-state-name", "Values": NOT_TERMINATED},
            {"Name": f"tag:{naming.MANAGED_BY_KEY}", "Values": [naming.MANAGED_BY_VALUE]},
            {"Name": f"tag:{naming.TAG_REPOSITORY}", "Values": [naming.tag_value(self.ctx.repository)]},
            {"Name": f"tag:{naming.TAG_RUN_ID}", "Values": [self.ctx.run_id]},
        ]


def _tag(key: str, value: str | None) -> str:
    return f"it has no {key} tag" if value is None else f"its tag {key} is {value!r}"


# ---------------------------------------------------------------------------------- finding them, checking claims
@dataclass(frozen=True)
class Found:
    """This run's own resources of one kind, and why the id the caller claimed is not one of them (or None)."""

    own: tuple[Any, ...]
    refusal: str | None = None


def instances(client: Any, scope: RunScope, claimed: str = "") -> Found:
    """This run's instances not yet terminated, and the claimed id checked: one of this run's that is terminated
    is added (a re-run of the stop job still prices it), one EC2 no longer knows is not refused (EC2 dropped it),
    one with another run's tags is."""
    pages = client.get_paginator("describe_instances").paginate(Filters=scope.instance_filters())
    found = [i for page in pages for r in page["Reservations"] for i in r["Instances"]]
    own = [i for i in found if scope.instance_refusal(tags_of(i)) is None]
    refusal = None
    if claimed and claimed not in {i["InstanceId"] for i in own}:
        described = ec2.describe(client, claimed)
        refusal = None if described is None else scope.instance_refusal(tags_of(described))
        if described is not None and refusal is None:  # ours, not yet in the filtered listing
            own.append(described)
    return Found(tuple(sorted(own, key=lambda i: i["InstanceId"])), refusal)


def runners(github: GitHubRunners, scope: RunScope, claimed: int | None = None) -> Found:
    """This run's runner registrations, and the claimed id checked by its name: one GitHub no longer knows is not
    refused (a just-in-time runner is removed after its job), one of another name is."""
    own = [r for r in github.list_runners() if scope.runner_attempt(r.name) is not None]
    refusal = None
    if claimed is not None and claimed not in {r.id for r in own}:
        runner = github.get_runner(claimed)
        refusal = None if runner is None else scope.runner_refusal(runner.id, runner.name)
        if runner is not None and refusal is None:
            own.append(runner)
    return Found(tuple(own), refusal)


def tags_of(instance: Mapping[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
