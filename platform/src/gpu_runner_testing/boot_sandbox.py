"""The instance's boot script (gpu_runner's rendered user_data.sh) run by bash in a sandbox: one for the boot
script's unit tests (platform/tests/runner/test_user_data.py) and the e2e story's simulated instance (simulated_instance.py).

Every command the script could use to touch the machine (`shutdown`, `docker`, `curl`, `aws`, `useradd`,
`runuser`, `sudo`, ...) is a small bash stub that appends `<epoch seconds> <name> <args>` to the call log
($STUB_CALL_LOG); `tar`, `sha256sum`, `python3` and the rest of coreutils are the real ones. Downloads come from
$STUB_DIR (release.json, github/<tarball>). The "actions runner" is a tarball built here around a run.sh: the
scripted one below (takes a job, hangs or fails, as GPU_RUNNER_STUB_MODE says) or the e2e harness's own.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

RECORD = """#!/bin/bash
set -euo pipefail
record() { printf '%s %s\\n' "$(date +%s.%N)" "$*" >>"$STUB_CALL_LOG"; }
"""
# Every command that could change the host the tests run on, as both suites stub it: each must resolve to a stub,
# or the sandbox refuses to start the script (a real `shutdown` on a developer's machine is not a test failure
# anyone wants). Each suite adds `shutdown` and `aws` (the unit tests record them; the e2e instance ends itself in
# moto and calls moto with the real aws CLI).
MACHINE_STUBS: dict[str, str] = {
    "docker": """record docker "$@"
if [[ $1 == pull ]]; then
  sleep "${STUB_DOCKER_PULL_SECONDS:-1.5}"
  record docker-done "$@"
fi
""",
    "curl": """record curl "$@"
out=/dev/stdout
url=""
while (($#)); do
  case $1 in
    -o | --output) out=$2; shift ;;
    http://* | https://*) url=$1 ;;
  esac
  shift
done
case $url in
  https://api.github.com/repos/actions/runner/releases/latest) src=$STUB_DIR/release.json ;;
  https://github.com/actions/runner/releases/download/v*/actions-runner-linux-x64-*.tar.gz)
    src=$STUB_DIR/github/${url##*/}
    sleep "${STUB_DOWNLOAD_SECONDS:-0.3}" ;;
  *) src=/nonexistent ;;
esac
if [[ ! -f $src ]]; then
  echo "curl: (22) The requested URL returned error: 404" >&2
  exit 22
fi
cp "$src" "$out"
record curl-done "$url"
""",
    "useradd": 'record useradd "$@"\n',
    "usermod": 'record usermod "$@"\n',
    "chown": 'record chown "$@"\n',
    # The runner user does not exist yet on a fresh instance.
    "id": 'record id "$@"\nexit 1\n',
    "getent": """record getent "$@"
if [[ $1 == group && $2 == docker ]]; then echo 'docker:x:999:'; else exit 2; fi
""",
    # Runs the command as the current user (the sandbox cannot switch users).
    "runuser": """record runuser "$@"
while (($#)) && [[ $1 != -- ]]; do shift; done
shift
exec "$@"
""",
    "sudo": 'record sudo "$@"\nexit 1\n',
    "ldconfig": """record ldconfig "$@"
echo '	libicuuc.so.70 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libicuuc.so.70'
""",
}
RECORDING_STUBS: dict[str, str] = {
    "shutdown": 'record shutdown "$@"\n',
    "aws": """record aws "$@"
service="$1 $2"
shift 2
positional=()
while (($#)); do
  case $1 in
    --region | --name | --query | --output) shift ;;
    --*) ;;
    *) positional+=("$1") ;;
  esac
  shift
done
case $service in
  "ssm get-parameter")
    if [[ -e $STUB_DIR/ssm-denied ]]; then
      echo "An error occurred (AccessDeniedException) when calling the GetParameter operation" >&2
      exit 254
    fi
    cat "$STUB_DIR/jit" ;;
  "ssm delete-parameter") ;;
  "s3 ls")
    for f in "$STUB_DIR"/s3/*; do
      printf '2024-05-01 12:00:00 %10d %s\\n' "$(stat -c %s "$f")" "${f##*/}"
    done ;;
  "s3 cp") cp "$STUB_DIR/s3/${positional[0]##*/}" "${positional[1]}" ;;
  *) exit 2 ;;
