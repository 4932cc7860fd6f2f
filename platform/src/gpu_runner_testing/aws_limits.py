"""AWS's documented request limits that moto does not enforce, as one rule set for both test doubles.

`check(action, body)` looks at the raw HTTP body of one request (EC2's query string or SSM's JSON) and answers the
refusal AWS would send, or None. Used by the botocore `before-send` hook (gpu_runner_testing/aws_faults.py, the runner
unit tests) and the fault proxy in front of moto (gpu_runner_testing/aws_fault_proxy.py, the act story), so a request the code sends
later that crosses a limit fails a test in both places. The numbers are written here from the sources, never
imported from the code under test, so the code cannot agree with its own double by construction.

Sources (read 2026-12-01):
- [ssm-model] botocore data ssm/2014-11-06/service-2.json: PutParameter.Value "Standard parameters have a value
  limit of 4 KB. Advanced parameters have a value limit of 8 KB"; Tier enum Standard/Advanced/Intelligent-Tiering
  and "if you don't specify a tier ... the default tier ... is the standard-parameter tier"; Tag.Key length 1-128,
  Tag.Value 0-256; AddTagsToResource "Most resources can have a maximum of 50 tags"; TooManyTagsError.
- [kms-guide] AWS KMS Developer Guide, "How AWS Systems Manager Parameter Store uses AWS KMS": standard
  parameters "cannot exceed 4096 bytes". AWS's own refusal says "4096 characters" (quoted below): the stricter
  reading, UTF-8 bytes, is enforced (the two agree for ASCII, which a JIT config is).
- [ssm-4096] the ValidationException text AWS answers, quoted verbatim from real runs in
  github-aws-runners/terraform-aws-github-runner #3815 (2024-03) and #4790 (2025-09), aws/aws-sdk-net #3157.
- [ec2-userdata] EC2 User Guide, instance user data: the 16 KB limit applies "in raw form, before it is
  base64-encoded" (as quoted in open-guides/og-aws #221 and #266; an AWS SDK maintainer in aws/aws-sdk-java #408:
  "16 KB (or 21847 bytes when base64 encoded)"); AWS's refusal "InvalidParameterValue: User data is limited to
  16384 bytes" as quoted in runs-on/runs-on #9 (2024-01) and dask/dask-cloudprovider #249.
- [ec2-model] botocore data ec2/2016-11-15/service-2.json: RunInstances.ClientToken "Constraints: Maximum 64 ASCII
  characters"; Tag.Key "a maximum of 127 Unicode characters. May not begin with aws:", Tag.Value "a maximum of 256
  Unicode characters". The EC2 User Guide's tag restrictions say 128 for keys: the stricter 127 is enforced (a
  double that accepts what AWS may refuse is the worse error). 50 tags per resource, aws: tags not counted: AWS's
  common tag restrictions (EC2 User Guide "Tag restrictions"; read here in the same words in the Amazon ECS API
  Reference, Tag: "Maximum number of tags per resource - 50 ... Tags with this prefix do not count").
- [ec2-errors] EC2 API Reference, "Error codes": TagLimitExceeded, InvalidParameterValue (the page itself could not
  be read offline; moto 5.2.5 answers CreateTags over 50 tags with the same TagLimitExceeded). The reserved-prefix
  text "Tag keys starting with 'aws:' are reserved for internal use" (InvalidParameterValue) as the AWS CLI printed
  it in a public transcript (CreateImage). Where AWS's exact wording of a refusal is not published (marked
  "wording ours"), the code is AWS's and the message names the field and the limit.
- [batch-quotas] AWS Batch User Guide, "Resource: AWS Batch service quotas" (service_limits.html, read
  2026-12-04): "Maximum job payload size (for SubmitJob API operations) 30 KiB", a quota that "can't be changed".
  The request body is what is measured here; the refusal's code is Batch's ClientException (botocore data
  batch/2016-08-10/service-2.json: "These errors are usually caused by a client action", HTTP 400), its wording
  ours.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

# SSM Parameter Store [ssm-model] [kms-guide]
SSM_VALUE_MAX_BYTES = {"Standard": 4096, "Advanced": 8192, "Intelligent-Tiering": 8192}
SSM_DEFAULT_TIER = "Standard"
SSM_TAG_KEY_MAX = 128
SSM_TAG_VALUE_MAX = 256
# EC2 [ec2-userdata] [ec2-model]
EC2_USER_DATA_MAX_BYTES = 16384
EC2_CLIENT_TOKEN_MAX = 64
EC2_TAG_KEY_MAX = 127
EC2_TAG_VALUE_MAX = 256
# AWS Batch [batch-quotas]
BATCH_SUBMIT_JOB_MAX_BYTES = 30 * 1024
# Both [ssm-model] [ec2-model]
MAX_TAGS_PER_RESOURCE = 50
RESERVED_TAG_PREFIX = "aws:"

SSM_DOC = (
    "https://docs.aws.amazon.com/systems-manager/latest/userguide/parameter-store-advanced-parameters.html"
)


@dataclass(frozen=True)
class Refusal:
    """An AWS error answer: `service` picks the error document (EC2's XML or SSM's JSON)."""

    service: str
    code: str
    message: str
    status: int = 400


def check(action: str, body: str) -> Refusal | None:
    """The refusal AWS gives this request for a documented limit, or None when it is within all of them."""
    rule = _RULES.get(action)
    return rule(body) if rule else None


# ------------------------------------------------------------------------------------------------------ SSM
def _ssm_json(body: str) -> dict[str, Any]:
    try:
        parsed = json.loads(body or "{}")
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _validation(field: str, value: str, constraint: str) -> Refusal:
    """AWS's JSON-protocol model-validation text, e.g. "1 validation error detected: Value 'x' at
    'tags.1.member.value' failed to satisfy constraint: Member must have length less than or equal to 256"."""
    return Refusal(
        "ssm",
        "ValidationException",
        f"1 validation error detected: Value '{value}' at '{field}' failed to satisfy constraint: {constraint}",
    )


