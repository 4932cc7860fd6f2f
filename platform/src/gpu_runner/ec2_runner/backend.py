"""The EC2 runner backend behind the GpuBackend interface (gpu_runner/backend.py): one ephemeral self-hosted runner
on one GPU instance per piece of work; the workflow's own job runs on it (runs-on the handle's label)."""

from __future__ import annotations

from datetime import UTC, datetime

from gpu_runner.backend import Handle, Work
from gpu_runner.core import naming
from gpu_runner.core import workflow_contract as contract
from gpu_runner.core.aws import Aws
from gpu_runner.core.errors import RunnerError
from gpu_runner.core.github import GitHubRunners
from gpu_runner.core.naming import RunContext
from gpu_runner.core.settings import Settings
from gpu_runner.cost import accounting
from gpu_runner.cost.record import Cost
from gpu_runner.ec2_runner import ec2, lifecycle, ownership

NAME = "runner"
Output = contract.LaunchOutput


class Ec2Runner:
    """`label_nonce`: for the offline tests only (act maps the runner label before the run starts)."""

    name = NAME

    def __init__(
        self,
        settings: Settings,
        aws: Aws,
        github: GitHubRunners,
        ctx: RunContext,
        *,
        label_nonce: str | None = None,
    ) -> None:
        self.settings, self.aws, self.github, self.ctx = settings, aws, github, ctx
        self.label_nonce = label_nonce

    def launch(self, work: Work) -> Handle:
        """A runner's work is the workflow job that runs on it: `work.command` must be empty."""
        if work.command:
            raise RunnerError("backend runner: the work is the workflow job on the runner, not a command")
        outcome = lifecycle.launch(self.settings, self.ctx, self.aws, self.github, use_spot=work.use_spot,
                                   label_nonce=self.label_nonce)  # fmt: skip
        ids = {Output.INSTANCE_ID: outcome.launched.instance_id, Output.RUNNER_ID: str(outcome.runner_id),
               Output.PARAMETER: outcome.parameter, Output.LABEL: outcome.label}  # fmt: skip
        return Handle(NAME, outcome.region, {str(key): value for key, value in ids.items()})

    def wait(self, handle: Handle, *, timeout_seconds: float | None = None) -> int:
        lifecycle.wait(
            self.settings, self.aws, self.github, region=contract.region(handle.region),
            instance_id=self._instance_id(handle), runner_id=contract.runner_id(handle.ids[Output.RUNNER_ID]),
            timeout_seconds=timeout_seconds, runner_name=naming.runner_name(self.ctx),
        )  # fmt: skip
        return 0

    def teardown(self, handle: Handle) -> tuple[str, ...]:
        """This run's instance, runner and parameter, found through its run key (ownership.py); the handle's ids
        are claims, refused when they are another run's. Priced separately (`costs`), so it never logs a cost."""
        runner = handle.ids.get(Output.RUNNER_ID, "")
        report = lifecycle.teardown(
            self.aws, self.github, ownership.RunScope(self.ctx, self.settings.project, self.settings.ssm_prefix),
            region=contract.region(handle.region) if handle.region else self.settings.region,
            instance_id=self._instance_id(handle) if handle.ids.get(Output.INSTANCE_ID) else "",
            runner_id=contract.runner_id(runner) if runner else None,
            parameter=contract.parameter(handle.ids[Output.PARAMETER]) if handle.ids.get(Output.PARAMETER) else "",
        )  # fmt: skip
        return report.refused

    def costs(self, handle: Handle) -> list[Cost]:
        """The instance as EC2 describes it: billed from launch to EC2's termination time (60 s minimum), priced
        for the type, market and zone it ran in. Nothing when EC2 no longer knows the instance."""
        region = contract.region(handle.region)
        instance = ec2.describe(self.aws.client("ec2", region), self._instance_id(handle))
        if instance is None:
            return []
        billed = lifecycle.billed_seconds(instance, datetime.now(UTC))
        return [accounting.estimate(self.aws, instance, region=region, billed_seconds=billed,
                                    volume_gb=self.settings.root_volume_gb)]  # fmt: skip

    @staticmethod
    def _instance_id(handle: Handle) -> str:
        return contract.instance_id(handle.ids.get(Output.INSTANCE_ID, ""))
