"""Which trial an AWS Batch array child trains (`backend: batch`, manual/batch-jobs.md): a project's
`sweep trial --trials` asks it.

On the batch backend a sweep's wave is one array job, one child per planned trial: every child runs the same
command, `sweep trial --trials <the wave's trial numbers>`, and Batch tells each child which one it is through
AWS_BATCH_JOB_ARRAY_INDEX ("the array index of the job (starts at 0)", AWS Batch User Guide, "AWS Batch job
environment variables", job_env_vars.html, read 2026-12-04). A wave of one trial is submitted as a single job
(an array job has 2 to 10,000 children), which has no index: the one trial is then the child's.

Everything here refuses rather than guesses: a child that trained another child's trial would overwrite its
checkpoint and report into its Optuna trial.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from gpu_job.errors import JobInputError

ARRAY_INDEX = "AWS_BATCH_JOB_ARRAY_INDEX"
# The trial numbers sweep plan writes into the wave's matrix: no sign, no leading zero (gpu-runner's --slot rule).
TRIAL_NUMBER = re.compile(r"0|[1-9][0-9]{0,5}")


def parse_trials(text: str) -> tuple[int, ...]:
    """'3,5,8' -> (3, 5, 8): the wave's trial numbers, in the plan's order (child i trains the i-th)."""
    items = [item.strip() for item in text.split(",")] if text.strip() else []
    bad = [item for item in items if not TRIAL_NUMBER.fullmatch(item)]
    if not items or bad:
        raise JobInputError(
            f"--trials: {text!r} is not a comma list of trial numbers (e.g. 3,5,8); pass the plan job's trial "
            "numbers, in its order"
        )
    trials = tuple(int(item) for item in items)
    repeated = sorted({t for t in trials if trials.count(t) > 1})
    if repeated:
        raise JobInputError(
            f"--trials: trial {', '.join(map(str, repeated))} is listed twice; two children would train the same "
            "trial into one checkpoint"
        )
    return trials


def trial_of_child(trials: tuple[int, ...], environ: Mapping[str, str]) -> int:
    """The trial this child trains: trials[AWS_BATCH_JOB_ARRAY_INDEX], or the only trial of a single job."""
    index_text = environ.get(ARRAY_INDEX)
    if index_text is None:
        if len(trials) == 1:
            return trials[0]
        raise JobInputError(
            f"{ARRAY_INDEX} is not set, but --trials lists {len(trials)} trials: submit the wave as an array job "
            f"of {len(trials)} children (gpu-runner batch submit --array-size {len(trials)}), or pass --trial"
        )
    if not re.fullmatch(r"0|[1-9][0-9]{0,4}", index_text):
        raise JobInputError(f"{ARRAY_INDEX}={index_text!r} is not an array index (a whole number from 0)")
    index = int(index_text)
    if index >= len(trials):
        raise JobInputError(
            f"{ARRAY_INDEX}={index} but --trials lists only {len(trials)} trials: the array job's size must equal "
            "the number of trials in --trials"
        )
    return trials[index]
