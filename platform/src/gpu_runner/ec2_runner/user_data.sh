#!/bin/bash
# EC2 user-data of one ephemeral GPU runner, rendered by gpu_runner.ec2_runner.user_data (values: shell-quoted data).
# The JIT runner config is NOT in here: user-data is readable via instance metadata and the EC2 API, so it is
# read from SSM at boot and the parameter deleted at once. Never add `set -x`: it would print that config.
set -Eeuo pipefail
umask 022

readonly ROOT=@@ROOT@@
readonly REGION=@@REGION@@
readonly PARAMETER_NAME=@@PARAMETER_NAME@@
readonly RUNNER_NAME=@@RUNNER_NAME@@
readonly EXPIRES_AT=@@EXPIRES_AT@@
readonly MAX_RUNTIME_MINUTES=@@MAX_RUNTIME_MINUTES@@
readonly IDLE_TIMEOUT_MINUTES=@@IDLE_TIMEOUT_MINUTES@@
readonly IMAGE=@@IMAGE@@
readonly RUNNER_USER=@@RUNNER_USER@@
readonly RUNNER_VERSION=@@RUNNER_VERSION@@
readonly RUNNER_SHA256=@@RUNNER_SHA256@@
readonly RUNNER_MIRROR=@@RUNNER_MIRROR@@
# The job-started hook (job_started_hook.sh, rendered with this run's repository, run id, attempt, workflow and
# event): the runner runs it before any step of any job it takes; it refuses every job but this run's train job.
# The value is a script kept as data (single-quoted): its `$` must not expand here.
# shellcheck disable=SC2016
readonly JOB_STARTED_HOOK=@@JOB_STARTED_HOOK@@

# Test-only knobs, never set on an instance: the test suite cannot wait minutes for the watchdog or retries.
readonly POLL_SECONDS=${GPU_RUNNER_WATCHDOG_POLL_SECONDS:-15}
readonly IDLE_SECONDS=${GPU_RUNNER_WATCHDOG_IDLE_SECONDS:-$((IDLE_TIMEOUT_MINUTES * 60))}
readonly RETRY_DELAY=${GPU_RUNNER_RETRY_DELAY_SECONDS:-5}

readonly RUNNER_DIR=$ROOT/runner
readonly LOG_FILE=$ROOT/bootstrap.log
# The phase timeline: NAME=EPOCH lines, hard-linked into the runner's work folder before the runner starts. The
# train job reads them there (a container job sees that folder as /__w) and hands them to the stop job.
readonly TIMELINE=$ROOT/timeline.env
# Where job_started_hook.sh expects itself and its refusal file (it derives the second from its own path).
readonly HOOK_FILE=$ROOT/hooks/job-started.sh
readonly REFUSAL_FILE=$ROOT/refusals/refused
mkdir -p "$ROOT"

# 1. stdout reaches the instance console (cloud-init), which `gpu-runner wait` prints on timeout.
log() {
  local phase=$1
  shift
  printf '[gpu-runner %s] %s: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$phase" "$*" | tee -a "$LOG_FILE"
}

mark() { # phase: when it happened, for the timeline (never fails the boot)
  printf '%s=%s\n' "$1" "$(date +%s)" >>"$TIMELINE" || log timeline "WARNING: could not record $1"
}
mark boot

shutdown_requested=false
watchdog_pid=""
refusal_watch_pid=""
# InstanceInitiatedShutdownBehavior=terminate: halting terminates the instance and stops the GPU bill.
halt_now() {
  if [[ $shutdown_requested == false ]]; then
    shutdown_requested=true
    log shutdown "$1; shutting down now"
    shutdown -h now || log shutdown "ERROR: shutdown -h now failed (max lifetime still applies)"
  fi
}
on_exit() {
  local code=$?
  if [[ -n $watchdog_pid ]]; then kill "$watchdog_pid" 2>/dev/null || true; fi
  if [[ -n $refusal_watch_pid ]]; then kill "$refusal_watch_pid" 2>/dev/null || true; fi
  halt_now "bootstrap exiting with code $code"
}
# Installed before anything can fail, so every error below still ends in a shutdown.
trap on_exit EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
# BASH_COMMAND is the unexpanded source text, so it never contains the JIT config's value.
trap 'log error "line $LINENO failed: $BASH_COMMAND"' ERR

