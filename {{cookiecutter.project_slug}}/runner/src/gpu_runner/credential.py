"""The GitHub credential that registers and deletes runners, kept in AWS instead of GitHub repository secrets.

A repository secret reaches any workflow a pusher writes on any branch; this credential has Administration:
write on the repository. So it lives in an SSM SecureString `<ssm_prefix>-github-credential` under the stack's
customer-managed KMS key (infra/gpu-runner.yaml: GitHubCredentialKey), which only the launch and reaper roles may
decrypt, and those roles trust only the default branch's workflows. `gpu-runner bootstrap` writes it once.

The value is JSON: {"app_id": "...", "private_key": "<PEM>"} for a GitHub App, or {"token": "..."} for a PAT.
Explicit GPU_RUNNER_* variables in the environment still win (a laptop, the offline tests): reading the parameter
needs the role anyway.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from .errors import SettingsError
from .github import ENV_APP_ID, ENV_APP_PRIVATE_KEY, ENV_TOKEN
from .settings import Settings

SUFFIX = "-github-credential"
# SSM standard tier: a value up to 4 KB (AWS Systems Manager User Guide, "Parameter Store" > "Managing parameter
# tiers", read 2026-12-01); an RSA-2048 App key PEM is about 1.7 KB.
MAX_VALUE_BYTES = 4096


def parameter_name(settings: Settings) -> str:
    """Beside, not below, ssm_prefix: the runner role may read everything below the prefix."""
    return settings.ssm_prefix.rstrip("/") + SUFFIX


def has_env_credential(env: Mapping[str, str]) -> bool:
    return any(env.get(name, "").strip() for name in (ENV_TOKEN, ENV_APP_ID, ENV_APP_PRIVATE_KEY))


def github_env(settings: Settings, ssm: Any, env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """`env` plus the credential from the parameter, in GitHubRunners.from_env's variable names."""
    if has_env_credential(env):
        return dict(env)
    name = parameter_name(settings)
    try:
        value = ssm.get_parameter(Name=name, WithDecryption=True)["Parameter"]["Value"]
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "")
        if code == "ParameterNotFound":
            raise SettingsError(
                f"no GitHub credentials: SSM parameter {name} does not exist and neither {ENV_TOKEN} nor "
                f"{ENV_APP_ID} + {ENV_APP_PRIVATE_KEY} is set. Store it once: gpu-runner bootstrap ... "
                "--app-id <id> --app-private-key-file <key.pem> (or --token-file <file>)"
            ) from None
        raise
    return {**env, **_as_env(name, value)}


def _as_env(name: str, value: str) -> dict[str, str]:
    try:
        data = json.loads(value)
    except ValueError:
        data = None
    if isinstance(data, dict) and str(data.get("token", "")).strip():
        return {ENV_TOKEN: str(data["token"]).strip()}
    if isinstance(data, dict) and str(data.get("app_id", "")).strip() and data.get("private_key"):
        return {ENV_APP_ID: str(data["app_id"]).strip(), ENV_APP_PRIVATE_KEY: str(data["private_key"])}
    # Never echo the value: it is the credential.
    raise SettingsError(
        f"SSM parameter {name} is not a JSON object with app_id and private_key, or with token: store it again with "
        "gpu-runner bootstrap --app-id/--app-private-key-file (or --token-file)"
    )


def encode(*, app_id: str = "", private_key: str = "", token: str = "") -> str:
    """The parameter's value; refuses half an App, both kinds, or a value above SSM's standard-tier limit."""
    if token and (app_id or private_key):
        raise SettingsError("give either --token-file or --app-id with --app-private-key-file, not both")
    if token:
        value = json.dumps({"token": token.strip()})
    elif app_id and private_key:
        if not app_id.strip().isdigit():
            raise SettingsError(f"--app-id: '{app_id}' must be the App's numeric id")
        if "PRIVATE KEY-----" not in private_key:
            raise SettingsError("--app-private-key-file: not a PEM private key (the App's .pem file)")
        value = json.dumps({"app_id": app_id.strip(), "private_key": private_key})
    else:
        raise SettingsError("--app-id and --app-private-key-file go together")
    if len(value.encode()) > MAX_VALUE_BYTES:
        raise SettingsError(f"the credential is {len(value.encode())} bytes, above SSM's {MAX_VALUE_BYTES}")
    return value


def store(ssm: Any, settings: Settings, key_arn: str, value: str) -> str:
    """Write (or replace) the SecureString under the stack's key; returns its name."""
    name = parameter_name(settings)
    ssm.put_parameter(
        Name=name, Value=value, Type="SecureString", KeyId=key_arn, Overwrite=True, Tier="Standard",
        Description="GitHub credential of the GPU runners (gpu-runner bootstrap)",
    )  # fmt: skip
    return name