esac
""",
}

# The config as the real runner takes it (ACTIONS_RUNNER_INPUT_JITCONFIG): recorded under a name of its own so the
# tests can tell the hand-over from a leak into some command's argv.
SCRIPTED_RUN_SH = """record run.sh "$@"
record run.sh-input "${ACTIONS_RUNNER_INPUT_JITCONFIG:-}"
echo "Connected to GitHub"
case ${GPU_RUNNER_STUB_MODE:-job} in
  job)
    mkdir -p _diag
    : >_diag/Worker_20240501-120000-utc.log
    echo "Running job: train"
    sleep "${STUB_JOB_SECONDS:-2}"
    code=0 ;;
  hang) sleep 600 ;;
  fail) code=1 ;;
  read-proc)
    # As the real Listener does (actions/runner CommandSettings.cs: "Remove from the environment block"), drop the
    # config from this process's environment; then the job, a later process of the same user, reads this
    # process's /proc/<pid>/environ: the environment it was started with.
    unset ACTIONS_RUNNER_INPUT_JITCONFIG
    mkdir -p _diag
    : >_diag/Worker_20240501-120000-utc.log
    found=$(bash -c 'tr "\\0" "\\n" <"/proc/$PPID/environ"' | sed -n 's/^ACTIONS_RUNNER_INPUT_JITCONFIG=//p')
    record job-read-proc "$found"
    code=0 ;;
  hook)
    # As actions/runner does (JobExtension.cs, JobHookProvider.cs): the job-started hook, `bash -e <file>` with
    # the job's GITHUB_* variables, before any step; a non-zero exit fails the job and no step runs.
    if (set -a && . "$STUB_DIR/job.env" && exec bash -e "$ACTIONS_RUNNER_HOOK_JOB_STARTED"); then
      mkdir -p _diag
      : >_diag/Worker_20240501-120000-utc.log
      record job-step ran
      code=0
    else
      record job-refused
      sleep "${STUB_AFTER_REFUSAL_SECONDS:-0}"
      code=1
    fi ;;
esac
record run.sh-exit "$code"
exit "$code"
"""


@dataclass(frozen=True)
class Call:
    at: float
    name: str
    args: str

    def is_(self, name: str, args: str = "") -> bool:
        return self.name == name and self.args.startswith(args)


def read_calls(path: Path) -> list[Call]:
    calls = []
    for line in path.read_text(encoding="utf-8").splitlines():
        at, name, args = [*line.split(" ", 2), ""][:3]
        calls.append(Call(float(at), name, args))
    return calls


def write_stubs(bin_dir: Path, stubs: dict[str, str]) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, body in stubs.items():
        stub = bin_dir / name
        stub.write_text(RECORD + body, encoding="utf-8")
        stub.chmod(0o755)


def runner_tarball(run_sh: str) -> bytes:
    """The actions runner's tarball as the boot script unpacks it, around `run.sh` (recorded, like the stubs)."""
    members = {
        "run.sh": RECORD + run_sh,
        "config.sh": "#!/bin/bash\necho 'config.sh is not used with a JIT config' >&2\nexit 1\n",
        "bin/installdependencies.sh": RECORD + 'record installdependencies.sh "$@"\n',
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(f"./{name}")
            info.size, info.mode, info.mtime = len(data), 0o755, int(time.time())
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def start(
    script: Path,
    env: dict[str, str],
    stubs: dict[str, str],
    bin_dir: Path,
    *,
    stdout: IO[bytes],
    stderr: IO[bytes] | int,
) -> subprocess.Popen[bytes]:
    """Run `script` with bash in a session of its own (so `stop` ends everything it started), once every stub
    resolves to the sandbox's copy on env's PATH."""
    for name in stubs:
        assert shutil.which(name, path=env["PATH"]) == str(bin_dir / name), f"{name} is not stubbed"
    return subprocess.Popen(
        ["bash", str(script)], env=env, cwd=script.parent, stdout=stdout, stderr=stderr,
        stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip


def stop(process: subprocess.Popen[bytes]) -> None:
    """Kill the whole process group: background pulls, the watchdog and a hung run.sh must not outlive a test."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)
