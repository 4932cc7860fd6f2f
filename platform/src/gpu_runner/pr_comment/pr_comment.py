"""One comment on the open pull request of the trained branch, created once and then edited in place.

GitHub's REST API through PyGithub (as github.py), with the workflow's GITHUB_TOKEN (`pull-requests: write`):
- "List pull requests" (GET /repos/{owner}/{repo}/pulls?state=open&head=owner:branch): the open pull requests
  whose head is this branch of THIS repository. GitHub's `head` filter is "user:ref-name", so a fork under the
  same owner with the same branch name would match it too: a pull request whose head repository is not this one
  is skipped (a fork's pull request never gets the comment, and its workflows never trigger this one);
- "List issue comments" (GET /repos/{owner}/{repo}/issues/{number}/comments, every page through the Link
  header): the comment to edit is the first one that carries the marker AND whose author is the workflow's own
  bot (github-actions[bot], type Bot). Anyone may paste the marker into a comment of their own; theirs is never
  edited;
- "Update an issue comment" (PATCH /repos/{owner}/{repo}/issues/comments/{id}) when it exists, else "Create an
  issue comment" (POST /repos/{owner}/{repo}/issues/{number}/comments).
Both write operations work with "Pull requests" (or "Issues") write on a pull request (docs.github.com "REST API
endpoints for issue comments", fine-grained token sections).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import requests
import yaml
from github import Auth, Github, GithubException
from github.IssueComment import IssueComment
from github.PullRequest import PullRequest

from gpu_runner.core import workflow_contract as contract
from gpu_runner.core.errors import RunnerError
from gpu_runner.core.github import (
    _REPOSITORY,
    DEFAULT_BASE_URL,
    _check_repository,
    _client_options,
    _github_message,
)
from gpu_runner.core.mlflow_rest import MlflowRest
from gpu_runner.pr_comment import pr_report

log = logging.getLogger(__name__)

# The author of every comment made with a workflow's GITHUB_TOKEN (docs.github.com "Automatic token
# authentication": the token is an installation token of the GitHub Actions app, whose bot user is this one).
BOT_LOGIN = "github-actions[bot]"
BOT_TYPE = "Bot"
PER_PAGE = 100  # the REST API's maximum page size ("Using pagination in the REST API")


DEFAULT_ALIAS = "champion"
# MLflow's alias rule (mlflow/utils/validation.py _validate_model_alias_name: letters, digits, _ and -).
_ALIAS = re.compile(r"[A-Za-z0-9_-]{1,255}")


class CommentError(RunnerError):
    """GitHub refused or could not be reached; the message says which and what to fix."""


@dataclass(frozen=True)
class Posted:
    pull_number: int
    comment_id: int
    action: str  # created | updated
    url: str


def _hint(status: int) -> str:
    return {
        401: "the token is not valid (pass the workflow's own GITHUB_TOKEN)",
        403: "the job needs `permissions: pull-requests: write` (and the repository setting 'Workflow permissions' "
        "must not cap it), or GitHub's secondary rate limit refused it",
        404: "the repository or pull request is not visible to this token",
        422: "GitHub refused the comment body",
    }.get(status, "GitHub had a problem; a re-run of this job retries")


def _fail(error: GithubException, action: str) -> CommentError:
    status = error.status or 0
    return CommentError(f"{action}: GitHub answered {status} {_github_message(error)} ({_hint(status)})")


def _own_comment(pull: PullRequest, marker: str, bot_login: str) -> IssueComment | None:
    """The oldest comment that carries the marker and that the workflow's bot wrote (comments come in
    ascending id order, "List issue comments"); PaginatedList follows the Link header's rel="next"."""
    for comment in pull.get_issue_comments():
        user = comment.user
        if (
            marker in (comment.body or "")
            and user is not None
            and user.login == bot_login
            and user.type == BOT_TYPE
        ):
            return comment
    return None


