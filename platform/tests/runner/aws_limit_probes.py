"""The calls just under and just over each AWS limit that gpu_runner_testing/aws_limits.py encodes, as a table of
(limit, call just under, call just over, AWS's error code, a piece of AWS's message), and the calls they make.

tests/runner/test_aws_limits.py runs every row through both doubles (the botocore hook and the fault proxy).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class Clients:
    ssm: Any
    ec2: Any
    ami: str
    refused: Callable[[], list[str]]  # codes the double refused so far


# (limit, call just under, call just over, AWS's error code, a piece of AWS's message)
CASES: list[tuple[str, Callable[[Clients], None], Callable[[Clients], None], str, str]] = [
    ("SSM value, no tier = Standard, 4096 bytes",
     lambda c: put(c, "a" * 4096), lambda c: put(c, "a" * 4097),
     "ValidationException", "Standard tier parameters support a maximum parameter value of 4096 characters"),
    ("SSM value, Standard counted in UTF-8 bytes",
     lambda c: put(c, "é" * 2048, tier="Standard"), lambda c: put(c, "é" * 2048 + "a", tier="Standard"),
     "ValidationException", "4096"),
    ("SSM value, Advanced 8192 bytes",
     lambda c: put(c, "a" * 8192, tier="Advanced"), lambda c: put(c, "a" * 8193, tier="Advanced"),
     "ValidationException", "8192"),
    ("SSM tag key 128 characters",
     lambda c: put(c, "x", tags=tags(1, key_len=128)), lambda c: put(c, "x", tags=tags(1, key_len=129)),
     "ValidationException", "at 'tags.1.member.key' failed to satisfy constraint"),
    ("SSM tag value 256 characters",
     lambda c: put(c, "x", tags=tags(1, value_len=256)), lambda c: put(c, "x", tags=tags(1, value_len=257)),
     "ValidationException", "Member must have length less than or equal to 256"),
    ("SSM 50 tags per resource",
     lambda c: put(c, "x", tags=tags(50)), lambda c: put(c, "x", tags=tags(51)),
     "TooManyTagsError", "too many tags"),
    ("SSM aws: tag prefix reserved",
     lambda c: put(c, "x", tags=[{"Key": "awsx:k", "Value": "v"}]), lambda c: put(c, "x", tags=[{"Key": "AWS:k", "Value": "v"}]),
     "ValidationException", "aws:"),
    ("EC2 user data 16384 bytes raw (before base64)",
     lambda c: run(c, user_data="u" * 16384), lambda c: run(c, user_data="u" * 16385),
     "InvalidParameterValue", "User data is limited to 16384 bytes"),
    ("EC2 tag key 127 characters",
     lambda c: run(c, tags=tags(1, key_len=127)), lambda c: run(c, tags=tags(1, key_len=128)),
     "InvalidParameterValue", "Tag key"),
    ("EC2 tag value 256 characters",
     lambda c: run(c, tags=tags(1, value_len=256)), lambda c: run(c, tags=tags(1, value_len=257)),
     "InvalidParameterValue", "Tag value"),
    # `run` adds its own cleanup tag: 49 + 1 and 50 + 1.
    ("EC2 50 tags per resource",
     lambda c: run(c, tags=tags(49)), lambda c: run(c, tags=tags(50)),
     "TagLimitExceeded", "50"),
    ("EC2 aws: tag prefix reserved",
     lambda c: run(c, tags=[{"Key": "awsx:k", "Value": "v"}]), lambda c: run(c, tags=[{"Key": "aws:k", "Value": "v"}]),
     "InvalidParameterValue", "Tag keys starting with 'aws:' are reserved for internal use"),
    ("EC2 ClientToken 64 ASCII characters",
     lambda c: run(c, token="t" * 64), lambda c: run(c, token="t" * 65),
     "InvalidParameterValue", "clientToken"),
    ("EC2 ClientToken ASCII only",
     lambda c: run(c, token="t" * 63), lambda c: run(c, token="t" * 62 + "é"),
     "InvalidParameterValue", "clientToken"),
]  # fmt: skip


def _name() -> str:
    return f"/limits/{uuid.uuid4().hex}"


def put(c: Clients, value: str, *, tier: str | None = None, tags: list[dict[str, str]] | None = None) -> None:
    name = _name()
    extra: dict[str, Any] = {"Tier": tier} if tier else {}
    c.ssm.put_parameter(Name=name, Value=value, Type="SecureString", Tags=tags or [], **extra)
    assert c.ssm.get_parameter(Name=name, WithDecryption=True)["Parameter"]["Value"] == value
    c.ssm.delete_parameter(Name=name)


def run(
    c: Clients, *, user_data: str = "", tags: list[dict[str, str]] | None = None, token: str = ""
) -> None:
    base_tags = [{"Key": "limits-test", "Value": "yes"}]
    c.ec2.run_instances(
        ImageId=c.ami,
        InstanceType="t3.micro",
        MinCount=1,
        MaxCount=1,
        UserData=user_data,
        ClientToken=token or uuid.uuid4().hex,
        TagSpecifications=[{"ResourceType": "instance", "Tags": base_tags + (tags or [])}],
    )


def tags(count: int, key_len: int = 8, value_len: int = 8) -> list[dict[str, str]]:
    return [{"Key": f"k{i:03d}".ljust(key_len, "k"), "Value": "v" * value_len} for i in range(count)]
