"""The repository's OIDC `sub` template: `repo`, `context` and `job_workflow_ref`, so a role can trust a reusable
workflow at one commit of the platform (or one branch) rather than any workflow of a branch (GitHub docs "OpenID Connect reference" >
"Customizing the subject claims for an organization or repository", example "Requiring a reusable workflow and
other claims": sub = repo:ORG/REPO:<context>:job_workflow_ref:<path>@<ref>, read 2026-12-01).

Set through PUT /repos/{owner}/{repo}/actions/oidc/customization/sub (operationId
actions/set-custom-oidc-sub-claim-for-repo) with a token of a repository admin, once, by `gpu-runner bootstrap`.
It changes the `sub` of EVERY OIDC token of the repository: the stack's roles trust only this form.
"""

from __future__ import annotations

from typing import Any

import requests
from github import Auth, Github, GithubException

from gpu_runner.core.errors import RunnerError
from gpu_runner.core.github import DEFAULT_BASE_URL, _check_repository, _client_options

CLAIM_KEYS = ("repo", "context", "job_workflow_ref")


def template_body() -> dict[str, Any]:
    return {"use_default": False, "include_claim_keys": list(CLAIM_KEYS)}


def set_subject_template(repository: str, token: str, base_url: str = DEFAULT_BASE_URL) -> bool:
    """Make the repository's template CLAIM_KEYS; returns False when it already was (nothing written)."""
    owner, _, repo = _check_repository(repository).partition("/")
    path = f"/repos/{owner}/{repo}/actions/oidc/customization/sub"
    client = Github(auth=Auth.Token(token), **_client_options(base_url.rstrip("/"), 2.0))
    try:
        _, current = client.requester.requestJsonAndCheck("GET", path)
        if not current.get("use_default") and list(current.get("include_claim_keys") or []) == list(
            CLAIM_KEYS
        ):
            return False
        client.requester.requestJsonAndCheck("PUT", path, input=template_body())
    except GithubException as error:
        message = (error.data or {}).get("message", "") if isinstance(error.data, dict) else ""
        raise RunnerError(
            f"could not set the OIDC subject template of {repository} (GitHub answered {error.status} {message}): "
            "the token needs repository admin rights (fine-grained: Actions read and write; classic: repo)"
        ) from error
    except requests.RequestException as error:
        raise RunnerError(
            f"could not set the OIDC subject template of {repository}: cannot reach {base_url} ({type(error).__name__})"
        ) from error
    finally:
        client.close()
    return True
