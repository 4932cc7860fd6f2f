"""The story (push -> start -> train -> stop) with one fault each, and what every story left behind.

A story = a fresh git copy of the project (with the scenario's config edits), a fresh GitHub double, a fault
proxy in front of the shared moto server, an instance metadata double, the simulated instance, and one `act` run
of the real train.yml (plus, where the scenario's designed clean-up path is the reaper, one `act` run of the
real reap.yml; and after a spot interruption, a second run of train.yml for the attempt the stop job dispatched).
Each story has its own workflow run id, so its instances, runners and parameters are counted apart.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import boto3
import yaml

from gpu_runner.core.workflow_contract import LaunchOutput
from gpu_runner.cost import pricing
from gpu_runner_testing.amazon_images import first_amazon_image
from gpu_runner_testing.github_double import ACTIONS_BOT
from gpu_runner_testing.price_answers import get_products_answer, price_list_product, spot_history_xml
from gpu_runner_testing.story.harness import (
    AMI_PARAMETER,
    AWS_TEST_CREDENTIALS,
    BRANCH,
    DEFAULT_TOKEN,
    LIVE,
    PROJECT,
    AwsFaultProxy,
    GitHubDouble,
    ImdsDouble,
    Rule,
    Simulator,
    WorkflowRun,
    default_branch,
    kill_matching,
    prepare_repository,
    run_workflow,
)

PACKAGE = next(p.name for p in (PROJECT / "src").iterdir() if (p / "__init__.py").exists())
EPOCH = re.compile(r"Epoch (\d+)/(\d+)")
# Fault stories train briefly: the faults are about the machinery around training, not the model.
FAST_TRAIN: dict[str, Any] = {
    # Epochs of a second here: the spot notice must be seen within one (EC2's warning is two minutes).
    "training": {"epochs": 5, "early_stopping_patience": 50, "interruption_poll_seconds": 0.2},
    "export": {"tflite": False, "tflite_int8": False},
    "tracking": {"log_model": False, "log_system_metrics": False},
}


@dataclass(frozen=True)
class Stack:
    """What every story shares: the session's servers, the image stand-in, the project's settings."""

    moto_endpoint: str
    mlflow_uri: str
    image_bin: Path
    settings: dict[str, Any]
    checkpoint_uri: str
    security_group: str = ""

    @property
    def region(self) -> str:
        return self.settings["region"]

    @property
    def repository(self) -> str:
        return f"e2e-owner/{self.settings['project']}"

    def client(self, service: str) -> Any:
        return boto3.client(service, region_name=self.region, endpoint_url=self.moto_endpoint)


def runner_security_group(ec2: Any) -> str:
    """A group without inbound rules in the default VPC, made once per moto server."""
    found = ec2.describe_security_groups(Filters=[{"Name": "group-name", "Values": ["e2e-gpu-runner"]}])
    if found["SecurityGroups"]:
        return str(found["SecurityGroups"][0]["GroupId"])
    return str(ec2.create_security_group(GroupName="e2e-gpu-runner", Description="e2e GPU runner")["GroupId"])


def make_stack(moto_endpoint: str, mlflow_uri: str, image_bin: Path) -> Stack:
    settings = yaml.safe_load((PROJECT / "configs" / "gpu-runner.yaml").read_text())
    # The train step checkpoints to s3://<bucket>/checkpoints, the bucket of the settings (the start job's output).
    stack = Stack(moto_endpoint, mlflow_uri, image_bin, settings, f"s3://{settings['bucket']}/checkpoints")
    ec2, ssm = stack.client("ec2"), stack.client("ssm")
    # What `make bootstrap` creates (RunnerSecurityGroup): launch refuses an empty security_group_ids.
    stack = replace(stack, security_group=runner_security_group(ec2))
    ami = first_amazon_image(ec2)
    ssm.put_parameter(Name=AMI_PARAMETER, Value=ami, Type="String", Overwrite=True)
    bucket = stack.checkpoint_uri[5:].split("/")[0]
    s3 = boto3.client("s3", region_name="us-east-1", endpoint_url=moto_endpoint)
    if bucket not in {b["Name"] for b in s3.list_buckets()["Buckets"]}:
        s3.create_bucket(Bucket=bucket)  # make bootstrap creates it in a real account
    return stack


def story_prices(region: str) -> dict[str, dict[str, float]]:
    """The prices the story's account answers with: the bundled table's (gpu_runner/cost/prices.json, through
    pricing.load_table) for the region, or us-east-1's where the table has none for it. The table lists only
    prices it can source, and the only dated list reachable offline covers us-east-1 (see its `source`): so the
    default region's story shows us-east-1's list prices, real-looking figures, not eu-west-1's real ones."""
    regions = pricing.load_table()["regions"]
    kinds = ("on_demand_usd_per_hour", "spot_typical_usd_per_hour")
    return {kind: regions.get(region, {}).get(kind) or regions["us-east-1"][kind] for kind in kinds}


