"""The team MLflow server's first boot (the user-data CloudFormation rendered into the instance, read back from the
moto server) run by bash in the same kind of sandbox as the runner's boot script (boot_sandbox.py).

What would touch this machine is a recording stub: dnf, useradd, chown, chgrp, mkfs.xfs, mount, blkid (a volume
without a file system until mkfs ran). `python3.11 -m venv` makes a venv whose python and mlflow are this test
environment's (the locked MLflow; pip install is recorded, not run: no download). `systemctl enable --now` starts
a unit's ExecStart lines from the unit file the script wrote, with its Environment and EnvironmentFile, so the real
`mlflow server` runs, on the port the test-only knob gives it and the address `hostname -I` answers (the stub:
127.0.0.1, where the instance has its private address). `aws` is the real AWS CLI against moto.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from gpu_runner_testing import boot_sandbox

VENV_STUB = """record python3.11 "$@"
if [[ $1 == -m && $2 == venv ]]; then
  mkdir -p "$3/bin"
  printf '#!/bin/bash\\nexec %s "$@"\\n' "$STUB_PYTHON" >"$3/bin/python"
  printf '#!/bin/bash\\nexec %s "$@"\\n' "$STUB_MLFLOW" >"$3/bin/mlflow"
  printf '#!/bin/bash\\nprintf "%%s pip %%s\\\\n" "$(date +%%s.%%N)" "$*" >>"$STUB_CALL_LOG"\\n' >"$3/bin/pip"
  chmod 755 "$3/bin/python" "$3/bin/mlflow" "$3/bin/pip"
fi
"""

# systemctl in Python: it reads the unit file as systemd would for the few keys the script writes.
SYSTEMCTL = r"""#!@@PYTHON@@
import os, shlex, subprocess, sys, time

with open(os.environ["STUB_CALL_LOG"], "a") as log:
    log.write(f"{time.time()} systemctl {' '.join(sys.argv[1:])}\n")
if sys.argv[1:3] != ["enable", "--now"]:
    sys.exit(0)
unit = os.path.join(os.environ.get("MLFLOW_SERVER_TEST_ROOT", ""), "etc/systemd/system", sys.argv[3])
env, starts, oneshot = dict(os.environ), [], False
for line in open(unit):
    key, _, value = line.strip().partition("=")
    if key == "Environment":
        name, _, val = value.partition("=")
        env[name] = val
    elif key == "EnvironmentFile":
        for entry in open(value):
            name, _, val = entry.strip().partition("=")
            env[name] = val
    elif key == "ExecStart":
        starts.append(shlex.split(value))
    elif key == "Type" and value == "oneshot":
        oneshot = True
stub_dir = os.environ["STUB_DIR"]
name = sys.argv[3].removesuffix(".service")
with open(os.path.join(stub_dir, name + ".log"), "ab") as out:
    for command in starts:
        if oneshot:
            code = subprocess.run(command, env=env, stdout=out, stderr=out).returncode
            if code:
                sys.exit(f"systemctl: {sys.argv[3]}: {command[0]} exited {code}")
        else:
            process = subprocess.Popen(command, env=env, stdout=out, stderr=out, start_new_session=True)
            with open(os.path.join(stub_dir, name + ".pid"), "w") as pid:
                pid.write(str(process.pid))
"""

STUBS: dict[str, str] = {
    **boot_sandbox.MACHINE_STUBS,
    "shutdown": 'record shutdown "$@"\n',
    "dnf": 'record dnf "$@"\n',
    "python3.11": VENV_STUB,
    "chgrp": 'record chgrp "$@"\n',
    "mkfs.xfs": 'record mkfs.xfs "$@"\ntouch "$STUB_DIR/formatted"\n',
    "mount": 'record mount "$@"\n',
    "blkid": """record blkid "$@"