def publish(
    repository: str,
    branch: str,
    body: str,
    marker: str,
    token: str,
    *,
    base_url: str = DEFAULT_BASE_URL,
    bot_login: str = BOT_LOGIN,
    backoff_seconds: float = 2.0,
) -> list[Posted]:
    """Create or update the marked comment on every open pull request from `branch` of `repository`."""
    repository = _check_repository(repository)
    if marker not in body:
        raise CommentError("the comment body lacks its marker: a later run could not find it to edit it")
    if not token:
        raise CommentError(
            "GITHUB_TOKEN is not set: pass the workflow's token (permissions: pull-requests: write)"
        )
    owner = repository.partition("/")[0]
    client = Github(auth=Auth.Token(token), per_page=PER_PAGE, **_client_options(base_url, backoff_seconds))
    posted: list[Posted] = []
    try:
        repo = client.get_repo(repository, lazy=True)
        try:
            pulls = [
                p
                for p in repo.get_pulls(state="open", head=f"{owner}:{branch}")
                if p.head.ref == branch
                and p.head.repo is not None
                and p.head.repo.full_name.lower() == repository.lower()
            ]
        except GithubException as error:
            raise _fail(error, f"listing the open pull requests from {branch}") from None
        if not pulls:
            log.info("no open pull request from %s in %s: no comment posted", branch, repository)
            return []
        for pull in pulls:
            try:
                existing = _own_comment(pull, marker, bot_login)
                if existing is not None:
                    existing.edit(body)  # PATCH the comment's own `url`
                    posted.append(Posted(pull.number, int(existing.id), "updated", existing.html_url))
                else:
                    created = pull.create_issue_comment(body)
                    posted.append(Posted(pull.number, int(created.id), "created", created.html_url))
            except GithubException as error:
                raise _fail(error, f"commenting on pull request #{pull.number}") from None
            log.info("%s the comment on pull request #%s: %s", posted[-1].action, pull.number, posted[-1].url)
    except requests.RequestException as error:
        raise CommentError(f"cannot reach the GitHub API at {base_url} ({type(error).__name__})") from None
    finally:
        client.close()
    return posted


def registry_alias(config: Path) -> str:
    """`registry.alias` of the training config (the project's RegistryConfig default: champion)."""
    try:
        data = yaml.safe_load(config.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise CommentError(f"--config {config}: cannot read it ({error}); pass the training config") from None
    registry = data.get("registry") if isinstance(data, dict) else None
    alias = registry.get("alias", DEFAULT_ALIAS) if isinstance(registry, dict) else DEFAULT_ALIAS
    if not isinstance(alias, str) or not _ALIAS.fullmatch(alias):
        raise CommentError(
            f"--config {config}: registry.alias {alias!r} is not an MLflow alias (letters, digits, _ -)"
        )
    return alias


def workflow_run_url(env: Mapping[str, str]) -> str:
    """This workflow run's page, from the variables GitHub Actions sets (not from anything the run logged)."""
    server = env.get("GITHUB_SERVER_URL", "https://github.com").rstrip("/")
    repository, run_id = env.get("GITHUB_REPOSITORY", ""), env.get("GITHUB_RUN_ID", "")
    if not (
        server.startswith(("http://", "https://")) and _REPOSITORY.fullmatch(repository) and run_id.isdigit()
    ):
        return ""
    attempt = env.get("GITHUB_RUN_ATTEMPT", "")
    return f"{server}/{repository}/actions/runs/{run_id}" + (
        f"/attempts/{attempt}" if attempt.isdigit() else ""
    )


def comment(
    *, kind: str, mlflow_run_id: str, branch: str, commit: str, config: Path, env: Mapping[str, str]
) -> list[Posted]:
    """The whole job: check the inputs, build the body from MLflow, create or update the comment."""
    repository = env.get("GITHUB_REPOSITORY", "")
    if not repository:  # as every command the workflows run says it (cli.main)
        raise CommentError(
            "GITHUB_REPOSITORY is not set: GitHub Actions sets it; by hand, export GITHUB_REPOSITORY=owner/name"
        )
    if kind not in pr_report.KINDS:
        raise CommentError(f"--kind: '{kind}' is not one of {', '.join(pr_report.KINDS)}")
    run_id = contract.mlflow_run_id(mlflow_run_id)
    if commit:
        commit = contract.commit(commit)
    if not branch or "\n" in branch:
        raise CommentError("--branch: give the trained branch (github.ref_name)")
    ctx = pr_report.Context(kind, branch, commit, workflow_run_url(env), registry_alias(config))
    uri = env.get("MLFLOW_TRACKING_URI", "")
    client = MlflowRest.from_env(env)
    try:
        body = (
            pr_report.build(client, uri, run_id, ctx) if client else pr_report.build_local(uri, run_id, ctx)
        )
    except pr_report.ReportError as error:
        raise CommentError(str(error)) from None
    base_url = (env.get(contract.GITHUB_API_URL) or DEFAULT_BASE_URL).rstrip("/")
    return publish(
        repository,
        branch,
        body,
        pr_report.MARKERS[kind],
        env.get(contract.GITHUB_TOKEN, ""),
        base_url=base_url,
    )
