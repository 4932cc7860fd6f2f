"""How long each GitHub OIDC role's trust policy in gpu_runner/setup/gpu-runner.yaml will be once deployed, against IAM's quota.

IAM holds a role's trust policy, white space not counted, against the quota "Role trust policy length" (Service
Quotas: service code `iam`, quota code L-C07B4B0D), 2,048 characters unless raised (IAM User Guide, "IAM and AWS
STS quotas", read 2026-12-02). The train role names eight `sub` patterns since sweeps (train and sweep branches,
start and stop, name and id forms), each holding the owner and repository names twice: long names pass the
default, and CloudFormation would then fail the role half-way through the deploy. bootstrap measures first.

The measure evaluates the template's own trust statements (its !Sub, !If, !Ref and conditions) with the values
bootstrap deploys, so it cannot drift from what CloudFormation creates.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import yaml

QUOTA_CODE = "L-C07B4B0D"
DEFAULT_QUOTA = 2048
# IAM is a global service: Service Quotas lists its quotas in US East (N. Virginia).
QUOTA_REGION = "us-east-1"
# The ARN CloudFormation gives the OIDC provider resource (!Ref): its length is all that matters here.
OIDC_PROVIDER = "arn:{partition}:iam::123456789012:oidc-provider/token.actions.githubusercontent.com"
_SUB_NAME = re.compile(r"\$\{([A-Za-z0-9:]+)\}")


class _Loader(yaml.SafeLoader):
    """CloudFormation's short tags (!Ref, !Sub, !If, ...) read as their long form."""


def _intrinsic(loader: _Loader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    name = "Ref" if suffix == "Ref" else f"Fn::{suffix}"
    if isinstance(node, yaml.ScalarNode):
        return {name: loader.construct_scalar(node)}
    if isinstance(node, yaml.SequenceNode):
        return {name: loader.construct_sequence(node, deep=True)}
    return {name: loader.construct_mapping(node, deep=True)}


_Loader.add_multi_constructor("!", _intrinsic)
_NO_VALUE = object()


def partition(region: str) -> str:
    """The ARN partition of a region (aws, aws-us-gov, aws-cn)."""
    return "aws-us-gov" if region.startswith("us-gov-") else "aws-cn" if region.startswith("cn-") else "aws"


def trust_lengths(template_body: str, parameters: Mapping[str, str], region: str) -> dict[str, int]:
    """Logical id -> length of the trust policy as IAM counts it, for every role a web identity may assume."""
    template = yaml.load(template_body, Loader=_Loader)
    values: dict[str, Any] = {
        name: spec.get("Default", "") for name, spec in (template.get("Parameters") or {}).items()
    }
    values |= dict(parameters)
    values |= {"AWS::Partition": partition(region), "AWS::Region": region, "AWS::AccountId": "123456789012"}
    resources = template.get("Resources") or {}
    values |= {
        name: OIDC_PROVIDER.format(partition=values["AWS::Partition"])
        for name, resource in resources.items()
        if resource.get("Type") == "AWS::IAM::OIDCProvider"
    }
    conditions: dict[str, bool] = {}
    for name, expression in (template.get("Conditions") or {}).items():
        conditions[name] = bool(_value(expression, values, conditions))
    lengths = {}
    for name, resource in resources.items():
        if resource.get("Type") != "AWS::IAM::Role":
            continue
        document = _value(resource["Properties"]["AssumeRolePolicyDocument"], values, conditions)
        statements = document.get("Statement", [])
        if any("Federated" in (s.get("Principal") or {}) for s in statements):
            lengths[name] = len(json.dumps(document, separators=(",", ":")))
    return lengths


def _value(node: Any, values: Mapping[str, Any], conditions: Mapping[str, bool]) -> Any:
    """The subset of CloudFormation's intrinsic functions the trust statements and conditions use."""
    if isinstance(node, list):
        return [v for v in (_value(item, values, conditions) for item in node) if v is not _NO_VALUE]
    if not isinstance(node, dict):
        return node
    if len(node) == 1:
        ((key, arg),) = node.items()
        if key == "Ref":
            return _NO_VALUE if arg == "AWS::NoValue" else values[arg]
        if key == "Fn::Sub":
            return _SUB_NAME.sub(lambda m: str(values[m[1]]), arg)
        if key == "Fn::If":
            name, then, otherwise = arg
            return _value(then if conditions[name] else otherwise, values, conditions)
        if key == "Fn::Equals":
            left, right = (_value(side, values, conditions) for side in arg)
            return left == right
        if key == "Fn::Not":
            return not _value(arg[0], values, conditions)
        if key == "Fn::And":
            return all(_value(item, values, conditions) for item in arg)
        if key.startswith("Fn::") or key == "Condition":
            raise ValueError(f"{key} is not evaluated here: add it to gpu_runner.setup.trust_size")
    return {k: _value(v, values, conditions) for k, v in node.items()}


def applied_quota(quotas: Any) -> float:
    """The account's "Role trust policy length" (the default when no value was applied, as GetServiceQuota
    answers NoSuchResourceException then: botocore's service-quotas model)."""
    try:
        return float(quotas.get_service_quota(ServiceCode="iam", QuotaCode=QUOTA_CODE)["Quota"]["Value"])
    except quotas.exceptions.NoSuchResourceException:
        pass
    return float(
        quotas.get_aws_default_service_quota(ServiceCode="iam", QuotaCode=QUOTA_CODE)["Quota"]["Value"]
    )


def too_long(lengths: Mapping[str, int], quota: float) -> list[str]:
    """One line per role whose trust policy the quota refuses, naming the fix (empty: all fit)."""
    return [
        f"{name}'s trust policy would be {length} characters, more than this account's 'Role trust policy length' "
        f"quota ({quota:g}; the default is {DEFAULT_QUOTA}): raise it first with `aws service-quotas "
        f"request-service-quota-increase --service-code iam --quota-code {QUOTA_CODE} --desired-value 4096 "
        f"--region {QUOTA_REGION}` (long owner and repository names fill it: each is in every trusted subject)"
        for name, length in sorted(lengths.items())
        if length > quota
    ]
