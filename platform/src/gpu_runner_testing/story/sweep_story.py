"""The sweep story: the real sweep.yml under act, one act run per wave, against the doubles of harness.py.

Wave 1 is the push to the sweep branch; every later wave is the workflow_dispatch the collect job made through
the GitHub double (`gpu-runner next-wave`), run with the inputs the double recorded, until collect dispatches
no more. Each wave has its own workflow run id and simulated instances (one per matrix leg, told apart by their
runner labels: Simulator.job_started(label)). What is checked afterwards is read from where the product keeps
it: the Optuna study in moto's S3, the MLflow server, EC2, SSM and the GitHub double.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

from gpu_job.sweep import space
from gpu_job.sweep import study as sweep_study
from gpu_runner.core import quotas
from gpu_runner_testing.github_double import ACTIONS_BOT
from gpu_runner_testing.peer_env import peer_variable
from gpu_runner_testing.service_quotas import quota_body
from gpu_runner_testing.story.harness import (
    DEFAULT_TOKEN,
    LIVE,
    AwsFaultProxy,
    GitHubDouble,
    ImdsDouble,
    Rule,
    Simulator,
    WorkflowRun,
    act_time,
    default_branch,
    leg_slot,
    prepare_repository,
    run_workflow,
)
from gpu_runner_testing.story.stories import (
    EPOCH,
    FAST_TRAIN,
    PACKAGE,
    PROJECT,
    Stack,
    _wait_until,
    cancel_workflow,
    on_demand_price_list,
    typical_spot_history,
)

SWEEP_BRANCH = "sweep/demo"
# The story's search: 4 trials, 2 at once, short trainings on the embedded digits data. No pruner: with 1-2 epochs
# it could stop a trial before the objective is told, and the story asserts 4 finished (COMPLETE) trials.
SWEEP: dict[str, Any] = {
    "trials": 4,
    "parallel": 2,
    "pruner": {"name": "none"},
    "budget": {"epochs_per_trial": 2, "minutes_per_trial": 10, "usd": 20, "max_attempts_per_trial": 2},
}
TRAIN: dict[str, Any] = {
    **FAST_TRAIN,
    "training": {**FAST_TRAIN["training"], "epochs": 2, "allow_cpu": True},
    "tracking": {"log_model": True, "log_system_metrics": False},
}
AwsAnswer = tuple[float, float]  # the applied vCPU quotas: (on-demand L-DB2E81BA, spot L-3819A6DF)


@dataclass
class SweepScenario:
    name: str
    sweep: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=lambda: TRAIN)
    # What Service Quotas answers (moto serves no EC2 quota: gpu_runner_testing/service_quotas.py).
    quota_vcpus: AwsAnswer = (64.0, 64.0)
    trigger: Callable[[SweepStory, dict[str, Any], subprocess.Popen], None] | None = None
    max_waves: int = 6
    # After a wave that dispatched nothing (a cancelled run has no collect): the user's "Run workflow" of
    # sweep.yml on the branch, with no inputs (the plan takes the study's next wave).
    rerun_by_hand: int = 0
    # When act ended a wave's run early (ACT_ENDS_RUN: a leg's train job failed, e.g. exit 75 on a spot notice),
    # run the collect job's two commands outside act, as GitHub would run that job: collect, then next-wave
    # through the GitHub double when collect says another wave starts.
    collect_when_act_ends: bool = False
    # An open pull request of the sweep branch before the push: each wave's comment job reports on it.
    pull_request: bool = False
    # configs/gpu-runner.yaml changes (backend: batch) and repository variables besides the harness's.
    gpu_runner: dict[str, Any] = field(default_factory=dict)
    variables: dict[str, str] = field(default_factory=dict)


@dataclass
class Wave:
    number: int
    run_id: str
    event: str
    inputs: dict[str, str]
    run: WorkflowRun
    simulator: Simulator


@dataclass
class SweepStory:
    scenario: SweepScenario
    stack: Stack
    scratch: Path
    run_id: str
    study_name: str = ""
    head_sha: str = ""
    repo: Path | None = None
    github: GitHubDouble | None = None
    imds: ImdsDouble | None = None
    waves: list[Wave] = field(default_factory=list)
    fired: list[str] = field(default_factory=list)
    epochs: dict[str, int] = field(default_factory=dict)  # per leg (slot): the epoch its train job began last
    # The collect jobs run outside act (SweepScenario.collect_when_act_ends): each command's result, in order.
    outside_act: list[list[subprocess.CompletedProcess]] = field(default_factory=list)
    instances_left: int = -1
    runners_left: int = -1
    params_left: int = -1
    pull_number: int | None = None
    # The pull request's comments after each wave (SweepScenario.pull_request).
    comments_after_wave: list[list[dict[str, Any]]] = field(default_factory=list)

    @property
    def run_ids(self) -> list[str]:
        return [w.run_id for w in self.waves]

    def live_instances(self, run_ids: list[str]) -> int:
        ours = [{"Name": "tag:gpu-runner:run-id", "Values": run_ids}]
        reservations = self.stack.client("ec2").describe_instances(Filters=ours)["Reservations"]
        return sum(i["State"]["Name"] in LIVE for r in reservations for i in r["Instances"])

    def count_leftovers(self) -> None:
        assert self.github is not None
        self.instances_left = self.live_instances(self.run_ids)
        self.runners_left = len(self.github.runners)
        prefix = self.stack.settings["ssm_prefix"]
        names = [p["Name"] for p in self.stack.client("ssm").describe_parameters()["Parameters"]]
        self.params_left = sum(n.startswith(tuple(f"{prefix}/{r}-" for r in self.run_ids)) for n in names)

    def study(self) -> Any:
        """The study as the sweep's jobs open it (gpu_job.sweep, from s3://<bucket>/sweeps/<study>/ in moto), with
        the branch's sweep file (its fields were checked against the training config by the plan job)."""
        assert self.repo is not None
        cfg = space.SweepConfig.model_validate(space.read_sweep(self.repo / "configs" / "sweep.yaml"))
        # The story's own AWS (the batch host for the batch backend's), not only the session's moto.
        with mock.patch.dict(os.environ, {"AWS_ENDPOINT_URL": self.stack.moto_endpoint}):
            return sweep_study.open_study(cfg, f"s3://{self.stack.settings['bucket']}/sweeps")

    def results(self, job: str) -> list[list[str]]:
        """act's results of `job` (a job key: start, train, stop, plan, collect) in each wave, in order."""
        return [[r for key, _name, r in w.run.job_results if key == job] for w in self.waves]


