"""A local stand-in for the GitHub REST API: the self-hosted runner and GitHub App endpoints, over real HTTP.

Real clients (PyGithub, curl, the gpu-runner CLI) talk to it through `GITHUB_API_URL`. Response bodies, status
codes and headers follow docs.github.com ("REST API endpoints for self-hosted runners", "Apps"): runner objects
with `labels: [{id, name, type}]`, `{"total_count", "runners"}` pages with a `Link` header, 201/204/404/409/422
where GitHub answers them, `x-ratelimit-*` headers on every response, 401 "Bad credentials" for unknown tokens.
GitHub App auth is checked for real: the JWT must be RS256-signed with the App key (generated at runtime, never
stored) before an installation token is issued, and runner endpoints accept only known tokens.

Test controls are plain, thread-safe methods: `set_status`, `stay_busy_for`, `online_after`, `fail`, plus the
`runners`, `calls`, `requests` and `issued_jit_configs` views.
"""

from __future__ import annotations

import base64
import contextlib
import functools
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
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

DEFAULT_REPOSITORY = "octo-org/octo-repo"
DEFAULT_TOKEN = "github_pat_test_0123456789abcdef"  # fake fine-grained PAT with Administration: write
READ_ONLY_TOKEN = "github_pat_readonly_0123456789"  # fake PAT with Administration: read only
# Fake token of a repository admin (as `gh auth token` gives), allowed to read Actions variables and secrets.
ADMIN_TOKEN = "gho_admin_0123456789abcdef"
DEFAULT_APP_ID = 424242
DOCS = "https://docs.github.com/rest/actions/self-hosted-runners"
# Labels the runner application sets itself; GitHub reports them as "read-only", everything else as "custom".
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


@dataclass
class _OnlineRule:
    runner: int | re.Pattern[str] | None  # a runner id, a name pattern, or None = every runner
    polls: int | None
    seconds: float | None
    busy: bool
    since: float = field(default_factory=time.monotonic)
    seen_polls: dict[int, int] = field(default_factory=dict)