log start "runner $RUNNER_NAME, region $REGION, image ${IMAGE:-none (host mode)}"

# 2. Hard lifetime first: whatever hangs later, the instance goes away. Never past the launcher's expires-at tag.
lifetime=$MAX_RUNTIME_MINUTES
remaining=$(((EXPIRES_AT - $(date +%s) + 59) / 60))
if ((remaining < lifetime)); then lifetime=$remaining; fi
if ((lifetime < 1)); then lifetime=1; fi
shutdown -h "+$lifetime"
log lifetime "shutdown scheduled in $lifetime min"

# 3. Pull time is billed GPU time: overlap it with the runner set-up. A failed pull is not fatal (the job pulls).
# No image (host mode, the default): the train job installs TensorFlow itself and there is nothing to pull.
if [[ -z "$IMAGE" ]]; then
  log image "none (host mode): nothing to pull"
  mark image-ready # nothing to wait for: the job's own set-up installs TensorFlow
else
  log image "pulling $IMAGE in the background"
  (
    started=$(date +%s)
    for attempt in 1 2 3 4 5; do
      if docker pull --quiet "$IMAGE" >/dev/null; then
        log image "pulled $IMAGE in $(($(date +%s) - started)) s"
        mark image-ready
        exit 0
      fi
      log image "pull attempt $attempt failed (is dockerd up yet?)"
      sleep "$RETRY_DELAY"
    done
    log image "WARNING: could not pull $IMAGE; the job will pull it"
  ) &
fi

# 4. The runner never runs as root; the docker group lets jobs start their container.
if id -u "$RUNNER_USER" >/dev/null 2>&1; then
  log user "$RUNNER_USER exists"
else
  useradd --create-home --shell /bin/bash "$RUNNER_USER"
  log user "created $RUNNER_USER"
fi
if getent group docker >/dev/null; then
  usermod -aG docker "$RUNNER_USER"
else
  log user "WARNING: no docker group on this AMI; container jobs will fail"
fi

# 5. The actions runner: pre-baked in a private AMI, else from the S3 mirror, else from GitHub.
download() { # url file
  curl --fail --silent --show-error --location --retry 5 --retry-delay 3 --retry-all-errors \
    --connect-timeout 10 --max-time 600 --output "$2" "$1"
}

# Prints "<version> <sha256 or empty>" of the newest release. The digest comes from the asset list, else from the
# markers in the release notes; never a loose regex over the body (the notes hold other 64-hex strings).
latest_release() { # json-file
  python3 -c '
import json, re, sys
release = json.load(open(sys.argv[1], encoding="utf-8"))
version = str(release.get("tag_name", "")).removeprefix("v")
if not re.fullmatch(r"\d+\.\d+\.\d+", version):
    sys.exit(f"unexpected tag_name {version!r}")
name = f"actions-runner-linux-x64-{version}.tar.gz"
digest = next((str(a.get("digest") or "") for a in release.get("assets", []) if a.get("name") == name), "")
sha = digest.removeprefix("sha256:")
if not re.fullmatch(r"[0-9a-f]{64}", sha):
    found = re.search(r"<!-- BEGIN SHA linux-x64 -->([0-9a-f]{64})<!-- END SHA linux-x64 -->", str(release.get("body", "")))
    sha = found.group(1) if found else ""
print(version, sha)
' "$1"
}

# Fetch a runner tarball and verify it before anything unpacks it: no SHA-256, or one that does not match, and
# the boot fails closed (the EXIT trap halts the instance). A mirror or GitHub could serve other bytes; only the
# pinned or published digest decides.
verify_runner() { # file sha256
  if [[ ! $2 =~ ^[0-9a-f]{64}$ ]]; then
    log runner "no SHA-256 to verify ${1##*/} against; refusing to run it (pin runner_version and runner_sha256)"
    return 1
  fi
  if ! printf '%s  %s\n' "$2" "$1" | sha256sum --check --strict --quiet - >/dev/null 2>&1; then
    log runner "SHA-256 of ${1##*/} does not match $2; refusing to run it"
    return 1
  fi
  log runner "SHA-256 verified"
}

