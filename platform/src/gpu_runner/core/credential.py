"""The GitHub credential that registers and deletes runners, kept in AWS instead of GitHub repository secrets.

A repository secret reaches any workflow a pusher writes on any branch; this credential has Administration:
write on the repository. So it lives in an SSM SecureString `<ssm_prefix>-github-credential` under the stack's
customer-managed KMS key (gpu_runner/setup/gpu-runner.yaml: GitHubCredentialKey), which only the launch and reaper roles may
decrypt, and those roles trust only the default branch's workflows. `gpu-runner bootstrap` writes it once.

The value is JSON: {"app_id": "...", "private_key": "<PEM>"} for a GitHub App, or {"token": "..."} for a PAT.
Explicit GPU_RUNNER_* variables in the environment still win (a laptop, the offline tests): reading the parameter
needs the role anyway.

Only bootstrap's caller may encrypt under that key (the key policy), but any principal allowed ssm:PutParameter on
the parameter may overwrite it, as a String or under another key (the AWS-managed aws/ssm key, which the launch
role may decrypt through SSM, or one of its own). So every reader checks first that the parameter is a
SecureString under the key behind the stack's alias, and reads exactly the version it checked.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from gpu_runner.core import naming
from gpu_runner.core.errors import SettingsError
from gpu_runner.core.github import ENV_APP_ID, ENV_APP_PRIVATE_KEY, ENV_TOKEN
from gpu_runner.core.settings import Settings

SUFFIX = "-github-credential"
# SSM standard tier: a value up to 4 KB (AWS Systems Manager User Guide, "Parameter Store" > "Managing parameter
# tiers", read 2026-12-01); an RSA-2048 App key PEM is about 1.7 KB.
MAX_VALUE_BYTES = 4096


def parameter_name(settings: Settings) -> str:
    """Beside, not below, ssm_prefix: the runner role may read everything below the prefix."""
    return settings.ssm_prefix.rstrip("/") + SUFFIX


def has_env_credential(env: Mapping[str, str]) -> bool:
    return any(env.get(name, "").strip() for name in (ENV_TOKEN, ENV_APP_ID, ENV_APP_PRIVATE_KEY))


STORE_AGAIN = (
    "gpu-runner bootstrap ... --app-id <id> --app-private-key-file <key.pem> (or --token-file <file>)"
)


def github_env(
    settings: Settings, ssm: Any, env: Mapping[str, str] = os.environ, *, kms: Any
) -> dict[str, str]:
    """`env` plus the credential from the parameter, in GitHubRunners.from_env's variable names; the parameter
    is refused unless it is a SecureString under the stack's key (`kms`: a KMS client of the settings' region)."""
    if has_env_credential(env):
        return dict(env)
    name = parameter_name(settings)
    version = checked_version(ssm, kms, settings)
    parameter = ssm.get_parameter(Name=name, WithDecryption=True)["Parameter"]
    # The value read must be the version checked: one written in between is refused (read again to check it).
    if parameter["Type"] != "SecureString" or int(parameter["Version"]) != version:
        raise SettingsError(
            _replaced(
                name,
                f"a {parameter['Type']} of version {parameter['Version']} (version {version} was checked)",
                "",
            )
        )
    return {**env, **_as_env(name, parameter["Value"])}


def checked_version(ssm: Any, kms: Any, settings: Settings) -> int:
    """The version of the credential parameter, refused unless it is a SecureString encrypted under the key the
    stack's alias names. DescribeParameters' ParameterMetadata carries Type, KeyId (the key as the writer named
    it: id, ARN, alias or alias ARN), Version and LastModifiedUser (botocore's ssm service model)."""
    name = parameter_name(settings)
    pages = ssm.get_paginator("describe_parameters").paginate(
        ParameterFilters=[{"Key": "Name", "Option": "Equals", "Values": [name]}]
    )
    try:
        found = [meta for page in pages for meta in page.get("Parameters", [])]
    except ClientError as error:
        raise _older_stack(error, "ssm:DescribeParameters") from None
    if not found:
        raise SettingsError(
            f"no GitHub credentials: SSM parameter {name} does not exist and neither {ENV_TOKEN} nor "
            f"{ENV_APP_ID} + {ENV_APP_PRIVATE_KEY} is set. Store it once: {STORE_AGAIN}"
        )
    meta = found[0]
    writer = meta.get("LastModifiedUser", "")
    if meta.get("Type") != "SecureString":
        raise SettingsError(_replaced(name, f"a {meta.get('Type')}", writer))
    alias = naming.github_credential_key_alias(settings.ssm_prefix)
    try:
        key = kms.describe_key(KeyId=alias)["KeyMetadata"]
    except ClientError as error:
        if error.response.get("Error", {}).get("Code", "") == "NotFoundException":
            raise SettingsError(
                f"GitHub credential: the stack's key alias {alias} does not exist (a stack older than the check, "
                "or another ssm_prefix): run `make bootstrap` again, then store the credential with it"
            ) from None
        raise _older_stack(error, "kms:DescribeKey") from None
    alias_arn = key["Arn"].rsplit(":", 1)[0] + ":" + alias  # arn:<partition>:kms:<region>:<account>:alias/...
    if meta.get("KeyId") not in {key["Arn"], key["KeyId"], alias, alias_arn}:
        raise SettingsError(_replaced(name, f"a SecureString under key {meta.get('KeyId')}", writer))
    return int(meta["Version"])


def _older_stack(error: ClientError, action: str) -> Exception:
    """A role of a stack deployed before the check lacks its two grants: say so instead of a bare AccessDenied."""
    code = error.response.get("Error", {}).get("Code", "")
    if code in ("AccessDeniedException", "AccessDenied"):
        return SettingsError(
            f"GitHub credential: AWS refused {action} ({code}), which reading the credential needs since the "
            "stack checks its key: run `make bootstrap` again to update the stack's roles"
        )
    return error


def _replaced(name: str, what: str, writer: str) -> str:
    by = f" (last written by {writer})" if writer else ""
    return (
        f"GitHub credential: SSM parameter {name} is {what}{by}, not a SecureString under this stack's key: "
        "someone replaced it (a principal allowed ssm:PutParameter on it can; only bootstrap's caller may "
        "encrypt under the key). Nothing was sent to GitHub. Store it again with the stack's key: "
        f"{STORE_AGAIN}; then see who else may write the parameter (CloudTrail: PutParameter on {name})"
    )


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