def on_demand_price_list(region: str) -> Rule:
    """moto has no Price List API: GetProducts answered as AWS answers it (price_answers.price_list_product),
    with the story's on-demand price of the type asked for, so the stop job takes the path a real run takes."""
    on_demand = story_prices(region)["on_demand_usd_per_hour"]

    def answer(body: str) -> bytes:
        filters = {f["Field"]: f["Value"] for f in json.loads(body).get("Filters", [])}
        instance_type = filters.get("instanceType", "")
        products = [] if instance_type not in on_demand else [
            price_list_product(instance_type, filters.get("regionCode", region), f"{on_demand[instance_type]:.10f}")
        ]  # fmt: skip
        return json.dumps(get_products_answer(*products)).encode()

    return Rule("GetProducts", times=-1, answer=answer)


def typical_spot_history(region: str) -> Rule:
    """moto answers every DescribeSpotPriceHistory with $0.00001 (2006), so the story's cost read $0.00/h. This
    answers in EC2's shape (price_answers.spot_history_xml) with the story's typical spot price of the type asked
    for, in effect from five minutes before the window's start."""
    typical = story_prices(region)["spot_typical_usd_per_hour"]

    def answer(body: str) -> bytes:
        query = {key: values[0] for key, values in parse_qs(body).items()}
        instance_type, zone = query.get("InstanceType.1", ""), query.get("AvailabilityZone", "")
        # The price in effect at the window's start (botocore sends StartTime as ISO 8601, UTC).
        start = datetime.fromisoformat(query["StartTime"].replace("Z", "+00:00")).astimezone(UTC)
        records = [] if instance_type not in typical else [
            (zone, f"{typical[instance_type]:.6f}", start - timedelta(minutes=5))
        ]  # fmt: skip
        return spot_history_xml(records, instance_type)

    return Rule("DescribeSpotPriceHistory", times=-1, answer=answer)


