"""Rules on the parsed workflows that no linter enforces (or only in some personas).

Pins from the action contracts (action_contracts.json) with matching `# vX.Y.Z` comments, `permissions: {}` at the
top, explicit job permissions, timeouts, no self-hosted runner reachable from a pull request, checkout without
persisted credentials, no `${{` inside `run:`, no dependency cache in a job that holds AWS credentials.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from gpu_runner_testing.workflow_checks.workflow_files import (
    AWS_CREDENTIALS,
    CONTRACTS_FILE,
    GITHUB_HOSTED_RE,
    PLATFORM_CALL,
    PR_EVENTS,
    SETUP_ACTION,
    iter_steps,
    iter_uses,
    load_yaml,
    step_uses,
    triggers,
)

SHA_RE = re.compile(r"^[0-9a-f]{40}$")
# A `uses:` line as written, with its optional trailing comment (the pinned version).
USES_LINE_RE = re.compile(r"""^\s*(?:-\s+)?uses:\s*(['"]?)(?P<ref>[^\s'"#]+)\1\s*(?:#\s*(?P<comment>.*))?$""")
# Actions that restore or save a dependency cache: the `with:` key that switches it, and whether it is on when
# unset (setup-uv's default "auto" caches on GitHub-hosted runners).
CACHE_ACTIONS = {"astral-sh/setup-uv": ("enable-cache", True), "actions/setup-python": ("cache", False)}


def uses_problems(path: Path, doc: dict[str, Any], pins: dict[tuple[str, str], str]) -> list[str]:
    """Every remote `uses:` is owner/repo@<sha> from the pin table, with `# <version>` matching that pin."""
    problems: list[str] = []
    written: dict[str, list[str | None]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if m := USES_LINE_RE.match(line):
            comment = m["comment"].split()[0] if m["comment"] else None
            written.setdefault(m["ref"], []).append(comment)
    for where, ref in iter_uses(doc):
        if ref not in written:
            problems.append(f"{where}: `uses: {ref}` is not written on one line as `uses: <ref> # <version>`")
            continue
        if ref.startswith("./"):
            root = next(d.parent for d in path.parents if d.name == ".github")
            if (
                not any((root / ref / name).is_file() for name in ("action.yml", "action.yaml"))
                and not (root / ref).is_file()
            ):
                problems.append(f"{where}: local action {ref} does not exist")
            continue
        if PLATFORM_CALL.match(ref):
            # The platform's actions and reusable workflows: pinned by the lock's commit, not by the pin table
            # (workflow_files.platform_call_problems holds every such call to pyproject.toml's pin; the launch
            # and submit roles trust the reusable workflows at that commit only).
            if not SHA_RE.match(ref.rpartition("@")[2]):
                problems.append(f"{where}: {ref} is not pinned to a full commit SHA")
            continue
        if ref.startswith("docker://"):
            if "@sha256:" not in ref:
                problems.append(f"{where}: docker image {ref} is not pinned by digest")
            continue
        name, _, sha = ref.partition("@")
        owner_repo = "/".join(name.split("/")[:2])
        if not SHA_RE.match(sha):
            problems.append(f"{where}: {ref} is not pinned to a full commit SHA")
            continue
        version = pins.get((owner_repo, sha))
        if version is None:
            problems.append(
                f"{where}: {owner_repo}@{sha} is not in the pin table ({CONTRACTS_FILE.name} of the platform)"
            )
            continue
        comments = written[ref]
        if any(c != version for c in comments):
            problems.append(f"{where}: {ref} must carry the version comment `# {version}`, found {comments}")
    return problems


def workflow_problems(path: Path, pins: dict[tuple[str, str], str]) -> list[str]:
    """Rules on one parsed workflow that the linters do not enforce (or only in some personas)."""
    doc = load_yaml(path)
    problems = uses_problems(path, doc, pins)
    events = triggers(doc)
    if "pull_request_target" in events:
        problems.append("triggered by pull_request_target (runs fork code with a privileged token)")
    if doc.get("permissions", None) != {}:
        found = doc.get("permissions", "<missing>")
        problems.append("top-level permissions must be {}, found " + repr(found))
    for job_id, job in (doc.get("jobs") or {}).items():
        perms = job.get("permissions")
        if not isinstance(perms, dict):
            problems.append(f"jobs.{job_id}: permissions must be an explicit mapping, found {perms!r}")
        if "uses" not in job and "timeout-minutes" not in job:
            problems.append(f"jobs.{job_id}: no timeout-minutes")
        if events & set(PR_EVENTS):
            runs_on = job.get("runs-on")
            labels = runs_on if isinstance(runs_on, list) else [runs_on]
            if "uses" not in job and not all(
                isinstance(x, str) and GITHUB_HOSTED_RE.match(x) for x in labels
            ):
                problems.append(
                    f"jobs.{job_id}: runs-on {runs_on!r} is reachable from a pull request but is not "
                    "a literal GitHub-hosted label (self-hosted runners must never run pull request code)"
                )
    for where, step in iter_steps(doc):
        if str(step.get("uses", "")).startswith("actions/checkout@"):
            persist = (step.get("with") or {}).get("persist-credentials")
            if persist not in (False, "false"):
                problems.append(f"{where}: actions/checkout without persist-credentials: false")
    problems += [
        where + ": `${{` inside run: (pass the value through env:)" for where in expressions_in_run(doc)
    ]
    problems += cache_problems(doc)
    return problems


def holds_aws_credentials(job: dict[str, Any]) -> bool:
    """The job configures AWS credentials, or runs on a non-GitHub-hosted runner (our GPU instances carry an
    instance profile)."""
    runs_on = job.get("runs-on")
    labels = runs_on if isinstance(runs_on, list) else [runs_on]
    hosted = all(isinstance(x, str) and GITHUB_HOSTED_RE.match(x) for x in labels)
    return not hosted or any(step_uses(s) == AWS_CREDENTIALS for s in job.get("steps") or [])


def cache_problems(doc: dict[str, Any]) -> list[str]:
    """A job holding AWS credentials must not restore a cache: caches are shared across branches, so a
    poisoned entry would run with the credentials. The local setup action caches unless told
    `enable-cache: "false"`."""
    problems = []
    for job_id, job in (doc.get("jobs") or {}).items():
        if "uses" in job or not holds_aws_credentials(job):
            continue
        for i, step in enumerate(job.get("steps") or []):
            where, uses, with_ = f"jobs.{job_id}.steps[{i}]", step_uses(step), step.get("with") or {}
            if uses == "actions/cache" or uses.startswith("actions/cache/"):
                problems.append(f"{where}: actions/cache in a job that holds AWS credentials")
            elif uses == SETUP_ACTION and str(with_.get("enable-cache")).lower() != "false":
                problems.append(
                    f'{where}: {SETUP_ACTION} without enable-cache: "false" holds AWS credentials'
                )
            elif uses in CACHE_ACTIONS:
                key, on_by_default = CACHE_ACTIONS[uses]
                value = str(with_.get(key, "")).lower()
                if value not in {"", "false"} or (value == "" and on_by_default):
                    problems.append(f"{where}: {uses} with a cache in a job that holds AWS credentials")
    return problems


def expressions_in_run(doc: dict[str, Any]) -> list[str]:
    """Steps whose `run:` contains `${{`: GitHub pastes the value into the script before the shell sees it."""
    return [where for where, step in iter_steps(doc) if "${{" in str(step.get("run", ""))]
