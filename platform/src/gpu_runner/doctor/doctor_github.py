"""The GitHub half of `gpu-runner doctor`: the runner credential, and the repository's variables and secrets.

Two credentials, because they are two different things:
- the runner credential the workflows use (GPU_RUNNER_APP_ID + GPU_RUNNER_APP_PRIVATE_KEY, or GPU_RUNNER_TOKEN),
  exported in this shell with the same values as the repository's secrets. It must list the repository's runners
  (Administration: read) and may create JIT configs (Administration: write). For an App the installation's
  granted permissions are read back (GET /repos/{owner}/{repo}/installation, `permissions`). For a PAT what can be
  read is read: its user's role (GET /repos/{owner}/{repo}, `permissions.admin`) and a classic token's scopes
  (X-OAuth-Scopes). A fine-grained PAT's own permissions cannot be read back through the API: listing the runners
  proves read, and write is only proven by a registration, which doctor never makes (the first launch names the
  fix if it is missing).
- the admin's own token (GITHUB_TOKEN, e.g. from `gh auth token`) to list the names of the repository's variables
  and secrets: fine-grained "Variables: read" and "Secrets: read" on the repository, or the `repo` scope of a
  classic token / the gh CLI (docs.github.com, "REST API endpoints for GitHub Actions variables" and "... secrets").
  doctor_branch.py and doctor_repository.py read the repository's guards with the same token (admin_client).
Only GET requests (the App's token exchange aside, which registers nothing); secret values are never read (the
API does not return them).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import requests
from github import Auth, Github, GithubException, GithubIntegration, GithubRetry

from gpu_runner.core.aws import Aws
from gpu_runner.core.errors import RunnerError
from gpu_runner.core.github import (
    DEFAULT_BASE_URL,
    ENV_API_URL,
    ENV_APP_ID,
    ENV_APP_PRIVATE_KEY,
    ENV_TOKEN,
    GitHubRunners,
)
from gpu_runner.doctor.doctor_checks import Check, Outcome, Target, failed, passed

ENV_ADMIN_TOKEN = "GITHUB_TOKEN"
# The repository settings manual/setup.md's "Secrets and variables" table lists, with their kind, in the
# table's order. The platform's tests/test_manual_setup.py compares that table with this mapping, and the
# template's tests/test_manual.py with the workflows' `vars.` / `secrets.` uses, so the three cannot drift apart.
LEFTOVER_CREDENTIAL_SECRETS = ("GPU_RUNNER_APP_PRIVATE_KEY", "GPU_RUNNER_TOKEN")
REPOSITORY_SETTINGS: dict[str, str] = {
    "AWS_ROLE_ARN": "variable",
    "AWS_REAPER_ROLE_ARN": "variable",
    "AWS_SWEEP_ROLE_ARN": "variable",
    "AWS_PREDICT_ROLE_ARN": "variable",
    "AWS_PREDICT_LAUNCH_ROLE_ARN": "variable",
    "AWS_PROMOTE_ROLE_ARN": "variable",
    "AWS_BATCH_ROLE_ARN": "variable",
    "MLFLOW_TRACKING_URI": "variable",
    "MLFLOW_TUNNEL_ROLE_ARN": "variable",
    "MLFLOW_TRACKING_USERNAME": "secret",
    "MLFLOW_TRACKING_PASSWORD": "secret",
    "MLFLOW_LOCAL_STORE_ARTIFACT": "variable",
}
# Which stack output each role variable must hold (bootstrap prints the `gh variable set` lines).
ROLE_VARIABLES = {
    "AWS_ROLE_ARN": "TrainRoleArn",
    "AWS_REAPER_ROLE_ARN": "ReaperRoleArn",
    "AWS_SWEEP_ROLE_ARN": "SweepRoleArn",
    "AWS_PREDICT_ROLE_ARN": "PredictRoleArn",
    "AWS_PREDICT_LAUNCH_ROLE_ARN": "PredictLaunchRoleArn",
    "AWS_PROMOTE_ROLE_ARN": "PromoteRoleArn",
}
# GitHub's `per_page` maxima: 30 for "List repository variables", 100 for "List repository secrets".
VARIABLES_PER_PAGE = 30
SECRETS_PER_PAGE = 100


def _base_url(env: Mapping[str, str]) -> str:
    return (env.get(ENV_API_URL) or DEFAULT_BASE_URL).rstrip("/")


def github_message(error: GithubException) -> str:
    """GitHub's status and message, e.g. `404 Branch not protected`."""
    data = error.data if isinstance(error.data, dict) else {}
    return f"{error.status} {data.get('message') or 'no message'}"