@dataclass
class Scenario:
    number: int
    name: str
    expect: str  # the designed outcome, printed in the table
    gpu_runner: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=lambda: FAST_TRAIN)
    rules: list[Rule] = field(default_factory=list)
    github_faults: list[tuple[str, str, int, int]] = field(
        default_factory=list
    )  # method, path, status, times
    runner_mode: str = "normal"
    shutdown_broken: bool = False
    idle_seconds: int = 60
    map_label: bool = True
    # Called for every act record of the train.yml run; fires mid-run faults.
    trigger: Callable[[Story, dict[str, Any], subprocess.Popen], None] | None = None
    reaper: bool = False
    teardown_again: bool = False
    # Run train.yml again for each dispatch the stop job made (the next attempt after a spot interruption).
    follow_dispatch: bool = False
    branch: str = BRANCH
    aws_credentials: tuple[str, str] = AWS_TEST_CREDENTIALS
    # GITHUB_TOKEN, and the runner credential unless runner_credential is set; the double accepts it for writes.
    github_token: str = DEFAULT_TOKEN
    # The GitHub credential bootstrap stores in SSM, when it is not github_token (Administration: write only).
    runner_credential: str = ""
    # The launch role's credentials (start and stop jobs), when they are not aws_credentials (the instance's).
    launch_credentials: tuple[str, str] | None = None
    secrets: dict[str, str] = field(default_factory=dict)  # repository secrets besides the GitHub tokens
    variables: dict[str, str] = field(default_factory=dict)  # repository variables besides the harness's
    job_env: dict[str, str] = field(default_factory=dict)  # every job's environment (doubles' settings)
    # The simulated instance has no GPU: the story passes the CPU flag (training.allow_cpu) so the GPU preflight
    # lets it train; scenario 14 does not, and the preflight stops the job.
    allow_cpu: bool = True
    # Rewrites the story's copy of train.yml (host mode) before act runs it: what code in a job may do.
    workflow_edit: Callable[[str], str] | None = None
    # Another workflow's job that takes the runner while the instance boots (Simulator.hijack_job).
    hijack_job: tuple[dict[str, str], str] | None = None
    # An open pull request of the branch before the push: train.yml's comment job comments on it.
    pull_request: bool = False
    # Then the comment job's command once more (a re-run of that job, attempt 2): it must edit the same comment.
    comment_again: bool = False


@dataclass
class Story:
    scenario: Scenario
    stack: Stack
    scratch: Path
    run_id: str
    head_sha: str = ""
    github: GitHubDouble | None = None
    proxy: AwsFaultProxy | None = None
    simulator: Simulator | None = None
    run: WorkflowRun | None = None
    imds: ImdsDouble | None = None
    resumed_run: WorkflowRun | None = None
    resumed_simulator: Simulator | None = None
    lost_before_resume: int | None = None
    reap_run: WorkflowRun | None = None
    second_teardown: subprocess.CompletedProcess | None = None
    pull_number: int | None = None
    pr_comments: list[dict[str, Any]] = field(default_factory=list)  # after the workflow run
    comment_rerun: subprocess.CompletedProcess | None = None
    pr_comments_after_rerun: list[dict[str, Any]] = field(default_factory=list)
    fired: list[str] = field(default_factory=list)
    epochs_started: int = 0
    github_calls: list[tuple[str, str, int]] = field(default_factory=list)
    instances_left: int = -1
    runners_left: int = -1
    params_left: int = -1

    # ------------------------------------------------------------------ what the story left behind
    @property
    def run_ids(self) -> list[str]:
        return [self.run_id, f"{self.run_id}2"] if self.scenario.follow_dispatch else [self.run_id]

    def count_leftovers(self) -> None:
        ec2, ssm = self.stack.client("ec2"), self.stack.client("ssm")
        ours = [{"Name": "tag:gpu-runner:run-id", "Values": self.run_ids}]
        reservations = ec2.describe_instances(Filters=ours)["Reservations"]
        self.instances_left = sum(i["State"]["Name"] in LIVE for r in reservations for i in r["Instances"])
        assert self.github is not None
        self.runners_left = len(self.github.runners)
        prefix = self.stack.settings["ssm_prefix"]
        names = [p["Name"] for p in ssm.describe_parameters()["Parameters"]]
        self.params_left = sum(n.startswith(tuple(f"{prefix}/{r}-" for r in self.run_ids)) for n in names)

    def checkpoint_state(self) -> dict[str, Any]:
        """The newest state.json of this story's commit in the checkpoint bucket ({} when none), whichever session
        wrote it: <base>/<aws:userid>/<branch>/<commit>-<config hash>/state.json (checkpoints.session_prefix)."""
        bucket, _, base = self.stack.checkpoint_uri[5:].partition("/")
        s3 = boto3.client("s3", region_name="us-east-1", endpoint_url=self.stack.moto_endpoint)
        branch = re.sub(r"[^A-Za-z0-9._-]+", "-", self.scenario.branch).strip("-")
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{base}/")
        ours = re.compile(
            rf"{re.escape(base)}/[^/]+/{re.escape(branch)}/{self.head_sha[:12]}-[^/]+/state\.json"
        )
        states = [o for page in pages for o in page.get("Contents", []) if ours.fullmatch(o["Key"])]
        if not states:
            return {}
        newest = max(states, key=lambda o: o["LastModified"])
        return json.loads(s3.get_object(Bucket=bucket, Key=newest["Key"])["Body"].read())

    def epochs_lost(self) -> str:
        """Epochs begun in this story but not in its S3 checkpoint (the epoch in flight when it died)."""
        if self.lost_before_resume is not None:
            return str(self.lost_before_resume)
        if not self.epochs_started:
            return "-"
        state = self.checkpoint_state()
        if state.get("complete"):
            return "0"
        return str(self.epochs_started - int(state.get("epochs_done", 0)))

    def outcome(self) -> str:
        results = self.run.results if self.run else {}
        jobs = " ".join(f"{job}={results.get(job, 'skipped')}" for job in ("start", "train", "stop"))
        if self.resumed_run:
            jobs += " | attempt 2: " + " ".join(
                f"{job}={self.resumed_run.results.get(job, 'skipped')}" for job in ("start", "train", "stop")
            )
        if self.reap_run:
            jobs += f" reap={self.reap_run.results.get('reap', 'skipped')}"
        if self.second_teardown:
            jobs += f" teardown-again=exit {self.second_teardown.returncode}"
        return jobs

    def row(self) -> dict[str, Any]:
        s = self.scenario
        return {
            "scenario": f"{s.number:>2} {s.name}",
            "outcome": self.outcome(),
            "instances left": self.instances_left,
            "runners left": self.runners_left,
            "params left": self.params_left,
            "epochs lost": self.epochs_lost(),
        }


