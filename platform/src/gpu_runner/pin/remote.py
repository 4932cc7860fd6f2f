"""The platform's repository as git sees it: resolve a branch, tag or commit, fetch two commits, read a file
at each, list what changed between them.

git itself, in a throwaway repository: uv locks the platform but has no way to read a file at a commit, and
these five plumbing calls do not justify a git library. Commits are fetched one level deep by SHA, as
actions/checkout does (`git fetch --depth=1 origin <sha>`): GitHub serves any commit reachable from its refs.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from gpu_runner.core.errors import RunnerError

RELEASE_TAG = "platform-v"  # a release of the platform is the tag platform-v<MAJOR.MINOR.PATCH>
COMMIT = re.compile(r"[0-9a-f]{40}")
TIMEOUT_SECONDS = 300


class Remote:
    """One repository, fetched into `workdir` (an empty directory the caller owns)."""

    def __init__(self, url: str, workdir: Path) -> None:
        self.url = url
        self.workdir = workdir
        self._git("init", "--quiet")

    def _git(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        try:
            proc = subprocess.run(
                ["git", "-C", str(self.workdir), *args], capture_output=True, text=True, timeout=TIMEOUT_SECONDS,
                check=False,
            )  # fmt: skip
        except FileNotFoundError as error:
            raise RunnerError(
                "git is not installed: the platform update reads the platform's repository with it"
            ) from error
        except subprocess.TimeoutExpired as error:
            raise RunnerError(
                f"git {args[0]} {self.url} took over {TIMEOUT_SECONDS} s; check the network and run again"
            ) from error
        if check and proc.returncode != 0:
            raise RunnerError(f"git {args[0]} {self.url}: {proc.stderr.strip() or proc.stdout.strip()}")
        return proc

    def refs(self, *patterns: str) -> dict[str, str]:
        """ref name -> commit, annotated tags peeled to their commit."""
        listed = self._git("ls-remote", self.url, *patterns).stdout
        refs: dict[str, str] = {}
        for line in listed.splitlines():
            commit, _, name = line.partition("\t")
            if name.endswith("^{}"):
                refs[name.removesuffix("^{}")] = commit  # the peeled line names the commit a tag points at
            else:
                refs.setdefault(name, commit)
        return refs

    def resolve(self, ref: str) -> str:
        """The commit a full SHA, a tag or a branch of the repository names."""
        if COMMIT.fullmatch(ref):
            return ref
        refs = self.refs(f"refs/tags/{ref}", f"refs/heads/{ref}")
        for name in (f"refs/tags/{ref}", f"refs/heads/{ref}"):
            if name in refs:
                return refs[name]
        raise RunnerError(
            f"--to: {self.url} has no tag or branch '{ref}'; give a tag ({RELEASE_TAG}<version>), a branch or a "
            "full 40-digit commit SHA"
        )

    def releases(self) -> dict[str, str]:
        """release tag -> commit, for every `platform-v<MAJOR.MINOR.PATCH>` tag."""
        release = re.compile(rf"refs/tags/({re.escape(RELEASE_TAG)}\d+\.\d+\.\d+)")
        return {
            match[1]: commit
            for name, commit in self.refs(f"refs/tags/{RELEASE_TAG}*").items()
            if (match := release.fullmatch(name))
        }

    def fetch(self, *commits: str) -> None:
        self._git("fetch", "--quiet", "--depth=1", "--no-tags", self.url, *commits)

    def show(self, commit: str, path: str) -> str | None:
        """The file at `path` in `commit`, or None where the commit has no such file."""
        proc = self._git("show", f"{commit}:{path}", check=False)
        return proc.stdout if proc.returncode == 0 else None

    def export(self, commit: str, into: Path) -> None:
        """Write the whole tree of a fetched `commit` into the directory `into` (no .git: a tree, as an action
        download is)."""
        self._git(f"--work-tree={into}", "checkout", "--quiet", commit, "--", ".")

    def changed(self, old: str, new: str, path: str) -> list[str]:
        """The files under `path` that differ between the two commits."""
        return self._git("diff", "--name-only", old, new, "--", path).stdout.split()
