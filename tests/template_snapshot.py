"""The template as the tests bake it: this checkout's working tree under a real commit.

The post-generation hook pins the platform at the template's clean commit (issue 31), and a developer runs
the tests on uncommitted changes. So the tests bake a snapshot: a commit of the working tree (tracked and
untracked files, not ignored ones) made with a private index, so HEAD, the index and every branch stay as
they are, checked out in a temporary worktree (on a clean checkout, as in CI's clone, the snapshot is HEAD).
The snapshot commit is in this repository, which is where git's insteadOf sends the bakes'
uv (conftest.platform_git_env); upload-pack serves it although no ref names it
(uploadpack.allowAnySHA1InWant, given in the same environment).
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

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
