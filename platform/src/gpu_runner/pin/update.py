"""`gpu-runner platform-update`: move a project's pin of the platform to another commit, in pyproject.toml,
uv.lock, the workflows and the links to the manual together, and say what the project must do after it.

What must run again is read from the two commits, not trusted to the changelog alone: the roles trust the
platform's reusable workflows at the pinned commit, so every move needs `make bootstrap` (and `make batch-up`
for the Batch submit role), which also ships the reaper Lambda its zip of the new package
(setup/lambda_zip.py); a changed MLflow server stack must be deployed again too.
"""

from __future__ import annotations

import shlex
import subprocess
import tempfile
import tomllib
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from gpu_runner.core.errors import RunnerError
from gpu_runner.pin import changelog
from gpu_runner.pin.project_pin import (
    Pin,
    move_pins,
    pinned_files,
    read_pin,
    write_pin,
)
from gpu_runner.pin.remote import RELEASE_TAG, Remote

CHANGELOG = "CHANGELOG.md"
PACKAGE = "src/gpu_runner"
# The stacks a project deploys from the package, relative to the platform's directory, and the make target of
# the generated project that deploys each again (its Makefile; a test holds both to the files).
STACKS = {
    "src/gpu_runner/setup/gpu-runner.yaml": "make bootstrap",
    "src/gpu_runner/batch/batch.yaml": "make batch-up (if the project uses AWS Batch)",
    "src/gpu_runner/mlflow_server/mlflow-server.yaml": "make mlflow-server-up (if the team runs the MLflow server)",
}
# Every move of the pin: the launch roles trust the platform's start and stop workflows at the pinned commit (the
# gpu-runner stack's PlatformCommit), and the Batch submit role batch.yml there (the Batch stack copies it).
TRUST = (
    "make bootstrap (the launch roles trust the platform's workflows at the pinned commit: until it runs, "
    "the GPU jobs get no AWS credentials; it also ships the reaper Lambda the new package)"
)
BATCH_TRUST = (
    "make batch-up (if the project uses AWS Batch: its submit role trusts batch.yml at the pinned commit)"
)
LOCK_TIMEOUT_SECONDS = 600


@dataclass(frozen=True)
class Plan:
    pin: Pin
    target: str  # the commit the pin moves to
    label: str  # what the user asked for: a release tag, a branch or the commit
    old_version: changelog.Version
    new_version: changelog.Version
    notes: list[changelog.Section] = field(default_factory=list)
    then_run: list[str] = field(default_factory=list)
    pinned_paths: list[Path] = field(
        default_factory=list
    )  # workflows and pages naming the pin (project-relative)


def version_at(remote: Remote, commit: str, pin: Pin) -> changelog.Version:
    path = f"{pin.subdirectory}/pyproject.toml"
    text = remote.show(commit, path)
    if text is None:
        raise RunnerError(f"{pin.repository}@{commit[:12]} has no {path}: it holds no platform to pin")
    try:
        return changelog.parse_version(tomllib.loads(text)["project"]["version"])
    except (tomllib.TOMLDecodeError, KeyError, ValueError) as error:
        raise RunnerError(
            f"{pin.repository}@{commit[:12]} {path}: no MAJOR.MINOR.PATCH version ({error})"
        ) from error


def newest_release(remote: Remote) -> tuple[str, str]:
    releases = remote.releases()
    if not releases:
        raise RunnerError(
            f"{remote.url} has no release tag ({RELEASE_TAG}<version>) yet: name what to take with TO=<branch, "
            "tag or commit> (make platform-update TO=main)"
        )
    tag = max(releases, key=lambda name: changelog.parse_version(name.removeprefix(RELEASE_TAG)))
    return tag, releases[tag]


def then_run(remote: Remote, pin: Pin, target: str) -> list[str]:
    """The make targets the project must run after the update, each once, in deployment order: the two that
    move the roles' trust to the new commit always, and a stack's own target when its template changed."""
    if target == pin.commit:
        return []
    changed = set(remote.changed(pin.commit, target, f"{pin.subdirectory}/{PACKAGE}"))
    steps = [TRUST, BATCH_TRUST]
    steps += [
        step
        for path, step in STACKS.items()
        if f"{pin.subdirectory}/{path}" in changed
        and not step.startswith(("make bootstrap", "make batch-up"))
    ]
    return steps


