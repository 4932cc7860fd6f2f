"""Extract the contract (inputs, outputs, runs.using) of every pinned action from its own action.yml.

    python scripts/extract_action_contracts.py --mirror <dir of bare clones> [--read-on YYYY-MM-DD]
    python scripts/extract_action_contracts.py --git-dir actions/checkout=/path/to/checkout.git ...

Reads each `uses: owner/repo@<sha> # <version>` of the generated workflows and composite actions, plus the
team's allowed pins (tests/action_pins.json), from local bare git snapshots of the action repositories (the
layout is <mirror>/<owner>+<repo>/repo, as `git clone --bare` makes it), and writes the platform's
gpu_runner_testing/workflow_checks/action_contracts.json, against which a generated project's
tests/test_action_contracts.py checks every workflow offline, and this repository's tests the platform's.

For each pin it reads `action.yml` at the pinned SHA. When that SHA is not in the snapshot (a snapshot older
than the pin), the entry says so (`sha_in_snapshot: false`) and records the contract of the newest release tag
of the same major version the snapshot has, as evidence only: the pin itself was not checked.

Only names and shapes are kept (required, whether a default exists, deprecation, output names, runs.using); no
descriptions or code. Hand-written on PyYAML + git because no library reads action metadata from a git object.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ROOT / "{{cookiecutter.project_slug}}"
OUTPUT = ROOT / "platform" / "src" / "gpu_runner_testing" / "workflow_checks" / "action_contracts.json"
TEAM_PINS = ROOT / "tests" / "action_pins.json"
PIN = re.compile(r"uses:\s*([\w.-]+/[\w.-]+)@([0-9a-f]{40})\s*#\s*(v[\w.-]+)")
RELEASE_TAG = re.compile(r"^v(\d+)\.(\d+)\.(\d+)$")


def pins() -> list[tuple[str, str, str]]:
    """(repo, sha, version) of every remote pin in the generated workflows/actions and the team's pin list."""
    found: set[tuple[str, str, str]] = set()
    github = PROJECT / ".github"
    sources = [*(github / "workflows").glob("*.yml"), *(github / "actions").glob("*/action.yml")]
    for source in sources:
        found |= {m.groups() for m in PIN.finditer(source.read_text(encoding="utf-8"))}
    for pin in json.loads(TEAM_PINS.read_text(encoding="utf-8"))["pins"]:
        found.add((pin["action"], pin["sha"], pin["version"]))
    return sorted(found)


def git(git_dir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(git_dir), *args], capture_output=True, text=True, check=check)


def has_commit(git_dir: Path, rev: str) -> bool:
    return git(git_dir, "cat-file", "-e", f"{rev}^{{commit}}", check=False).returncode == 0


def metadata(git_dir: Path, rev: str) -> dict[str, Any]:
    for name in ("action.yml", "action.yaml"):  # GitHub accepts both names; action.yml is preferred
        shown = git(git_dir, "show", f"{rev}:{name}", check=False)
        if shown.returncode == 0:
            return yaml.safe_load(shown.stdout)
    raise SystemExit(f"{git_dir}: no action.yml or action.yaml at {rev}")


def contract(meta: dict[str, Any]) -> dict[str, Any]:
    """The shape a caller must respect: input names, required, whether a default exists, output names."""
    inputs = {}
    for name, spec in (meta.get("inputs") or {}).items():
        spec = spec or {}
        entry = {"required": str(spec.get("required", False)).lower() == "true", "default": "default" in spec}
        if "deprecationMessage" in spec:
            entry["deprecated"] = True
        inputs[name] = entry
    return {
        "runs_using": meta["runs"]["using"],
        "inputs": inputs,
        "outputs": sorted(meta.get("outputs") or {}),
    }


def newest_release(git_dir: Path, major: str) -> str | None:
    """The newest vX.Y.Z tag with the pin's major version (else any major), as evidence for an unread pin."""
    tags = [t for t in git(git_dir, "tag", "--list", "v*").stdout.split() if RELEASE_TAG.match(t)]

    def key(tag: str) -> tuple[int, ...]:
        return tuple(int(part) for part in RELEASE_TAG.match(tag).groups())  # type: ignore[union-attr]

    same = [t for t in tags if t.split(".")[0] == major]
    return max(same or tags, key=key, default=None)


