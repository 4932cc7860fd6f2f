"""The one interface a GPU backend implements (CONTRIBUTING.md, "Adding a backend"): the four operations every
backend's workflows run, over one handle that the start phase writes as step outputs and the later phases read.

    launch    start the GPU work: a runner that registers and boots (ec2_runner) or a queued job (batch)
    wait      until the GPU has taken the work: the runner is online, or the job has ended
    teardown  end everything of this work, idempotently; a claimed id of another run is refused, never ended
    costs     what the provider bills for it, per attempt, priced (cost/: the same record for every backend)

A backend is a folder of gpu_runner with a `backend.py` whose class satisfies GpuBackend; it imports no other
backend (the `backends` import contract), and its name is one of settings.BACKENDS (the settings' `backend:`;
tests/runner/test_backends.py holds every name to an implementation). What only one backend has (a runner's spot
resume and reaper, a Batch stack's queues and array jobs) stays its own command."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from gpu_runner.cost.record import Cost


@dataclass(frozen=True)
class Handle:
    """What launch started, as the workflow carries it from job to job: step outputs, so strings only.
    `ids` are the output names the backend wrote (instance-id, runner-id, parameter, label; job-id)."""

    backend: str
    region: str
    ids: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Work:
    """One piece of GPU work of the calling workflow run (naming.RunContext names the run).

    name: what the provider shows (a Batch job name); command: the argv that runs on the GPU, empty where a
    workflow job runs there instead (ec2_runner); environment: given to the command; use_spot: overrides the
    settings' use_spot where the backend chooses the market at launch (None: the settings decide)."""

    name: str = ""
    command: tuple[str, ...] = ()
    environment: Mapping[str, str] = field(default_factory=dict)
    use_spot: bool | None = None


@runtime_checkable
class GpuBackend(Protocol):
    """The operations; each implementation takes its settings, AWS session and run context when it is made."""

    name: str  # the settings' `backend:` value that selects it

    def launch(self, work: Work) -> Handle:
        """Start the work; on any failure leave nothing billed behind, then raise."""
        ...

    def wait(self, handle: Handle, *, timeout_seconds: float | None = None) -> int:
        """Block until the GPU has taken the work; the exit status the workflow step should end with (a runner:
        0 once online, its job then runs on it; a job: the job's own exit code)."""
        ...

    def teardown(self, handle: Handle) -> tuple[str, ...]:
        """End everything of this work (twice is fine); returns the claims refused as another run's."""
        ...

    def costs(self, handle: Handle) -> list[Cost]:
        """The billed attempts of the work, priced: read from the provider's own record of what ran."""
        ...
