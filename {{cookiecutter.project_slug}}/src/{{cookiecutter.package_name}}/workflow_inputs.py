"""The values train.yml hands the training CLI (`--config=`, TRAIN_COMMIT, TRAIN_ATTEMPT), checked in its GPU job
(`train`): they come from dispatch inputs, and the commit ends up in S3 keys and MLflow tags.

There the config must be a file of the checkout, so a dispatch input cannot point the training at a file of the
runner's host. Elsewhere (by hand, the CI's test job, whose tests use temporary configs) any config file may be used.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from .config import ConfigError

# A Git object name of a SHA-1 repository, as `github.sha` writes it.
COMMIT = re.compile(r"[0-9a-f]{40}")
TRAIN_JOB = "train"  # the job id of train.yml's GPU job (GITHUB_JOB)


def check(config: Path, env: Mapping[str, str], repository: Path | None = None) -> None:
    """Raise ConfigError naming the first bad value and the fix; nothing to check outside train.yml's GPU job."""
    if env.get("GITHUB_ACTIONS") != "true" or env.get("GITHUB_JOB") != TRAIN_JOB:
        return
    root = (repository or Path.cwd()).resolve()
    if config.is_absolute() or not (root / config).resolve().is_relative_to(root):
        raise ConfigError(
            f"--config: '{config}' is not a path inside the repository; pass a relative path such as "
            "configs/train.yaml (the dispatch input `config`)"
        )
    commit = env.get("TRAIN_COMMIT", "")
    if commit and not COMMIT.fullmatch(commit):
        raise ConfigError(
            f"TRAIN_COMMIT: {commit[:60]!r} is not a commit (40 lowercase hex digits); pass the full SHA in the "
            "dispatch input `commit`, or leave it empty for the branch head"
        )
    attempt = env.get("TRAIN_ATTEMPT", "")
    if attempt and not (attempt.isascii() and attempt.isdigit() and int(attempt) >= 1):
        raise ConfigError(
            f"TRAIN_ATTEMPT: {attempt[:60]!r} is not an attempt number (1 or more); the dispatch input `attempt` "
            "is 1 for a first run"
        )
