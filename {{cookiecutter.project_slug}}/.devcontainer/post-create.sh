#!/usr/bin/env bash
# The dev container's one-time set-up (devcontainer.json postCreateCommand): uv, then the project from uv.lock
# with the CPU TensorFlow, as CI installs it (make install), then the environment check against it (make env-check).
set -euo pipefail
cd "$(dirname "$0")/.."
# The TensorFlow image is Ubuntu with Python and TensorFlow: the Makefile and git need their tools. As root (the
# image's only user) they come from apt; elsewhere (a laptop running this script) they must already be there.
missing=()
for tool in make git; do
  command -v "${tool}" >/dev/null 2>&1 || missing+=("${tool}")
done
if [[ -n "${missing[*]-}" ]]; then
  if [[ "$(id -u)" != 0 ]]; then
    echo "post-create: ${missing[*]} not installed and not root: install them, then run this again" >&2
    exit 1
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# The uv release .github/actions/setup pins (tests/test_env_parity.py holds the two equal).
UV_VERSION="0.13.9"
if ! command -v uv >/dev/null 2>&1; then
  python3 -m pip install --user --quiet "uv==${UV_VERSION}"
  export PATH="${HOME}/.local/bin:${PATH}"
fi
# The Python of uv.lock (requires-python): the image's own when it is a 3.11, else uv fetches a 3.11.
export UV_PYTHON=3.11
make install
make env-check