# ---------------------------------------------------------------------------------------------- running one
def workflow_run_ids(client: Any, run_id: str, attempt: int = 1) -> list[str]:
    """The MLflow runs a workflow run's attempt logged (its github.run_url tag), over every experiment."""
    suffix = f"/actions/runs/{run_id}/attempts/{attempt}"
    return [
        r.info.run_id
        for e in client.search_experiments()
        for r in client.search_runs([e.experiment_id])
        if r.data.tags.get("github.run_url", "").endswith(suffix)
    ]


def _wait_until(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.5)
    return predicate()


def _track_epochs(story: Story, rec: dict[str, Any]) -> None:
    if rec.get("jobID") == "train" and rec.get("raw_output"):
        for match in EPOCH.finditer(rec.get("msg", "")):
            story.epochs_started = max(story.epochs_started, int(match.group(1)))


def run_story(stack: Stack, scenario: Scenario, scratch: Path, run_id: str) -> Story:
    story = Story(scenario, stack, scratch, run_id)
    # Fault stories skip the install-time bytecode compilation (~15 s of each train job here): they are about
    # the machinery around training. The happy story keeps it, so its timeline is the real one.
    train = scenario.train
    if scenario.allow_cpu:
        train = {**train, "training": {**train.get("training", {}), "allow_cpu": True}}
    # Scenario 14 keeps it too: it measures the GPU preflight (the import of TensorFlow) as a real runner runs it.
    gpu_runner = {"security_group_ids": [stack.security_group], **(scenario.gpu_runner or {})}
    repo, workflow, story.head_sha = prepare_repository(
        scratch, gpu_runner, train, compile_bytecode=scenario.number in (0, 14),
        branch=scenario.branch,
    )  # fmt: skip
    if scenario.workflow_edit:
        workflow.write_text(scenario.workflow_edit(workflow.read_text()))

    def on_record(rec: dict[str, Any], process: subprocess.Popen) -> None:
        _track_epochs(story, rec)
        if scenario.trigger:
            scenario.trigger(story, rec, process)

    with (
        GitHubDouble(repositories=(stack.repository,)) as github,
        AwsFaultProxy(
            stack.moto_endpoint,
            rules=[*scenario.rules, on_demand_price_list(stack.region), typical_spot_history(stack.region)],
            under=scratch,
        ) as proxy,
        ImdsDouble() as imds,
    ):
        story.github, story.proxy, story.imds = github, proxy, imds
        github.tokens.setdefault(scenario.github_token, "write")
        if scenario.runner_credential:
            runner_permissions = {"administration": "write", "metadata": "read"}
            github.tokens.setdefault(scenario.runner_credential, runner_permissions)
        # The history GitHub holds: act runs the branch's one commit (GITHUB_SHA); a resumed attempt's launch
        # asks compare whether its dispatch input `commit` is on the branch.
        github.commit(scenario.branch, sha=story.head_sha, repository=stack.repository)
        # The token stands for the run's GITHUB_TOKEN (act hands it over as secrets.GITHUB_TOKEN): GitHub writes
        # what that token writes as github-actions[bot].
        github.token_authors[scenario.github_token] = ACTIONS_BOT
        if scenario.pull_request:
            story.pull_number = github.open_pull(
                scenario.branch, base=default_branch(), repository=stack.repository
            )
        for method, path, status, times in scenario.github_faults:
            github.fail(method, path, status, times=times)
        simulator = Simulator(
            stack.moto_endpoint, stack.region, github, scratch / "instances", run_id=run_id,
            runner_mode=scenario.runner_mode, shutdown_broken=scenario.shutdown_broken,
            idle_seconds=scenario.idle_seconds, aws_credentials=scenario.aws_credentials,
            hijack_job=scenario.hijack_job,
        )  # fmt: skip
        story.simulator = simulator
        simulator.start()
        common = {
            "moto_endpoint": stack.moto_endpoint, "mlflow_uri": stack.mlflow_uri, "github": github,
            "repo": repo, "head_sha": story.head_sha, "repository": stack.repository,
            "image_bin": stack.image_bin, "imds_url": imds.url, "branch": scenario.branch,
            "aws_credentials": scenario.aws_credentials, "github_token": scenario.github_token,
            "secrets": scenario.secrets, "launch_credentials": scenario.launch_credentials,
            "runner_credential": scenario.runner_credential, "variables": scenario.variables,
            "job_env": scenario.job_env,
        }  # fmt: skip
        try:
            story.run = run_workflow(
                scratch=scratch, simulator=simulator, workflow=workflow, aws_endpoint=proxy.url,
                map_label=scenario.map_label, on_record=on_record,
                run_id=run_id, **common,
            )  # fmt: skip
            if scenario.follow_dispatch:
                next_attempt(story, workflow, common)
            if story.pull_number is not None:
                story.pr_comments = github.comments(story.pull_number, repository=stack.repository)
                if scenario.comment_again:
                    story.comment_rerun = comment_again(story, repo)
                    story.pr_comments_after_rerun = github.comments(
                        story.pull_number, repository=stack.repository
                    )
            if scenario.teardown_again:
                story.second_teardown = teardown_again(story, repo)
            if scenario.reaper:
                story.reap_run = reap_after_grace(story, repo, common)
            else:
                # The instance's own ways out (runner exit, idle watchdog, failed boot) take a few seconds.
                _wait_until(lambda: _live_instances(story) == 0, timeout=60)
            simulator.wait_for_boots(timeout=10)
        finally:
            simulator.stop()
            if story.resumed_simulator:
                story.resumed_simulator.stop()
            story.github_calls = [(c.method, c.path, c.status) for c in github.calls]
            story.count_leftovers()
    return story