class _HttpError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None, body: Any = None):
        super().__init__(message)
        self.status = status
        self.headers = headers or {}
        self.body = (
            body
            if body is not None
            else {"message": message, "documentation_url": DOCS, "status": str(status)}
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
        tokens: dict[str, str] | None = None,
        app_id: int = DEFAULT_APP_ID,
        app_repositories: Iterable[str] | None = None,
        app_permissions: dict[str, str] | None = None,
    ) -> None:
        """`tokens` maps a PAT to its Administration permission ("write" or "read"); the App is installed on
        `app_repositories` (default: all) with `app_permissions` (default: administration write)."""
        self._lock = threading.RLock()
        self.repositories = {r.lower(): r for r in repositories}
        self.tokens: dict[str, str] = dict(tokens or {DEFAULT_TOKEN: "write", READ_ONLY_TOKEN: "read"})
        self.app_id = app_id
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
        self.workflows = {"train.yml": 161335, "reap.yml": 161336}
        self.dispatches: list[dict[str, Any]] = []
        # Actions variables and secrets (gpu-runner doctor): per repository, and who may read them.
        self.variables: dict[str, dict[str, str]] = {repo: {} for repo in self.repositories}
        self.secrets: dict[str, set[str]] = {repo: set() for repo in self.repositories}
        self.settings_permissions: dict[str, dict[str, str]] = {
            ADMIN_TOKEN: {"variables": "read", "secrets": "read"}
        }
        self.tokens.setdefault(ADMIN_TOKEN, "write")
        # Whose user is not an admin of the repositories (GET /repos/{o}/{r} `permissions.admin` false), and the
        # scopes of classic tokens (sent as X-OAuth-Scopes, which GitHub sends for OAuth and classic tokens only).
        self.non_admin_tokens: set[str] = set()
        self.classic_scopes: dict[str, str] = {}

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
        if self._server is None:
            return
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
        with self._lock:
            try:
                if not isinstance(body, dict | None):
                    raise _HttpError(400, "Problems parsing JSON")
                status, extra, payload = self._dispatch(method, path, query, body, scheme, credential)
            except _HttpError as error:
                status, extra, payload = error.status, error.headers, error.body
            self._requests.append(Request(method, path, query, body, status, scheme, credential))
            extra = {**self._rate_headers(credential), **extra}
            if credential in self.classic_scopes:
                extra["X-OAuth-Scopes"] = self.classic_scopes[credential]
        return status, extra, payload

    def _dispatch(
        self, method: str, path: str, query: dict[str, str], body: dict | None, scheme: str, credential: str
    ) -> tuple[int, dict[str, str], Any]:
        for fault in self._faults:
            if fault.times > 0 and fault.method == method and fault.path.search(path):
                fault.times -= 1
                default = {"message": _REASONS.get(fault.status, "Error"), "documentation_url": DOCS}
                return fault.status, fault.headers, fault.body if fault.body is not None else default

        if path.startswith("/app/") or re.fullmatch(r"/repos/[^/]+/[^/]+/installation", path):
            return self._app_endpoint(method, path, scheme, credential)

        permission = self._authenticate(scheme, credential)
        if match := re.fullmatch(r"/repos/([^/]+)/([^/]+)(/.*)?", path):
            repo = f"{match[1]}/{match[2]}".lower()
            if repo not in self.repositories or not self._can_see(credential, repo):
                raise _HttpError(404, "Not Found")
            if method == "GET" and match[3] in _ACTIONS_SETTINGS:
                return self._actions_settings(repo, match[3], query, credential)
            return self._repo_endpoint(method, repo, match[3] or "", query, body, permission, credential)
        raise _HttpError(404, "Not Found")

    # ------------------------------------------------------------------ auth
    def _authenticate(self, scheme: str, credential: str) -> str:
        if scheme not in ("token", "bearer") or not credential:
            raise _HttpError(401, "Requires authentication")
        if credential in self.tokens:
            return self.tokens[credential]
        expiry = self.installation_tokens.get(credential)
        if expiry is not None and expiry > datetime.now(UTC):
            return self.app_permissions.get("administration", "none")
        raise _HttpError(401, "Bad credentials")

    def _can_see(self, credential: str, repo: str) -> bool:
        # An installation token only reaches the repositories the App is installed on.
        return credential not in self.installation_tokens or repo in self.app_repositories

    def _verify_jwt(self, scheme: str, credential: str) -> None:
        if scheme != "bearer" or not credential:
            raise _HttpError(401, "A JSON web token could not be decoded")
        try:
            claims = jwt.decode(
                credential,
                app_private_key().public_key(),
                algorithms=["RS256"],
                options={"require": ["iat", "exp", "iss"]},
                leeway=5,
            )
        except jwt.PyJWTError as error:
            raise _HttpError(401, f"A JSON web token could not be decoded ({type(error).__name__})") from None
        if str(claims["iss"]) != str(self.app_id):
            raise _HttpError(401, "Integration not found")
        if claims["exp"] - claims["iat"] > 660:  # GitHub: at most 10 minutes (PyGithub backdates iat 60 s)
            raise _HttpError(401, "'Expiration time' claim ('exp') is too far in the future")

    def _app_endpoint(
        self, method: str, path: str, scheme: str, credential: str
    ) -> tuple[int, dict[str, str], Any]:
        self._verify_jwt(scheme, credential)
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
            "account": {"login": owner, "id": 1, "type": "Organization", "url": f"{self.url}/users/{owner}"},
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

    # ------------------------------------------------------------------ repository endpoints
    def _repo_endpoint(
        self,
        method: str,
        repo: str,
        rest: str,
        query: dict[str, str],
        body: dict | None,
        permission: str,
        credential: str = "",
    ) -> tuple[int, dict[str, str], Any]:
        if rest == "" and method == "GET":
            owner, _, name = self.repositories[repo].partition("/")
            return 200, {}, {
                "id": 1296269,
                "name": name,
                "full_name": self.repositories[repo],
                "owner": {"login": owner, "id": 1, "type": "Organization"},
                "private": True,
                # The authenticated user's role on the repository (added for gpu-runner doctor).
                "permissions": self._repository_role(credential),
                "html_url": f"https://github.com/{self.repositories[repo]}",
                "url": f"{self.url}/repos/{self.repositories[repo]}",
            }  # fmt: skip
        if rest.startswith("/actions/workflows/"):
            return self._workflow_endpoint(method, repo, rest, body, permission)
        if not rest.startswith("/actions/runners"):
            raise _HttpError(404, "Not Found")
        if permission not in ("read", "write"):
            raise _HttpError(403, "Resource not accessible by integration")
        writes = method in ("POST", "DELETE", "PUT", "PATCH")
        if writes and permission != "write":
            raise _HttpError(403, "Resource not accessible by personal access token")

        if rest == "/actions/runners" and method == "GET":
            return self._list(repo, query)
        if rest == "/actions/runners/generate-jitconfig" and method == "POST":
            return self._generate_jitconfig(repo, body or {})
        if (
            rest in ("/actions/runners/registration-token", "/actions/runners/remove-token")
            and method == "POST"
        ):
            expires = (datetime.now(UTC) + timedelta(hours=1)).isoformat(timespec="milliseconds")
            return 201, {}, {"token": secrets.token_hex(15).upper(), "expires_at": expires}
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
        self, method: str, repo: str, rest: str, body: dict | None, permission: str
    ) -> tuple[int, dict[str, str], Any]:
        """GET /actions/workflows/{id or file} and POST .../dispatches, as GitHub answers them."""
        match = re.fullmatch(r"/actions/workflows/([^/]+)(/dispatches)?", rest)
        if not match:
            raise _HttpError(404, "Not Found")
        key = match[1]
        name = next((f for f, i in self.workflows.items() if key in (f, str(i))), None)
        if name is None:
            raise _HttpError(404, "Not Found")
        url = f"{self.url}/repos/{self.repositories[repo]}/actions/workflows/{self.workflows[name]}"
        if match[2] is None and method == "GET":
            return 200, {}, {
                "id": self.workflows[name], "node_id": f"W_{self.workflows[name]}", "name": name,
                "path": f".github/workflows/{name}", "state": "active", "url": url,
                "html_url": f"https://github.com/{self.repositories[repo]}/blob/main/.github/workflows/{name}",
                "badge_url": f"https://github.com/{self.repositories[repo]}/workflows/{name}/badge.svg",
                "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
            }  # fmt: skip
        if match[2] and method == "POST":
            if permission != "write":
                raise _HttpError(403, "Resource not accessible by integration")
            body = body or {}
            inputs = body.get("inputs") or {}
            if not isinstance(body.get("ref"), str) or not body["ref"]:
                raise _HttpError(422, 'Invalid request.\n\n"ref" wasn\'t supplied.')
            if not isinstance(inputs, dict) or len(inputs) > 25:
                raise _HttpError(422, "inputs must be an object of at most 25 properties")
            self.dispatches.append({"workflow": name, "ref": body["ref"], "inputs": dict(inputs)})
            return 204, {}, None
        raise _HttpError(404, "Not Found")

    def _list(self, repo: str, query: dict[str, str]) -> tuple[int, dict[str, str], Any]:
        try:
            per_page = min(int(query.get("per_page", 30)), 100)
            page = max(int(query.get("page", 1)), 1)
        except ValueError:
            raise _HttpError(422, "Validation Failed") from None
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
        for key in ("name", "runner_group_id", "labels"):
            if key not in body:
                raise _HttpError(422, f"Invalid input: object is missing required key: {key}")
        name, labels, group = body["name"], body["labels"], body["runner_group_id"]
        if not isinstance(name, str) or not name or not isinstance(group, int):
            raise _HttpError(422, "Invalid request.")
        if (
            not isinstance(labels, list)
            or not 1 <= len(labels) <= 100
            or not all(isinstance(x, str) for x in labels)
        ):
            raise _HttpError(422, "Invalid request.\n\nlabels must have between 1 and 100 items.")
        if group != 1:
            raise _HttpError(404, "Not Found")
        if any(r["name"] == name and self._runner_repo[rid] == repo for rid, r in self._runners.items()):
            raise _HttpError(409, f"Already exists - A runner with the name {name} already exists.")
        runner = self._new_runner(repo, name, labels, group, ephemeral=True)
        work_folder = body.get("work_folder", "_work")
        documents = {
            ".runner": {
                "AgentId": runner["id"],
                "AgentName": name,
                "PoolId": group,
                "PoolName": "Default",
                "ServerUrl": f"https://pipelines.actions.githubusercontent.com/{uuid.uuid4().hex}",
                "GitHubUrl": f"https://github.com/{self.repositories[repo]}",
                "WorkFolder": work_folder,
                "Ephemeral": True,
            },
            ".credentials": {
                "Scheme": "OAuthAccessToken",
                "Data": {
                    "ClientId": str(uuid.uuid4()),
                    "AuthorizationUrl": "https://vstoken.actions.example/",
                },
            },
            ".credentials_rsaparams": {
                "d": "fake-secret-" + secrets.token_hex(16),
                "modulus": secrets.token_hex(8),
            },
        }
        encoded = base64.b64encode(
            json.dumps(
                {k: base64.b64encode(json.dumps(v).encode()).decode() for k, v in documents.items()}
            ).encode()
        ).decode()
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
        self, repo: str, rest: str, query: dict[str, str], credential: str
    ) -> tuple[int, dict[str, str], Any]:
        """GET /repos/{owner}/{repo}/actions/variables | /actions/secrets (docs.github.com, "REST API endpoints
        for GitHub Actions variables" / "... secrets"): `{"total_count", "variables": [{name, value, created_at,
        updated_at}]}` (per_page default 10, max 30) and `{"total_count", "secrets": [{name, created_at,
        updated_at}]}` (default 30, max 100); the "Variables" / "Secrets" repository permission (read)."""
        kind, default, maximum = _ACTIONS_SETTINGS[rest]
        granted = self._settings_permission(credential, kind)
        accepted = {"x-accepted-github-permissions": f"{kind}=read"}
        if granted not in ("read", "write"):
            raise _HttpError(403, "Resource not accessible by personal access token", accepted)
        try:
            per_page = min(int(query.get("per_page", default)), maximum)
            page = max(int(query.get("page", 1)), 1)
        except ValueError:
            raise _HttpError(422, "Validation Failed") from None
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
        headers = {**accepted, **({"Link": ", ".join(links)} if links else {})}
        return 200, headers, {"total_count": len(items), kind: chunk}

    def _repository_role(self, credential: str) -> dict[str, bool]:
        admin = credential not in self.non_admin_tokens
        return {"admin": admin, "maintain": admin, "push": True, "triage": True, "pull": True}

    def _settings_permission(self, credential: str, kind: str) -> str:
        if credential in self.installation_tokens:
            return self.app_permissions.get(kind, "none")
        return self.settings_permissions.get(credential, {}).get(kind, "none")

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
