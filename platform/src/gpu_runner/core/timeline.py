"""The phase timeline of one attempt on a real run, logged by the stop job to the training run and its summary.

Where each moment comes from (epoch seconds, UTC), so a real AWS run measures the same phases the offline story
prints:
- launched: the instance's LaunchTime (EC2 DescribeInstances);
- boot, image-ready, runner-started: the instance's boot script (user_data.sh appends them to
  <runner work folder>/_gpu_runner/timeline.env; the train job's first step turns them into job outputs);
- runner-online: `gpu-runner wait` (the start job's output runner-online-at);
- job-started: the train job's first step;
- training start / end: the training run's start_time / end_time in MLflow;
- terminated: EC2's own termination time (StateTransitionReason), else the teardown's clock.

MLflow metrics at step = attempt (seconds, like the cost record, cost/record.py): runner_online_seconds (launched -> runner
online), image_ready_seconds (launched -> image pulled), setup_seconds (job started -> training run started),
teardown_seconds (training run ended -> instance terminated). training_seconds is the training code's own.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpu_runner.core.mlflow_rest import MlflowError, MlflowRest

log = logging.getLogger(__name__)

# The moments the workflow hands the teardown (`--phase NAME=EPOCH`), in the order they happen.
WORKFLOW_PHASES = ("boot", "image-ready", "runner-started", "runner-online", "job-started")
METRICS = ("runner_online_seconds", "image_ready_seconds", "setup_seconds", "teardown_seconds")
# A moment more than a day away from the launch is not one of this attempt's (a stale or hand-made input).
_PLAUSIBLE_SECONDS = 86_400


def parse_phases(pairs: Sequence[str]) -> dict[str, float]:
    """`NAME=EPOCH` pairs from the workflow; anything else is skipped with a warning (never fails the teardown:
    the values come from step outputs that a failed or hostile job may have left malformed)."""
    phases: dict[str, float] = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        if name not in WORKFLOW_PHASES or not value.isdigit():
            names = ", ".join(WORKFLOW_PHASES)
            log.warning(
                f"warning: timeline: ignored {pair[:60]!r} (expected NAME=EPOCH, NAME one of {names})"
            )
            continue
        phases[name] = float(value)
    return phases


@dataclass(frozen=True)
class Timeline:
    launched: float
    terminated: float
    phases: Mapping[str, float] = field(default_factory=dict)
    training_start: float | None = None
    training_end: float | None = None
    training_seconds: float | None = None

    def moments(self) -> dict[str, float]:
        """Every known moment, in seconds after launch, in the order they happen."""
        found = {"launched": 0.0}
        found |= {name: at - self.launched for name, at in self.phases.items() if self._plausible(at)}
        if self.training_start is not None:
            found["training start"] = self.training_start - self.launched
        if self.training_end is not None:
            found["training end"] = self.training_end - self.launched
        found["terminated"] = self.terminated - self.launched
        return dict(sorted(found.items(), key=lambda item: item[1]))

    def durations(self) -> dict[str, float]:
        """The MLflow metrics this timeline can give (a phase nobody recorded is left out, not logged as 0)."""
        moments = self.moments()
        spans = {
            "runner_online_seconds": ("launched", "runner-online"),
            "image_ready_seconds": ("launched", "image-ready"),
            "setup_seconds": ("job-started", "training start"),
            "teardown_seconds": ("training end", "terminated"),
        }
        return {
            metric: max(0.0, moments[end] - moments[start])
            for metric, (start, end) in spans.items()
            if start in moments and end in moments
        }

    def _plausible(self, at: float) -> bool:
        return abs(at - self.launched) <= _PLAUSIBLE_SECONDS


def from_mlflow(
    run: Mapping[str, Any],
    training_seconds: float | None,
    *,
    launched: float,
    terminated: float,
    phases: Mapping[str, float],
) -> Timeline:
    """Add the training run's own start and end (MLflow keeps them in milliseconds) to the other moments.

    A resumed attempt trains in the first attempt's run: a start before this launch is not this attempt's."""
    info = run.get("info", {})
    start = int(info["start_time"]) / 1000 if info.get("start_time") else None
    end = int(info["end_time"]) / 1000 if info.get("end_time") else None
    return Timeline(
        launched=launched,
        terminated=terminated,
        phases=phases,
        training_start=start if start is not None and start >= launched else None,
        training_end=end if end is not None and end >= launched else None,
        training_seconds=training_seconds,
    )


def log_to_mlflow(
    client: MlflowRest,
    run_id: str,
    *,
    attempt: int,
    launched: float,
    terminated: float,
    phases: Mapping[str, float],
    training_seconds: float | None,
) -> Timeline | None:
    """Log this attempt's phase durations to the training run (once per attempt). Never raises."""
    try:
        timeline = from_mlflow(
            client.get_run(run_id), training_seconds, launched=launched, terminated=terminated, phases=phases
        )
        durations = timeline.durations()
        first = next(iter(durations), None)
        logged = client.metric_history(run_id, first) if first else []
        # A re-run of the stop job must not add this attempt twice.
        if any(int(point.get("step", 0)) == attempt for point in logged):
            log.info(f"timeline of attempt {attempt} already logged to MLflow run {run_id}: not logged again")
        elif durations:
            client.log_batch(run_id, durations, {}, step=attempt)
            log.info(f"timeline logged to MLflow run {run_id} (attempt {attempt}): {durations}")
    except MlflowError as error:
        log.warning(f"warning: timeline not logged to MLflow run {run_id}: {error}")
        return None
    return timeline


def summary(timeline: Timeline, *, attempt: int, slot: str = "") -> str:
    """Markdown for the stop job's summary: the moments after launch, then the durations."""
    moments = " · ".join(f"{name} {seconds:.0f} s" for name, seconds in timeline.moments().items())
    durations = dict(timeline.durations())
    if timeline.training_seconds is not None:
        durations["training_seconds"] = timeline.training_seconds
    spans = " · ".join(f"{name} {seconds:.0f}" for name, seconds in durations.items())
    heading = f"slot {slot}, attempt {attempt}" if slot else f"attempt {attempt}"
    return f"**Timeline ({heading})**, after launch: {moments}\n\n{spans or 'no phase durations'}\n"