START_OWN_TEARDOWN = "Success - Main Tear down what start created (start failed)"


def assert_start_tore_down(story: Story) -> None:
    """A failed start job ended what it created itself (gpu-runner-start.yml's last step). act 0.2.89 ends the
    whole run when a called workflow's job fails, so train.yml's stop job does not run under act; on GitHub it
    runs as well and finds everything gone (teardown is idempotent: scenario 11)."""
    assert story.run is not None
    assert story.run.results.get("start") == "failure", story.run.results
    assert START_OWN_TEARDOWN in story.run.log.read_text(), story.run.log
    assert story.run.results.get("stop") in (None, "success"), story.run.results


def _live_instances(story: Story) -> int:
    ours = [{"Name": "tag:gpu-runner:run-id", "Values": story.run_ids}]
    reservations = story.stack.client("ec2").describe_instances(Filters=ours)["Reservations"]
    return sum(i["State"]["Name"] in LIVE for r in reservations for i in r["Instances"])


def next_attempt(story: Story, workflow: Path, common: dict[str, Any]) -> None:
    """What GitHub does with the stop job's dispatch: a new run of train.yml with the dispatch's inputs, on a
    new machine (a fresh simulated instance), with no notice pending."""
    assert story.github and story.imds
    dispatches = [d for d in story.github.dispatches if d["workflow"] == "train.yml"]
    if not dispatches:
        return
    story.lost_before_resume = story.epochs_started - int(story.checkpoint_state().get("epochs_done", 0))
    story.imds.documents.clear()
    second = f"{story.run_id}2"
    story.resumed_simulator = Simulator(
        story.stack.moto_endpoint,
        story.stack.region,
        story.github,
        story.scratch / "instances-2",
        run_id=second,
        aws_credentials=story.scenario.aws_credentials,
    )
    story.resumed_simulator.start()
    story.resumed_run = run_workflow(
        scratch=story.scratch, simulator=story.resumed_simulator, workflow=workflow,
        event_name="workflow_dispatch", inputs=dispatches[0]["inputs"], run_id=second,
        **common,
    )  # fmt: skip


