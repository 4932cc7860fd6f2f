"""The platform a project pins, as a directory: the template repository's tree at the commit of the project's
`[tool.uv.sources] gpu-runner`.

A project's workflows call the platform's composite actions as `<owner>/<template>/.github/actions/<name>@<commit>`
(and GitHub downloads the whole repository at that commit to run one). Offline, the tests read those files from
this tree: the contract checks resolve a call's inputs and outputs against the action.yml it names, and the act
stories hand the tree to act with `--local-repository <owner>/<template>@<commit>=<tree>`.

Fetched once per commit, one level deep by SHA (gpu_runner.pin.remote, as `make platform-update` does), from where
git's configuration sends `https://github.com/<owner>/<template>`: GitHub, or a local clone through `insteadOf`
(this repository's tests). The tree is kept under `cache` by commit: a commit's files never change.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from gpu_runner.pin.project_pin import Pin, read_pin
from gpu_runner.pin.remote import Remote


def platform_tree(project: Path, cache: Path) -> Path:
    """The directory holding the pinned platform commit's whole tree, fetched into `cache` when missing."""
    return tree_at(read_pin(project), cache)


def tree_at(pin: Pin, cache: Path) -> Path:
    """The tree of `pin.repository` at `pin.commit`: `cache/platform/<commit>`. Built beside it and renamed into
    place, so parallel test workers never see half a tree (the first rename wins; the others' copies go)."""
    tree = cache / "platform" / pin.commit
    if tree.is_dir():
        return tree
    tree.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="platform-fetch-") as workdir:
        remote = Remote(pin.url, Path(workdir))
        remote.fetch(pin.commit)
        building = Path(tempfile.mkdtemp(prefix=f".{pin.commit}-", dir=tree.parent))
        try:
            remote.export(pin.commit, building)
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
    try:
        building.rename(tree)
    except OSError:  # another worker renamed its copy first: the same commit, the same files
        shutil.rmtree(building, ignore_errors=True)
    return tree