install_runner() {
  if [[ -x $RUNNER_DIR/run.sh && -x $RUNNER_DIR/config.sh ]]; then
    log runner "pre-installed runner in $RUNNER_DIR (baked AMI); no download"
    return
  fi
  local version=$RUNNER_VERSION sha=$RUNNER_SHA256 mirror=${RUNNER_MIRROR%/} work=$ROOT/download tarball release
  mkdir -p "$work"
  if [[ -n $mirror ]]; then
    # Settings allow a mirror only with a pinned version and SHA-256: the mirror never chooses what runs.
    if [[ $version == latest || -z $sha ]]; then
      log runner "runner_mirror needs a pinned runner_version and runner_sha256; refusing $mirror"
      exit 1
    fi
    tarball=actions-runner-linux-x64-$version.tar.gz
    log runner "copying $mirror/$tarball"
    aws s3 cp --region "$REGION" --only-show-errors "$mirror/$tarball" "$work/$tarball"
  else
    if [[ $version == latest ]]; then
      download https://api.github.com/repos/actions/runner/releases/latest "$work/release.json"
      release=$(latest_release "$work/release.json")
      read -r version sha <<<"$release"
    fi
    tarball=actions-runner-linux-x64-$version.tar.gz
    log runner "downloading runner $version"
    download "https://github.com/actions/runner/releases/download/v$version/$tarball" "$work/$tarball"
  fi
  verify_runner "$work/$tarball" "$sha" || exit 1
  mkdir -p "$RUNNER_DIR"
  tar -xzf "$work/$tarball" -C "$RUNNER_DIR"
  rm -rf "$work"
  log runner "runner $version installed in $RUNNER_DIR"
}
install_runner
# The runner is .NET: it needs ICU (present on the Ubuntu DLAMI; installed only when missing). grep without -q
# reads all input, so pipefail does not see ldconfig die of SIGPIPE.
if ! ldconfig -p | grep libicu >/dev/null; then
  log runner "installing the runner's system dependencies"
  "$RUNNER_DIR/bin/installdependencies.sh"
fi
# Before the chown: the runner must own its work folder to create the job's directories in it.
mkdir -p "$RUNNER_DIR/_work/_gpu_runner"
ln -f "$TIMELINE" "$RUNNER_DIR/_work/_gpu_runner/timeline.env"
chown -R "$RUNNER_USER:" "$RUNNER_DIR"

# 5b. The job-started hook, outside the runner's folder (GitHub: "not in the actions-runner application
# directory") and owned by root, so neither the runner's user nor a job can change it. Only its refusal folder
# belongs to the runner's user: the hook runs as that user.
mkdir -p "$ROOT/hooks" "$ROOT/refusals"
printf '%s\n' "$JOB_STARTED_HOOK" >"$HOOK_FILE"
chmod 0755 "$ROOT/hooks"
chmod 0644 "$HOOK_FILE"
chown "$RUNNER_USER:" "$ROOT/refusals"
chmod 0700 "$ROOT/refusals"
log hook "job-started hook installed: only this run's train job may use this runner"

# 6. One-time JIT config. Boot-time credentials can lag a few seconds, and `launch` writes the parameter (tagged
# with this instance's ARN, the only one whose role may read it) just after RunInstances: hence the retries.
jit=""
for attempt in 1 2 3 4 5 6 7 8; do
  if jit=$(aws ssm get-parameter --with-decryption --region "$REGION" --name "$PARAMETER_NAME" \
    --query Parameter.Value --output text); then
    break
  fi
  log ssm "reading $PARAMETER_NAME failed (attempt $attempt)"
  sleep "$RETRY_DELAY"
done
if [[ -z $jit || $jit == None ]]; then
  log ssm "no JIT config in $PARAMETER_NAME; giving up"
  exit 1
fi
log ssm "read the JIT config (${#jit} characters) from $PARAMETER_NAME"
# Deleted before the runner starts: it exists only in this process from now on. Teardown deletes it as well.
if aws ssm delete-parameter --region "$REGION" --name "$PARAMETER_NAME" >/dev/null; then
  log ssm "deleted $PARAMETER_NAME"
