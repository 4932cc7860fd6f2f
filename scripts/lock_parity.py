"""The platform's own lock (platform/uv.lock) against the generated project's (the template's uv.lock): a
package both hold must be at a version the project locks, so the platform's tests run on the botocore,
moto and MLflow a team's project runs on. `make relock` aligns the platform's lock; tests/test_lock_parity.py
holds it there."""

from __future__ import annotations

import tomllib
from collections import defaultdict


def locked_versions(lock_text: str) -> dict[str, set[str]]:
    """Package name -> the versions a uv.lock holds (a project lock may hold two, one per marker fork). The
    template's lock is TOML with Jinja only inside strings, so it parses as it is."""
    versions: dict[str, set[str]] = defaultdict(set)
    for package in tomllib.loads(lock_text)["package"]:
        if "version" in package:
            versions[package["name"]].add(package["version"])
    return versions


def lock_drift(platform_lock: str, project_lock: str) -> dict[str, tuple[str, list[str]]]:
    """Each package of the platform's lock at a version the project's lock does not hold: name -> (the
    platform's version, the project's versions). Packages only one lock holds are not drift."""
    project = locked_versions(project_lock)
    return {
        name: (version, sorted(project[name]))
        for name, versions in locked_versions(platform_lock).items()
        if name in project
        for version in versions
        if version not in project[name]
    }
