"""`make template-update`: take the template's newer commits into this project with cruft, and never silently.

cruft update (2.16.0, cruft/_commands/update.py) applies the difference between the template at the project's
recorded commit and at the new one with `git apply -3`, and when that cannot run at all with `git apply --reject`.
Either way it exits 0 and writes the new commit into .cruft.json even when a hunk did not apply: a 3-way conflict
leaves conflict markers and an unmerged path, a rejected hunk a `<file>.rej` beside the file. So this wrapper
refuses a dirty tree first (the update must be one diff that can be reviewed and undone), runs cruft without its
prompt, then looks for every one of those three traces and exits 1 naming each file and what to do.

Arguments it does not know go to `cruft update` as they are (`--checkout v1.2`, `--template-path ../template`,
`--variables-to-update '...'`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

CRUFT_FILE = ".cruft.json"
# Directories no template writes into: never walked for .rej files (a .venv holds thousands of files).
NOT_WALKED = {".git", ".venv", "node_modules", ".e2e-cache", "__pycache__", ".ruff_cache", ".pytest_cache"}
# git's conflict markers (git-merge-file(1)): seven characters at the start of a line.
MARKERS = ("<<<<<<< ", ">>>>>>> ")
# git apply -3 labels the sides "ours" (this project) and "theirs" (the template's new version).
FIX_MARKED = (
    "conflict markers (<<<<<<< ours = yours, >>>>>>> theirs = the template's): keep what you need, delete the "
    "markers, `git add` the file"
)
FIX_REJECTED = "apply them by hand, then delete the .rej"


class UpdateError(Exception):
    """A reason not to update (or that the update failed), worded as the fix."""


def git(root: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise UpdateError(f"`git {' '.join(args)}` failed: {proc.stderr.strip()}")
    return proc.stdout


def recorded_commit(root: Path) -> str:
    return str(recorded_state(root)["commit"])


def recorded_state(root: Path) -> dict[str, object]:
    path = root / CRUFT_FILE
    if not path.is_file():
        raise UpdateError(
            f"{CRUFT_FILE} is missing, so the template this project came from is unknown (it was baked from a zip "
            "or from a template with uncommitted changes). Link it once with `uv run --only-group template cruft "
            "link <template-url>` (it asks for the commit you baked from), commit, and run this again."
        )
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(state, dict) or not isinstance(state["commit"], str) or not state["template"]:
            raise TypeError("commit and template must be set")
        return state
    except (ValueError, KeyError, TypeError) as error:
        raise UpdateError(
            f"{CRUFT_FILE} is not cruft's format ({error!r}): restore it with `git checkout`"
        ) from None


def require_clean_tree(root: Path) -> None:
    """Refuse to start on uncommitted or untracked changes: they would mix with the template's."""
    try:
        inside = git(root, "rev-parse", "--is-inside-work-tree").strip() == "true"
    except UpdateError:
        inside = False
    if not inside:
        raise UpdateError(
            "this project is not a git work tree, and an update must be a diff you can review and undo: "
            "`git init && git add -A && git commit -m 'baked from the template'` first"
        )
    status = git(root, "status", "--porcelain", "--untracked-files=normal").splitlines()
    if status:
        shown = "\n".join(f"  {line}" for line in status[:20])
        more = f"\n  ... and {len(status) - 20} more" if len(status) > 20 else ""
        raise UpdateError(
            f"the git working tree is not clean:\n{shown}{more}\n"
            "Commit or stash them first (`git stash -u`): the template update must be one diff of its own, which "
            "you review with `git diff HEAD` and can undo."
        )


def rejected_files(root: Path) -> list[str]:
    """Every `*.rej` below root: hunks `git apply --reject` could not place (also when .gitignore hides them)."""
    found = []
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(name for name in dirs if name not in NOT_WALKED)
        found += [
            str((Path(directory) / name).relative_to(root)) for name in sorted(files) if name.endswith(".rej")
        ]
    return found


def unmerged_files(root: Path) -> list[str]:
    return git(root, "diff", "--name-only", "--diff-filter=U").splitlines()


def files_with_markers(root: Path) -> list[str]:
    """Changed or new files that hold conflict markers."""
    changed = git(root, "diff", "--name-only", "HEAD").splitlines()
    changed += git(root, "ls-files", "--others", "--exclude-standard").splitlines()
    marked = []
    for name in sorted(set(changed)):
        path = root / name
        if not path.is_file():
            continue
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError:
            continue
        if any(line.startswith(MARKERS) for line in lines):
            marked.append(name)
    return marked


def conflict_report(root: Path, old: str, new: str) -> str:
    """What did not apply, one line per file with its fix; empty when everything applied."""
    rejected = rejected_files(root)
    marked = sorted(set(unmerged_files(root)) | set(files_with_markers(root)))
    if not rejected and not marked:
        return ""
    lines = [
        f"ERROR: the template update {old[:12]} -> {new[:12]} did not apply cleanly; resolve these files:"
    ]
    lines += [f"  {name}: {FIX_MARKED}" for name in marked]
    for name in rejected:
        target = name.removesuffix(".rej")
        lines.append(f"  {name}: the template's hunks that did not apply to {target}: {FIX_REJECTED}")
    if "uv.lock" in marked or "uv.lock.rej" in rejected:
        lines.append(
            "uv.lock: do not merge it by hand; resolve pyproject.toml, run `uv lock`, `git add uv.lock`."
        )
    lines += [
        "Nothing was dropped: each change the template made is in its file or in a .rej beside it.",
        f"Then `make install`, `make lint test` and commit ({CRUFT_FILE} already names {new[:12]}).",
        "To give the update up instead: `git reset --hard && git clean -fd` (the tree was clean before it).",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project-dir", type=Path, default=Path.cwd())
    args, cruft_args = parser.parse_known_args(argv)
    root = args.project_dir.resolve()
    try:
        state = recorded_state(root)
        old = str(state["commit"])
        require_clean_tree(root)
        # cruft runs the template's hooks (Python) at both commits on this machine: say whose, before it does.
        # A pull request that changes "template" in .cruft.json changes whose code that is.
        print(f"Template: {state['template']} (from {CRUFT_FILE}), this project at its commit {old[:12]}")
        # --skip-apply-ask: no "Apply diff and update? [y/n/s/v]" prompt (the CLI's default asks).
        command = [sys.executable, "-m", "cruft", "update", "--project-dir", str(root), "--skip-apply-ask"]
        proc = subprocess.run([*command, *cruft_args], cwd=root, check=False)
        if proc.returncode != 0:
            raise UpdateError(f"cruft update failed (exit {proc.returncode}); its message is above")
        new = recorded_commit(root)
        report = conflict_report(root, old, new)
    except UpdateError as error:
        print(f"ERROR: {error}", file=sys.stderr)
        return 1
    if report:
        print(report, file=sys.stderr)
        return 1
    changed = git(root, "status", "--short")
    if not changed:
        print(f"Already on the template's commit {new[:12]}; nothing changed.")
        return 0
    # The same commit with changed files: new answers (--variables-to-update) re-rendered the project.
    moved = f"from the template's commit {old[:12]} to {new[:12]}" if new != old else f"at commit {new[:12]}"
    print(f"Updated {moved}:")
    print(changed, end="")
    print(
        "Next: review `git diff HEAD` (the update is staged); `make install` (uv.lock may have changed; "
        "`uv lock --check` tells whether it matches pyproject.toml); `make lint test`; then commit."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