def admin_client(target: Target) -> Github | None:
    """A client with the admin's GITHUB_TOKEN (None when it is not set). Two retries: enough for a blip, and a
    wrong GITHUB_API_URL fails in seconds. No pause between requests: PyGithub waits 0.25 s before each by
    default, but GitHub asks for a pause only between writes ("Best practices for using the REST API": make
    requests serially, and wait a second between POST, PATCH, PUT or DELETE requests); doctor sends a few GETs,
    one after the other."""
    token = target.env.get(ENV_ADMIN_TOKEN, "").strip()
    if not token:
        return None
    return Github(
        auth=Auth.Token(token),
        base_url=_base_url(target.env),
        retry=GithubRetry(total=2),
        seconds_between_requests=0,
    )


def no_admin_token(check: str, what: str, permission: str) -> Outcome:
    return failed(
        check,
        f"{ENV_ADMIN_TOKEN} is not set, so {what} cannot be read",
        f"{ENV_ADMIN_TOKEN}=$(gh auth token) make doctor (a repository admin's token: gh's `repo` scope, or "
        f"fine-grained {permission})",
    )


def get_json(client: Github, path: str, parameters: dict[str, Any] | None = None) -> Any:
    """One GET; a refusal raises GithubException (status and GitHub's message in .data)."""
    _, data = client.requester.requestJsonAndCheck("GET", path, parameters=parameters)
    return data


# ---------------------------------------------------------------------- the runner credential
def _app_permissions(target: Target) -> dict[str, str]:
    """The permissions granted to the App's installation on the repository (what its tokens can do)."""
    env = target.env
    key = env[ENV_APP_PRIVATE_KEY].strip()
    if "\\n" in key and "\n" not in key:
        key = key.replace("\\n", "\n")  # as GitHubRunners.from_env reads a one-line PEM
    owner, _, name = target.repository.partition("/")
    integration = GithubIntegration(auth=Auth.AppAuth(env[ENV_APP_ID].strip(), key), base_url=_base_url(env))
    try:
        installation = integration.get_repo_installation(owner, name)
    finally:
        integration.close()
    return {str(k): str(v) for k, v in (installation.raw_data.get("permissions") or {}).items()}


def _pat_outcome(target: Target, count: int) -> Outcome:
    """What can be read back about a PAT without a write: its user's role on the repository (GET /repos:
    `permissions.admin`; the runner endpoints need admin access, and a token never exceeds its user) and, for a
    classic token, its scopes (X-OAuth-Scopes; the runner endpoints need `repo`). A fine-grained PAT's own
    permissions are not readable through the API, so its Administration: write stays unproven."""
    check = "runner credential"
    client = Github(
        auth=Auth.Token(target.env[ENV_TOKEN].strip()),
        base_url=_base_url(target.env),
        retry=GithubRetry(total=2),
    )
    try:
        _, repo = client.requester.requestJsonAndCheck("GET", f"/repos/{target.repository}")
        scopes = client.oauth_scopes
    finally:
        client.close()
    if not (repo.get("permissions") or {}).get("admin", False):
        return failed(
            check,
            f"{ENV_TOKEN}'s user is not an admin of {target.repository}, so it can never create runners",
            f"a repository admin creates the token (or grant that user the admin role), then gh secret set {ENV_TOKEN}",
        )
    if scopes is not None and "repo" not in scopes:
        return failed(
            check,
            f"{ENV_TOKEN} is a classic token with scopes {', '.join(scopes) or 'none'}: runners need `repo`",
            "a fine-grained PAT with Administration: Read and write on this repository (manual/setup.md), or add `repo`",
        )
    lists = f"{ENV_TOKEN} lists the {count} runner(s) of {target.repository}; its user is an admin"
    if scopes is not None:
        return passed(check, f"{lists} and the classic token has the `repo` scope")
    return passed(
        check,
        f"{lists}; a fine-grained PAT's Administration: write cannot be read back without registering a runner "
        "(the first launch names it if missing): grant Repository permissions > Administration: Read and write",
    )