def entry(repo: str, sha: str, version: str, git_dir: Path) -> dict[str, Any]:
    head = git(git_dir, "rev-parse", "HEAD").stdout.strip()
    snapshot = {
        "fetch": f"github:{repo}",
        "head": head,
        "head_date": git(git_dir, "log", "-1", "--format=%cI", head).stdout.strip(),
    }
    tag = git(git_dir, "rev-parse", "--verify", "--quiet", f"refs/tags/{version}^{{commit}}", check=False)
    tag_commit = tag.stdout.strip() or None
    record: dict[str, Any] = {"repo": repo, "sha": sha, "version": version, "snapshot": snapshot}
    if has_commit(git_dir, sha):
        record |= {"sha_in_snapshot": True, "read_at": sha, "tag_commit": tag_commit}
        return record | contract(metadata(git_dir, sha))
    evidence = newest_release(git_dir, version.split(".")[0])
    if evidence is None:
        raise SystemExit(f"{repo}: {sha} not in the snapshot and no release tag to read instead")
    evidence_commit = git(git_dir, "rev-parse", f"refs/tags/{evidence}^{{commit}}").stdout.strip()
    major = version.split(".")[0]
    same_major = evidence.split(".")[0] == major
    which = f"the newest {major} release" if same_major else f"no {major} release; the newest"
    record |= {
        "sha_in_snapshot": False,
        "read_at": evidence_commit,
        "read_at_tag": evidence,
        "tag_commit": tag_commit,
        "note": (
            f"NOT CHECKED: {sha} ({version}) is not in the snapshot (head {head[:12]} of "
            f"{snapshot['head_date']}); inputs and outputs are those of {evidence} ({evidence_commit[:12]}), "
            f"{which} the snapshot has. Re-run this script on a snapshot that has the pin."
        ),
    }
    return record | contract(metadata(git_dir, evidence_commit))


def render(data: dict[str, Any]) -> str:
    """JSON with one line per action field and per input: a re-extraction diff reads as a change list."""

    def one(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False)

    blocks = []
    for action in data["actions"]:
        fields = [f'   "{key}": {one(value)}' for key, value in action.items() if key != "inputs"]
        inputs = ",\n".join(f'    "{name}": {one(spec)}' for name, spec in action["inputs"].items())
        fields.append(f'   "inputs": {{\n{inputs}\n   }}')
        blocks.append("  {\n" + ",\n".join(fields) + "\n  }")
    head = [f' "{key}": {one(value)}' for key, value in data.items() if key != "actions"]
    text = "{\n" + ",\n".join([*head, ' "actions": [\n' + ",\n".join(blocks) + "\n ]"]) + "\n}\n"
    assert json.loads(text) == data
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", type=Path, help="directory holding <owner>+<repo>/repo bare git dirs")
    parser.add_argument("--git-dir", action="append", default=[], metavar="OWNER/REPO=PATH")
    parser.add_argument("--read-on", default=datetime.datetime.now(datetime.UTC).date().isoformat())
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    git_dirs = dict(item.split("=", 1) for item in args.git_dir)
    actions = []
    for repo, sha, version in pins():
        path = git_dirs.get(repo) or (args.mirror / repo.replace("/", "+") / "repo" if args.mirror else None)
        if path is None or not Path(path).is_dir():
            raise SystemExit(f"no git dir for {repo}: pass --mirror or --git-dir {repo}=PATH")
        actions.append(entry(repo, sha, version, Path(path)))
    data = {
        "_about": (
            "Contracts of the pinned actions, from each action's own action.yml, extracted by the template's "
            "scripts/extract_action_contracts.py from snapshots of the action repositories. inputs: "
            "required = `required: true` (GitHub does not enforce it: docs.github.com, Metadata syntax "
            "reference, 'inputs'), default = the input has one. sha_in_snapshot false = the pin itself could "
            "not be read: see note."
        ),
        "read_on": args.read_on,
        "actions": actions,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(render(data), encoding="utf-8")
    unchecked = [f"{a['repo']}@{a['version']}" for a in actions if not a["sha_in_snapshot"]]
    print(f"wrote {args.output} ({len(actions)} pins; not in the snapshots: {', '.join(unchecked) or '-'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
