"""Where a project pins the platform, read and moved: `[tool.uv.sources] gpu-runner` in its pyproject.toml (a git
dependency on this repository's platform/ at one commit), any `uses:` of this repository's reusable workflows
or actions in its .github/ (`<owner>/<repo>/.github/...@<commit>`), and any link of its README and docs/ to the
platform's manual (`https://github.com/<owner>/<repo>/blob/<commit>/platform/manual/...`).

Written by replacing the one commit string, not by re-serialising the file: the standard library reads TOML
but does not write it, and a line-level change keeps the team's comments and layout. Every write is read back.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from gpu_runner.core.errors import RunnerError

PYPROJECT = "pyproject.toml"
DISTRIBUTION = "gpu-runner"
GITHUB = "https://github.com/"
COMMIT = re.compile(r"[0-9a-f]{40}")
# GitHub's owner and repository name characters (docs.github.com, "Repository limits"; the bake's hook checks
# the same): letters, digits, hyphen, and for the repository also `.` and `_`.
REPOSITORY = re.compile(r"[A-Za-z0-9-]+/[A-Za-z0-9._-]+")
PINNED_GLOBS = (
    ".github/workflows/*.yml",
    ".github/workflows/*.yaml",
    ".github/actions/*/action.yml",
    "README.md",
    "docs/*.md",
)


@dataclass(frozen=True)
class Pin:
    """One commit of one GitHub repository's platform/ directory."""

    repository: str  # owner/name
    commit: str  # 40 hex digits
    subdirectory: str

    @property
    def url(self) -> str:
        return f"{GITHUB}{self.repository}"


def read_pin(project: Path) -> Pin:
    """The pin in `project`'s pyproject.toml; a RunnerError naming the table and the fix when it is not one."""
    path = project / PYPROJECT
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise RunnerError(f"{path}: {error}; run this in the project's root directory") from error
    source = data.get("tool", {}).get("uv", {}).get("sources", {}).get(DISTRIBUTION)
    where = f"{path} [tool.uv.sources] {DISTRIBUTION}"
    if not isinstance(source, dict) or "git" not in source:
        raise RunnerError(
            f"{where}: no git pin of the platform (a project baked before the platform was a dependency "
            "carries its own copy in runner/: take the template's update first, `make template-update`)"
        )
    url, commit, subdirectory = (
        str(source["git"]),
        str(source.get("rev", "")),
        str(source.get("subdirectory", "")),
    )
    repository = url.removeprefix(GITHUB).removesuffix(".git")
    if not url.startswith(GITHUB) or not REPOSITORY.fullmatch(repository):
        raise RunnerError(f"{where}: git = '{url}' is not https://github.com/<owner>/<repository>")
    if not COMMIT.fullmatch(commit):
        raise RunnerError(
            f"{where}: rev = '{commit}' is not a full commit SHA (40 hex digits); a branch or tag would move "
            "under the project: pin the commit it names"
        )
    if not subdirectory:
        raise RunnerError(f"{where}: no subdirectory (the platform is the repository's platform/ directory)")
    return Pin(repository, commit, subdirectory)


# What the launch, predict launch and Batch submit roles trust: the platform's reusable workflows at one commit,
# named on the command line as owner/name@commit or read from the project's pin.
PLATFORM_FLAG = "--platform"


def trusted_platform(given: str, project: Path) -> Pin:
    """`given` (owner/name@<40 hex>) when set, else the pin in `project`'s pyproject.toml; a RunnerError naming
    the flag and the fix otherwise."""
    if not given:
        try:
            return read_pin(project)
        except RunnerError as error:
            raise RunnerError(
                f"{PLATFORM_FLAG}: not given, and {error}; run this in the project's root directory or pass "
                f"{PLATFORM_FLAG} <owner>/<template>@<commit> (the commit the project's uv.lock pins)"
            ) from error
    repository, _, commit = given.partition("@")
    if not REPOSITORY.fullmatch(repository) or not COMMIT.fullmatch(commit):
        raise RunnerError(
            f"{PLATFORM_FLAG}: '{given}' is not <owner>/<template>@<commit> with a full commit SHA (40 lowercase "
            "hex digits); leave it out to read the pin in pyproject.toml"
        )
    return Pin(repository, commit, "platform")


def write_pin(project: Path, pin: Pin, commit: str) -> None:
    """Move pyproject.toml's pin from `pin.commit` to `commit`, and check it by reading it back."""
    path = project / PYPROJECT
    text = path.read_text(encoding="utf-8")
    old = f'rev = "{pin.commit}"'
    if text.count(old) != 1:
        raise RunnerError(
            f"{path}: expected {old} exactly once (in [tool.uv.sources] {DISTRIBUTION}), found it "
            f"{text.count(old)} times; set the rev by hand to {commit} and run `uv lock`"
        )
    path.write_text(text.replace(old, f'rev = "{commit}"'), encoding="utf-8")
    written = read_pin(project)
    if written != Pin(pin.repository, commit, pin.subdirectory):
        path.write_text(text, encoding="utf-8")
        raise RunnerError(f"{path}: the rewritten pin reads back as {written}; left unchanged")


def pin_references(pin: Pin) -> re.Pattern[str]:
    """A reference to this repository at the pinned commit: `<owner>/<repo>/.github/...@<commit>` (a call of its
    workflows or actions) or `github.com/<owner>/<repo>/blob/<commit>/` (a link into its tree, the manual)."""
    repository = re.escape(pin.repository)
    return re.compile(
        rf"(?:(?<![\w./-]){repository}/\.github/[\w./-]+@|(?<![\w.-])github\.com/{repository}/blob/)"
        rf"{pin.commit}(?![0-9a-f])"
    )


def pinned_files(project: Path, pin: Pin) -> list[Path]:
    """The project's workflow, action and documentation files that name this repository at the pinned commit."""
    pattern = pin_references(pin)
    found = {path for glob in PINNED_GLOBS for path in project.glob(glob)}
    return sorted(path for path in found if pattern.search(path.read_text(encoding="utf-8")))


def move_pins(files: list[Path], pin: Pin, commit: str) -> None:
    """Every reference of `files` to this repository at `pin.commit` names `commit` instead."""
    pattern = pin_references(pin)
    for path in files:
        text = path.read_text(encoding="utf-8")
        path.write_text(
            pattern.sub(lambda match: match[0][: -len(pin.commit)] + commit, text), encoding="utf-8"
        )
