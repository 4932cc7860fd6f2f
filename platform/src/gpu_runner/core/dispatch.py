"""What a workflow dispatch needs and must not be trusted with: the run's GITHUB_TOKEN, the API's address, and a
dispatch input `commit` that must be in the dispatched branch's history (launch, `batch ship`, resume, next-wave)."""

from __future__ import annotations

import os

from gpu_runner.core import workflow_contract as contract
from gpu_runner.core.errors import RunnerError
from gpu_runner.core.github import DEFAULT_BASE_URL, check_commit_on_branch
from gpu_runner.core.naming import RunContext


def api_base_url() -> str:
    """GitHub's REST API of this run (GITHUB_API_URL on GitHub Enterprise Server), else api.github.com."""
    return os.environ.get(contract.GITHUB_API_URL) or DEFAULT_BASE_URL


def workflow_token(permission: str) -> str:
    """The run's GITHUB_TOKEN, which the step passes; refused when missing, naming the permission it needs."""
    token = os.environ.get(contract.GITHUB_TOKEN, "")
    if not token:
        raise RunnerError(f"GITHUB_TOKEN is not set: pass the workflow's token (permissions: {permission})")
    return token


def check_dispatch_commit(commit: str, ctx: RunContext) -> None:
    """A dispatch input `commit` must be in the dispatched branch's history (GitHub's compare), for launch and for
    `batch ship` alike: a hand-made dispatch must not send another branch's code to the GPU with this branch's
    roles."""
    contract.commit(commit)
    token = os.environ.get(contract.GITHUB_TOKEN, "")
    if not token:
        raise RunnerError(
            "GITHUB_TOKEN is not set: the launch step passes the workflow's token (permissions: contents: read) "
            "to check that the dispatch input `commit` is on the dispatched branch"
        )
    # For workflow_dispatch, GITHUB_SHA is the "Last commit on the GITHUB_REF branch or tag" (docs.github.com,
    # "Events that trigger workflows", workflow_dispatch, read 2026-12-01): the head `commit` must be behind.
    if not contract.COMMIT.fullmatch(ctx.commit):
        raise RunnerError(f"GITHUB_SHA {ctx.commit!r} is not a commit: run launch inside the workflow run")
    check_commit_on_branch(ctx.repository, commit, ctx.branch, ctx.commit, token, api_base_url())
