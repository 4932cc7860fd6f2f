"""The GPU instance of the e2e story: when `gpu-runner launch` creates one in moto, its REAL rendered user-data
(read back through DescribeInstanceAttribute) runs in the boot-script sandbox (boot_sandbox.py), the one the boot
script's unit tests use. Only what cannot run here is stubbed: the runner download (curl -> a fake runner tarball
whose run.sh "registers" through the harness), `docker pull` (no-op), user management (no-op) and `shutdown`
(`-h now` -> TerminateInstances in moto, `-h +N` recorded only). The one edit to the script is its ROOT
(/opt/gpu-runner -> a scratch directory). Moved from tests/e2e/harness.py.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import boto3

from gpu_runner.core.naming import TAG_SLOT
from gpu_runner_testing import boot_sandbox
from gpu_runner_testing.github_double import GitHubDouble, decode_jit_config

RUN_ID = "777"
LIVE = ("pending", "running", "stopping", "stopped")
POWER_OFF_SECONDS = 2.0
SHUTDOWN_CALL_SECONDS = 30.0
# moto accepts any credentials; a story that scans for leaked ones passes distinctive values instead.
AWS_TEST_CREDENTIALS = ("testing", "testing")
RUNNER_VERSION = "2.331.0"


# The machine stubs both sandboxes share, and this instance's own `shutdown`; `aws` is the real CLI (against moto).
STUBS = {
    **boot_sandbox.MACHINE_STUBS,
    # InstanceInitiatedShutdownBehavior=terminate: halting the instance terminates it.
    "shutdown": """record shutdown "$@"
if [[ " $* " == *" now "* ]]; then
  # A broken halt (scenario: the instance cannot end itself); scheduling the lifetime limit still "works".
  if [[ ${SIM_SHUTDOWN_BROKEN:-} == 1 ]]; then echo "shutdown: failed to talk to init" >&2; exit 1; fi
  aws ec2 terminate-instances --region "$SIM_REGION" --instance-ids "$SIM_INSTANCE_ID" >/dev/null
  record terminated "$SIM_INSTANCE_ID"
fi
""",
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
    # A sweep trial's slot (the gpu-runner:slot tag launch sets): which leg's job of the run is this one's.
    slot: str = ""


def _grace(instance: Instance) -> float:
    """Seconds between power-off and killing what still runs: longer while the instance's own `shutdown -h
    now` is between its terminate call and the record of its return."""
    log = (instance.sim_dir / "calls.log").read_text()
    halting = any(
        line.split(" ", 1)[-1].startswith("shutdown") and " now" in line for line in log.splitlines()
    )
    return SHUTDOWN_CALL_SECONDS if halting and "terminated " not in log else POWER_OFF_SECONDS


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
        boot_sandbox.write_stubs(self.bin, STUBS)
        (self.bin / "aws").symlink_to(_real_aws_cli())
        self.tarball = boot_sandbox.runner_tarball(RUN_SH)
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
                            tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
                            booted = self._boot(inst["InstanceId"])
                            booted.slot = tags.get(TAG_SLOT, "")
                            self.instances.append(booted)
                for instance in self.instances:
                    self._registration(instance)
                    if instance.powered_off_at is None and states.get(instance.instance_id) not in LIVE:
                        self._power_off(instance)
                    # An OS takes a moment to go down: what was running (the shutdown call) may finish. The
                    # instance's own terminate call is given up to SHUTDOWN_CALL_SECONDS to record its return: on
                    # a loaded 2-core machine the aws CLI took longer than POWER_OFF_SECONDS to exit.
                    if instance.powered_off_at and time.time() - instance.powered_off_at > _grace(instance):
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
        (sim_dir / "github").mkdir()
        (sim_dir / "github" / tar_name).write_bytes(self.tarball)
        digest = hashlib.sha256(self.tarball).hexdigest()
        release = {"tag_name": f"v{RUNNER_VERSION}", "body": "", "assets": [{"name": tar_name, "digest": f"sha256:{digest}"}]}  # fmt: skip
        (sim_dir / "release.json").write_text(json.dumps(release))
        (sim_dir / "calls.log").touch()
        env = {
            "PATH": f"{self.bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(sim_dir),
            "LC_ALL": "C.UTF-8",
            "SIM_DIR": str(sim_dir),
            # The shared sandbox's stubs: their call log, their downloads, no waits (boot_sandbox.py).
            "STUB_CALL_LOG": str(sim_dir / "calls.log"),
            "STUB_DIR": str(sim_dir),
            "STUB_DOCKER_PULL_SECONDS": "0",
            "STUB_DOWNLOAD_SECONDS": "0",
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
            process = boot_sandbox.start(
                sim_dir / "user-data.sh", env, STUBS, self.bin, stdout=console, stderr=subprocess.STDOUT
            )
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

    def _serving(self, slot: str | None) -> list[Instance]:
        """The instances of one sweep leg's runner (its slot), or every one (None: train.yml's single runner)."""
        return [i for i in self.instances if slot is None or i.slot == slot]

    def job_started(self, slot: str | None = None) -> None:
        for instance in self._serving(slot):
            if instance.runner_id is not None and instance.runner_id in self.github.runners:
                self.github.set_status(instance.runner_id, "online", busy=True)
            _write_job(instance.sim_dir, self.train_job_env)
            (instance.sim_dir / "job-started").touch()

    def job_finished(self, result: str, slot: str | None = None) -> None:
        for instance in self._serving(slot):
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
            boot_sandbox.stop(instance.process)

    @staticmethod
    def calls(instance: Instance) -> list[tuple[float, str]]:
        out = []
        for line in (instance.sim_dir / "calls.log").read_text().splitlines():
            at, _, what = line.partition(" ")
            out.append((float(at), what))
        return out
