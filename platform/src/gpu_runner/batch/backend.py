"""The AWS Batch backend behind the GpuBackend interface (gpu_runner/backend.py): the work is a job on the Batch
stack's queue; its container runs the command, and the job's own exit code ends the wait."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_runner.backend import Handle, Work
from gpu_runner.batch import batch_cost, batch_jobs, batch_wait
from gpu_runner.core import workflow_contract as contract
from gpu_runner.core.aws import Aws
from gpu_runner.core.errors import RunnerError
from gpu_runner.core.settings import Settings
from gpu_runner.cost.record import Cost

NAME = "batch"


class BatchJobs:
    """Where the work goes (the queue and job definition, an array size, an instance type the queue may launch,
    the tags) is Batch's own and given when it is made (launch needs them; the other operations read the job);
    the operations are every backend's."""

    name = NAME

    def __init__(
        self, settings: Settings, aws: Aws, *, queue: str = "", definition: str = "", array_size: int = 0,
        instance_type: str = "", tags: Mapping[str, str] | None = None, poll_seconds: float = 5.0,
    ) -> None:  # fmt: skip
        self.settings, self.aws = settings, aws
        self.queue, self.definition, self.array_size = queue, definition, array_size
        self.instance_type, self.tags, self.poll_seconds = instance_type, dict(tags or {}), poll_seconds

    def launch(self, work: Work) -> Handle:
        if work.use_spot is not None:
            raise RunnerError(
                "backend batch: the queue's compute environments choose the market (spot first, then on demand); "
                "leave use_spot unset for a Batch job"
            )
        if not (self.queue and self.definition):
            raise RunnerError(
                "queue, definition: a Batch job needs both (batch submit defaults to the stack's <stack>-gpu queue "
                "and <stack>-train definition)"
            )
        request = batch_jobs.JobRequest(
            name=work.name, queue=self.queue, definition=self.definition, command=work.command,
            environment=dict(work.environment), array_size=self.array_size, instance_type=self.instance_type,
            tags=self.tags,
        )  # fmt: skip
        submitted = batch_jobs.submit(self._batch(), request)
        return Handle(NAME, self.settings.region, {str(contract.BatchOutput.JOB_ID): submitted.job_id})

    def wait(self, handle: Handle, *, timeout_seconds: float | None = None) -> int:
        logs = self.aws.client("logs", self.settings.region)
        outcome = batch_wait.wait(self._batch(), logs, self._job_id(handle), poll_seconds=self.poll_seconds,
                                  timeout_seconds=timeout_seconds)  # fmt: skip
        return outcome.exit_code

    def teardown(self, handle: Handle) -> tuple[str, ...]:
        """Terminate the job (a child or node still running ends with it); an ended job stays as it ended.
        Nothing is refused here: the submit role may end only jobs tagged as its stack's, and AWS refuses any
        other (batch.yaml, SubmitPolicy)."""
        batch_jobs.cancel(self._batch(), self._job_id(handle))
        return ()

    def costs(self, handle: Handle) -> list[Cost]:
        """Every ended attempt of the job (each array child's, a multi-node job's nodes summed), priced."""
        return [attempt.cost for attempt in self.attempt_costs(self.job(handle))]

    def attempt_costs(self, job: Mapping[str, Any]) -> list[batch_cost.AttemptCost]:
        """The same, with each attempt's number and array child (what `batch wait` logs per sweep trial)."""
        types = self.settings.instance_types
        return batch_cost.job_costs(self.aws, job, region=self.settings.region,
                                    volume_gb=self.settings.root_volume_gb,
                                    fallback_type=types[0] if len(types) == 1 else "")  # fmt: skip

    def job(self, handle: Handle) -> dict[str, Any]:
        job_id = self._job_id(handle)
        found = batch_jobs.describe(self._batch(), [job_id])
        if not found:
            raise RunnerError(f"job-id: no Batch job {job_id} in {self.settings.region}")
        return found[0]

    def _batch(self) -> Any:
        return self.aws.client("batch", self.settings.region)

    @staticmethod
    def _job_id(handle: Handle) -> str:
        job_id = handle.ids.get(contract.BatchOutput.JOB_ID, "")
        if not job_id:
            raise RunnerError("job-id: the handle names no Batch job (batch submit's job-id output)")
        return job_id
