"""A GitHub credential replaced by another principal is refused before anything reaches GitHub.

Any principal allowed ssm:PutParameter on `<ssm_prefix>-github-credential` can overwrite it. The key policy keeps
them from encrypting under the stack's key (test_key_policies), so what they can write is a plain String, or a
SecureString under another key: the AWS-managed aws/ssm key (which the launch role can decrypt through SSM) or a
key of their own. Launch, wait, teardown and the reaper read the credential the same way (credential.github_env)
and must refuse all three, naming the fix, with no GitHub call and no instance."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from gpu_runner import cli
from gpu_runner.core import credential
from gpu_runner_testing.github_double import DEFAULT_TOKEN, GitHubDouble
from gpu_runner_testing.gpu_runner_stack import REGION, wire_settings
from gpu_runner_testing.iam_requests import Call

REPLACEMENTS = {
    "a plain String": {"Type": "String"},
    # Named: without a KeyId an overwrite may keep the parameter's key (moto's PutParameter does), which the key
    # policy then refuses to this principal.
    "a SecureString under aws/ssm": {"Type": "SecureString", "KeyId": "alias/aws/ssm"},
    "a SecureString under another key": {"Type": "SecureString", "KeyId": "another"},
}


@pytest.fixture
def replaced(stack: dict[str, Any], request: pytest.FixtureRequest) -> Iterator[str]:
    """The credential overwritten by another principal (an admin session of its own); stored again afterwards
    under the stack's key, as bootstrap writes it, for the other tests of this process's shared stack."""
    ssm = boto3.Session(region_name=REGION).client("ssm")
    name = stack["outputs"]["GitHubCredentialParameter"]
    how = dict(REPLACEMENTS[request.param])
    if how.get("KeyId") == "another":
        how["KeyId"] = boto3.Session(region_name=REGION).client("kms").create_key()["KeyMetadata"]["Arn"]
    value = credential.encode(token="ghp_" + "a" * 36)  # the attacker's own token, say
    ssm.put_parameter(Name=name, Value=value, Overwrite=True, **how)
    try:
        yield name
    finally:
        original = credential.encode(token=DEFAULT_TOKEN)
        credential.store(ssm, stack["settings"], stack["outputs"]["GitHubCredentialKeyArn"], original)


@pytest.mark.parametrize("replaced", list(REPLACEMENTS), indirect=True)
def test_a_replaced_github_credential_is_refused_before_any_github_call(
    stack: dict[str, Any],
    settings_file: Path,
    recorded: tuple[list[Call], boto3.Session],
    workflow_env: dict[str, str],
    github_double: GitHubDouble,
    replaced: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    calls, _ = recorded
    wire_settings(stack, settings_file)
    base = ["--settings", str(settings_file)]
    assert cli.main([*base, "launch", "--spot", "false"]) == 1
    err = capsys.readouterr().err
    assert f"SSM parameter {replaced}" in err and "not a SecureString under this stack's key" in err, err
    assert "gpu-runner bootstrap" in err and "--token-file" in err, err  # the fix
    assert github_double.calls == []
    assert not [c for c in calls if c.operation in ("RunInstances", "PutParameter")]
    # The reaper (reap.yml) reads it the same way: refused too, nothing asked of GitHub.
    assert cli.main([*base, "reap"]) == 1
    assert "not a SecureString under this stack's key" in capsys.readouterr().err
    assert github_double.calls == []


def test_the_credential_bootstrap_stored_is_read(
    stack: dict[str, Any], recorded: tuple[list[Call], boto3.Session]
) -> None:
    """The check is no blanket refusal: bootstrap's own SecureString, under the stack's key, is read."""
    _, session = recorded
    env = credential.github_env(
        stack["settings"], session.client("ssm"), {"GITHUB_API_URL": "http://127.0.0.1:9"},
        kms=session.client("kms"),
    )  # fmt: skip
    assert env["GPU_RUNNER_TOKEN"] == DEFAULT_TOKEN
