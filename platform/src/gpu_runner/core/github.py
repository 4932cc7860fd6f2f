"""GitHub side of the runner lifecycle: JIT registration, lookup, wait-until-online and deletion.

One code path for both credentials (fine-grained PAT or GitHub App installation token): PyGithub does the auth
(including refreshing the App's installation token), the HTTP retries and the error types; this module adds the
runner endpoints PyGithub lacks (repository `generate-jitconfig`, a name-filtered list), the retry policy of the
teardown (422 = runner busy) and error messages that say what to fix.

Secrets handled here (tokens, the App key, the encoded JIT config) are never logged, printed or put in a repr.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn
from urllib.parse import quote

import requests
import tenacity
from github import Auth, Github, GithubException, GithubIntegration, GithubRetry
from github.GithubException import RateLimitExceededException
from github.PaginatedList import PaginatedList
from github.Requester import Requester
from github.SelfHostedActionsRunner import SelfHostedActionsRunner

from gpu_runner.core.errors import RegistrationTimeout, RunnerError, SettingsError
from gpu_runner.core.workflow_contract import mask

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.github.com"
ENV_TOKEN = "GPU_RUNNER_TOKEN"
ENV_APP_ID = "GPU_RUNNER_APP_ID"
ENV_APP_PRIVATE_KEY = "GPU_RUNNER_APP_PRIVATE_KEY"
ENV_API_URL = "GITHUB_API_URL"  # set by GitHub Actions (also on GitHub Enterprise Server)

# GitHub's owner and repository name rules; anything else would be pasted into a URL path.
_REPOSITORY = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}")
# Transient server errors worth retrying; 429 (and 403 with Retry-After or a rate-limit message, which
# GithubRetry recognises itself) are rate limits and wait for the time the server asks for.
_RETRY_STATUSES = (429, 500, 502, 503, 504)
_HTTP_ATTEMPTS = 4  # 1 try + 3 retries: a ~minute-long GitHub blip is absorbed, a real outage fails the job
# Between registration polls: a runner that connects after a minute should not be noticed minutes later.
_MAX_POLL_INTERVAL = 15.0
_MAX_BUSY_INTERVAL = 30.0
# A primary rate-limit reset can be an hour away; waiting that long in a stop job is worse than failing loudly
# (the instance still terminates itself and the reaper deletes the runner later).
_MAX_RATE_LIMIT_WAIT = 600.0
_PERMISSION_HINT = (
    "the credential needs the repository permission 'Administration: write' on {repo} "
    "(fine-grained PAT: Repository permissions > Administration > Read and write; GitHub App: the same permission, "
    "then approve it on the installation). The workflow's default GITHUB_TOKEN cannot manage runners."
)


class _RedactSecretResponses(logging.Filter):
    """PyGithub logs whole response bodies at DEBUG; the bodies of these endpoints are credentials."""

    SECRET_PATHS = ("/generate-jitconfig", "/access_tokens", "/registration-token", "/remove-token")

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        # Requester's debug record: (verb, scheme, host, url, request headers, input, status, headers, output).
        if isinstance(args, tuple) and len(args) == 9 and any(p in str(args[3]) for p in self.SECRET_PATHS):
            record.args = (*args[:8], "<response body redacted: it holds a secret>")
        return True


logging.getLogger("github.Requester").addFilter(_RedactSecretResponses())


@dataclass(frozen=True)
class Runner:
    """A self-hosted runner registration as GitHub reports it."""

    id: int
    name: str
    status: str  # "online" or "offline"
    busy: bool
    labels: tuple[str, ...]

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> Runner:
        return cls(
            id=int(data["id"]),
            name=str(data["name"]),
            status=str(data.get("status", "")),
            busy=bool(data.get("busy", False)),
            labels=tuple(str(label["name"]) for label in data.get("labels") or ()),
        )


@dataclass(frozen=True)
class JitConfig:
    """A just-in-time runner registration; `encoded_jit_config` registers exactly one runner, so it is a secret."""

    runner: Runner
    # repr=False: a traceback or log line that shows this object must not leak a usable registration.
    encoded_jit_config: str = field(repr=False)


class GitHubRunners:
    """Self-hosted runners of one repository, through PyGithub with either a PAT or a GitHub App installation."""

    def __init__(
        self,
        repository: str,
        auth: Auth.Auth,
        base_url: str = DEFAULT_BASE_URL,
        backoff_seconds: float = 2.0,
        busy_timeout_seconds: float = 300,
        per_page: int = 100,
    ) -> None:
        self.repository = _check_repository(repository)
        self.owner, _, self.repo = self.repository.partition("/")
        self.base_url = base_url.rstrip("/")
        self.backoff_seconds = backoff_seconds
        self.busy_timeout_seconds = busy_timeout_seconds
        self._path = f"/repos/{self.owner}/{self.repo}/actions/runners"
        self._repository_checked = False
        self._github = Github(auth=auth, per_page=per_page, **_client_options(self.base_url, backoff_seconds))

    # ------------------------------------------------------------------ construction from the environment
    @classmethod
    def from_env(cls, repository: str, env: Mapping[str, str] = os.environ, **options: Any) -> GitHubRunners:
        """PAT from GPU_RUNNER_TOKEN, else a GitHub App from GPU_RUNNER_APP_ID + GPU_RUNNER_APP_PRIVATE_KEY.

        `options` go to the constructor (backoff_seconds, busy_timeout_seconds, per_page).
        """
        repository = _check_repository(repository)
        base_url = (env.get(ENV_API_URL) or DEFAULT_BASE_URL).rstrip("/")
        token = env.get(ENV_TOKEN, "").strip()
        if token:
            return cls(repository, Auth.Token(token), base_url=base_url, **options)
        app_id = env.get(ENV_APP_ID, "").strip()
        private_key = env.get(ENV_APP_PRIVATE_KEY, "").strip()
        if app_id and private_key:
            auth = _app_installation_auth(repository, app_id, private_key, base_url, options)
            return cls(repository, auth, base_url=base_url, **options)
        if app_id or private_key:
            missing = ENV_APP_PRIVATE_KEY if app_id else ENV_APP_ID
            raise SettingsError(
                f"GitHub App credentials are incomplete: {missing} is not set (set both, or {ENV_TOKEN})"
            )
        raise SettingsError(
            f"no GitHub credentials to manage self-hosted runners of {repository}: set {ENV_TOKEN} "
            f"(a fine-grained PAT with Administration: write on the repository) or {ENV_APP_ID} and "
            f"{ENV_APP_PRIVATE_KEY} (a GitHub App installed on the repository). The workflow's default "
            "GITHUB_TOKEN cannot register runners."
        )

    # ------------------------------------------------------------------ lifecycle of the client
    def close(self) -> None:
        self._github.close()

    def __enter__(self) -> GitHubRunners:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def _requester(self) -> Requester:
        return self._github.requester

    # ------------------------------------------------------------------ API
    def create_jit_config(
        self, name: str, labels: list[str], runner_group_id: int = 1, work_folder: str = "_work"
    ) -> JitConfig:
        """Register a just-in-time runner (POST .../actions/runners/generate-jitconfig)."""
        if not labels:
            raise RunnerError(
                f"runner {name!r}: give at least one label (GitHub requires one, and the unique label is what "
                "keeps other jobs off this runner)"
            )
        body = {
            "name": name,
            "runner_group_id": runner_group_id,
            "labels": list(labels),
            "work_folder": work_folder,
        }
        try:
            _, data = self._requester.requestJsonAndCheck(
                "POST", f"{self._path}/generate-jitconfig", input=body
            )
        except GithubException as error:
            if error.status == 409:
                raise RunnerError(self._conflict_message(name)) from error
            if error.status == 404:
                raise RunnerError(
                    f"creating runner {name!r}: GitHub answered 404: either {self.repository} is wrong or not visible "
                    f"to this credential (App not installed on it / PAT not granted it), or runner group "
                    f"{runner_group_id} does not exist"
                ) from error
            if error.status == 422:
                raise RunnerError(
                    f"creating runner {name!r}: GitHub rejected the runner's name or labels (422 "
                    f"{_github_message(error)}); both are built from GITHUB_RUN_ID and GITHUB_RUN_ATTEMPT: check "
                    "those variables"
                ) from error
            self._raise(error, f"creating runner {name!r}")
        except requests.RequestException as error:
            self._raise_unreachable(error, f"creating runner {name!r}")
        # Never log `data`: it holds the encoded JIT config.
        runner = Runner.from_api(data["runner"])
        # Nor the labels: one is the run's secret label (issue 13, item 1), should INFO be turned on here.
        log.info(
            "registered JIT runner %s (id %d) with %d labels", runner.name, runner.id, len(runner.labels)
        )
        encoded = str(data["encoded_jit_config"])
        mask(encoded)  # a backstop in the workflow log: nothing prints it
        return JitConfig(runner=runner, encoded_jit_config=encoded)

    def list_runners(self, name: str | None = None) -> list[Runner]:
        """All runners of the repository (or the ones with exactly this name), across every page."""
        params: dict[str, Any] = {"name": name} if name else {}
        pages = PaginatedList(
            SelfHostedActionsRunner, self._requester, self._path, params, list_item="runners"
        )
        try:
            return [Runner.from_api(item.raw_data) for item in pages]
        except GithubException as error:
            self._raise(error, "listing runners")
        except requests.RequestException as error:
            self._raise_unreachable(error, "listing runners")

    def get_runner(self, runner_id: int) -> Runner | None:
        """The runner, or None when GitHub no longer knows it (404)."""
        try:
            _, data = self._requester.requestJsonAndCheck("GET", f"{self._path}/{int(runner_id)}")
        except GithubException as error:
            if error.status == 404:
                self._check_repository_access()  # a wrong repository also answers 404: do not mistake it for "gone"
                return None
            self._raise(error, f"reading runner {runner_id}")
        except requests.RequestException as error:
            self._raise_unreachable(error, f"reading runner {runner_id}")
        return Runner.from_api(data)

    def delete_runner(self, runner_id: int) -> bool:
        """Delete a registration: True = deleted, False = already gone (404). Idempotent, so teardown can rerun.

        422 means a job is still running on it: retried with exponential backoff for `busy_timeout_seconds`.
        """
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(_is_busy),
            wait=tenacity.wait_exponential(multiplier=self.backoff_seconds, max=_MAX_BUSY_INTERVAL),
            stop=tenacity.stop_before_delay(self.busy_timeout_seconds),
            before_sleep=lambda state: log.info(
                "runner %d is busy (attempt %d); retrying the delete", runner_id, state.attempt_number
            ),
            reraise=True,
        )
        try:
            retrying(self._requester.requestJsonAndCheck, "DELETE", f"{self._path}/{int(runner_id)}")
        except GithubException as error:
            if error.status == 404:
                self._check_repository_access()
                log.info("runner %d was already gone", runner_id)
                return False
            if _is_busy(error):
                raise RunnerError(
                    f"runner {runner_id} is still busy after {self.busy_timeout_seconds:.0f} s: a job is running on "
                    "it. Cancel that job (or wait for it), then run the teardown again; terminating the instance "
                    "ends the job and GitHub drops the offline registration."
                ) from error
            self._raise(error, f"deleting runner {runner_id}")
        except requests.RequestException as error:
            self._raise_unreachable(error, f"deleting runner {runner_id}")
        log.info("deleted runner %d", runner_id)
        return True

    def wait_until_online(
        self,
        runner_id: int,
        timeout_seconds: float,
        on_poll: Callable[[float, Runner | None], None] | None = None,
    ) -> Runner:
        """Poll until the runner reports "online"; `on_poll(elapsed_seconds, runner_or_None)` sees every poll."""
        start = time.monotonic()
        attempt = 0
        runner: Runner | None = None
        while True:
            runner = self.get_runner(runner_id)
            elapsed = time.monotonic() - start
            if on_poll is not None:
                on_poll(elapsed, runner)
            if runner is not None and runner.status == "online":
                return runner
            remaining = timeout_seconds - elapsed
            if remaining <= 0:
                break
            # Exponential so a fast boot is noticed quickly, capped so a slow one is not overshot by minutes.
            time.sleep(min(self.backoff_seconds * 2**attempt, _MAX_POLL_INTERVAL, remaining))
            attempt += 1
        seen = f"last status {runner.status!r}" if runner else "GitHub no longer knows the runner (deleted?)"
        raise RegistrationTimeout(
            f"runner {runner_id} did not come online within {timeout_seconds:.0f} s ({seen}). Check the instance's "
            "console output: the runner download, the JIT config hand-over or the network may have failed."
        )

    # ------------------------------------------------------------------ errors
    def _check_repository_access(self) -> None:
        """Tell a wrong repository (or an App not installed on it) apart from a runner that is gone; cached."""
        if self._repository_checked:
            return
        try:
            self._requester.requestJsonAndCheck("GET", self._path, parameters={"per_page": 1})
        except GithubException as error:
            self._raise(error, "checking access to the repository's runners")
        except requests.RequestException as error:
            self._raise_unreachable(error, "checking access to the repository's runners")
        self._repository_checked = True

    def _conflict_message(self, name: str) -> str:
        message = f"a runner named {name!r} already exists in {self.repository}"
        try:
            existing = self.list_runners(name)
        except RunnerError:
            existing = []
        if existing:
            runner = existing[0]
            message += f" (id {runner.id}, {runner.status}{', busy' if runner.busy else ''})"
        advice = (
            "Runner names must be unique: delete the old registration (the teardown or reaper does) or rerun the "
            "workflow, which gives the runner a new name."
        )
        return f"{message}. {advice}"

    def _raise(self, error: GithubException, action: str) -> NoReturn:
        detail = _github_message(error)
        status = error.status
        if isinstance(error, RateLimitExceededException) or status == 429:
            reset = (error.headers or {}).get("x-ratelimit-reset", "")
            when = f" (the limit resets at epoch {reset})" if reset else ""
            raise RunnerError(
                f"{action}: GitHub rate limit exhausted{when}; retry later. {detail}"
            ) from error
        if status == 401:
            raise RunnerError(
                f"{action}: GitHub rejected the credentials (401 {detail}): the token is wrong, expired or revoked. "
                f"Check {ENV_TOKEN}, or {ENV_APP_ID} and {ENV_APP_PRIVATE_KEY} for a GitHub App."
            ) from error
        if status == 403:
            hint = _PERMISSION_HINT.format(repo=self.repository)
            raise RunnerError(f"{action}: GitHub refused (403 {detail}): {hint}") from error
        if status == 404:
            raise RunnerError(
                f"{action}: {self.repository} was not found (404): check the owner/name, and that the GitHub App is "
                "installed on the repository or the fine-grained PAT was granted access to it."
            ) from error
        if status >= 500:
            raise RunnerError(
                f"{action}: GitHub answered {status} after {_HTTP_ATTEMPTS} attempts; GitHub may be degraded "
                f"(https://www.githubstatus.com). Rerun the job. {detail}"
            ) from error
        raise RunnerError(f"{action}: GitHub answered {status}: {detail}") from error

    def _raise_unreachable(self, error: requests.RequestException, action: str) -> NoReturn:
        raise RunnerError(
            f"{action}: cannot reach the GitHub API at {self.base_url} ({type(error).__name__}). "
            f"Check {ENV_API_URL} and the network."
        ) from error


# ---------------------------------------------------------------------- helpers
def dispatch_workflow(
    repository: str,
    workflow: str,
    ref: str,
    inputs: Mapping[str, str],
    token: str,
    base_url: str = DEFAULT_BASE_URL,
    backoff_seconds: float = 2.0,
) -> str | None:
    """Start `workflow` on `ref` with `inputs` (workflow_dispatch), with the workflow run's own GITHUB_TOKEN
    (`actions: write`): a run started that way is allowed to start another. Returns the new run's URL when
    GitHub reports it; raises RunnerError with GitHub's status and message when GitHub refuses (404, 422, or
    5xx after the retries).

    One POST through the requester, not PyGithub's Workflow.create_dispatch: that returns False and drops
    GitHub's answer unless throw=True, and needs two GETs first (the repository, then the workflow).
    """
    base_url = base_url.rstrip("/")
    owner, _, repo = _check_repository(repository).partition("/")
    body: dict[str, Any] = {"ref": ref, "inputs": dict(inputs)}
    # The run's id and URL come back (200 instead of 204) on github.com and GHE.com; GitHub Enterprise Server
    # (API at /api/v3) does not know the field in its REST description up to 3.19, so it is not sent there.
    if not base_url.endswith("/api/v3"):
        body["return_run_details"] = True
    client = Github(auth=Auth.Token(token), **_client_options(base_url, backoff_seconds))
    path = f"/repos/{owner}/{repo}/actions/workflows/{quote(workflow, safe='')}/dispatches"
    try:
        _, data = client.requester.requestJsonAndCheck("POST", path, input=body)
    except GithubException as error:
        raise RunnerError(_dispatch_refusal(error, repository, workflow, ref)) from error
    except requests.RequestException as error:
        raise RunnerError(
            f"could not re-dispatch {workflow} on {ref}: cannot reach the GitHub API at {base_url} "
            f"({type(error).__name__})"
        ) from error
    finally:
        client.close()
    run_url = str(data["html_url"]) if isinstance(data, dict) and data.get("html_url") else None
    log.info("dispatched %s on %s%s", workflow, ref, f": {run_url}" if run_url else "")
    return run_url


def check_commit_on_branch(
    repository: str,
    commit: str,
    branch: str,
    head: str,
    token: str,
    base_url: str = DEFAULT_BASE_URL,
    backoff_seconds: float = 2.0,
) -> None:
    """Refuse (RunnerError) a dispatch input `commit` that is not in the history of `head`, the dispatched
    branch's head commit (GITHUB_SHA): a hand-made dispatch must not make the GPU train another branch's code
    (an unreviewed branch, a fork pull request's head) with this branch's roles.

    One GET "Compare two commits" (docs.github.com/rest/commits/commits#compare-two-commits, read 2026-12-01)
    with base=`commit`, head=`head`: `status` is "identical" or "ahead" exactly when `commit` is an ancestor of
    `head` ("behind" or "diverged" otherwise); an unknown commit, or one with no common history, is a 404. The
    token is the start job's own GITHUB_TOKEN: the endpoint asks "Contents" read, nothing of the runner
    credential. The head is a SHA, not the branch name, so the answer is about the workflow run's own commit
    and cannot be raced by a later push. per_page=1: one commit in the body instead of 250; the files list (up
    to 300 entries, page 1) cannot be turned off (pages after the first omit it, but a page past the end is not
    documented), so the call costs one request of GITHUB_TOKEN's 1,000 per hour and repository (docs.github.com
    "Rate limits for the REST API"; that section not re-read verbatim on 2026-12-01) and a body of <= 300 files.
    """
    where = f"branch {branch!r}" if branch else "the dispatched branch"
    fix = (
        f"dispatch train.yml on the branch that holds it (or merge or push it to {where} first), or leave "
        "`commit` empty to train the branch head"
    )
    client = Github(auth=Auth.Token(token), lazy=True, **_client_options(base_url, backoff_seconds))
    try:
        comparison = client.get_repo(_check_repository(repository)).compare(
            commit, head, comparison_commits_per_page=1
        )
        status, behind = comparison.status, comparison.behind_by
    except GithubException as error:
        if error.status == 404:
            raise RunnerError(
                f"dispatch input `commit`: {commit} is not a commit of {repository} that shares history with "
                f"{where} (GitHub's compare answered 404 {_github_message(error)}): pass the full SHA of a commit "
                f"on {where}; {fix}"
            ) from error
        hint = {
            401: "the GITHUB_TOKEN passed to the launch step is wrong or expired",
            403: "the start job needs `permissions: contents: read`, and its launch step the workflow's token in "
            "GITHUB_TOKEN",
        }.get(error.status, "GitHub may be degraded (https://www.githubstatus.com); rerun the start job")
        raise RunnerError(
            f"dispatch input `commit`: could not check that {commit} is on {where}: GitHub answered "
            f"{error.status} {_github_message(error)} ({hint})"
        ) from error
    except requests.RequestException as error:
        raise RunnerError(
            f"dispatch input `commit`: could not check that {commit} is on {where}: cannot reach the GitHub API "
            f"at {base_url} ({type(error).__name__})"
        ) from error
    finally:
        client.close()
    if status not in ("identical", "ahead"):
        raise RunnerError(
            f"dispatch input `commit`: {commit} is not in the history of {where} (GitHub compares it to the "
            f"branch head {head}: {status}, {behind} commit(s) of it not on the branch); launch trains only code "
            f"of the dispatched branch: {fix}"
        )
    log.info("dispatch input commit %s is on %s (%s)", commit, where, status)


def _dispatch_refusal(error: GithubException, repository: str, workflow: str, ref: str) -> str:
    """GitHub's status and message, and what each usually means for a dispatch."""
    status = error.status
    hint = {
        401: "the GITHUB_TOKEN passed to the stop job is wrong or expired",
        403: "the stop job needs `permissions: actions: write`",
        404: f"{repository} has no workflow {workflow} visible to this token",
        422: f"{ref} does not exist, {workflow} there has no workflow_dispatch trigger, or an input it does "
        "not declare was sent",
    }.get(status, "GitHub may be degraded (https://www.githubstatus.com); rerun the stop job")
    if isinstance(error, RateLimitExceededException) or status == 429:
        hint = "GitHub's rate limit for this token is exhausted; rerun the stop job later"
    elif status >= 500:
        hint = f"still failing after {_HTTP_ATTEMPTS} attempts: {hint}"
    return f"could not re-dispatch {workflow} on {ref}: GitHub answered {status} {_github_message(error)} ({hint})"


def _check_repository(repository: str) -> str:
    if not _REPOSITORY.fullmatch(repository or ""):
        raise SettingsError(f"repository '{repository}' is not of the form owner/name (GITHUB_REPOSITORY)")
    return repository


def _client_options(base_url: str, backoff_seconds: float) -> dict[str, Any]:
    """Settings shared by the Github and GithubIntegration clients, so the App token exchange retries alike.

    POST is retried too (GithubRetry's default). Should a 5xx'd generate-jitconfig have registered the runner
    after all, the retry answers 409 and create_jit_config names the existing runner instead of failing vaguely.
    """
    retry = GithubRetry(
        total=_HTTP_ATTEMPTS - 1,
        status_forcelist=list(_RETRY_STATUSES),
        backoff_factor=backoff_seconds,
        backoff_max=60,
        # Return the last 5xx response instead of urllib3's MaxRetryError, so PyGithub raises a GithubException
        # carrying GitHub's own message.
        raise_on_status=False,
        respect_retry_after_header=True,
        max_rate_limit_wait=_MAX_RATE_LIMIT_WAIT,
    )
    return {
        "base_url": base_url,
        "retry": retry,
        # PyGithub spaces every request 0.25 s and every write 1 s apart by default. We make a handful of
        # sequential calls, so that only slows polling and teardown down; a short gap between writes still keeps
        # a reaper that deletes many runners clear of the secondary rate limit (which is retried anyway).
        "seconds_between_requests": None,
        "seconds_between_writes": min(0.5, backoff_seconds / 4),
    }


def _app_installation_auth(
    repository: str, app_id: str, private_key: str, base_url: str, options: Mapping[str, Any]
) -> Auth.AppInstallationAuth:
    """JWT (signed with the App key) -> the repository's installation -> an auto-refreshing installation token."""
    owner, _, repo = repository.partition("/")
    if "\\n" in private_key and "\n" not in private_key:
        private_key = private_key.replace("\\n", "\n")  # a PEM pasted into a one-line variable
    if "PRIVATE KEY-----" not in private_key:
        raise SettingsError(
            f"{ENV_APP_PRIVATE_KEY} is not a PEM private key (paste the App's .pem file content)"
        )
    app_auth = Auth.AppAuth(app_id, private_key)
    try:
        app_auth.create_jwt()  # fail here, with the variable named, rather than deep inside the first request
    except Exception as error:  # PyJWT and cryptography raise several types for a bad key
        # Only the type: a parser message could quote part of the key.
        raise SettingsError(
            f"{ENV_APP_PRIVATE_KEY} could not be loaded as an RSA private key ({type(error).__name__}): paste the "
            "whole .pem file the App settings page generated"
        ) from None
    backoff = float(options.get("backoff_seconds", 2.0))
    integration = GithubIntegration(auth=app_auth, **_client_options(base_url, backoff))
    try:
        installation = integration.get_repo_installation(owner, repo)
    except GithubException as error:
        if error.status == 404:
            raise SettingsError(
                f"the GitHub App {app_id} is not installed on {repository} (or the repository does not exist): "
                "install it on the repository with the Administration: write permission"
            ) from error
        if error.status == 401:
            raise SettingsError(
                f"GitHub rejected the App's JWT (401 {_github_message(error)}): check that {ENV_APP_ID} is the App's "
                f"id and {ENV_APP_PRIVATE_KEY} one of its current private keys"
            ) from error
        raise RunnerError(
            f"looking up the App installation on {repository}: GitHub answered {error.status}: "
            f"{_github_message(error)}"
        ) from error
    except requests.RequestException as error:
        raise RunnerError(f"cannot reach the GitHub API at {base_url} ({type(error).__name__})") from error
    finally:
        integration.close()
    # The Github client attaches its own requester to this auth; the token is fetched on first use and renewed
    # before it expires, which matters for a wait/teardown that spans an hour-long training job.
    return _MaskedInstallationAuth(app_auth, installation.id)


class _MaskedInstallationAuth(Auth.AppInstallationAuth):
    """PyGithub's installation auth, plus `::add-mask::` for each installation token as GitHub issues it (a
    backstop in the workflow log: nothing prints the token; the App key itself is a masked repository secret)."""

    def _get_installation_authorization(self) -> Any:
        authorization = super()._get_installation_authorization()
        mask(authorization.token)
        return authorization


def _github_message(error: GithubException) -> str:
    data = error.data if isinstance(error.data, dict) else {}
    return str(data.get("message") or error.message or "no message")


def _is_busy(error: BaseException) -> bool:
    return isinstance(error, GithubException) and error.status == 422