def _ssm_tags(tags: Any) -> Refusal | None:
    tags = tags if isinstance(tags, list) else []
    user_tags = [t for t in tags if not str(t.get("Key", "")).lower().startswith(RESERVED_TAG_PREFIX)]
    if len(user_tags) > MAX_TAGS_PER_RESOURCE:
        # [ssm-model] TooManyTagsError's documented text; PutParameter's Tags go through AddTagsToResource.
        return Refusal(
            "ssm",
            "TooManyTagsError",
            "The Targets parameter includes too many tags. Remove one or more tags and try the command again.",
        )
    for index, tag in enumerate(tags, start=1):
        key, value = str(tag.get("Key", "")), str(tag.get("Value", ""))
        if len(key) > SSM_TAG_KEY_MAX:
            return _validation(
                f"tags.{index}.member.key",
                key,
                f"Member must have length less than or equal to {SSM_TAG_KEY_MAX}",
            )
        if len(value) > SSM_TAG_VALUE_MAX:
            return _validation(
                f"tags.{index}.member.value",
                value,
                f"Member must have length less than or equal to {SSM_TAG_VALUE_MAX}",
            )
        if key.lower().startswith(RESERVED_TAG_PREFIX):
            # Wording ours: the aws: prefix is reserved for AWS on every tagged resource [ssm-model].
            return Refusal(
                "ssm", "ValidationException", f"Tag key '{key}': the aws: prefix is reserved for AWS use."
            )
    return None


def _put_parameter(body: str) -> Refusal | None:
    request = _ssm_json(body)
    tier = str(request.get("Tier") or SSM_DEFAULT_TIER)
    size = len(str(request.get("Value", "")).encode())
    limit = SSM_VALUE_MAX_BYTES.get(tier, SSM_VALUE_MAX_BYTES[SSM_DEFAULT_TIER])
    if size > limit and tier == "Standard":
        return Refusal(  # [ssm-4096], verbatim
            "ssm",
            "ValidationException",
            "Standard tier parameters support a maximum parameter value of 4096 characters. To create a larger "
            "parameter value, upgrade the parameter to use the advanced-parameter tier. For more information, "
            f"see {SSM_DOC}",
        )
    if size > limit:
        # Wording modelled on the Standard text (the 8 KB limit is [ssm-model]'s).
        return Refusal(
            "ssm",
            "ValidationException",
            f"Advanced tier parameters support a maximum parameter value of {limit} characters.",
        )
    return _ssm_tags(request.get("Tags"))


