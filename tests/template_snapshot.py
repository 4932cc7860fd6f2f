"""The template as the tests bake it: this checkout's working tree under a real commit.

The post-generation hook pins the platform at the template's clean commit (issue 31), and a developer runs
the tests on uncommitted changes. So the tests bake a snapshot: a commit of the working tree (tracked and
untracked files, not ignored ones) made with a private index, so HEAD, the index and every branch stay as
they are, checked out in a temporary worktree (on a clean checkout, as in CI's clone, the snapshot is HEAD).
The snapshot commit is in this repository, which is where git's insteadOf sends the bakes'
uv (snapshot_git_env); upload-pack serves it although no ref names it
(uploadpack.allowAnySHA1InWant, given in the same environment).

The benchmark (benchmarks/run.py) bakes the same way.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

# The GitHub repository the bakes pin the platform at (issue 31). This checkout is no clone of it, so the
# bakes answer it (platform_repository), and git's insteadOf (snapshot_git_env) sends every fetch of it to
# this checkout: the bakes install the platform of the snapshot, offline.
PLATFORM_REPOSITORY = "your-org/mlops-template"
NAME, EMAIL = "template-tests", "template-tests@example.invalid"
IDENTITY = {
    "GIT_AUTHOR_NAME": NAME,
    "GIT_AUTHOR_EMAIL": EMAIL,
    "GIT_COMMITTER_NAME": NAME,
    "GIT_COMMITTER_EMAIL": EMAIL,
}


def git(root: Path, *args: str, **env: str) -> str:
    clean = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=False,
                          env={**clean, **env}, timeout=120)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} in {root}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def snapshot_git_env(root: Path) -> dict[str, str]:
    """Environment for a bake's uv and act: git reads PLATFORM_REPOSITORY from `root`, including a snapshot
    commit that no ref names. Variables, not a file: nothing is written to the user's git config."""
    return {
        "GIT_CONFIG_COUNT": "2",
        "GIT_CONFIG_KEY_0": f"url.file://{root}.insteadOf",
        "GIT_CONFIG_VALUE_0": f"https://github.com/{PLATFORM_REPOSITORY}",
        "GIT_CONFIG_KEY_1": "uploadpack.allowAnySHA1InWant",
        "GIT_CONFIG_VALUE_1": "true",
    }


def snapshot_commit(root: Path) -> str:
    """HEAD when the working tree is clean, else a new commit of it whose parent is HEAD (no ref moves)."""
    head = git(root, "rev-parse", "HEAD")
    with tempfile.TemporaryDirectory() as tmp:
        index = str(Path(tmp) / "index")
        git(root, "add", "-A", ".", GIT_INDEX_FILE=index)
        tree = git(root, "write-tree", GIT_INDEX_FILE=index)
    if tree == git(root, "rev-parse", "HEAD^{tree}"):
        return head
    return git(
        root, "commit-tree", tree, "-p", head, "-m", "the working tree, for the template's tests", **IDENTITY
    )


def bakeable_template(root: Path) -> Path:
    """A clean checkout of the snapshot, in a worktree removed at exit. Never `root` itself, even when clean:
    an edit made while the tests run would make it dirty, and every later bake would stop."""
    commit = snapshot_commit(root)
    directory = Path(tempfile.mkdtemp(prefix="template-snapshot-")) / "template"
    git(root, "worktree", "add", "--detach", "--quiet", str(directory), commit)

    def remove() -> None:
        shutil.rmtree(directory, ignore_errors=True)
        subprocess.run(["git", "-C", str(root), "worktree", "prune"], capture_output=True, check=False)

    atexit.register(remove)
    return directory
