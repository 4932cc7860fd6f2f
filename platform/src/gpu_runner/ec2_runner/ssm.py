"""The JIT config's trip through SSM Parameter Store: written once by `launch`, read and deleted by the instance."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from gpu_runner.core import naming
from gpu_runner.core.errors import LaunchBlockedError

# Parameter Store's value limit per tier (botocore ssm service model, PutParameter `Value` and `Tier`: 4 KB
# Standard, 8 KB Advanced; the AWS KMS Developer Guide, "How AWS Systems Manager Parameter Store uses AWS KMS":
# standard "cannot exceed 4096 bytes"; AWS's ValidationException says "4096 characters"). Counted in UTF-8 bytes,
# the stricter reading; a JIT config is ASCII base64, where both agree.
STANDARD_TIER_MAX_BYTES = 4096
ADVANCED_TIER_MAX_BYTES = 8192


def tier_for(value: str) -> str:
    """The cheapest tier that holds `value`.

    Chosen here rather than left to "Intelligent-Tiering": the request then says which tier it needs, and a public
    report has PutParameter with Intelligent-Tiering still refusing a value over 4,096 with the Standard error
    (aws/aws-sdk-net #3157, 2024). GitHub's encoded_jit_config outgrew 4,096 in 2025 (github-aws-runners/
    terraform-aws-github-runner PR #4613 made the same move: Advanced above the Standard limit). Advanced costs
    $0.05 per parameter-month, prorated hourly (AWS Systems Manager pricing, Parameter Store; PR #4613's
    maintainer: 50K ephemeral runners "should stay under the $5 a month"): this parameter lives from launch until
    the instance reads it at boot, minutes, so under $0.0001 per job (one hour is $0.05 / 730)."""
    size = len(value.encode())
    if size <= STANDARD_TIER_MAX_BYTES:
        return "Standard"
    if size <= ADVANCED_TIER_MAX_BYTES:
        return "Advanced"
    raise LaunchBlockedError(
        f"the JIT runner config GitHub issued is {size} bytes, more than the {ADVANCED_TIER_MAX_BYTES} an SSM "
        "parameter can hold in any tier: gpu-runner cannot hand it to the instance; please report this"
    )


def put_jit_config(ssm: Any, name: str, value: str, tags: Mapping[str, str], *, key_id: str) -> None:
    """SecureString under the stack's customer-managed key `key_id`, never overwritten: a second launch for the
    same run attempt must not reuse a live config.

    `tags` must hold naming.TAG_INSTANCE_ARN, the one instance whose role may read it (the runner policy's
    condition): given here, in the creating request, so the parameter never exists without it. The tier changes
    only the size limit and how SSM wraps the value under the key (Advanced uses envelope encryption,
    kms:GenerateDataKey instead of kms:Encrypt, per the KMS guide above); no parameter policy."""
    if not tags.get(naming.TAG_INSTANCE_ARN):
        raise LaunchBlockedError(
            f"internal error: the JIT config {name} would carry no {naming.TAG_INSTANCE_ARN}"
        )
    ssm.put_parameter(
        Name=name,
        Value=value,
        Type="SecureString",
        KeyId=key_id,
        Overwrite=False,
        Tier=tier_for(value),
        Tags=[{"Key": k, "Value": v} for k, v in tags.items()],
    )


def delete_parameter(ssm: Any, name: str) -> bool:
    """True when deleted, False when already gone (the instance deletes it after reading)."""
    try:
        ssm.delete_parameter(Name=name)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ParameterNotFound":
            return False
        raise
    return True


def list_parameters(ssm: Any, prefix: str) -> list[dict[str, Any]]:
    """Metadata (never values) of every parameter below `prefix`."""
    paginator = ssm.get_paginator("describe_parameters")
    found: list[dict[str, Any]] = []
    for page in paginator.paginate(
        ParameterFilters=[{"Key": "Path", "Option": "Recursive", "Values": [prefix.rstrip("/") or "/"]}]
    ):
        found.extend(page.get("Parameters", []))
    return found
