"""A sweep's wave on the batch backend: one array job, each child picks its trial from AWS_BATCH_JOB_ARRAY_INDEX.

The mapping is checked on its own, then for real: an array job of three children on the batch host (moto's Batch
backend, each child a local process with the variables Batch sets) in which every child resolves its trial with
the same code `sweep trial --trials` runs. The refusals reach the CLI as the "Bad input" rows
sweep-trials-no-array-index and sweep-trials-index-out-of-range (a project's tests/test_bad_input.py).
"""

from __future__ import annotations

import sys
import time
from typing import Any

import boto3
import pytest

from gpu_job.errors import JobInputError
from gpu_job.sweep_array import ARRAY_INDEX, parse_trials, trial_of_child
from gpu_runner_testing.batch_world import REGION


@pytest.mark.parametrize(
    ("text", "trials"), [("3,5,8", (3, 5, 8)), ("0", (0,)), (" 7 , 2 ", (7, 2)), ("999999", (999999,))]
)
def test_the_waves_trials_are_read_in_the_plans_order(text: str, trials: tuple[int, ...]) -> None:
    assert parse_trials(text) == trials


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("", "not a comma list"),
        ("3,,5", "not a comma list"),
        ("03", "not a comma list"),
        ("-1", "not a comma list"),
        ("3;rm -rf /", "not a comma list"),
        ("1000000", "not a comma list"),
        ("4,2,4", "trial 4 is listed twice"),
    ],
)
def test_a_bad_trial_list_is_refused_by_name(text: str, named: str) -> None:
    with pytest.raises(JobInputError, match="--trials") as refused:
        parse_trials(text)
    assert named in str(refused.value)


def test_each_child_trains_the_trial_at_its_index() -> None:
    trials = (3, 5, 8)
    assert [trial_of_child(trials, {ARRAY_INDEX: str(i)}) for i in range(3)] == [3, 5, 8]


def test_a_single_job_trains_the_waves_only_trial_and_nothing_else() -> None:
    assert trial_of_child((6,), {}) == 6
    with pytest.raises(JobInputError, match=f"{ARRAY_INDEX} is not set, but --trials lists 2 trials"):
        trial_of_child((6, 7), {})


@pytest.mark.parametrize(("index", "named"), [("3", "lists only 3 trials"), ("-1", "not an array index"),
                                              ("01", "not an array index"), ("x", "not an array index")])  # fmt: skip
def test_an_index_outside_the_wave_is_refused(index: str, named: str) -> None:
    with pytest.raises(JobInputError, match=named):
        trial_of_child((3, 5, 8), {ARRAY_INDEX: index})


def ended_job(batch: Any, job_id: str, timeout: float = 120.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = batch.describe_jobs(jobs=[job_id])["jobs"][0]
        children = [batch.describe_jobs(jobs=[f"{job_id}:{i}"])["jobs"][0] for i in range(3)]
        if all(child["status"] in ("SUCCEEDED", "FAILED") for child in children):
            return {**job, "children": children}
        time.sleep(0.3)
    raise AssertionError(f"array job {job_id} did not end within {timeout} s")


def test_an_array_jobs_children_each_train_their_own_trial(batch_world: str) -> None:
    batch = boto3.client("batch", region_name=REGION, endpoint_url=batch_world)
    logs = boto3.client("logs", region_name=REGION, endpoint_url=batch_world)
    child = (
        "import os; from gpu_job.sweep_array import parse_trials, trial_of_child; "
        "print('trial', trial_of_child(parse_trials('3,5,8'), os.environ))"
    )
    submitted = batch.submit_job(
        jobName="sweep-wave-1", jobQueue="gpu", jobDefinition="train", arrayProperties={"size": 3},
        containerOverrides={"command": [sys.executable, "-c", child]},
    )  # fmt: skip

    job = ended_job(batch, submitted["jobId"])

    reasons = [c.get("statusReason") for c in job["children"]]
    assert [c["status"] for c in job["children"]] == ["SUCCEEDED"] * 3, reasons
    printed = set()
    for one in job["children"]:
        stream = one["container"]["logStreamName"]
        events = logs.get_log_events(logGroupName="/aws/batch/job", logStreamName=stream, startFromHead=True)
        printed |= {event["message"] for event in events["events"]}
    assert {"trial 3", "trial 5", "trial 8"} <= printed, printed