else
  log ssm "WARNING: could not delete $PARAMETER_NAME (teardown will)"
fi

# 7. Idle watchdog: an instance whose job never comes would otherwise bill until the max lifetime.
job_started() {
  compgen -G "$RUNNER_DIR/_diag/Worker_*.log" >/dev/null || pgrep -x Runner.Worker >/dev/null
}
watchdog() {
  local deadline
  # +1: `date +%s` counts whole seconds, so without it the watchdog could fire up to a second early.
  deadline=$(($(date +%s) + IDLE_SECONDS + 1))
  while true; do
    if job_started; then
      log watchdog "job started; idle watchdog off"
      return 0
    fi
    if (($(date +%s) >= deadline)); then
      halt_now "no job started within $IDLE_SECONDS s"
      return 0
    fi
    sleep "$POLL_SECONDS"
  done
}
watchdog &
watchdog_pid=$!

# 7b. A refused job (someone else's workflow took the runner): halt at once. The hook has already failed that
# job before its first step; halting also ends whatever the runner might still do and the GPU bill.
report_refusal() {
  # Once, from whichever path sees it first (mkdir is atomic): the watch below or the runner's exit.
  mkdir "$REFUSAL_FILE.reported" 2>/dev/null || return 0
  # What the refused job claimed to be: printable characters only, it is another workflow's data.
  log hook "REFUSED a job (runner was taken): $(head -c 300 "$REFUSAL_FILE" | tr -cd '[:print:]')"
  halt_now "the job-started hook refused a job that is not this run's train job"
}
refusal_watch() {
  until [[ -e $REFUSAL_FILE ]]; do sleep 1; done
  report_refusal
}
refusal_watch &
refusal_watch_pid=$!

# 8. runuser, not sudo: sudo logs the command line to the auth log. The config goes in the environment, never in
# argv: any local user can read every process's /proc/<pid>/cmdline, /proc/<pid>/environ only its owner and root.
# The runner reads ACTIONS_RUNNER_INPUT_<ARG> as <ARG>, registers it with its secret masker and removes it from
# its own environment before anything else runs (actions/runner@258d6c8, src/Runner.Listener/CommandSettings.cs,
# lines 110-139; `jitconfig` is in Constants.Runner.CommandLine.Args.Secrets; run-helper.sh.template:36 starts
# `Runner.Listener run`, which reads GetJitConfig(): Runner.cs:234). The assignment prefix exports it to runuser
# alone, not to this shell's other children; runuser without --login sets "only the environment variables HOME
# and SHELL (plus USER and LOGNAME ...)" and keeps the rest (util-linux runuser(1), Ubuntu 22.04/24.04 man page).
prefix_output() {
  local line
  while IFS= read -r line; do log runner "$line"; done
}
cd "$RUNNER_DIR"
# The runner reads the hook's path from its environment (JobExtension.cs: ACTIONS_RUNNER_HOOK_JOB_STARTED);
# runuser keeps the environment but HOME, SHELL, USER and LOGNAME.
export ACTIONS_RUNNER_HOOK_JOB_STARTED=$HOOK_FILE
ACTIONS_RUNNER_INPUT_JITCONFIG=$jit runuser -u "$RUNNER_USER" -- ./run.sh > >(prefix_output) 2>&1 &
runner_pid=$!
unset jit
log runner "started $RUNNER_NAME as $RUNNER_USER"
mark runner-started
# Waits for run.sh alone: a stray process still holding its output open cannot delay the shutdown.
code=0
wait "$runner_pid" || code=$?

# 9. The job is over: stop the GPU bill now instead of waiting for the workflow's stop job.
log runner "exited with code $code"
mark runner-exit
# The watch polls once a second, and a refused job's runner exits at once: it may not have looked yet.
if [[ -e $REFUSAL_FILE ]]; then report_refusal; fi
halt_now "runner finished"
# Conditional on purpose: a bare final `exit` hides the EXIT trap from shellcheck (SC2329, koalaman/shellcheck#3385).
if ((code != 0)); then exit "$code"; fi