def cancel_when_both_train(story: SweepStory, rec: dict[str, Any], process: subprocess.Popen) -> None:
    """ "Cancel workflow" while both legs of wave 1 train: the first to reach its second epoch (its first
    checkpoint is in S3) once the other has begun, as the train story's cancel scenario sends it: SIGINT to act
    itself (stories.cancel_during_training). Waiting for both to reach epoch 2 let a fast leg finish under load."""
    epochs = story.epochs
    if story.waves or story.fired or len(epochs) < 2 or max(epochs.values()) < 2 or min(epochs.values()) < 1:
        return
    story.fired.append("cancel")
    cancel_workflow(process)


def interrupt_trial_one_in_its_second_epoch(
    story: SweepStory, rec: dict[str, Any], process: subprocess.Popen
) -> None:
    """EC2's two-minute warning for trial 1's instance only, once trial 1 is in its second epoch (its first
    checkpoint is in S3): its metadata service answers the notice, trial 0's does not. Trial 1's own progress
    decides, not trial 0's: a notice sent after trial 1's last epoch has nothing left to stop."""
    if story.waves or story.fired or story.epochs.get("1", 0) < 2:
        return
    assert story.imds is not None
    story.fired.append("interrupt trial 1")
    story.imds.interrupt(instance="1")