def plan(project: Path, to: str, workdir: Path, allow_downgrade: bool = False) -> Plan:
    """What moving the pin to `to` (a release tag, a branch or a commit; empty: the newest release) means."""
    pin = read_pin(project)
    remote = Remote(pin.url, workdir)
    label, target = newest_release(remote) if not to else (to, remote.resolve(to))
    remote.fetch(*dict.fromkeys((pin.commit, target)))
    old_version, new_version = version_at(remote, pin.commit, pin), version_at(remote, target, pin)
    if new_version < old_version and not allow_downgrade:
        raise RunnerError(
            f"--to {label}: version {changelog.version_text(new_version)} is older than the pinned "
            f"{changelog.version_text(old_version)}; to go back on purpose, add --allow-downgrade"
        )
    notes_path = f"{pin.subdirectory}/{CHANGELOG}"
    notes = changelog.taken_with(
        remote.show(pin.commit, notes_path) or "", remote.show(target, notes_path) or "", old_version
    )
    return Plan(
        pin, target, label, old_version, new_version, notes, then_run(remote, pin, target),
        [path.relative_to(project) for path in pinned_files(project, pin)],
    )  # fmt: skip


def apply(project: Path, chosen: Plan, uv: str) -> None:
    """Write the new pin everywhere and lock; on any failure put every file back as it was."""
    pinned = [project / path for path in chosen.pinned_paths]
    files = [project / "pyproject.toml", project / "uv.lock", *pinned]
    before = {path: path.read_bytes() for path in files if path.exists()}
    try:
        write_pin(project, chosen.pin, chosen.target)
        move_pins(pinned, chosen.pin, chosen.target)
        lock = subprocess.run(
            [*shlex.split(uv), "lock", "--upgrade-package", "gpu-runner"], cwd=project, capture_output=True,
            text=True, timeout=LOCK_TIMEOUT_SECONDS, check=False,
        )  # fmt: skip
        if lock.returncode != 0:
            raise RunnerError(f"uv lock failed, nothing changed:\n{lock.stderr.strip()[-3000:]}")
    except BaseException:
        for path, content in before.items():
            path.write_bytes(content)
        raise


def inert(text: str) -> str:
    """The changelog as plain text: it comes from whichever repository the pin names, so control characters
    (a terminal's escape sequences among them) are dropped before it reaches the terminal."""
    return "".join(char for char in text if char in "\n\t" or unicodedata.category(char) != "Cc")


def report(chosen: Plan, applied: bool) -> str:
    """What the update does or did: the two commits and versions, the changelog between them, what to run."""
    version = changelog.version_text(chosen.old_version), changelog.version_text(chosen.new_version)
    if chosen.target == chosen.pin.commit:
        return f"The platform is already at {chosen.label} ({chosen.target[:12]}, version {version[1]}): nothing to do."
    verb = "Moved" if applied else "Would move"
    lines = [
        f"{verb} the platform ({chosen.pin.repository}) from {chosen.pin.commit[:12]} (version {version[0]}) "
        f"to {chosen.label} ({chosen.target[:12]}, version {version[1]}):",
        "  pyproject.toml, uv.lock" + "".join(f", {path.as_posix()}" for path in chosen.pinned_paths),
        "",
    ]
    for section in chosen.notes:
        lines += [f"## {inert(section.title)}", inert(section.body), ""]
    if not chosen.notes:
        lines += ["(no changelog entry between the two commits)", ""]
    if chosen.then_run:
        lines.append("Then run, in this order:" if applied else "It would then need:")
        lines += [f"  {step}" for step in chosen.then_run]
    else:
        lines.append("No stack or package file changed: nothing to deploy again.")
    if applied:
        lines.append("Review with `git diff`, run `make install test`, and commit.")
    return "\n".join(lines)


def platform_update(project: Path, to: str, uv: str, check: bool, allow_downgrade: bool) -> str:
    with tempfile.TemporaryDirectory(prefix="platform-update-") as workdir:
        chosen = plan(project, to, Path(workdir), allow_downgrade)
    if not check and chosen.target != chosen.pin.commit:
        apply(project, chosen, uv)
    return report(chosen, applied=not check)