def teardown_again(story: Story, repo: Path) -> subprocess.CompletedProcess:
    """The stop job's teardown command once more, with the same ids, as a re-run of the stop job runs it: attempt 2
    of the same workflow run, handed the start job's outputs of attempt 1 (GitHub keeps the outputs of the jobs a
    re-run leaves out: "Re-running workflows and jobs")."""
    assert story.run and story.github
    out = story.run.outputs.get("start", {})
    args = ["uv", "run", "--no-sync", "gpu-runner", "--settings", "configs/gpu-runner.yaml", "teardown"]
    for key in (
        LaunchOutput.REGION,
        LaunchOutput.INSTANCE_ID,
        LaunchOutput.RUNNER_ID,
        LaunchOutput.PARAMETER,
    ):
        if out.get(key):
            args += [f"--{key}", out[key]]  # the flag is named as the output
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GITHUB_", "VIRTUAL_ENV"))}
    env.update(
        AWS_ENDPOINT_URL=story.stack.moto_endpoint, AWS_ACCESS_KEY_ID=story.scenario.aws_credentials[0],
        AWS_SECRET_ACCESS_KEY=story.scenario.aws_credentials[1],
        AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull, GITHUB_API_URL=story.github.url,
        GITHUB_REPOSITORY=story.stack.repository, GPU_RUNNER_TOKEN=story.scenario.github_token,
        GITHUB_RUN_ID=story.run_id, GITHUB_RUN_ATTEMPT="2",
        UV_PROJECT_ENVIRONMENT=str(PROJECT / ".venv"), UV_OFFLINE="1",
    )  # fmt: skip
    return subprocess.run(args, cwd=repo, env=env, capture_output=True, text=True, timeout=120, check=False)