def quota_rules(region: str, on_demand: float, spot: float) -> list[Rule]:
    """GetServiceQuota answered as Service Quotas answers it (gpu_runner_testing.service_quotas.quota_body), per code."""
    rules = []
    for code, value in ((quotas.ON_DEMAND_QUOTA[0], on_demand), (quotas.SPOT_QUOTA[0], spot)):
        body = json.dumps(quota_body(code, value, region)).encode()
        rules.append(
            Rule(
                "GetServiceQuota",
                times=-1,
                answer=lambda _body, body=body: body,
                when=lambda request, code=code: json.loads(request).get("QuotaCode") == code,
            )
        )
    return rules


def run_sweep(stack: Stack, scenario: SweepScenario, scratch: Path, run_id: str) -> SweepStory:
    story = SweepStory(scenario, stack, scratch, run_id, study_name=f"e2e-sweep-{run_id}")
    sweep = {"study_name": story.study_name, **SWEEP, **scenario.sweep}
    gpu_runner = {"security_group_ids": [stack.security_group], **scenario.gpu_runner}
    repo, _, story.head_sha = prepare_repository(
        scratch, gpu_runner, scenario.train, compile_bytecode=False, branch=SWEEP_BRANCH, sweep=sweep
    )
    story.repo = repo
    # The real sweep.yml (no job of it or of sweep-trial.yml has a container: nothing to change for host mode).
    workflow = repo / ".github" / "workflows" / "sweep.yml"
    slots = tuple(str(n) for n in range(int(sweep["trials"])))
    rules = [
        *quota_rules(stack.region, *scenario.quota_vcpus),
        on_demand_price_list(stack.region),
        typical_spot_history(stack.region),
    ]
    with (
        GitHubDouble(repositories=(stack.repository,)) as github,
        AwsFaultProxy(stack.moto_endpoint, rules=rules, under=scratch) as proxy,
        # One metadata service per simulated instance: a leg is the process with its TRIAL (gpu_runner_testing.peer_env).
        ImdsDouble(instance_of=peer_variable("TRIAL")) as imds,
    ):
        story.github, story.imds = github, imds
        github.tokens.setdefault(DEFAULT_TOKEN, "write")
        github.commit(SWEEP_BRANCH, sha=story.head_sha, repository=stack.repository)
        # DEFAULT_TOKEN is the runs' GITHUB_TOKEN here (act's secrets.GITHUB_TOKEN): its comments are the bot's.
        github.token_authors[DEFAULT_TOKEN] = ACTIONS_BOT
        if scenario.pull_request:
            story.pull_number = github.open_pull(
                SWEEP_BRANCH, base=default_branch(), repository=stack.repository
            )
        event, inputs = "push", {}

        def on_record(rec: dict[str, Any], process: subprocess.Popen) -> None:
            slot = leg_slot(str(rec.get("job", "")))
            if slot is not None and rec.get("jobID") == "train" and rec.get("raw_output"):
                for match in EPOCH.finditer(rec.get("msg", "")):
                    story.epochs[slot] = max(story.epochs.get(slot, 0), int(match.group(1)))
            if scenario.trigger:
                scenario.trigger(story, rec, process)

        for number in range(1, scenario.max_waves + 1):
            wave_run = f"{run_id}{number}"
            simulator = Simulator(
                stack.moto_endpoint, stack.region, github, scratch / f"instances-{number}", run_id=wave_run
            )
            simulator.start()
            try:
                run = run_workflow(
                    scratch=scratch, moto_endpoint=stack.moto_endpoint, mlflow_uri=stack.mlflow_uri,
                    github=github, simulator=simulator, repo=repo, workflow=workflow, head_sha=story.head_sha,
                    repository=stack.repository, image_bin=stack.image_bin, run_id=wave_run,
                    aws_endpoint=proxy.url, event_name=event, inputs=inputs, imds_url=imds.url,
                    branch=SWEEP_BRANCH, on_record=on_record, slots=slots, variables=scenario.variables,
                )  # fmt: skip
                # Each act run's log is kept: the harness names it by event only.
                run.log.rename(kept := scratch / f"act-wave{number}.jsonl")
                run.log = kept
                _wait_until(lambda ids=[wave_run]: story.live_instances(ids) == 0, timeout=60)
                simulator.wait_for_boots(timeout=10)
            finally:
                simulator.stop()
            story.waves.append(Wave(number, wave_run, event, inputs, run, simulator))
            if story.pull_number is not None:
                story.comments_after_wave.append(
                    github.comments(story.pull_number, repository=stack.repository)
                )
            if (
                scenario.collect_when_act_ends
                and ACT_ENDS_RUN in run.log.read_text()
                and "collect" not in run.results
            ):
                story.outside_act.append(collect_job_outside_act(story, story.waves[-1]))
            dispatched = [d for d in github.dispatches if d["workflow"] == workflow.name]
            if len(dispatched) < number and story.fired.count("run by hand") < scenario.rerun_by_hand:
                github.dispatches.append({"workflow": workflow.name, "ref": SWEEP_BRANCH, "inputs": {}})
                story.fired.append("run by hand")
                dispatched = [d for d in github.dispatches if d["workflow"] == workflow.name]
            if len(dispatched) < number:
                break  # collect started no next wave
            # What GitHub does with the dispatch: a new run of sweep.yml with its inputs, on new machines.
            event, inputs = "workflow_dispatch", dict(dispatched[number - 1]["inputs"])
            assert dispatched[number - 1]["ref"] in (SWEEP_BRANCH, f"refs/heads/{SWEEP_BRANCH}"), dispatched
            imds.documents.clear()
            imds.instance_documents.clear()
        story.count_leftovers()
    return story


