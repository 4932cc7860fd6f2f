"""Planted violations: a workflow, a composite action and a Dependabot file that break every rule the checks
enforce. Each check must find its violations here (its negative control), so none can pass silently."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from gpu_runner_testing.workflow_checks.workflow_files import offline_env, tool

BAD_WORKFLOW = """\
name: bad
on:
  pull_request_target:
  pull_request:
jobs:
  build:
    runs-on: self-hosted
    steps:
      - uses: actions/checkout@v4
      - uses: astral-sh/setup-uv@c18668ad3cf93ea998bef934396af7bb5c839dc7 # v9.9.9
      - uses: actions/cache@0123456789abcdef0123456789abcdef01234567 # v6.1.0
      - uses: ./.github/actions/bad
        with:
          bogus: "1"
      - run: echo "${{ github.head_ref }}"
      - run: echo $GREETING
  aws:
    runs-on: ubuntu-latest
    timeout-minutes: 5
    permissions:
      id-token: write
    steps:
      - uses: aws-actions/configure-aws-credentials@e1253824e5c10ff9df46874f81ed3ec929e19cfd # v6.3.0
        with:
          aws-region: eu-west-1
      - uses: acme/mlops-template/.github/actions/setup@0123456789abcdef0123456789abcdef01234567 # the platform's
      - uses: actions/setup-python@5fda3b95a4ea91299a34e894583c3862153e4b97 # v7.0.0
        with:
          cache: pip
      - uses: actions/cache@55cc8345863c7cc4c66a329aec7e433d2d1c52a9 # v6.1.0
        with:
          path: x
          key: x
"""

BAD_ACTION = """\
name: bad
description: expands an input inside a shell script
inputs:
  who:
    description: anyone
    default: world
runs:
  using: composite
  steps:
    - shell: bash
      run: |
        echo "hello ${{ inputs.who }}"
        echo $GREETING
"""

BAD_DEPENDABOT = """\
version: 2
updates:
  - package-ecosystem: uv
    directory: "/"
    insecure-external-code-execution: allow
    schedule:
      interval: weekly
"""


def plant_violations(project: Path, into: Path) -> Path:
    """A copy of `project`'s .github (a git repository: actionlint resolves local actions only inside one) with
    the bad workflow, composite action and Dependabot file added."""
    shutil.copytree(project / ".github", into / ".github", symlinks=True)
    subprocess.run([tool("git"), "init", "--quiet", str(into)], check=True, env=offline_env())
    (into / ".github" / "workflows" / "bad.yml").write_text(BAD_WORKFLOW, encoding="utf-8")
    (into / ".github" / "actions" / "bad").mkdir(parents=True)
    (into / ".github" / "actions" / "bad" / "action.yml").write_text(BAD_ACTION, encoding="utf-8")
    (into / ".github" / "dependabot.yml").write_text(BAD_DEPENDABOT, encoding="utf-8")
    return into
