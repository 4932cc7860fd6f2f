"""Regenerate `{{cookiecutter.project_slug}}/uv.lock`, the generated project's lock file.

uv.lock names the project itself (and its extras in conflict markers), so the template stores it with those
places written as Jinja: bake the defaults, lock, then put the Jinja back. `make relock` runs this; the
template tests run `uv lock --check` inside baked projects, so a stale lock fails CI.

The baked lock is the starting point, so `uv lock` keeps every pin that still satisfies pyproject.toml and
only resolves what changed (a new extra of the platform does not move boto3); `--upgrade` (`make relock
RELOCK_ARGS=--upgrade`) resolves everything afresh.

Then platform/uv.lock, the platform's own test environment: locked, then every package it shares with the
project moved to the project's version (`uv lock --upgrade-package name==version`), so the platform's tests
run on what teams run (lock_parity.py; tests/test_lock_parity.py holds the two equal).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from cookiecutter.main import cookiecutter
from lock_parity import lock_drift

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE_LOCK = ROOT / "{{cookiecutter.project_slug}}" / "uv.lock"
PLATFORM = ROOT / "platform"
# Rounds of `uv lock --upgrade-package` before giving up: one pin can move a dependency another one shares.
ALIGN_ROUNDS = 3
SLUG = "{{ cookiecutter.project_slug }}"
# The bake's pin on the platform (issue 31): placeholders in the template that the post-generation hook fills
# with the template's GitHub repository and commit (hooks/post_gen_project.py, PLATFORM_TOKENS). Relocking
# fills them with this checkout's HEAD under a stand-in repository, locks, and puts the placeholders back.
REPOSITORY_TOKEN, COMMIT_TOKEN = "__platform_repository__", "__platform_commit__"
STAND_IN = "relock/platform"  # never fetched: git's insteadOf sends it to this checkout
PINNED_FILES = ("pyproject.toml", "uv.lock")


def head() -> str:
    """The commit uv locks the platform at: HEAD, whose platform/ must be committed (its dependencies are what
    the lock records)."""
    # platform/uv.lock is not the platform's metadata (this script rewrites it below): it may differ.
    status = ["git", "-C", str(ROOT), "status", "--porcelain", "--", "platform", ":!platform/uv.lock"]
    dirty = subprocess.run(status, check=True, capture_output=True, text=True).stdout
    if dirty:
        raise SystemExit("platform/ has uncommitted changes: commit them first (the lock records a commit's)")
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()  # fmt: skip


def platform_env() -> dict[str, str]:
    """git fetches the stand-in repository from this checkout (insteadOf): no network, no GitHub access."""
    return {
        **os.environ,
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": f"url.file://{ROOT}.insteadOf",
        "GIT_CONFIG_VALUE_0": f"https://github.com/{STAND_IN}",
    }


def pin(project: Path, commit: str) -> None:
    for name in PINNED_FILES:
        path = project / name
        path.write_text(path.read_text().replace(REPOSITORY_TOKEN, STAND_IN).replace(COMMIT_TOKEN, commit))


def unpin(lock_text: str, commit: str) -> str:
    return lock_text.replace(STAND_IN, REPOSITORY_TOKEN).replace(commit, COMMIT_TOKEN)


def templatize(lock_text: str, slug: str) -> str:
    """Replace the baked slug by its Jinja expression, including uv's `extra-<len>-<name>-<extra>` markers."""
    marker = re.compile(rf"extra-{len(slug)}-{re.escape(slug)}-")
    text = marker.sub(f"extra-{{{{ cookiecutter.project_slug | length }}}}-{SLUG}-", lock_text)
    text = text.replace(f'"{slug}"', f'"{SLUG}"')
    if slug in text:
        raise SystemExit(f"uv.lock still mentions '{slug}' somewhere the template does not handle")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--upgrade", action="store_true", help="resolve every package afresh (uv lock --upgrade)"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        # Without the hooks: the post-generation hook pins the clean commit, and relocking runs on a
        # changed pyproject.toml, before it is committed.
        project = Path(cookiecutter(str(ROOT), no_input=True, output_dir=tmp, accept_hooks=False))
        commit = head()
        pin(project, commit)
        upgrade = ["--upgrade"] if args.upgrade else []
        subprocess.run(["uv", "lock", *upgrade], cwd=project, check=True, env=platform_env())
        slug = project.name
        TEMPLATE_LOCK.write_text(templatize(unpin((project / "uv.lock").read_text(), commit), slug))
    print(f"wrote {TEMPLATE_LOCK.relative_to(ROOT)}")
    align_platform_lock(["--upgrade"] if args.upgrade else [])
    print(f"wrote {(PLATFORM / 'uv.lock').relative_to(ROOT)}")
    return 0


def align_platform_lock(upgrade: list[str]) -> None:
    """Lock platform/, then pin each package it shares with the project at the project's version."""
    subprocess.run(["uv", "lock", *upgrade], cwd=PLATFORM, check=True)
    for _ in range(ALIGN_ROUNDS):
        drift = lock_drift((PLATFORM / "uv.lock").read_text(), TEMPLATE_LOCK.read_text())
        if not drift:
            return
        # The project's highest version where it holds two (one per marker fork).
        pins = [f"--upgrade-package={name}=={versions[-1]}" for name, (_, versions) in sorted(drift.items())]
        subprocess.run(["uv", "lock", *pins], cwd=PLATFORM, check=True)
    raise SystemExit(
        "platform/uv.lock cannot take the project's versions of "
        + ", ".join(
            f"{name} (platform {ours}, project {', '.join(theirs)})" for name, (ours, theirs) in drift.items()
        )
        + ": widen platform/pyproject.toml's requirement, or move the project's pin"
    )


if __name__ == "__main__":
    sys.exit(main())
