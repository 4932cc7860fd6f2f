"""A local stand-in for the GitHub REST API over real HTTP: the self-hosted runner, workflow dispatch, compare and
GitHub App endpoints, and what gpu-runner doctor reads (the repository, its Actions variables and secret names,
what guards its default branch, its `production` environment, its fork pull request policy: github_settings.py).

Real clients (PyGithub, curl, the gpu-runner CLI) talk to it through `GITHUB_API_URL`. Response bodies, status
codes and headers follow docs.github.com ("REST API endpoints for self-hosted runners", "Apps"): runner objects
with `labels: [{id, name, type}]`, `{"total_count", "runners"}` pages with a `Link` header, 201/204/404/409/422
where GitHub answers them, `x-ratelimit-*` headers on every response, 401 "Bad credentials" for unknown tokens.
GitHub App auth is checked for real: the JWT must be RS256-signed with the App key (generated at runtime, never
stored) and follow GitHub's claim rules before an installation token is issued, and every endpoint asks the
permission GitHub asks of the token presented.

Every request and every response is checked against GitHub's REST description (gpu_runner_testing/
github-openapi.json, extracted from npm `@octokit/openapi` by extract_github_openapi.py; see
github_contract.py): a request the description refuses is answered 422 as GitHub does, a response it does not
allow becomes a 500, and both are recorded as violations that `stop()` raises unless a test took them with
`take_violations()`. A route outside the description is never served.

Test controls are plain, thread-safe methods: `set_status`, `stay_busy_for`, `online_after`, `fail`,
`set_variable`, `set_secret`, `commit` (a Git history per repository, which compare answers from), `settings`
(github_settings.RepositorySettings per repository: rulesets, branch protection, environments), plus the
`runners`, `calls`, `requests`, `dispatches` and `issued_jit_configs` views
and the `non_admin_tokens` / `classic_scopes` settings.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import itertools
import json
import re
import secrets
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from gpu_runner_testing.github_contract import Contract, ContractViolation, Operation, default_contract
from gpu_runner_testing.github_settings import NotFound, RepositorySettings
from gpu_runner_testing.jit_config_double import encoded_jit_config

DEFAULT_REPOSITORY = "octo-org/octo-repo"
# Fake fine-grained PATs, each with the repository permissions GitHub would have granted it.
# Administration: write + Actions: write (the tests' all-rounder: the harness passes it as both tokens)
DEFAULT_TOKEN = "github_pat_test_0123456789abcdef"
RUNNERS_TOKEN = "github_pat_runners_0123456789ab"  # Administration: write only (what the README asks for)
READ_ONLY_TOKEN = "github_pat_readonly_0123456789"  # Administration: read only
# A repository admin's own token (as `gh auth token` gives, an OAuth token): what gpu-runner doctor lists the
# repository's Actions variables and secrets with.
ADMIN_TOKEN = "gho_admin_0123456789abcdef"
# The workflow's GITHUB_TOKEN with `permissions: actions: write`: an installation token of the Actions app.
WORKFLOW_TOKEN = "ghs_workflow_0123456789abcdefghijklmnop"
# The start job's GITHUB_TOKEN (`permissions: contents: read`): what launch checks the dispatch input commit with.
START_JOB_TOKEN = "ghs_startjob_0123456789abcdefghijklmn"
# The pull-request comment job's GITHUB_TOKEN (`permissions: pull-requests: write`, contents: read).
PR_COMMENT_TOKEN = "ghs_prcomment_0123456789abcdefghijk"
# The author GitHub records for what a workflow's GITHUB_TOKEN writes (docs.github.com "Automatic token
# authentication": an installation token of the GitHub Actions app, whose bot user this is).
ACTIONS_BOT = ("github-actions[bot]", "Bot")
HUMAN = ("mona", "User")
DEFAULT_TOKENS: dict[str, dict[str, str]] = {
    DEFAULT_TOKEN: {
        "administration": "write",
        "actions": "write",
        "contents": "read",
        "metadata": "read",
        "pull_requests": "write",
    },
    RUNNERS_TOKEN: {"administration": "write", "metadata": "read"},
    READ_ONLY_TOKEN: {"administration": "read", "metadata": "read"},
    WORKFLOW_TOKEN: {"actions": "write", "metadata": "read"},
    START_JOB_TOKEN: {"contents": "read", "metadata": "read"},
    PR_COMMENT_TOKEN: {"contents": "read", "pull_requests": "write", "metadata": "read"},
    ADMIN_TOKEN: {
        "administration": "write", "variables": "read", "secrets": "read", "metadata": "read", "actions": "read",
    },
}  # fmt: skip
# The permission each operation asks of a token, keyed by the description's operationIds: the endpoint pages'
# "Fine-grained access tokens for ..." sections and docs.github.com "Permissions required for fine-grained
# personal access tokens" (self-hosted runners = "Administration": read to list/get, write to create/delete;
# "Create a workflow dispatch event" = "Actions": write). Not machine-checked: the OpenAPI description does not
# carry permissions, and the dispatch row was taken from the issue (#12) and the GITHUB_TOKEN docs
# ("actions: write"), not re-read verbatim on 2026-12-01.
REQUIRED_PERMISSIONS: dict[str, tuple[str, str]] = {
    "actions/list-self-hosted-runners-for-repo": ("administration", "read"),
    "actions/get-self-hosted-runner-for-repo": ("administration", "read"),
    "actions/generate-runner-jitconfig-for-repo": ("administration", "write"),
    "actions/delete-self-hosted-runner-from-repo": ("administration", "write"),
    "actions/create-workflow-dispatch": ("actions", "write"),
    # gpu-runner doctor's reads, from the same "Permissions required for fine-grained personal access tokens"
    # page: "Get a repository" = "Metadata": read, "List repository variables" = "Variables": read, "List
    # repository secrets" = "Secrets": read (as issue #12 quotes it; not re-read verbatim on 2026-12-01).
    "repos/get": ("metadata", "read"),
    "actions/list-repo-variables": ("variables", "read"),
    "actions/list-repo-secrets": ("secrets", "read"),
    # gpu-runner bootstrap's OIDC `sub` template: "Actions" repository permission, write to set, read to get
    # (docs.github.com "REST API endpoints for GitHub Actions OIDC", as mirrored by apidog.com/apidoc 347364,
    # read 2026-12-01; classic tokens need the `repo` scope).
    "actions/get-custom-oidc-sub-claim-for-repo": ("actions", "read"),
    "actions/set-custom-oidc-sub-claim-for-repo": ("actions", "write"),
    # "Compare two commits" (docs.github.com/rest/commits/commits#compare-two-commits, its "Fine-grained access
    # tokens" section, read 2026-12-01): "Contents" repository permissions (read).
    "repos/compare-commits-with-basehead": ("contents", "read"),
    # The pull-request comment (gpu_runner.pr_comment.pr_comment): "List pull requests" asks "Pull requests" (read)
    # (docs.github.com/rest/pulls/pulls#list-pull-requests, its fine-grained token section).
    "pulls/list": ("pull_requests", "read"),
    # gpu-runner doctor's guards, from GitHub's own table (github/docs src/github-apps/data/fpt-2026-03-10/
    # fine-grained-pat-permissions.json, read 2026-12-06; the rules rows from the "Get rules for a branch" page):
    # the rules and rulesets are "Metadata" (read: anyone who may read the repository sees its active rules);
    # branch protection, the workflow token's settings and both fork pull request settings "Administration"
    # (read); environments and their branch policies "Actions" (read).
    "repos/get-branch-rules": ("metadata", "read"),
    "repos/get-repo-ruleset": ("metadata", "read"),
    "repos/get-branch-protection": ("administration", "read"),
    "actions/get-github-actions-default-workflow-permissions-repository": ("administration", "read"),
    "repos/get-environment": ("actions", "read"),
    "repos/list-deployment-branch-policies": ("actions", "read"),
    "actions/get-fork-pr-contributor-approval-permissions-repository": ("administration", "read"),
    "actions/get-private-repo-fork-pr-workflows-settings-repository": ("administration", "read"),
}
# Operations GitHub allows with any one of several permissions: the issue-comment endpoints' fine-grained token
# sections list "at least one of" "Issues" or "Pull requests" repository permissions (docs.github.com "REST API
# endpoints for issue comments", List / Create / Update an issue comment; read 2026-12-03), the comment being on
# a pull request here.
ANY_OF_PERMISSIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "issues/list-comments": (("issues", "read"), ("pull_requests", "read")),
    "issues/create-comment": (("issues", "write"), ("pull_requests", "write")),
    "issues/update-comment": (("issues", "write"), ("pull_requests", "write")),
}
# GitHub's 422 to a longer comment body: "Body is too long (maximum is 65536 characters)", resource
# IssueComment, code unprocessable, field data (as clients quote it: jmikedupont2/ai-ticket#51, 2023;
# reg-viz/reg-actions#123, 2024; peter-evans/create-or-update-comment#182 truncates at the same number).
COMMENT_MAX_CHARS = 65536
# "Each claim key can only contain alphanumeric characters and underscores" (the description's
# oidc-custom-sub-repo schema, @octokit/openapi 23.0.2); GitHub answers 422 to another key.
_CLAIM_KEY = re.compile(r"[A-Za-z0-9_]+")
DEFAULT_APP_ID = 424242
DEFAULT_CLIENT_ID = "Iv23liGpuRunnerTest01"  # a GitHub App's client id (Iv23li...), the recommended JWT `iss`
# docs.github.com "Generating a JSON Web Token (JWT) for a GitHub App" (read 2026-12-01): `exp` "must be no more
# than 10 minutes into the future"; `iat` is the creation time, which clients set 60 s in the past against clock
# drift (PyGithub does); `iss` is "the client ID or application ID". GitHub's tolerance for an `iat` ahead of its
# clock is not documented: the double allows none beyond PyJWT's leeway, so a client that follows the docs
# passes and one that does not fails here rather than on a real clock. An exp of exactly 600 s from a clock a
# few seconds behind GitHub's is refused for real (Link-/gh-token#69, 2026-03).
JWT_MAX_LIFETIME_SECONDS = 600
JWT_LEEWAY_SECONDS = 5
# GitHub Actions' pagination: per_page above 100 is reduced to 100 without an error (docs.github.com "Using
# pagination in the REST API"); 0 or a negative value falls back to the default 30 (observed 2026-01-12 on
# the issues list, derrickscottux-collab/github-issues-openapi-portfolio "Pagination and Filtering").
PER_PAGE_DEFAULT, PER_PAGE_MAX = 30, 100
DOCS = "https://docs.github.com/rest/actions/self-hosted-runners"
_COMMENTS_DOCS = "https://docs.github.com/rest/issues/comments"
# "Compare two commits" (the description's per_page: default 30, "max 100"): without `page`/`per_page` the list
# "is limited to 250 commits" (the most recent ones), and page 1 carries "up to 300 changed files".
COMPARE_UNPAGED_COMMITS, COMPARE_MAX_FILES = 250, 300
# Labels the runner application sets itself; GitHub reports them as "read-only", everything else as "custom".
RUNNER_NAME_MAX = 64
DEFAULT_LABELS = {"self-hosted", "linux", "x64", "arm64", "arm", "windows", "macos"}
RATE_LIMIT = 5000


class Call(NamedTuple):
    method: str
    path: str
    query: dict[str, str]
    body: Any
    status: int


class Request(NamedTuple):
    """A recorded call plus how it authenticated ("token", "bearer" or "" and the credential presented)."""

    method: str
    path: str
    query: dict[str, str]
    body: Any
    status: int
    scheme: str
    credential: str


@dataclass
class _Fault:
    method: str
    path: re.Pattern[str]
    status: int
    times: int
    headers: dict[str, str]
    body: Any


@dataclass(frozen=True)
class _Commit:
    """A commit of the double's history: what compare needs (ancestry, order, touched files)."""

    sha: str
    parents: tuple[str, ...]
    message: str
    files: tuple[str, ...]
    order: int  # creation order: "chronological" in compare's commit list


