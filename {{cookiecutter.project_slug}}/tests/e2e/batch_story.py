"""What the batch backend's stories share (test_batch_train_story.py, test_batch_sweep_story.py): the commit a
branch would push, shipped by `gpu-runner batch ship`, and the step outputs the CLIs write."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from doubles.git_repository import git
from harness import PROJECT, _edit_yaml

# What the commit holds: the package, the lock and the project file (no tests or docs: smaller, same story).
SHIPPED = ("src", "pyproject.toml", "uv.lock")


def commit_of_the_project(root: Path, branch: str, configs: dict[str, dict[str, Any]]) -> str:
    """A repository holding the project's package and its configs/<name> with `configs[name]` merged in (values
    only this commit has), committed on `branch`; returns the commit."""
    root.mkdir(parents=True)
    for name in SHIPPED:
        source = PROJECT / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(source, root / name)
    (root / "configs").mkdir()
    for name, changes in configs.items():
        shutil.copy2(PROJECT / "configs" / name, root / "configs" / name)
        _edit_yaml(root / "configs" / name, changes)
    git(root, "init", "-q", "-b", branch)
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", f"a branch to run on Batch ({branch})")
    return git(root, "rev-parse", "HEAD")


def outputs(path: Path) -> dict[str, str]:
    """The step outputs in $GITHUB_OUTPUT, the last value of each."""
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