# What act 0.2.89 prints when a job of a called workflow failed: it then ends the whole run, so a job that
# `needs` the matrix (collect, `if: !cancelled() && needs.plan.result == 'success'`) never runs under act, where
# GitHub would run it (stories.assert_start_tore_down notes the same for train.yml's stop job).
ACT_ENDS_RUN = "Error: Job 'Train the trial' failed"


def collect_outside_act(
    story: SweepStory, wave: Wave, output: Path | None = None
) -> subprocess.CompletedProcess:
    """The collect job's own command (sweep.yml, step "Collect the wave"), run as that step runs it, for a wave
    act ended early (ACT_ENDS_RUN). Not act: the caller asserts act did not run collect, and says so."""
    assert story.repo is not None
    text = (story.repo / ".github" / "workflows" / "sweep.yml").read_text()
    assert f"python -m {PACKAGE} sweep collect" in text, "sweep.yml's collect step changed: update this"
    bucket = story.stack.settings["bucket"]
    args = [
        "uv",
        "run",
        "--no-sync",
        "python",
        "-m",
        PACKAGE,
        "sweep",
        "collect",
        "--sweep=configs/sweep.yaml",
    ]
    args += ["--config=configs/train.yaml", f"--wave={wave.run.outputs['plan']['wave']}"]
    args += [f"--storage-root=s3://{bucket}/sweeps"]
    return _outside_act(story, wave, args, output)


def collect_job_outside_act(story: SweepStory, wave: Wave) -> list[subprocess.CompletedProcess]:
    """Both commands of sweep.yml's collect job for a wave act ended early: collect, then (its step output
    next-wave=true) `gpu-runner next-wave`, whose dispatch reaches the GitHub double as the job's would."""
    assert story.repo is not None
    text = (story.repo / ".github" / "workflows" / "sweep.yml").read_text()
    assert "gpu-runner --settings configs/gpu-runner.yaml next-wave" in text, (
        "sweep.yml's next-wave step changed"
    )
    output = story.scratch / f"collect-wave{wave.number}.out"
    done = [collect_outside_act(story, wave, output)]
    if done[0].returncode == 0 and "next-wave=true" in output.read_text().splitlines():
        args = ["uv", "run", "--no-sync", "gpu-runner", "--settings", "configs/gpu-runner.yaml", "next-wave"]
        args += [f"--ref={SWEEP_BRANCH}", f"--wave={wave.run.outputs['plan']['wave']}"]
        args += ["--sweep=configs/sweep.yaml", "--config=configs/train.yaml"]
        done.append(_outside_act(story, wave, args, output, dispatch=True))
    return done