@dataclass
class _OnlineRule:
    runner: int | re.Pattern[str] | None  # a runner id, a name pattern, or None = every runner
    polls: int | None
    seconds: float | None
    busy: bool
    since: float = field(default_factory=time.monotonic)
    seen_polls: dict[int, int] = field(default_factory=dict)


class _HttpError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        headers: dict[str, str] | None = None,
        body: Any = None,
        documentation_url: str = DOCS,
    ):
        super().__init__(message)
        self.status = status
        self.headers = headers or {}
        self.body = (
            body
            if body is not None
            else {"message": message, "documentation_url": documentation_url, "status": str(status)}
        )


@functools.cache
def app_private_key() -> rsa.RSAPrivateKey:
    """One RSA key per test session (generation costs ~0.1 s); it only ever lives in memory."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def app_private_key_pem() -> str:
    return (
        app_private_key()
        .private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        .decode()
    )


def decode_jit_config(encoded: str) -> dict[str, Any]:
    """Both layers of an encoded JIT config: the outer JSON's values are base64 JSON documents, like GitHub's."""
    outer = json.loads(base64.b64decode(encoded))
    return {key: json.loads(base64.b64decode(value)) for key, value in outer.items()}


class GitHubDouble:
    """GitHub's REST API for a few repositories, on 127.0.0.1 and a free port. Use as a context manager."""

    def __init__(
        self,
        repositories: Iterable[str] = (DEFAULT_REPOSITORY,),
        tokens: dict[str, str | dict[str, str]] | None = None,
        app_id: int = DEFAULT_APP_ID,
        app_repositories: Iterable[str] | None = None,
        app_permissions: dict[str, str] | None = None,
        contract: Contract | None = None,
    ) -> None:
        """`tokens` maps a token to its repository permissions ({"administration": "write", ...}; a plain
        "write"/"read" is the Administration permission alone); the App is installed on `app_repositories`
        (default: all) with `app_permissions` (default: administration write). `contract` is GitHub's REST
        description for our operations (default: github-openapi.json in this package)."""
        self._lock = threading.RLock()
        self.repositories = {r.lower(): r for r in repositories}
        self.tokens: dict[str, str | dict[str, str]] = dict(tokens or DEFAULT_TOKENS)
        self.contract = contract or default_contract()
        self._violations: list[str] = []
        self.app_id = app_id
        self.client_id = DEFAULT_CLIENT_ID
        self.app_repositories = {r.lower() for r in (app_repositories or self.repositories)}
        self.app_permissions = dict(app_permissions or {"administration": "write", "metadata": "read"})
        self.installation_ids = {
            repo: 1000 + index for index, repo in enumerate(sorted(self.app_repositories))
        }
        self.installation_tokens: dict[str, datetime] = {}  # issued token -> expiry
        self._runners: dict[int, dict[str, Any]] = {}
        self._runner_repo: dict[int, str] = {}
        self._busy_deletes: dict[int, int] = {}
        self._ids = itertools.count(23)
        self._label_ids: dict[str, int] = {}
        self._faults: list[_Fault] = []
        self._online_rules: list[_OnlineRule] = []
        self._requests: list[Request] = []
        self._issued_jit: dict[str, str] = {}
        self._rate_used: dict[str, int] = {}
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._connections: set[Any] = set()
        # workflow_dispatch: the repository's workflow files, and every dispatch accepted (in order).
        self.workflows = {"train.yml": 161335, "reap.yml": 161336, "sweep.yml": 161337}
        self.dispatches: list[dict[str, Any]] = []
        self._run_ids = itertools.count(30433642)
        # The run ids handed out, for the dispatches that asked for return_run_details.
        self.dispatched_runs: list[int] = []
        # Actions variables and secrets (gpu-runner doctor), per repository; who may list them is the tokens'
        # `variables` / `secrets` permissions (REQUIRED_PERMISSIONS).
        self.variables: dict[str, dict[str, str]] = {repo: {} for repo in self.repositories}
        self.secrets: dict[str, set[str]] = {repo: set() for repo in self.repositories}
        # Whose user is not an admin of the repositories (GET /repos/{o}/{r} `permissions.admin` false), and the
        # scopes of classic tokens (sent as X-OAuth-Scopes, which GitHub sends for OAuth and classic tokens only).
        self.non_admin_tokens: set[str] = set()
        self.classic_scopes: dict[str, str] = {}
        # The repositories' OIDC `sub` templates (a new repository uses GitHub's default).
        self.oidc_sub: dict[str, dict[str, Any]] = {repo: {"use_default": True} for repo in self.repositories}
        # Git history per repository (compare): commit SHA -> commit, branch name -> head SHA.
        self._commits: dict[str, dict[str, _Commit]] = {repo: {} for repo in self.repositories}
        self.branches: dict[str, dict[str, str]] = {repo: {} for repo in self.repositories}
        # Pull requests and their issue comments, per repository (the pull-request comment); issue numbers and
        # comment ids count up like GitHub's. Who wrote a comment is the token's user (token_authors; any
        # other token: a human).
        self._pulls: dict[str, list[dict[str, Any]]] = {repo: [] for repo in self.repositories}
        self._comments: dict[int, dict[str, Any]] = {}
        self._issue_numbers = itertools.count(1)
        self._comment_ids = itertools.count(1200000001)
        self.token_authors: dict[str, tuple[str, str]] = {
            WORKFLOW_TOKEN: ACTIONS_BOT, START_JOB_TOKEN: ACTIONS_BOT, PR_COMMENT_TOKEN: ACTIONS_BOT,
        }  # fmt: skip
        # What gpu-runner doctor reads about each repository's guards (github_settings.py): none set at first,
        # as on a new repository. Tokens of an owner of the organization (who may read its rulesets' bypass lists).
        self.settings: dict[str, RepositorySettings] = {
            repo: RepositorySettings(full, self._simple_user) for repo, full in self.repositories.items()
        }
        self.org_owner_tokens: set[str] = set()

    # ------------------------------------------------------------------ server lifecycle
    def start(self) -> GitHubDouble:
        handler = type("Handler", (_Handler,), {"double": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="github-double", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; raise ContractViolation if a request or response broke GitHub's description and no
        test took the violation (take_violations)."""
        if self._server is not None:
            self._shutdown()
        with self._lock:
            violations, self._violations = self._violations, []
        if violations:
            raise ContractViolation(
                "the GitHub double saw requests or responses GitHub's REST description does not allow:\n- "
                + "\n- ".join(violations)
            )

    def _shutdown(self) -> None:
        assert self._server is not None
        self._server.shutdown()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:  # keep-alive connections would otherwise hold their threads
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None

    def __enter__(self) -> GitHubDouble:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "start() the double first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    # ------------------------------------------------------------------ test controls
    @property
    def runners(self) -> dict[int, dict[str, Any]]:
        """A snapshot: runner id -> the runner object GitHub would return."""
        with self._lock:
            return {rid: json.loads(json.dumps(runner)) for rid, runner in self._runners.items()}

    @property
    def calls(self) -> list[Call]:
        with self._lock:
            return [Call(*r[:5]) for r in self._requests]

    @property
    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._requests)

    @property
    def issued_jit_configs(self) -> dict[str, str]:
        """Runner name -> the encoded JIT config handed out for it."""
        with self._lock:
            return dict(self._issued_jit)

    def clear_calls(self) -> None:
        with self._lock:
            self._requests.clear()

    def add_runner(
        self,
        name: str,
        labels: Iterable[str] = ("self-hosted",),
        status: str = "offline",
        busy: bool = False,
        repository: str = DEFAULT_REPOSITORY,
    ) -> dict[str, Any]:
        """Register a runner directly (as if `config.sh` had run), e.g. to seed stale runners for a reaper test."""
        with self._lock:
            runner = self._new_runner(repository.lower(), name, list(labels), 1, ephemeral=False)
            runner.update(status=status, busy=busy)
            return dict(runner)

    def commit(
        self,
        branch: str,
        message: str = "",
        parents: Iterable[str] | None = None,
        files: Iterable[str] = ("README.md",),
        sha: str | None = None,
        repository: str = DEFAULT_REPOSITORY,
    ) -> str:
        """A new commit (as a push makes it) that moves `branch` to it; its parents are `parents`, else the
        branch's head (none: a root commit). `sha` registers a real repository's commit (e2e); else one is
        made up like Git's, a SHA-1 of the parents and the message. Returns the SHA."""
        with self._lock:
            repo = repository.lower()
            commits = self._commits[repo]
            head = self.branches[repo].get(branch)
            chosen = tuple(parents) if parents is not None else ((head,) if head else ())
            unknown = [p for p in chosen if p not in commits]
            assert not unknown, f"parents {unknown} are not commits of {repository}"
            if sha is None:
                seed = f"{chosen}{branch}{message}{len(commits)}".encode()
                sha = hashlib.sha1(seed, usedforsecurity=False).hexdigest()
            commits[sha] = _Commit(
                sha, chosen, message or f"commit {len(commits) + 1}", tuple(files), len(commits)
            )
            self.branches[repo][branch] = sha
            return sha

    def set_status(self, runner_id: int, status: str, busy: bool = False) -> None:
        with self._lock:
            runner = self._runners[runner_id]
            runner.update(status=status, busy=busy)
            if status == "online" and runner["os"] == "unknown":
                runner["os"] = "linux"

    def job_completed(self, runner_id: int) -> None:
        """What GitHub does when a just-in-time (ephemeral) runner finishes its one job: removes it."""
        with self._lock:
            self._runners.pop(runner_id, None)

    def stay_busy_for(self, runner_id: int, delete_attempts: int) -> None:
        """Runner is online and running a job; the job ends after `delete_attempts` DELETEs were refused (422)."""
        with self._lock:
            self.set_status(runner_id, "online", busy=True)
            self._busy_deletes[runner_id] = delete_attempts

    def online_after(
        self,
        runner: int | str | None = None,
        polls: int | None = None,
        seconds: float | None = None,
        busy: bool = False,
    ) -> None:
        """Bring a runner online, like a booting instance would: after `polls` reads of it (GET by id or a list
        that includes it) and/or `seconds` from now. `runner` is an id, a name regex, or None for every runner,
        including ones created later."""
        target: int | re.Pattern[str] | None = re.compile(runner) if isinstance(runner, str) else runner
        with self._lock:
            self._online_rules.append(_OnlineRule(target, polls, seconds, busy))

    def fail(
        self,
        method: str,
        path_regex: str,
        status: int,
        times: int = 1,
        headers: dict[str, str] | None = None,
        body: Any = None,
    ) -> None:
        """Answer the next `times` matching requests (re.search on the path) with `status` before anything else."""
        with self._lock:
            self._faults.append(
                _Fault(method.upper(), re.compile(path_regex), status, times, headers or {}, body)
            )

    def take_violations(self) -> list[str]:
        """The contract violations seen so far (and forget them): a test that plants one asserts on it here."""
        with self._lock:
            violations, self._violations = self._violations, []
        return violations

    def revoke(self, token: str) -> None:
        with self._lock:
            self.tokens.pop(token, None)
            self.installation_tokens.pop(token, None)

    # ------------------------------------------------------------------ request handling
    def handle(
        self, method: str, target: str, headers: Any, raw_body: bytes
    ) -> tuple[int, dict[str, str], Any]:
        split = urlsplit(target)
        path = split.path.rstrip("/") or "/"
        query = {key: values[-1] for key, values in parse_qs(split.query).items()}
        try:
            body = json.loads(raw_body) if raw_body else None
        except ValueError:
            body = raw_body.decode(errors="replace")
        scheme, _, credential = (headers.get("Authorization") or "").partition(" ")
        scheme = scheme.lower()
        matched = self.contract.match(method, path)
        op, path_params = matched if matched else (None, {})
        with self._lock:
            try:
                if not isinstance(body, dict | None):
                    raise _HttpError(400, "Problems parsing JSON")
                status, extra, payload = self._dispatch(
                    method, path, query, body, scheme, credential, op, path_params
                )
            except _HttpError as error:
                status, extra, payload = error.status, error.headers, error.body
            problems = self.contract.check_response(op, status, payload)
            if problems:  # a double bug: never let the client see an answer GitHub would not give
                where = op.operation_id if op else f"{method} {path}"
                self._violations += [f"response of {where} ({status}): {p}" for p in problems]
                status, extra = 500, {}
                payload = {"message": f"GitHub double: answer violates GitHub's REST description: {problems}"}
            self._requests.append(Request(method, path, query, body, status, scheme, credential))
            extra = {**self._rate_headers(credential), **extra}
            if credential in self.classic_scopes:
                extra["X-OAuth-Scopes"] = self.classic_scopes[credential]
        return status, extra, payload

    def _dispatch(
        self,
        method: str,
        path: str,
        query: dict[str, str],
        body: dict | None,
        scheme: str,
        credential: str,
        op: Operation | None,
        path_params: dict[str, str],
    ) -> tuple[int, dict[str, str], Any]:
        for fault in self._faults:
            if fault.times > 0 and fault.method == method and fault.path.search(path):
                fault.times -= 1
                default = {"message": _REASONS.get(fault.status, "Error"), "documentation_url": DOCS}
                return fault.status, fault.headers, fault.body if fault.body is not None else default
        # A route outside the description still reaches the handlers (so a route added to the double without
        # its operation in extract_github_openapi.py is caught by handle(), not hidden behind a 404).
        if path.startswith("/app/") or re.fullmatch(r"/repos/[^/]+/[^/]+/installation", path):
            self._verify_jwt(scheme, credential)
            if op is not None:
                self._check_request(op, path_params, query, body)
            return self._app_endpoint(method, path)

        permissions = self._authenticate(scheme, credential)
        if match := re.fullmatch(r"/repos/([^/]+)/([^/]+)(/.*)?", path):
            repo = f"{match[1]}/{match[2]}".lower()
            if repo not in self.repositories or not self._can_see(credential, repo):
                raise _HttpError(404, "Not Found")
            if op is not None:
                self._authorize(op, credential, permissions)
                self._check_request(op, path_params, query, body)
            return self._repo_endpoint(method, repo, match[3] or "", query, body, credential)
        raise _HttpError(404, "Not Found")

    def _check_request(
        self, op: Operation, path_params: dict[str, str], query: dict[str, str], body: dict | None
    ) -> None:
        """A request the description refuses: recorded (a client bug or a planted one) and answered as GitHub
        answers a body its schema refuses, 422 with the reasons."""
        problems = self.contract.check_request(op, path_params, query, body)
        if problems:
            self._violations += [f"request to {op.operation_id}: {p}" for p in problems]
            message = "Invalid request.\n\n" + "\n".join(problems)
            raise _HttpError(
                422,
                message,
                body={
                    "message": message,
                    "errors": problems,
                    "documentation_url": op.documentation_url,
                    "status": "422",
                },
            )

    # ------------------------------------------------------------------ auth
    def _authenticate(self, scheme: str, credential: str) -> dict[str, str]:
        """The repository permissions of the token presented (401 for none, or an unknown or expired one)."""
        if scheme not in ("token", "bearer") or not credential:
            raise _HttpError(401, "Requires authentication")
        if credential in self.tokens:
            granted = self.tokens[credential]
            return (
                dict(granted)
                if isinstance(granted, dict)
                else {"administration": granted, "metadata": "read"}
            )
        expiry = self.installation_tokens.get(credential)
        if expiry is not None and expiry > datetime.now(UTC):
            return dict(self.app_permissions)
        raise _HttpError(401, "Bad credentials")

    def _authorize(self, op: Operation, credential: str, permissions: dict[str, str]) -> None:
        """403 unless the token holds the permission GitHub asks for this operation (write includes read)."""
        choices = ANY_OF_PERMISSIONS.get(op.operation_id) or (
            (REQUIRED_PERMISSIONS[op.operation_id],) if op.operation_id in REQUIRED_PERMISSIONS else ()
        )
        if not choices:
            return
        for name, level in choices:
            if permissions.get(name) == "write" or (level == "read" and permissions.get(name) == "read"):
                return
        name, level = choices[-1]
        # GitHub's wording differs by token kind, and it names the permission it wanted in a header
        # (X-Accepted-GitHub-Permissions: docs.github.com "Permissions required for fine-grained personal
        # access tokens").
        kind = "personal access token" if credential.startswith("github_pat_") else "integration"
        raise _HttpError(
            403,
            f"Resource not accessible by {kind}",
            headers={"X-Accepted-GitHub-Permissions": f"{name}={level}"},
            documentation_url=op.documentation_url,
        )

    def _can_see(self, credential: str, repo: str) -> bool:
        # An installation token only reaches the repositories the App is installed on.
        return credential not in self.installation_tokens or repo in self.app_repositories

    def _verify_jwt(self, scheme: str, credential: str) -> None:
        """GitHub's rules for an App JWT (see JWT_MAX_LIFETIME_SECONDS), with GitHub's 401 messages (as
        clients quote them: rocq-prover/bot#204, octokit/auth-app.js's tests)."""
        if scheme != "bearer" or not credential:
            raise _HttpError(401, "A JSON web token could not be decoded")
        try:
            claims = jwt.decode(
                credential,
                app_private_key().public_key(),
                algorithms=["RS256"],
                options={"require": ["iat", "exp", "iss"], "verify_exp": False, "verify_iat": False},
            )
        except jwt.PyJWTError as error:
            raise _HttpError(401, f"A JSON web token could not be decoded ({type(error).__name__})") from None
        now = time.time()
        iat, exp = claims["iat"], claims["exp"]
        if not isinstance(iat, int) or iat > now + JWT_LEEWAY_SECONDS:
            raise _HttpError(
                401,
                "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued",
            )
        if not isinstance(exp, int | float) or exp <= now:
            raise _HttpError(
                401,
                "'Expiration time' claim ('exp') must be a numeric value representing the future time at which "
                "the assertion expires",
            )
        if exp > now + JWT_MAX_LIFETIME_SECONDS:
            raise _HttpError(401, "'Expiration time' claim ('exp') is too far in the future")
        if str(claims["iss"]) not in (str(self.app_id), self.client_id):
            raise _HttpError(401, "Integration not found")

    def _app_endpoint(self, method: str, path: str) -> tuple[int, dict[str, str], Any]:
        if method == "GET" and (match := re.fullmatch(r"/repos/([^/]+)/([^/]+)/installation", path)):
            repo = f"{match[1]}/{match[2]}".lower()
            if repo not in self.app_repositories:
                raise _HttpError(404, "Not Found")
            return 200, {}, self._installation(repo)
        if method == "POST" and (match := re.fullmatch(r"/app/installations/(\d+)/access_tokens", path)):
            if int(match[1]) not in self.installation_ids.values():
                raise _HttpError(404, "Not Found")
            token = "ghs_" + secrets.token_hex(18)
            expires = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
            self.installation_tokens[token] = expires
            body = {
                "token": token,
                "expires_at": expires.isoformat().replace("+00:00", "Z"),
                "permissions": dict(self.app_permissions),
                "repository_selection": "selected",
            }
            return 201, {}, body
        raise _HttpError(404, "Not Found")

    def _installation(self, repo: str) -> dict[str, Any]:
        owner = self.repositories[repo].partition("/")[0]
        installation_id = self.installation_ids[repo]
        return {
            "id": installation_id,
            "account": self._simple_user(owner, "Organization"),
            "repository_selection": "selected",
            "access_tokens_url": f"{self.url}/app/installations/{installation_id}/access_tokens",
            "repositories_url": f"{self.url}/installation/repositories",
            "html_url": f"https://github.com/organizations/{owner}/settings/installations/{installation_id}",
            "app_id": self.app_id,
            "app_slug": "gpu-runner-test",
            "target_id": 1,
            "target_type": "Organization",
            "permissions": dict(self.app_permissions),
            "events": [],
            "created_at": "2024-01-01T00:00:00Z",
            "updated_at": "2024-01-01T00:00:00Z",
            "single_file_name": None,
            "has_multiple_single_files": False,
            "single_file_paths": [],
            "suspended_by": None,
            "suspended_at": None,
        }

    def _simple_user(self, login: str, kind: str) -> dict[str, Any]:
        """The description's `simple-user` (an installation's account, a comment's author), every required field
        present. A bot's login ("github-actions[bot]") is percent-encoded in its URLs and its page is the App's, as
        GitHub sends them (`https://api.github.com/users/github-actions%5Bbot%5D`, `https://github.com/apps/
        github-actions`: the `user` of any comment a workflow's token wrote)."""
        api = f"{self.url}/users/{quote(login)}"
        return {
            "login": login, "id": 1, "node_id": "MDEyOk9yZ2FuaXphdGlvbjE=", "type": kind, "site_admin": False,
            "avatar_url": "https://avatars.githubusercontent.com/u/1?v=4", "gravatar_id": "",
            "url": api, "followers_url": f"{api}/followers",
            "html_url": f"https://github.com/apps/{login.removesuffix('[bot]')}" if kind == "Bot" else f"https://github.com/{quote(login)}",
            "following_url": api + "/following{/other_user}", "gists_url": api + "/gists{/gist_id}",
            "starred_url": api + "/starred{/owner}{/repo}", "subscriptions_url": f"{api}/subscriptions",
            "organizations_url": f"{api}/orgs", "repos_url": f"{api}/repos", "events_url": api + "/events{/privacy}",
            "received_events_url": f"{api}/received_events",
        }  # fmt: skip

    def _full_repository(self, repo: str, credential: str) -> dict[str, Any]:
        """GET /repos/{owner}/{repo}: the description's `full-repository`, every required field present, with
        `permissions`, the authenticated user's role on the repository (what gpu-runner doctor reads)."""
        full_name = self.repositories.get(repo, repo)  # a fork's head repository is not one of ours
        owner, _, name = full_name.partition("/")
        public = repo in self.settings and self.settings[repo].public
        api, web = f"{self.url}/repos/{full_name}", f"https://github.com/{full_name}"
        stamp = "2024-01-01T00:00:00Z"
        templated = {  # the `{...}` parts are RFC 6570 templates, as GitHub sends them
            "archive_url": "/{archive_format}{/ref}", "assignees_url": "/assignees{/user}", "blobs_url": "/git/blobs{/sha}",
            "branches_url": "/branches{/branch}", "collaborators_url": "/collaborators{/collaborator}",
            "comments_url": "/comments{/number}", "commits_url": "/commits{/sha}", "compare_url": "/compare/{base}...{head}",
            "contents_url": "/contents/{+path}", "git_commits_url": "/git/commits{/sha}", "git_refs_url": "/git/refs{/sha}",
            "git_tags_url": "/git/tags{/sha}", "issue_comment_url": "/issues/comments{/number}",
            "issue_events_url": "/issues/events{/number}", "issues_url": "/issues{/number}", "keys_url": "/keys{/key_id}",
            "labels_url": "/labels{/name}", "milestones_url": "/milestones{/number}",
            "notifications_url": "/notifications{?since,all,participating}", "pulls_url": "/pulls{/number}",
            "releases_url": "/releases{/id}", "statuses_url": "/statuses/{sha}", "trees_url": "/git/trees{/sha}",
        }  # fmt: skip
        plain = (
            "contributors", "deployments", "downloads", "events", "forks", "hooks", "languages", "merges",
            "stargazers", "subscribers", "subscription", "tags", "teams",
        )  # fmt: skip
        counts = ("forks", "forks_count", "network_count", "open_issues", "open_issues_count", "size",
                  "stargazers_count", "subscribers_count", "watchers", "watchers_count")  # fmt: skip
        return {
            "id": 1296269, "node_id": "MDEwOlJlcG9zaXRvcnkxMjk2MjY5", "name": name, "full_name": full_name,
            "owner": self._simple_user(owner, "Organization"), "private": not public, "description": None,
            "visibility": "public" if public else "private", "fork": False,
            "url": api, "html_url": web, "git_url": f"git://github.com/{full_name}.git",
            "ssh_url": f"git@github.com:{full_name}.git", "clone_url": f"{web}.git", "svn_url": web,
            "homepage": None, "language": "Python", "mirror_url": None, "license": None, "default_branch": "main",
            "archived": False, "disabled": False, "has_issues": True, "has_projects": False, "has_wiki": False,
            "has_pages": False, "has_discussions": False, "pushed_at": stamp, "created_at": stamp,
            "updated_at": stamp, "permissions": self._repository_role(credential),
            **{key: api + suffix for key, suffix in templated.items()},
            **{f"{key}_url": f"{api}/{key}" for key in plain},
            **dict.fromkeys(counts, 0),
        }  # fmt: skip

    # ------------------------------------------------------------------ repository endpoints
    def _repo_endpoint(
        self,
        method: str,
        repo: str,
        rest: str,
        query: dict[str, str],
        body: dict | None,
        credential: str,
    ) -> tuple[int, dict[str, str], Any]:
        """Runs after authentication, visibility, permission and the request's schema were checked."""
        if rest == "" and method == "GET":
            return 200, {}, self._full_repository(repo, credential)
        if rest in _ACTIONS_SETTINGS and method == "GET":
            return self._actions_settings(repo, rest, query)
        if rest.startswith("/actions/workflows/"):
            return self._workflow_endpoint(method, repo, rest, body or {})
        if rest == "/actions/oidc/customization/sub":
            return self._oidc_sub(method, repo, body or {})
        if (match := re.fullmatch(r"/compare/([^/]+)", rest)) and method == "GET":
            return self._compare(repo, match[1], query)
        if rest == "/actions/runners" and method == "GET":
            return self._list(repo, query)
        if rest == "/pulls" and method == "GET":
            return self._list_pulls(repo, query, credential)
        if method == "GET" and (found := self._settings_endpoint(repo, rest, query, credential)) is not None:
            return found
        if (match := re.fullmatch(r"/issues/(\d+)/comments", rest)) and method in ("GET", "POST"):
            issue = int(match[1])
            if method == "GET":
                return self._list_comments(repo, issue, query)
            return self._create_comment(repo, issue, (body or {})["body"], credential)
        if (match := re.fullmatch(r"/issues/comments/(\d+)", rest)) and method == "PATCH":
            return self._update_comment(repo, int(match[1]), (body or {})["body"])
        if rest == "/actions/runners/generate-jitconfig" and method == "POST":
            return self._generate_jitconfig(repo, body or {})
        if match := re.fullmatch(r"/actions/runners/(\d+)", rest):
            runner_id = int(match[1])
            runner = self._runners.get(runner_id) if self._runner_repo.get(runner_id) == repo else None
            if runner is None:
                raise _HttpError(404, "Not Found")
            if method == "GET":
                self._observe(runner)
                return 200, {}, runner
            if method == "DELETE":
                return self._delete(runner)
        raise _HttpError(404, "Not Found")

    def _workflow_endpoint(
        self, method: str, repo: str, rest: str, body: dict[str, Any]
    ) -> tuple[int, dict[str, str], Any]:
        """POST /actions/workflows/{id or file}/dispatches as GitHub answers it (API version 2022-11-28, the
        one a client gets without an X-GitHub-Api-Version header): 204 and no body, or 200 with the run's id
        and URLs when `return_run_details` is true (the description's `workflow-dispatch-response`)."""
        match = re.fullmatch(r"/actions/workflows/([^/]+)/dispatches", rest)
        key = match[1] if match else ""
        name = next((f for f, i in self.workflows.items() if key in (f, str(i))), None)
        if name is None or method != "POST":
            raise _HttpError(404, "Not Found")
        self.dispatches.append(
            {"workflow": name, "ref": body["ref"], "inputs": dict(body.get("inputs") or {})}
        )
        if not body.get("return_run_details"):
            return 204, {}, None
        run_id = next(self._run_ids)
        self.dispatched_runs.append(run_id)
        full_name = self.repositories[repo]
        return (
            200,
            {},
            {
                "workflow_run_id": run_id,
                "run_url": f"{self.url}/repos/{full_name}/actions/runs/{run_id}",
                "html_url": f"https://github.com/{full_name}/actions/runs/{run_id}",
            },
        )

    def _oidc_sub(self, method: str, repo: str, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        """GET / PUT /repos/{owner}/{repo}/actions/oidc/customization/sub: 200 with the template, 201 with `{}`
        (the description's responses). `use_default: true` ignores include_claim_keys (the same schema)."""
        if method == "GET":
            return 200, {}, dict(self.oidc_sub[repo])
        if method != "PUT":
            raise _HttpError(404, "Not Found")
        keys = body.get("include_claim_keys")
        bad = [k for k in keys or () if not _CLAIM_KEY.fullmatch(str(k))]
        if bad:
            raise _HttpError(422, f"Invalid claim keys: {bad}")
        if body["use_default"]:
            self.oidc_sub[repo] = {"use_default": True}
        else:
            self.oidc_sub[repo] = {"use_default": False, "include_claim_keys": list(keys or [])}
        return 201, {}, {}

    # ------------------------------------------------------------------ commits (compare)
    def _compare(self, repo: str, basehead: str, query: dict[str, str]) -> tuple[int, dict[str, str], Any]:
        """GET /repos/{o}/{r}/compare/{BASE...HEAD} ("Compare two commits", docs.github.com/rest/commits/
        commits#compare-two-commits, read 2026-12-01): `git log BASE..HEAD` in chronological order; `status`
        "identical", "ahead" (BASE is an ancestor of HEAD), "behind" or "diverged"; 404 "Not Found" for a ref
        GitHub cannot resolve (github/docs#13185, 2021) and 404 "No common ancestor between BASE and HEAD."
        for unrelated histories (slapperwan/gh4a#544, 2017; caarlos0/fork-cleaner#31, 2020). BASE and HEAD
        are full SHAs or branch names without a slash here (the description's `{basehead}` is one path segment);
        GitHub also resolves tags, short SHAs, `user:branch` of forks and branch names with slashes."""
        docs = "https://docs.github.com/rest/commits/commits#compare-two-commits"
        base_ref, sep, head_ref = basehead.partition("...")
        base, head = self._resolve(repo, base_ref), self._resolve(repo, head_ref)
        if not sep or base is None or head is None:
            raise _HttpError(404, "Not Found", documentation_url=docs)
        base_history, head_history = self._history(repo, base), self._history(repo, head)
        common = base_history & head_history
        if not common:
            raise _HttpError(
                404, f"No common ancestor between {base_ref} and {head_ref}.", documentation_url=docs
            )
        commits = self._commits[repo]
        merge_base = max(common, key=lambda sha: commits[sha].order)  # the newest common ancestor
        ahead = sorted(head_history - base_history, key=lambda sha: commits[sha].order)
        behind = base_history - head_history
        status = (
            "identical" if base == head else "ahead" if not behind else "behind" if not ahead else "diverged"
        )
        paged = "page" in query or "per_page" in query
        page = max(int(query.get("page", 1)), 1)
        per_page = int(query.get("per_page", PER_PAGE_DEFAULT))
        per_page = PER_PAGE_DEFAULT if per_page < 1 else min(per_page, PER_PAGE_MAX)
        shown = ahead[(page - 1) * per_page : page * per_page] if paged else ahead[-COMPARE_UNPAGED_COMMITS:]
        files = sorted({name for sha in ahead for name in commits[sha].files})[:COMPARE_MAX_FILES]
        full_name = self.repositories[repo]
        web = f"https://github.com/{full_name}"
        body = {
            "url": f"{self.url}/repos/{full_name}/compare/{basehead}",
            "html_url": f"{web}/compare/{basehead}",
            "permalink_url": f"{web}/compare/{full_name.partition('/')[0]}:{base}...{full_name.partition('/')[0]}:{head}",
            "diff_url": f"{web}/compare/{basehead}.diff",
            "patch_url": f"{web}/compare/{basehead}.patch",
            "base_commit": self._commit_object(repo, base),
            "merge_base_commit": self._commit_object(repo, merge_base),
            "status": status,
            "ahead_by": len(ahead),
            "behind_by": len(behind),
            "total_commits": len(ahead),
            "commits": [self._commit_object(repo, sha) for sha in shown],
        }
        if page == 1:  # "The list of changed files is only shown on the first page of results"
            body["files"] = [self._file_entry(repo, head, name) for name in files]
        links = []
        last = max(1, -(-len(ahead) // per_page))
        if paged:  # GitHub's pagination links ("Using pagination in the REST API"), as on the runners list

            def link(to_page: int, rel: str) -> str:
                return f'<{body["url"]}?{urlencode({"per_page": per_page, "page": to_page})}>; rel="{rel}"'

            if page > 1:
                links += [link(page - 1, "prev"), link(1, "first")]
            if page < last:
                links += [link(page + 1, "next"), link(last, "last")]
        return 200, {"Link": ", ".join(links)} if links else {}, body

    def _resolve(self, repo: str, ref: str) -> str | None:
        if ref in self._commits[repo]:
            return ref
        return self.branches[repo].get(ref)

    def _history(self, repo: str, sha: str) -> set[str]:
        """`sha` and all its ancestors."""
        seen, todo = set(), [sha]
        while todo:
            current = todo.pop()
            if current not in seen:
                seen.add(current)
                todo.extend(self._commits[repo][current].parents)
        return seen

    def _commit_object(self, repo: str, sha: str) -> dict[str, Any]:
        """The description's `commit` (compare's base_commit, merge_base_commit and commits[])."""
        commit = self._commits[repo][sha]
        full_name = self.repositories[repo]
        api, web = f"{self.url}/repos/{full_name}", f"https://github.com/{full_name}"
        stamp = (datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=commit.order)).isoformat()
        person = {"name": "Mona Lisa", "email": "mona@example.com", "date": stamp.replace("+00:00", "Z")}
        return {
            "url": f"{api}/commits/{sha}", "sha": sha, "node_id": f"C_kwDO{sha[:20]}", "html_url": f"{web}/commit/{sha}",
            "comments_url": f"{api}/commits/{sha}/comments",
            "commit": {
                "url": f"{api}/git/commits/{sha}", "author": person, "committer": person, "message": commit.message,
                "tree": {"sha": hashlib.sha1(sha.encode(), usedforsecurity=False).hexdigest(), "url": f"{api}/git/trees/{sha}"},
                "comment_count": 0,
                "verification": {"verified": False, "reason": "unsigned", "signature": None, "payload": None, "verified_at": None},
            },
            "author": self._simple_user("mona", "User"), "committer": self._simple_user("mona", "User"),
            "parents": [{"sha": p, "url": f"{api}/commits/{p}", "html_url": f"{web}/commit/{p}"} for p in commit.parents],
        }  # fmt: skip

    def _file_entry(self, repo: str, head: str, name: str) -> dict[str, Any]:
        full_name = self.repositories[repo]
        blob = hashlib.sha1(f"{head}:{name}".encode(), usedforsecurity=False).hexdigest()
        return {
            "sha": blob, "filename": name, "status": "modified", "additions": 1, "deletions": 1, "changes": 2,
            "blob_url": f"https://github.com/{full_name}/blob/{head}/{name}",
            "raw_url": f"https://github.com/{full_name}/raw/{head}/{name}",
            "contents_url": f"{self.url}/repos/{full_name}/contents/{name}?ref={head}",
            "patch": f"@@ -1 +1 @@\n-old\n+new {name}",
        }  # fmt: skip

    def _list(self, repo: str, query: dict[str, str]) -> tuple[int, dict[str, str], Any]:
        # The schema check already refused a non-integer; out-of-range values are GitHub's (PER_PAGE_MAX).
        per_page = int(query.get("per_page", PER_PAGE_DEFAULT))
        per_page = PER_PAGE_DEFAULT if per_page < 1 else min(per_page, PER_PAGE_MAX)
        page = max(int(query.get("page", 1)), 1)
        matching = [
            runner
            for rid, runner in sorted(self._runners.items())
            if self._runner_repo[rid] == repo and ("name" not in query or runner["name"] == query["name"])
        ]
        chunk = matching[(page - 1) * per_page : page * per_page]
        for runner in chunk:
            self._observe(runner)
        last = max(1, -(-len(matching) // per_page))
        links = []
        base = f"{self.url}/repos/{self.repositories[repo]}/actions/runners"

        def link(to_page: int, rel: str) -> str:
            return f'<{base}?{urlencode({**query, "per_page": per_page, "page": to_page})}>; rel="{rel}"'

        if page > 1:
            links += [link(page - 1, "prev"), link(1, "first")]
        if page < last:
            links += [link(page + 1, "next"), link(last, "last")]
        headers = {"Link": ", ".join(links)} if links else {}
        return 200, headers, {"total_count": len(matching), "runners": chunk}

    def _generate_jitconfig(self, repo: str, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        # Types, required keys and the 1-100 labels were checked against the description's schema already.
        name, labels, group = body["name"], body["labels"], body["runner_group_id"]
        if not name:
            raise _HttpError(422, "Invalid request.\n\nname can't be blank.")
        # GitHub's description states no maxLength for the name (gpu_runner_testing/github-openapi.json); a GitHub
        # maintainer: "Runner names can only be 64 characters in length" (actions/runner PR #1710). Wording ours.
        if len(name) > RUNNER_NAME_MAX:
            raise _HttpError(
                422, f"Invalid request.\n\nname is too long (maximum is {RUNNER_NAME_MAX} characters)."
            )
        if group != 1:
            raise _HttpError(404, "Not Found")
        if any(r["name"] == name and self._runner_repo[rid] == repo for rid, r in self._runners.items()):
            raise _HttpError(409, f"Already exists - A runner with the name {name} already exists.")
        runner = self._new_runner(repo, name, labels, group, ephemeral=True)
        work_folder = body.get("work_folder", "_work")
        encoded = encoded_jit_config(
            runner_id=runner["id"], runner_name=name, repository=self.repositories[repo], pool_id=group,
            work_folder=work_folder,
        )  # fmt: skip
        self._issued_jit[name] = encoded
        return 201, {}, {"runner": runner, "encoded_jit_config": encoded}

    def _new_runner(
        self, repo: str, name: str, labels: list[str], group: int, ephemeral: bool
    ) -> dict[str, Any]:
        runner_id = next(self._ids)
        runner = {
            "id": runner_id,
            "runner_group_id": group,
            "name": name,
            "os": "unknown",
            "status": "offline",
            "busy": False,
            "ephemeral": ephemeral,
            "labels": [self._label(label) for label in labels],
        }
        self._runners[runner_id] = runner
        self._runner_repo[runner_id] = repo
        return runner

    def _label(self, name: str) -> dict[str, Any]:
        label_id = self._label_ids.setdefault(name.lower(), len(self._label_ids) + 1)
        kind = "read-only" if name.lower() in DEFAULT_LABELS else "custom"
        return {"id": label_id, "name": name, "type": kind}

    def _delete(self, runner: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        runner_id = runner["id"]
        if runner["busy"]:
            left = self._busy_deletes.get(runner_id)
            if left is not None:
                self._busy_deletes[runner_id] = left - 1
                if left - 1 <= 0:  # the job finishes: the next DELETE goes through
                    del self._busy_deletes[runner_id]
                    runner["busy"] = False
            raise _HttpError(422, f'Bad request - Runner "{runner["name"]}" is still running a job"')
        del self._runners[runner_id]
        del self._runner_repo[runner_id]
        return 204, {}, None

    def _observe(self, runner: dict[str, Any]) -> None:
        """A client looked at the runner: apply the online_after rules that match it."""
        now = time.monotonic()
        for rule in self._online_rules:
            target = rule.runner
            if isinstance(target, int) and target != runner["id"]:
                continue
            if isinstance(target, re.Pattern) and not target.search(runner["name"]):
                continue
            polls = rule.seen_polls[runner["id"]] = rule.seen_polls.get(runner["id"], 0) + 1
            polls_done = rule.polls is None or polls > rule.polls
            time_done = rule.seconds is None or now - rule.since >= rule.seconds
            if polls_done and time_done and runner["status"] != "online":
                runner.update(status="online", busy=rule.busy, os="linux")

    # ------------------------------------------------------------------ pull requests and issue comments
    # (added for the pull-request comment; operations pulls/list, issues/list-comments, issues/create-comment,
    # issues/update-comment)
    def open_pull(
        self,
        branch: str,
        base: str = "main",
        head_repository: str | None = None,
        title: str = "",
        repository: str = DEFAULT_REPOSITORY,
    ) -> int:
        """Open a pull request of `branch` (of `head_repository`, default this repository: another name is a
        fork) into `base`; returns its number."""
        with self._lock:
            repo = repository.lower()
            number = next(self._issue_numbers)
            head_full = head_repository or self.repositories[repo]
            self._pulls[repo].append(
                {"number": number, "head_ref": branch, "head_repo": head_full, "base_ref": base,
                 "title": title or f"Train {branch}", "state": "open",
                 "head_sha": self.branches[repo].get(branch) or hashlib.sha1(branch.encode(), usedforsecurity=False).hexdigest()}
            )  # fmt: skip
            return number

    def close_pull(self, number: int, repository: str = DEFAULT_REPOSITORY) -> None:
        with self._lock:
            for pull in self._pulls[repository.lower()]:
                if pull["number"] == number:
                    pull["state"] = "closed"

    def add_comment(
        self, number: int, body: str, author: tuple[str, str] = HUMAN, repository: str = DEFAULT_REPOSITORY
    ) -> int:
        """A comment someone else wrote (author = (login, type)), e.g. a human who pasted the marker."""
        with self._lock:
            return self._new_comment(repository.lower(), number, body, author)["id"]

    def comments(self, number: int, repository: str = DEFAULT_REPOSITORY) -> list[dict[str, Any]]:
        """A snapshot of the issue comments of pull request `number`, oldest first: id, body, login, type,
        created_at, updated_at."""
        with self._lock:
            repo = repository.lower()
            return [
                {"id": cid, "body": c["body"], "login": c["author"][0], "type": c["author"][1],
                 "created_at": c["created_at"], "updated_at": c["updated_at"]}
                for cid, c in sorted(self._comments.items())
                if c["repo"] == repo and c["issue"] == number
            ]  # fmt: skip

    def _pull(self, repo: str, number: int) -> dict[str, Any]:
        found = next((p for p in self._pulls[repo] if p["number"] == number), None)
        if found is None:  # only pull requests are issues here
            raise _HttpError(404, "Not Found", documentation_url=_COMMENTS_DOCS)
        return found

    def _new_comment(self, repo: str, number: int, body: str, author: tuple[str, str]) -> dict[str, Any]:
        self._pull(repo, number)
        stamp = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
        comment = {
            "id": next(self._comment_ids), "repo": repo, "issue": number, "body": body, "author": author,
            "created_at": stamp, "updated_at": stamp,
        }  # fmt: skip
        self._comments[comment["id"]] = comment
        return comment

    def _check_comment_body(self, body: str) -> None:
        if len(body) > COMMENT_MAX_CHARS:
            message = f"Body is too long (maximum is {COMMENT_MAX_CHARS} characters)"
            raise _HttpError(
                422,
                "Validation Failed",
                body={
                    "message": "Validation Failed",
                    "errors": [{"resource": "IssueComment", "code": "unprocessable", "field": "data", "message": message}],
                    "documentation_url": _COMMENTS_DOCS,
                },
            )  # fmt: skip

    def _comment_object(self, comment: dict[str, Any]) -> dict[str, Any]:
        """The description's `issue-comment`, every required field present."""
        full_name = self.repositories[comment["repo"]]
        api, web = f"{self.url}/repos/{full_name}", f"https://github.com/{full_name}"
        login, kind = comment["author"]
        return {
            "id": comment["id"], "node_id": f"IC_kwDO{comment['id']}", "url": f"{api}/issues/comments/{comment['id']}",
            "html_url": f"{web}/pull/{comment['issue']}#issuecomment-{comment['id']}", "body": comment["body"],
            "issue_url": f"{api}/issues/{comment['issue']}", "user": self._simple_user(login, kind),
            "created_at": comment["created_at"], "updated_at": comment["updated_at"],
            "author_association": "NONE" if kind == "Bot" else "MEMBER", "performed_via_github_app": None,
        }  # fmt: skip

    def _pull_object(self, repo: str, pull: dict[str, Any], credential: str) -> dict[str, Any]:
        """The description's `pull-request-simple` (List pull requests), every required field present."""
        full_name = self.repositories[repo]
        api, web, number = f"{self.url}/repos/{full_name}", f"https://github.com/{full_name}", pull["number"]
        head_full = pull["head_repo"]
        head_repo = {
            **self._full_repository(
                head_full.lower() if head_full.lower() in self.repositories else head_full, credential
            ),
            "has_downloads": True,
        }
        head_repo["fork"] = head_full.lower() != repo
        base_repo = {**self._full_repository(repo, credential), "has_downloads": True}
        user = self._simple_user("mona", "User")
        base_sha = self.branches[repo].get(pull["base_ref"]) or "0" * 40

        def side(owner_repo: dict[str, Any], ref: str, sha: str) -> dict[str, Any]:
            return {
                "label": f"{owner_repo['owner']['login']}:{ref}",
                "ref": ref,
                "repo": owner_repo,
                "sha": sha,
                "user": user,
            }

        links = {
            "comments": f"{api}/issues/{number}/comments", "commits": f"{api}/pulls/{number}/commits",
            "statuses": f"{api}/statuses/{pull['head_sha']}", "html": f"{web}/pull/{number}",
            "issue": f"{api}/issues/{number}", "review_comments": f"{api}/pulls/{number}/comments",
            "review_comment": api + "/pulls/comments{/number}", "self": f"{api}/pulls/{number}",
        }  # fmt: skip
        return {
            "url": f"{api}/pulls/{number}", "id": 9000 + number, "node_id": f"PR_kwDO{number}",
            "html_url": f"{web}/pull/{number}", "diff_url": f"{web}/pull/{number}.diff",
            "patch_url": f"{web}/pull/{number}.patch", "issue_url": f"{api}/issues/{number}",
            "commits_url": f"{api}/pulls/{number}/commits", "review_comments_url": f"{api}/pulls/{number}/comments",
            "review_comment_url": api + "/pulls/comments{/number}", "comments_url": f"{api}/issues/{number}/comments",
            "statuses_url": f"{api}/statuses/{pull['head_sha']}", "number": number, "state": pull["state"],
            "locked": False, "title": pull["title"], "user": user, "body": None, "labels": [], "milestone": None,
            "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z", "closed_at": None,
            "merged_at": None, "merge_commit_sha": None, "assignee": None, "draft": False,
            "head": side(head_repo, pull["head_ref"], pull["head_sha"]), "base": side(base_repo, pull["base_ref"], base_sha),
            "_links": {rel: {"href": href} for rel, href in links.items()},
            "author_association": "MEMBER", "auto_merge": None,
        }  # fmt: skip

    def _page(self, items: list[Any], query: dict[str, str], base: str) -> tuple[list[Any], dict[str, str]]:
        """One page and its Link header, as the runners list pages ("Using pagination in the REST API")."""
        per_page = int(query.get("per_page", PER_PAGE_DEFAULT))
        per_page = PER_PAGE_DEFAULT if per_page < 1 else min(per_page, PER_PAGE_MAX)
        page = max(int(query.get("page", 1)), 1)
        last = max(1, -(-len(items) // per_page))
        kept = {k: v for k, v in query.items() if k not in ("page", "per_page")}

        def link(to_page: int, rel: str) -> str:
            return f'<{base}?{urlencode({**kept, "per_page": per_page, "page": to_page})}>; rel="{rel}"'

        links = []
        if page > 1:
            links += [link(page - 1, "prev"), link(1, "first")]
        if page < last:
            links += [link(page + 1, "next"), link(last, "last")]
        return items[(page - 1) * per_page : page * per_page], {"Link": ", ".join(links)} if links else {}

    def _list_pulls(
        self, repo: str, query: dict[str, str], credential: str
    ) -> tuple[int, dict[str, str], Any]:
        """GET /repos/{o}/{r}/pulls (docs.github.com/rest/pulls/pulls#list-pull-requests): `state` open (the
        default), closed or all; `head` "user:ref-name" keeps the pull requests whose head repository's owner is
        `user` and whose head branch is `ref-name` (a fork under that owner matches too); `base` the base
        branch. A `head` without the colon is not described; it matches nothing here. Newest first (sort
        created, direction desc: the defaults)."""
        state = query.get("state", "open")
        head = query.get("head")
        found = []
        for pull in sorted(self._pulls[repo], key=lambda p: -p["number"]):
            if state != "all" and pull["state"] != state:
                continue
            if head is not None:
                user, colon, ref = head.partition(":")
                owner = pull["head_repo"].partition("/")[0]
                if not colon or user.lower() != owner.lower() or ref != pull["head_ref"]:
                    continue
            if "base" in query and query["base"] != pull["base_ref"]:
                continue
            found.append(self._pull_object(repo, pull, credential))
        chunk, headers = self._page(found, query, f"{self.url}/repos/{self.repositories[repo]}/pulls")
        return 200, headers, chunk

    def _list_comments(
        self, repo: str, number: int, query: dict[str, str]
    ) -> tuple[int, dict[str, str], Any]:
        """GET .../issues/{n}/comments: "Issue comments are ordered by ascending ID" (the description)."""
        self._pull(repo, number)
        items = [
            self._comment_object(c)
            for _, c in sorted(self._comments.items())
            if c["repo"] == repo and c["issue"] == number
        ]
        base = f"{self.url}/repos/{self.repositories[repo]}/issues/{number}/comments"
        chunk, headers = self._page(items, query, base)
        return 200, headers, chunk

    def _create_comment(
        self, repo: str, number: int, body: str, credential: str
    ) -> tuple[int, dict[str, str], Any]:
        """POST .../issues/{n}/comments: 201 and the comment, its author the token's user."""
        self._check_comment_body(body)
        comment = self._new_comment(repo, number, body, self.token_authors.get(credential, HUMAN))
        return 201, {"Location": self._comment_object(comment)["url"]}, self._comment_object(comment)

    def _update_comment(self, repo: str, comment_id: int, body: str) -> tuple[int, dict[str, str], Any]:
        """PATCH .../issues/comments/{id}: 200 and the comment. A token with write access to the repository may
        edit anyone's comment (as a maintainer may): only the client decides which comment is its own."""
        comment = self._comments.get(comment_id)
        if comment is None or comment["repo"] != repo:
            raise _HttpError(404, "Not Found", documentation_url=_COMMENTS_DOCS)
        self._check_comment_body(body)
        comment["body"] = body
        comment["updated_at"] = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
        return 200, {}, self._comment_object(comment)

    # ------------------------------------------------------------------ Actions variables and secrets
    # (added for gpu-runner doctor; operations actions/list-repo-variables and actions/list-repo-secrets)
    def set_variable(self, name: str, value: str, repository: str = DEFAULT_REPOSITORY) -> None:
        with self._lock:
            self.variables[repository.lower()][name] = value

    def set_secret(self, name: str, repository: str = DEFAULT_REPOSITORY) -> None:
        """Only the name: GitHub never returns a secret's value."""
        with self._lock:
            self.secrets[repository.lower()].add(name)

    def _actions_settings(
        self, repo: str, rest: str, query: dict[str, str]
    ) -> tuple[int, dict[str, str], Any]:
        """GET /repos/{owner}/{repo}/actions/variables | /actions/secrets (docs.github.com, "REST API endpoints
        for GitHub Actions variables" / "... secrets"): `{"total_count", "variables": [{name, value, created_at,
        updated_at}]}` (per_page default 10, max 30) and `{"total_count", "secrets": [{name, created_at,
        updated_at}]}` (default 30, max 100). The token's Variables / Secrets permission was checked already."""
        kind, default, maximum = _ACTIONS_SETTINGS[rest]
        # The schema check already refused a non-integer.
        per_page = min(int(query.get("per_page", default)), maximum)
        page = max(int(query.get("page", 1)), 1)
        stamp = "2026-01-01T00:00:00Z"
        if kind == "variables":
            items = [
                {"name": n, "value": v, "created_at": stamp, "updated_at": stamp}
                for n, v in sorted(self.variables[repo].items())
            ]
        else:
            items = [
                {"name": n, "created_at": stamp, "updated_at": stamp} for n in sorted(self.secrets[repo])
            ]
        chunk = items[(page - 1) * per_page : page * per_page]
        last = max(1, -(-len(items) // per_page))
        base = f"{self.url}/repos/{self.repositories[repo]}{rest}"
        links = [
            f'<{base}?{urlencode({"per_page": per_page, "page": to})}>; rel="{rel}"'
            for to, rel, show in ((page + 1, "next", page < last), (last, "last", page < last))
            if show
        ]
        headers = {"Link": ", ".join(links)} if links else {}
        return 200, headers, {"total_count": len(items), kind: chunk}

    # ------------------------------------------------------------------ the guards doctor reads
    def _settings_endpoint(
        self, repo: str, rest: str, query: dict[str, str], credential: str
    ) -> tuple[int, dict[str, str], Any] | None:
        """The GETs of github_settings.py (None: not one of them). Who is an admin is the token's user
        (non_admin_tokens); an organization's ruleset is writable by the organization's owners only."""
        settings, api = self.settings[repo], f"{self.url}/repos/{self.repositories[repo]}"
        is_admin = credential not in self.non_admin_tokens
        try:
            if match := re.fullmatch(r"/rules/branches/([^/]+)", rest):  # a branch with a slash comes as %2F
                chunk, headers = self._page(settings.branch_rules(unquote(match[1])), query, f"{api}{rest}")
                return 200, headers, chunk
            if match := re.fullmatch(r"/rulesets/(\d+)", rest):
                ruleset = settings.rulesets.get(int(match[1]))
                can_write = (
                    is_admin
                    if ruleset is None or ruleset.source_type == "Repository"
                    else (credential in self.org_owner_tokens)
                )
                return 200, {}, settings.ruleset(api, int(match[1]), can_write)
            if match := re.fullmatch(r"/branches/([^/]+)/protection", rest):
                return 200, {}, settings.branch_protection(api, unquote(match[1]), is_admin)
            if rest == "/actions/permissions/workflow":
                return 200, {}, settings.workflow_permissions()
            if match := re.fullmatch(r"/environments/([^/]+)", rest):
                return 200, {}, settings.environment(api, match[1])
            if match := re.fullmatch(r"/environments/([^/]+)/deployment-branch-policies", rest):
                policies = settings.branch_policies(match[1])
                chunk, headers = self._page(policies, query, f"{api}{rest}")
                return 200, headers, {"total_count": len(policies), "branch_policies": chunk}
            if rest == "/actions/permissions/fork-pr-contributor-approval":
                return 200, {}, settings.fork_pr_approval()
            if rest == "/actions/permissions/fork-pr-workflows-private-repos":
                return 200, {}, settings.private_fork_workflows()
        except NotFound as missing:
            raise _HttpError(404, missing.message, documentation_url=missing.documentation_url) from None
        return None

    def _repository_role(self, credential: str) -> dict[str, bool]:
        admin = credential not in self.non_admin_tokens
        return {"admin": admin, "maintain": admin, "push": True, "triage": True, "pull": True}

    def _rate_headers(self, credential: str) -> dict[str, str]:
        used = self._rate_used[credential] = self._rate_used.get(credential, 0) + 1
        return {
            "x-ratelimit-limit": str(RATE_LIMIT),
            "x-ratelimit-remaining": str(max(RATE_LIMIT - used, 0)),
            "x-ratelimit-reset": str(int(time.time()) + 3600),
            "x-ratelimit-used": str(used),
            "x-ratelimit-resource": "core",
        }


# path -> (permission and list key, default per_page, maximum per_page)
_ACTIONS_SETTINGS = {"/actions/variables": ("variables", 10, 30), "/actions/secrets": ("secrets", 30, 100)}

_REASONS = {
    401: "Bad credentials",
    403: "Resource not accessible by personal access token",
    404: "Not Found",
    409: "Conflict",
    422: "Validation Failed",
    429: "API rate limit exceeded",
    500: "Server Error",
    502: "Server Error",
    503: "Service Unavailable",
    504: "We couldn't respond to your request in time. Sorry about that.",
}


class _Handler(BaseHTTPRequestHandler):
    double: GitHubDouble
    protocol_version = "HTTP/1.1"  # keep-alive, as api.github.com; every response carries Content-Length
    server_version = "GitHub.com"
    sys_version = ""

    def setup(self) -> None:
        super().setup()
        with self.double._lock:
            self.double._connections.add(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            with self.double._lock:
                self.double._connections.discard(self.connection)

    def log_message(self, format: str, *args: Any) -> None:  # the test output stays readable
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        status, headers, payload = self.double.handle(self.command, self.path, self.headers, raw)
        data = b"" if payload is None or status == 204 else json.dumps(payload).encode()
        self.send_response(status)
        if data:
            self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-GitHub-Media-Type", "github.v3; format=json")
        self.send_header("X-GitHub-Request-Id", uuid.uuid4().hex[:16].upper())
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if data and self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _serve


def iter_pages(calls: Iterable[Call], path_suffix: str = "/actions/runners") -> Iterator[Call]:
    """The list requests among `calls`, e.g. to count the pages a client fetched."""
    return (c for c in calls if c.method == "GET" and c.path.endswith(path_suffix))
