#!/bin/bash
# Job-started hook of one ephemeral GPU runner: user_data.sh writes it (values shell-quoted by
# gpu_runner.ec2_runner.user_data) and points ACTIONS_RUNNER_HOOK_JOB_STARTED at it. Only this run's train job may use the
# instance: the label is unguessable, but any job that names it anyway ends here, before its first step.
#
# What the runner does with this file (actions/runner, read 2026-12-01 at 258d6c85):
# - src/Runner.Worker/JobExtension.cs adds it to the pre-job steps ("Set up runner", condition always()) before
#   the container set-up and every step of the job; src/Runner.Worker/JobHookProvider.cs runs it as a script
#   (bash -e <file>), as the runner's user, outside any job container;
# - docs/adrs/1751-runner-job-hooks.md and GitHub's "Running scripts before or after a job" (docs.github.com,
#   read 2026-12-01): "any other exit code, the job will not run and will be marked as failed"; no
#   continue-on-error;
# - the environment: JobHookProvider passes an empty `env:` (the workflow's job and step `env:` never reach it)
#   and ScriptHandler.cs then sets GITHUB_<KEY> from the job's github context (GitHubContext.cs allow-list:
#   repository, run_id, run_attempt, job, workflow_ref, event_name...), which the server, not the workflow, fills.
# Not proven offline: GitHub's own handling of the exit status (the tests run a stand-in runner that follows the
# code above); the first real push shows "Set up runner" with "accepted" in the train job's log.
set -uo pipefail

readonly EXPECTED_REPOSITORY=@@REPOSITORY@@
readonly EXPECTED_RUN_ID=@@RUN_ID@@
readonly EXPECTED_RUN_ATTEMPT=@@RUN_ATTEMPT@@
readonly EXPECTED_JOB=@@JOB@@
readonly EXPECTED_WORKFLOW_REF=@@WORKFLOW_REF@@
# Space-separated event names (push workflow_dispatch schedule: naming.TRAIN_EVENTS).
readonly EXPECTED_EVENTS=@@EVENTS@@
# Written on refusal; the boot script (root) halts the instance when it appears. The runner's user cannot run
# `shutdown` itself, and needs no sudo rule for it this way. The boot script installs this file as
# <root>/hooks/job-started.sh and makes <root>/refusals/ writable by the runner's user.
readonly REFUSAL_FILE=${BASH_SOURCE[0]%/hooks/*}/refusals/refused

refuse() {
  local why=$1
  # The line the job's log shows ("Set up runner"), and the one `gpu-runner wait` finds in the console output.
  echo "::error title=GPU runner refused this job::runner was taken: $why; this runner serves only job" \
    "'$EXPECTED_JOB' of run $EXPECTED_RUN_ID (attempt $EXPECTED_RUN_ATTEMPT) of $EXPECTED_REPOSITORY." \
    "No step of this job runs and the instance halts."
  printf '%s\n' "$why" >"$REFUSAL_FILE" || echo "could not write $REFUSAL_FILE (the runner still exits)"
  exit 1
}

check() { # variable-name expected: the job's value must equal the launch-time one, character for character
  local name=$1 expected=$2 actual
  actual=${!name-}
  # Quoted right-hand side: a literal comparison, no glob or pattern in a value can match more.
  if [[ -z $actual || $actual != "$expected" ]]; then
    refuse "$name is '${actual:0:200}', expected '$expected'"
  fi
}

check GITHUB_REPOSITORY "$EXPECTED_REPOSITORY"
check GITHUB_RUN_ID "$EXPECTED_RUN_ID"
check GITHUB_RUN_ATTEMPT "$EXPECTED_RUN_ATTEMPT"
check GITHUB_JOB "$EXPECTED_JOB"
check GITHUB_WORKFLOW_REF "$EXPECTED_WORKFLOW_REF"
event=${GITHUB_EVENT_NAME-} allowed=false
for name in $EXPECTED_EVENTS; do
  if [[ $event == "$name" ]]; then allowed=true; fi
done
if [[ $allowed != true ]]; then
  refuse "GITHUB_EVENT_NAME is '${event:0:50}', expected one of: $EXPECTED_EVENTS"
fi
echo "gpu-runner hook: accepted job '$GITHUB_JOB' of run $GITHUB_RUN_ID (attempt $GITHUB_RUN_ATTEMPT)," \
  "$GITHUB_WORKFLOW_REF, event $event"
