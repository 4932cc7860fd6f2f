"""A small real git repository with one commit, for the code a Batch job is shipped (gpu-runner batch ship)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

# What the commit holds: a package file, a config in a subdirectory, an executable script.
FILES = {
    "pyproject.toml": '[project]\nname = "demo"\nversion = "0"\n',
    "src/demo/__init__.py": "print('the branch code')\n",
    "configs/train.yaml": "training:\n  epochs: 1\n",
    "scripts/run.sh": "#!/usr/bin/env bash\necho run\n",
}


def git(repository: Path, *args: str) -> str:
    # No user or system configuration: the commit is the same on every machine.
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_AUTHOR_DATE": "2026-12-04T12:00:00Z",
           "GIT_COMMITTER_DATE": "2026-12-04T12:00:00Z"}  # fmt: skip
    result = subprocess.run(["git", "-C", str(repository), *args], check=True, capture_output=True, text=True,
                            env=env)  # fmt: skip
    return result.stdout.strip()


def committed_repository(root: Path) -> tuple[Path, str]:
    """`root` as a repository holding FILES in one commit; returns it and the commit's SHA."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    for name, text in FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (root / "scripts/run.sh").chmod(0o755)
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "the branch")
    return root, git(root, "rev-parse", "HEAD")