def comment_again(story: Story, repo: Path) -> subprocess.CompletedProcess:
    """The comment job's command once more, as a re-run of that job (attempt 2 of the same workflow run) runs
    it: same MLflow run, same branch and commit, the default branch's gpu-runner (the story's repository)."""
    assert story.run and story.github
    run_id = story.run.outputs.get("train", {}).get("mlflow-run-id", "")
    args = ["uv", "run", "--no-sync", "gpu-runner", "--settings", "configs/gpu-runner.yaml", "pr-comment"]
    args += ["--kind=train", f"--mlflow-run-id={run_id}", f"--branch={story.scenario.branch}"]
    args += [f"--commit={story.head_sha}", "--config=configs/train.yaml"]
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GITHUB_", "MLFLOW_", "VIRTUAL_ENV"))
    }
    env.update(
        GITHUB_API_URL=story.github.url, GITHUB_REPOSITORY=story.stack.repository,
        GITHUB_TOKEN=story.scenario.github_token, GITHUB_SERVER_URL="https://github.com",
        GITHUB_RUN_ID=story.run_id, GITHUB_RUN_ATTEMPT="2", MLFLOW_TRACKING_URI=story.stack.mlflow_uri,
        UV_PROJECT_ENVIRONMENT=str(PROJECT / ".venv"), UV_OFFLINE="1",
    )  # fmt: skip
    return subprocess.run(args, cwd=repo, env=env, capture_output=True, text=True, timeout=120, check=False)


def reap_after_grace(story: Story, repo: Path, common: dict[str, Any]) -> WorkflowRun:
    """Wait out the reaper's grace period for this story's instances, then run the real reap.yml once."""
    grace = 60 * int(yaml.safe_load((repo / "configs" / "gpu-runner.yaml").read_text())["reap_grace_minutes"])
    ours = [{"Name": "tag:gpu-runner:run-id", "Values": [story.run_id]}]
    reservations = story.stack.client("ec2").describe_instances(Filters=ours)["Reservations"]
    launched = [i["LaunchTime"].timestamp() for r in reservations for i in r["Instances"]]
    if launched:
        time.sleep(max(0.0, max(launched) + grace + 2 - time.time()))
    return run_workflow(
        scratch=story.scratch, simulator=None, workflow=repo / ".github" / "workflows" / "reap.yml",
        event_name="schedule", **common,
    )  # fmt: skip


# ------------------------------------------------------------------------------------------- the scenarios
def _once(story: Story, what: str) -> bool:
    if what in story.fired:
        return False
    story.fired.append(what)
    return True


def _in_third_epoch(story: Story, rec: dict[str, Any]) -> bool:
    # "Epoch 3/5" is printed after epoch 2's checkpoint reached S3 (callbacks run before the next epoch).
    return rec.get("jobID") == "train" and story.epochs_started >= 3


def cancel_workflow(process: subprocess.Popen) -> None:
    """What "Cancel workflow" does to a running job: SIGINT, sent to act itself. `timeout` (act's parent, the
    process run_workflow started) would forward it, but also SIGKILL act 15 s later (--kill-after), before the
    jobs that clean up are done."""
    for pid in Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split():
        os.kill(int(pid), signal.SIGINT)


def cancel_during_training(story: Story, rec: dict[str, Any], process: subprocess.Popen) -> None:
    if _in_third_epoch(story, rec) and _once(story, "cancel"):
        cancel_workflow(process)


def instance_dies_mid_job(story: Story, rec: dict[str, Any], process: subprocess.Popen) -> None:
    if _in_third_epoch(story, rec) and _once(story, "instance dies"):
        simulator = story.simulator
        assert simulator is not None and simulator.instances
        # The machine is gone (hardware failure, spot reclaim): EC2 says terminated, and the job's processes,
        # which ran on it, die with it.
        story.stack.client("ec2").terminate_instances(InstanceIds=[simulator.instances[0].instance_id])
        kill_matching("-m", PACKAGE, "train", under=story.scratch)


def spot_notice_mid_training(story: Story, rec: dict[str, Any], process: subprocess.Popen) -> None:
    if _in_third_epoch(story, rec) and _once(story, "spot notice"):
        assert story.imds is not None
        story.imds.interrupt()  # EC2's two-minute warning, at the instance metadata service


HOSTILE_RUN_ID = "--x"


def hostile_mlflow_run_id(workflow: str) -> str:
    """Code in the train job (a bad dependency) writes the step's output file: `mlflow-run-id=--x`, the last
    value GitHub reads for it, after the training CLI wrote the real id."""
    written = '            echo "interrupted=true" >> "${GITHUB_OUTPUT}"\n          fi\n'
    assert workflow.count(written) == 1, "the train step's output lines moved: update this scenario"
    return workflow.replace(
        written, f'{written}          echo "mlflow-run-id={HOSTILE_RUN_ID}" >> "${{GITHUB_OUTPUT}}"\n'
    )