def _outside_act(
    story: SweepStory, wave: Wave, args: list[str], output: Path | None, dispatch: bool = False
) -> subprocess.CompletedProcess:
    """A collect job's step as the job runs it: the sweep role's view of moto, the MLflow server, and with
    `dispatch` the run's token for the GitHub double (running only inside run_sweep); step outputs to `output`
    (none kept when None)."""
    assert story.repo is not None and story.github is not None
    github = {"GITHUB_API_URL": story.github.url, "GITHUB_TOKEN": DEFAULT_TOKEN} if dispatch else {}
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GITHUB_", "VIRTUAL_ENV", "MLFLOW_"))
    }
    env.update(
        AWS_ENDPOINT_URL=story.stack.moto_endpoint, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
        AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull, AWS_REGION=story.stack.region,
        AWS_DEFAULT_REGION=story.stack.region, MLFLOW_TRACKING_URI=story.stack.mlflow_uri,
        GITHUB_RUN_ID=wave.run_id, GITHUB_REPOSITORY=story.stack.repository,
        GITHUB_OUTPUT=str(output) if output else os.devnull, GITHUB_STEP_SUMMARY=os.devnull,
        UV_PROJECT_ENVIRONMENT=str(PROJECT / ".venv"), UV_OFFLINE="1", **github,
    )  # fmt: skip
    return subprocess.run(
        args, cwd=story.repo, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def overhead(story: SweepStory, children: list[Any]) -> dict[str, float]:
    """The benchmark's figures. Per trial, from what its stop job logged on its child run (step = attempt): launch
    -> runner online, setup, training, teardown and billed seconds. act's log cannot attribute the start and stop
    jobs' steps to a leg (their job names carry no leg: WorkflowRun.job_results). Per wave, from act's records:
    the plan job and the wall clock; the train jobs' spans (their names carry the leg) summed over the sweep."""
    figures: dict[str, float] = {}
    for child in sorted(children, key=lambda r: int(r.data.tags.get("sweep.trial", "0"))):
        trial, metrics = child.data.tags.get("sweep.trial"), child.data.metrics
        for key in (
            "runner_online_seconds",
            "setup_seconds",
            "training_seconds",
            "teardown_seconds",
            "billed_seconds",
        ):
            if key in metrics:
                figures[f"trial {trial}: {key}"] = metrics[key]
    train_sum = 0.0
    for wave in story.waves:
        run = wave.run
        figures[f"wave {wave.number}: act wall clock"] = run.seconds
        figures[f"wave {wave.number}: plan job"] = _span(run, lambda rec: rec.get("jobID") == "plan")
        for slot in sorted({leg_slot(str(r.get("job", ""))) for r in run.records} - {None}):
            span = _span(
                run,
                lambda rec, s=slot: rec.get("jobID") == "train" and leg_slot(str(rec.get("job", ""))) == s,
            )
            figures[f"wave {wave.number}: train job of trial {slot}"] = span
            train_sum += span
    figures["sweep wall clock (all waves)"] = sum(w.run.seconds for w in story.waves)
    figures["sum of the trials' train jobs"] = train_sum
    return figures


def _span(run: WorkflowRun, match: Callable[[dict[str, Any]], bool]) -> float:
    times = [act_time(r) for r in run.records if match(r)]
    return max(times) - min(times) if times else 0.0