def _add_tags_to_resource(body: str) -> Refusal | None:
    return _ssm_tags(_ssm_json(body).get("Tags"))


# ------------------------------------------------------------------------------------------------------ EC2
def _query(body: str) -> dict[str, str]:
    return {key: values[0] for key, values in parse_qs(body or "", keep_blank_values=True).items()}


_TAG = re.compile(r"^(?P<resource>(?:TagSpecification\.\d+\.)?)Tag\.(?P<n>\d+)\.(?P<part>Key|Value)$")


def _ec2_tag_sets(params: dict[str, str]) -> Iterator[list[tuple[str, str]]]:
    """The (key, value) tags of each resource the request tags: one set per TagSpecification, or CreateTags' one."""
    sets: dict[str, dict[str, dict[str, str]]] = {}
    for name, value in params.items():
        match = _TAG.match(name)
        if match:
            sets.setdefault(match["resource"], {}).setdefault(match["n"], {})[match["part"]] = value
    for tags in sets.values():
        yield [
            (tag.get("Key", ""), tag.get("Value", ""))
            for _, tag in sorted(tags.items(), key=lambda t: int(t[0]))
        ]


def _ec2_invalid(message: str) -> Refusal:
    return Refusal("ec2", "InvalidParameterValue", message)


def _ec2_tags(params: dict[str, str]) -> Refusal | None:
    for tags in _ec2_tag_sets(params):
        if (
            sum(1 for key, _ in tags if not key.lower().startswith(RESERVED_TAG_PREFIX))
            > MAX_TAGS_PER_RESOURCE
        ):
            # Code [ec2-errors]; wording ours.
            return Refusal(
                "ec2", "TagLimitExceeded", f"A resource can have at most {MAX_TAGS_PER_RESOURCE} tags."
            )
        for key, value in tags:
            if key.lower().startswith(RESERVED_TAG_PREFIX):  # [ec2-errors], verbatim
                return _ec2_invalid("Tag keys starting with 'aws:' are reserved for internal use")
            if len(key) > EC2_TAG_KEY_MAX:  # wording ours
                return _ec2_invalid(f"Tag key exceeds the maximum length of {EC2_TAG_KEY_MAX} characters")
            if len(value) > EC2_TAG_VALUE_MAX:  # wording ours
                return _ec2_invalid(f"Tag value exceeds the maximum length of {EC2_TAG_VALUE_MAX} characters")
    return None


def _run_instances(body: str) -> Refusal | None:
    params = _query(body)
    token = params.get("ClientToken", "")
    if len(token) > EC2_CLIENT_TOKEN_MAX or not token.isascii():  # [ec2-model]; wording ours
        return _ec2_invalid(
            f"Value ({token}) for parameter clientToken is invalid: at most {EC2_CLIENT_TOKEN_MAX} ASCII characters"
        )
    user_data = params.get("UserData", "")
    try:
        raw = base64.b64decode(user_data, validate=True)
    except (binascii.Error, ValueError):
        return _ec2_invalid("Invalid BASE64 encoding of user data.")  # wording ours
    if len(raw) > EC2_USER_DATA_MAX_BYTES:  # [ec2-userdata], verbatim
        return _ec2_invalid(f"User data is limited to {EC2_USER_DATA_MAX_BYTES} bytes")
    return _ec2_tags(params)


def _create_tags(body: str) -> Refusal | None:
    return _ec2_tags(_query(body))


# ---------------------------------------------------------------------------------------------------- Batch
def _submit_job(body: str) -> Refusal | None:
    size = len(body.encode())
    if size <= BATCH_SUBMIT_JOB_MAX_BYTES:
        return None
    return Refusal(  # wording ours [batch-quotas]
        "batch",
        "ClientException",
        f"The job payload is {size} bytes; SubmitJob accepts at most {BATCH_SUBMIT_JOB_MAX_BYTES} bytes (30 KiB).",
    )


_RULES = {
    "PutParameter": _put_parameter,
    "AddTagsToResource": _add_tags_to_resource,
    "RunInstances": _run_instances,
    "CreateTags": _create_tags,
    "SubmitJob": _submit_job,
}