def check_runner_credential(target: Target, aws: Aws) -> Iterator[Outcome]:
    check = "runner credential"
    env = target.env
    uses_token = bool(env.get(ENV_TOKEN, "").strip())
    uses_app = not uses_token and bool(
        env.get(ENV_APP_ID, "").strip() or env.get(ENV_APP_PRIVATE_KEY, "").strip()
    )
    if not uses_token and not uses_app:
        yield failed(
            check,
            f"neither {ENV_APP_ID} + {ENV_APP_PRIVATE_KEY} nor {ENV_TOKEN} is set in this shell",
            f'export {ENV_APP_ID}=<the App id> {ENV_APP_PRIVATE_KEY}="$(cat <the App .pem>)" (or {ENV_TOKEN}=<the '
            "PAT>), the values the repository's variable and secret hold, and run again",
        )
        return
    try:
        with GitHubRunners.from_env(target.repository, env=env) as runners:
            count = len(runners.list_runners())
    except RunnerError as error:
        yield failed(check, str(error), "see the message (manual/setup.md: 'GitHub App', or the PAT)")
        return
    if uses_token:
        yield _pat_outcome(target, count)
        return
    try:
        permissions = _app_permissions(target)
    except GithubException as error:
        yield failed(
            check, f"reading the App installation's permissions: {github_message(error)}", "see the message"
        )
        return
    granted = permissions.get("administration", "none")
    if granted != "write":
        yield failed(
            check,
            f"the App lists the {count} runner(s) of {target.repository}, but its installation grants "
            f"Administration: {granted}, so creating a JIT config is refused (403)",
            "App settings > Permissions > Repository permissions > Administration: Read and write, then accept "
            "the new permission on the installation (Settings > GitHub Apps > Configure)",
        )
        return
    yield passed(
        check,
        f"the App lists the {count} runner(s) of {target.repository}; its installation grants Administration: "
        "write (JIT configs)",
    )


# ---------------------------------------------------------------------- the repository's variables and secrets
def _pages(client: Github, path: str, key: str, per_page: int) -> list[dict[str, Any]]:
    """Every item of a `{"total_count", key: [...]}` list. The page size is always sent: GitHub's default for
    variables is 10, and PyGithub leaves `per_page` out when it equals its own default of 30."""
    items: list[dict[str, Any]] = []
    page = 1
    while True:
        _, data = client.requester.requestJsonAndCheck(
            "GET", path, parameters={"per_page": per_page, "page": page}
        )
        chunk = list(data.get(key) or [])
        items += chunk
        if len(chunk) < per_page or len(items) >= int(data.get("total_count", 0)):
            return items
        page += 1


def _repository_names(target: Target, token: str) -> tuple[dict[str, str], set[str]]:
    """GET /repos/{owner}/{repo}/actions/variables and .../actions/secrets (names; secrets have no value)."""
    # Two retries: enough for a blip, and a wrong GITHUB_API_URL fails in seconds.
    client = Github(auth=Auth.Token(token), base_url=_base_url(target.env), retry=GithubRetry(total=2))
    base = f"/repos/{target.repository}/actions"
    try:
        variables = _pages(client, f"{base}/variables", "variables", VARIABLES_PER_PAGE)
        secrets = _pages(client, f"{base}/secrets", "secrets", SECRETS_PER_PAGE)
    finally:
        client.close()
    return {str(v["name"]): str(v.get("value", "")) for v in variables}, {str(s["name"]) for s in secrets}


