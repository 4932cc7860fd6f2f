#!/usr/bin/env bash
# Jupyter Lab (make jupyter) and the MLflow UI (make mlflow-ui) in the background, each in its own process group,
# bound to 127.0.0.1: VS Code and Codespaces forward the two ports (devcontainer.json forwardPorts), nothing else
# reaches them. Returns once both answer; the logs and process-group ids are in .devcontainer/logs/.
set -euo pipefail
cd "$(dirname "$0")/.."
JUPYTER_PORT="${JUPYTER_PORT:-8888}"
MLFLOW_PORT="${MLFLOW_PORT:-5000}"
LOGS="${DEVCONTAINER_LOGS:-.devcontainer/logs}"
mkdir -p "${LOGS}"

start() {  # start <name> <make target and arguments...>
  local name=$1
  shift
  setsid make "$@" >"${LOGS}/${name}.log" 2>&1 </dev/null &
  echo $! >"${LOGS}/${name}.pgid"
}

wait_for() {  # wait_for <name> <url>: up to 120 s
  local name=$1 url=$2
  for _ in $(seq 1 120); do
    if python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "${url}" 2>/dev/null; then
      echo "${name}: ${url%/*}/ (log: ${LOGS}/${name}.log)"
      return 0
    fi
    sleep 1
  done
  echo "${name} did not answer at ${url} within 120 s; its log, ${LOGS}/${name}.log, ends with:" >&2
  tail -n 20 "${LOGS}/${name}.log" >&2
  return 1
}

start jupyter jupyter JUPYTER_PORT="${JUPYTER_PORT}"
start mlflow mlflow-ui MLFLOW_PORT="${MLFLOW_PORT}"
# /api answers without the token (the server's version only); the token is in the log's URL.
wait_for jupyter "http://127.0.0.1:${JUPYTER_PORT}/api"
wait_for mlflow "http://127.0.0.1:${MLFLOW_PORT}/health"