def _spot_request(body: str) -> bool:
    return "InstanceMarketOptions.MarketType=spot" in body


SCENARIOS = [
    Scenario(1, "launch crashes right after RunInstances", "start tears down all, the instance found by its tags",
             rules=[Rule("RunInstances", kill=("gpu-runner", "launch"))], idle_seconds=10),
    Scenario(2, "runner never registers (wait times out)", "wait fails with the console; start tears down all",
             gpu_runner={"wait_timeout_seconds": 8}, runner_mode="silent"),
    Scenario(3, "training fails", "train fails; instance ends itself; stop confirms",
             train={**FAST_TRAIN, "data": {"source": "data/no-such-folder"}}),
    Scenario(4, "workflow cancelled during training", "train cancelled; stop still tears down",
             trigger=cancel_during_training),
    Scenario(5, "stop job crashes (and the instance cannot shut down)", "the reaper terminates the instance",
             rules=[Rule("TerminateInstances", kill=("gpu-runner", "teardown"), forward=False)],
             shutdown_broken=True, gpu_runner={"reap_grace_minutes": 1}, reaper=True),
    # The train job's runner is gone by then (GitHub removes a just-in-time runner after its job): teardown's
    # GitHub calls are the list of the repository's runners and the claimed id's GET (a DELETE only while a
    # runner of this run is still registered: platform/tests/runner/test_lifecycle.py retries those).
    Scenario(6, "GitHub API 5xx during teardown (retried)", "teardown retries and succeeds",
             github_faults=[("GET", r"/actions/runners$", 502, 2)]),
    Scenario(7, "AWS throttling during launch and teardown", "botocore retries; all succeed",
             rules=[Rule("RunInstances", times=2, error="RequestLimitExceeded"),
                    Rule("PutParameter", times=1, error="ThrottlingException"),
                    Rule("TerminateInstances", times=2, error="RequestLimitExceeded")],
             # The runner exits after its job and the instance halts itself; when that wins the race, teardown
             # finds it terminated and never calls TerminateInstances (measured: the 2-core CI run). A halt
             # that fails keeps the instance running until teardown, so its throttled terminate always runs.
             shutdown_broken=True),
    Scenario(8, "instance dies mid-job", "train fails; checkpoint in S3; stop cleans up",
             trigger=instance_dies_mid_job),
    Scenario(9, "every spot pool out of capacity -> on-demand", "launch falls back to on-demand",
             gpu_runner={"use_spot": True},
             rules=[Rule("RunInstances", times=-1, error="InsufficientInstanceCapacity", when=_spot_request)]),
    Scenario(10, "vCPU quota exceeded -> fails fast", "one RunInstances; start fails naming the quota",
             rules=[Rule("RunInstances", times=-1, error="VcpuLimitExceeded")]),
    Scenario(11, "teardown runs twice", "second teardown: everything already gone, exit 0",
             train={**FAST_TRAIN, "data": {"source": "data/no-such-folder"}}, teardown_again=True),
    Scenario(12, "runner online, no job ever starts (idle watchdog)", "the instance halts itself",
             map_label=False, idle_seconds=2),
    Scenario(13, "spot interruption mid-training", "checkpoint, exit 75; stop dispatches attempt 2, which resumes",
             trigger=spot_notice_mid_training, follow_dispatch=True),
    Scenario(14, "no GPU visible, no CPU flag (GPU preflight)", "train fails in seconds (exit 78); stop: no GPU visible",
             allow_cpu=False),
    Scenario(15, "train job writes a hostile mlflow-run-id output (--x)", "teardown completes; only the MLflow cost is skipped",
             workflow_edit=hostile_mlflow_run_id),
]  # fmt: skip