def settings_problems(
    variables: Mapping[str, str], secrets: set[str], outputs: Mapping[str, str], backend: str = "runner"
) -> list[str]:
    """What the workflows would miss, as `gh` commands or sentences (empty: nothing)."""
    problems: list[str] = []
    # backend: batch: train.yml's and sweep.yml's batch jobs assume the Batch stack's submit role (batch.yml); its
    # ARN is that stack's output, which `make batch-up` prints, not the bootstrap stack's.
    if backend == "batch" and "AWS_BATCH_ROLE_ARN" not in variables:
        problems.append(
            "backend: batch needs the submit role: gh variable set AWS_BATCH_ROLE_ARN --body <SubmitRoleArn that "
            "`make batch-up` prints>"
        )
    present = {"variable": set(variables), "secret": secrets}
    for name, kind in REPOSITORY_SETTINGS.items():
        other = "secret" if kind == "variable" else "variable"
        if name in present[other] and name not in present[kind]:
            problems.append(f"{name} is a {other}, the workflows read it as a {kind}: gh {kind} set {name}")
    for name in ROLE_VARIABLES:
        if name not in variables:
            problems.append(f"gh variable set {name} --body <{ROLE_VARIABLES[name]} of the stack>")
        elif outputs.get(ROLE_VARIABLES[name]) and variables[name] != outputs[ROLE_VARIABLES[name]]:
            problems.append(
                f"{name} is {variables[name]}, the stack's {ROLE_VARIABLES[name]} is "
                f"{outputs[ROLE_VARIABLES[name]]}: gh variable set {name} --body {outputs[ROLE_VARIABLES[name]]}"
            )
    # Issue 13 item 2: the runner credential lives in AWS (credential.py), never in a repository secret, which
    # any branch's workflow can print. One left from an older version is a live Administration: write credential.
    for name in LEFTOVER_CREDENTIAL_SECRETS:
        if name in secrets:
            problems.append(
                f"{name} is a repository secret any branch's workflow can print, and the workflows no longer read "
                f"it (the credential is in SSM: gpu-runner bootstrap --app-id/--app-private-key-file): "
                f"gh secret delete {name}"
            )
    login = ("MLFLOW_TRACKING_USERNAME" in secrets, "MLFLOW_TRACKING_PASSWORD" in secrets)
    if any(login) and not all(login):
        missing = "MLFLOW_TRACKING_PASSWORD" if login[0] else "MLFLOW_TRACKING_USERNAME"
        problems.append(f"MLflow login without its pair: gh secret set {missing}")
    return problems


def check_repository_settings(target: Target, aws: Aws) -> Iterator[Outcome]:
    check = "repository variables and secrets"
    token = target.env.get(ENV_ADMIN_TOKEN, "").strip()
    if not token:
        yield failed(
            check,
            f"{ENV_ADMIN_TOKEN} is not set, so their names cannot be listed",
            f"{ENV_ADMIN_TOKEN}=$(gh auth token) make doctor (a token that may read the repository's Actions "
            "variables and secrets: gh's `repo` scope, or fine-grained Variables: read + Secrets: read)",
        )
        return
    try:
        variables, secrets = _repository_names(target, token)
    except requests.RequestException as error:
        yield failed(
            check,
            f"cannot reach the GitHub API at {_base_url(target.env)} ({type(error).__name__})",
            f"check {ENV_API_URL} (unset for github.com) and the network",
        )
        return
    except GithubException as error:
        yield failed(
            check,
            f"listing them on {target.repository}: GitHub answered {github_message(error)}",
            f"{ENV_ADMIN_TOKEN} must be a repository admin's token with the `repo` scope, or fine-grained "
            "Variables: read + Secrets: read on the repository",
        )
        return
    target.repo_variables = dict(variables)
    problems = settings_problems(variables, secrets, target.outputs, target.settings.backend)
    names = sorted(n for n in REPOSITORY_SETTINGS if n in variables or n in secrets)
    if problems:
        yield failed(check, f"set: {', '.join(names) or 'none'}", "; ".join(problems))
        return
    yield passed(check, f"set: {', '.join(names)}")


CHECKS: list[tuple[str, Check]] = [
    ("runner credential", check_runner_credential),
    ("repository variables and secrets", check_repository_settings),
]
