"""The JIT config's trip through SSM Parameter Store: written once by `launch`, read and deleted by the instance."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError


def put_jit_config(ssm: Any, name: str, value: str, tags: Mapping[str, str]) -> None:
    """SecureString, never overwritten: a second launch for the same run attempt must not reuse a live config."""
    ssm.put_parameter(
        Name=name,
        Value=value,
        Type="SecureString",
        Overwrite=False,
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