[[ -f $STUB_DIR/formatted ]] || exit 2
if [[ $1 == -s ]]; then echo 0b7c3a52-5f0e-4f43-9d1e-2f2f6b2c1a10; fi
""",
    # hostname -I: the instance's private address; here the one address the test server listens on.
    "hostname": 'record hostname "$@"\necho "127.0.0.1 "\n',
}


@dataclass(frozen=True)
class Boot:
    root: Path
    stub_dir: Path
    calls_log: Path
    result: subprocess.CompletedProcess[bytes]
    env: dict[str, str]  # the sandbox's environment, for what systemd runs on a later boot

    def calls(self) -> list[boot_sandbox.Call]:
        return boot_sandbox.read_calls(self.calls_log)

    def log(self, unit: str) -> str:
        path = self.stub_dir / f"{unit}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def server_pid(self) -> int | None:
        path = self.stub_dir / "mlflow.pid"
        return int(path.read_text()) if path.exists() else None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def stop_server(boot: Boot) -> None:
    pid = boot.server_pid()
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, 9)


# What a tracking client reads from the environment. A server the tests start inherits none of it (a server on an
# instance has none), or it resolves `models:/<id>` sources against another test's server.
MLFLOW_CLIENT_VARIABLES = ("MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")


def inherited_environment(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment without MLflow's client variables, then `extra`: what a server starts with."""
    return {**{k: v for k, v in os.environ.items() if k not in MLFLOW_CLIENT_VARIABLES}, **extra}


def run_boot(
    script_text: str, work: Path, *, port: int, extra_env: dict[str, str], timeout: float = 240
) -> Boot:
    """Run the user-data once, as cloud-init would on the first boot; the server it started keeps running."""
    root, stub_dir, bin_dir = work / "root", work / "stub", work / "bin"
    for path in (root / "etc", stub_dir):
        path.mkdir(parents=True, exist_ok=True)
    device = work / "dev-sdf"
    device.write_bytes(b"")  # the attached volume's device node exists
    script = work / "user-data.sh"
    script.write_text(script_text, encoding="utf-8")
    venv_bin = Path(sys.executable).parent
    boot_sandbox.write_stubs(bin_dir, STUBS)
    systemctl = bin_dir / "systemctl"
    systemctl.write_text(SYSTEMCTL.replace("@@PYTHON@@", sys.executable), encoding="utf-8")
    systemctl.chmod(0o755)
    calls_log = stub_dir / "calls.log"
    env = inherited_environment(
        {
            **extra_env,
            # Stubs first, then this environment's tools (the real aws CLI), then the system's coreutils.
            "PATH": f"{bin_dir}:{venv_bin}:/usr/bin:/bin",
            "STUB_CALL_LOG": str(calls_log),
            "STUB_DIR": str(stub_dir),
            "STUB_PYTHON": sys.executable,
            "STUB_MLFLOW": str(venv_bin / "mlflow"),
            "MLFLOW_SERVER_TEST_ROOT": str(root),
            # The mlflow user's home on the instance (useradd --home-dir /var/lib/mlflow): what MLflow writes under
            # ~ (its assistant's configuration, telemetry) stays in the sandbox.
            "HOME": str(root / "var" / "lib" / "mlflow"),
            "MLFLOW_SERVER_TEST_PORT": str(port),
            "MLFLOW_SERVER_TEST_DEVICE": str(device),
            "MLFLOW_SERVER_TEST_DEVICE_WAIT": "4",
            "MLFLOW_SERVER_TEST_HEALTH_WAIT": "90",
        }
    )
    for name in [*STUBS, "systemctl"]:
        assert shutil.which(name, path=env["PATH"]) == str(bin_dir / name), f"{name} is not stubbed"
    result = subprocess.run(
        ["bash", str(script)],
        env=env,
        cwd=work,
        capture_output=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    return Boot(root, stub_dir, calls_log, result, env)


def later_boot(boot: Boot) -> subprocess.CompletedProcess[bytes]:
    """What systemd runs when the stopped instance starts again (user-data runs on the first boot only): the
    enabled units. mlflow.service kept running here (this machine never stopped), so only the ready unit."""
    return subprocess.run(
        ["systemctl", "enable", "--now", "mlflow-ready.service"],
        env=boot.env,
        capture_output=True,
        timeout=120,
    )
