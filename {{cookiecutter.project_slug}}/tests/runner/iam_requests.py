"""What IAM is asked when gpu-runner calls AWS, and whether a policy document allows it.

Written by hand because nothing offline evaluates IAM with resources and conditions: moto's access control
ignores both (its own docstring says so), and AWS's policy simulator is an online API. The mapping from an API
call to IAM actions, resource ARNs and condition keys follows AWS's Service Authorization Reference for the
handful of operations gpu-runner makes; an operation missing here fails the test instead of passing silently.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import boto3

ACCOUNT = "123456789012"  # moto's account
SPOT_SERVICE = "spot.amazonaws.com"
# IAM's path for service-linked roles: aws-service-role/<service principal>/<role name> (IAM User Guide).
SPOT_ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/aws-service-role/{SPOT_SERVICE}/AWSServiceRoleForEC2Spot"


@dataclass(frozen=True)
class Call:
    service: str  # boto3 service name: ec2, ssm, pricing, ...
    operation: str  # API operation: RunInstances, ...
    region: str
    params: Mapping[str, Any]


@dataclass(frozen=True)
class Request:
    """One authorization IAM makes: an action on a resource, with the request's condition keys."""

    action: str
    resource: str
    context: Mapping[str, str] = field(default_factory=dict)
    call: str = ""


def record_calls(session: boto3.Session) -> list[Call]:
    """Every API call made through clients of `session` created after this (botocore's before-call hook)."""
    calls: list[Call] = []

    def before_call(model: Any, params: Any, context: Any, **_: Any) -> None:
        client_config = context.get("client_config")
        region = getattr(client_config, "region_name", None) or session.region_name or ""
        calls.append(Call(model.service_model.service_name, model.name, region, context["api_params"]))

    def keep_params(params: Any, context: Any, **_: Any) -> None:
        context["api_params"] = dict(params)

    session.events.register("provide-client-params", keep_params)
    session.events.register("before-call", before_call)
    return calls


def _ec2_arn(region: str, kind: str, ident: str = "*", account: str = ACCOUNT) -> str:
    return f"arn:aws:ec2:{region}:{account}:{kind}/{ident}"


def _tags(specs: Iterable[Mapping[str, Any]], resource_type: str) -> dict[str, str]:
    for spec in specs:
        if spec["ResourceType"] == resource_type:
            return {t["Key"]: t["Value"] for t in spec["Tags"]}
    return {}


def _request_tags(tags: Mapping[str, str]) -> dict[str, str]:
    return {f"aws:RequestTag/{k}": v for k, v in tags.items()}


def _run_instances(
    call: Call, profile_role: Callable[[str], str], spot_role_exists: Callable[[], bool]
) -> list[Request]:
    p, region = call.params, call.region
    specs = p.get("TagSpecifications", [])
    instance_ctx = {
        **_request_tags(_tags(specs, "instance")),
        "ec2:InstanceType": p["InstanceType"],
        "ec2:MetadataHttpTokens": p.get("MetadataOptions", {}).get("HttpTokens", "optional"),
    }
    profile = p.get("IamInstanceProfile", {})
    if profile:
        name = profile.get("Name") or profile["Arn"].rsplit("/", 1)[-1]
        instance_ctx["ec2:InstanceProfile"] = f"arn:aws:iam::{ACCOUNT}:instance-profile/{name}"
    requests = [Request("ec2:RunInstances", _ec2_arn(region, "instance"), instance_ctx)]
    for mapping in p.get("BlockDeviceMappings", []):
        ebs = mapping.get("Ebs", {})
        volume_ctx = {
            **_request_tags(_tags(specs, "volume")),
            "ec2:Encrypted": str(ebs.get("Encrypted", False)).lower(),
        }
        requests.append(Request("ec2:RunInstances", _ec2_arn(region, "volume"), volume_ctx))
    requests.append(Request("ec2:RunInstances", f"arn:aws:ec2:{region}::image/{p['ImageId']}"))
    requests.append(Request("ec2:RunInstances", _ec2_arn(region, "subnet", p.get("SubnetId", "*"))))
    requests.append(Request("ec2:RunInstances", _ec2_arn(region, "network-interface")))
    requests += [
        Request("ec2:RunInstances", _ec2_arn(region, "security-group", group))
        for group in p.get("SecurityGroupIds", ["*"])
    ]
    if p.get("InstanceMarketOptions", {}).get("MarketType") == "spot":
        requests.append(Request("ec2:RunInstances", _ec2_arn(region, "spot-instances-request")))
        if not spot_role_exists():
            # The account's first spot launch: EC2 creates AWSServiceRoleForEC2Spot with the caller's permissions,
            # or answers AuthFailure.ServiceLinkedRoleCreationNotPermitted (EC2 User Guide, "Service-linked role
            # for Spot Instance requests"; dstack #886).
            requests.append(
                Request("iam:CreateServiceLinkedRole", SPOT_ROLE_ARN, {"iam:AWSServiceName": SPOT_SERVICE})
            )
    # Tags given at launch are a CreateTags authorization on each tagged resource.
    requests += [
        Request(
            "ec2:CreateTags", _ec2_arn(region, spec["ResourceType"]), {"ec2:CreateAction": "RunInstances"}
        )
        for spec in specs
    ]
    if profile:
        role = profile_role(instance_ctx["ec2:InstanceProfile"])
        requests.append(Request("iam:PassRole", role, {"iam:PassedToService": "ec2.amazonaws.com"}))
    return requests


def _on_instances(
    call: Call, action: str, instance_tags: Callable[[str, str], dict[str, str]]
) -> list[Request]:
    ids = call.params.get("InstanceIds") or [call.params["InstanceId"]]
    return [
        Request(
            action,
            _ec2_arn(call.region, "instance", instance_id),
            {f"ec2:ResourceTag/{k}": v for k, v in instance_tags(call.region, instance_id).items()},
        )
        for instance_id in ids
    ]


def _parameter_arn(region: str, name: str) -> str:
    # AWS's public parameters (/aws/service/...) have no account in their ARN.
    account = "" if name.startswith("/aws/") else ACCOUNT
    return f"arn:aws:ssm:{region}:{account}:parameter{name}"


# S3 operations are authorized under other names (ListObjectsV2 is s3:ListBucket, multipart parts are PutObject).
_S3_OBJECT_ACTIONS = {
    "GetObject": "s3:GetObject",
    "HeadObject": "s3:GetObject",
    "PutObject": "s3:PutObject",
    "CreateMultipartUpload": "s3:PutObject",
    "UploadPart": "s3:PutObject",
    "CompleteMultipartUpload": "s3:PutObject",
    "DeleteObject": "s3:DeleteObject",
}


def _s3(call: Call) -> list[Request]:
    bucket = call.params["Bucket"]
    if call.operation in {"ListObjectsV2", "ListObjects"}:
        return [Request("s3:ListBucket", f"arn:aws:s3:::{bucket}")]
    if call.operation == "DeleteObjects":
        keys = [obj["Key"] for obj in call.params["Delete"]["Objects"]]
        return [Request("s3:DeleteObject", f"arn:aws:s3:::{bucket}/{key}") for key in keys]
    if call.operation in _S3_OBJECT_ACTIONS:
        return [Request(_S3_OBJECT_ACTIONS[call.operation], f"arn:aws:s3:::{bucket}/{call.params['Key']}")]
    raise KeyError(f"no IAM mapping for s3:{call.operation}: add it to iam_requests._s3")


def requests_for(
    call: Call,
    *,
    instance_tags: Callable[[str, str], dict[str, str]],
    profile_role: Callable[[str], str],
    spot_role_exists: Callable[[], bool],
) -> list[Request]:
    """The IAM authorizations one API call needs. Unknown operations raise: extend the mapping, never skip."""
    key = f"{call.service}:{call.operation}"
    if key == "ec2:RunInstances":
        requests = _run_instances(call, profile_role, spot_role_exists)
    elif key in {"ec2:TerminateInstances", "ec2:GetConsoleOutput"}:
        requests = _on_instances(call, key, instance_tags)
    elif key in {
        "ec2:DescribeInstances",
        "ec2:DescribeImages",
        "ec2:DescribeInstanceTypeOfferings",
        "ec2:DescribeSubnets",
        "ec2:DescribeSpotPriceHistory",
    }:
        requests = [Request(key, "*")]
    elif key in {"ssm:GetParameter", "ssm:DeleteParameter"}:
        requests = [Request(key, _parameter_arn(call.region, call.params["Name"]))]
    elif key == "ssm:PutParameter":
        arn = _parameter_arn(call.region, call.params["Name"])
        requests = [Request(key, arn)]
        if call.params.get("Tags"):
            requests.append(Request("ssm:AddTagsToResource", arn))
    elif key in {"ssm:DescribeParameters", "pricing:GetProducts"}:
        requests = [Request(key, "*")]
    elif call.service == "s3":
        requests = _s3(call)
    else:
        raise KeyError(f"no IAM mapping for {key}: add it to iam_requests.requests_for")
    return [Request(r.action, r.resource, r.context, key) for r in requests]


def _values(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def _condition_holds(operator: str, key: str, expected: Any, context: Mapping[str, str]) -> bool:
    if key not in context:
        return False  # no IfExists operators in our policies: a missing key never matches
    actual = context[key]
    wanted = _values(expected)
    if operator in {"StringEquals", "ArnEquals"}:
        return actual in wanted
    if operator in {"StringLike", "ArnLike"}:
        return any(fnmatch.fnmatchcase(actual, pattern) for pattern in wanted)
    if operator == "Bool":
        return actual.lower() in [w.lower() for w in wanted]
    raise ValueError(f"condition operator {operator} is not supported by this evaluator: add it")


def _statement_matches(statement: Mapping[str, Any], request: Request) -> bool:
    actions = _values(statement.get("Action", []))
    if not any(fnmatch.fnmatchcase(request.action.lower(), a.lower()) for a in actions):
        return False
    resources = _values(statement.get("Resource", []))
    if not any(fnmatch.fnmatchcase(request.resource, r) for r in resources):
        return False
    return all(
        _condition_holds(operator, key, expected, request.context)
        for operator, pairs in statement.get("Condition", {}).items()
        for key, expected in pairs.items()
    )


def allowed(policies: Iterable[Mapping[str, Any]], request: Request) -> bool:
    """IAM's rule for one principal: an explicit Deny wins, otherwise some Allow must match."""
    statements = [s for policy in policies for s in _values_or_list(policy["Statement"])]
    if any(s["Effect"] == "Deny" and _statement_matches(s, request) for s in statements):
        return False
    return any(s["Effect"] == "Allow" and _statement_matches(s, request) for s in statements)


def _values_or_list(statements: Any) -> list[Mapping[str, Any]]:
    return statements if isinstance(statements, list) else [statements]


def granted_actions(policies: Iterable[Mapping[str, Any]]) -> set[str]:
    return {
        action
        for policy in policies
        for s in _values_or_list(policy["Statement"])
        if s["Effect"] == "Allow"
        for action in _values(s["Action"])
    }


def web_identity_allowed(
    trust_policy: Mapping[str, Any], provider_arn: str, claims: Mapping[str, str]
) -> bool:
    """Whether a role's trust policy lets an OIDC token with `claims` (condition keys such as
    token.actions.githubusercontent.com:sub) from `provider_arn` call sts:AssumeRoleWithWebIdentity.

    A trust policy names a Principal instead of a Resource; the conditions are evaluated as for `allowed`. The
    keys are IAM's web identity federation keys, `<provider url>:aud` and `:sub` (IAM User Guide, "Available keys
    for AWS OIDC federation", read 2026-12-01)."""
    request = Request("sts:AssumeRoleWithWebIdentity", "*", dict(claims))

    def matches(statement: Mapping[str, Any]) -> bool:
        federated = _values(statement.get("Principal", {}).get("Federated", []))
        return provider_arn in federated and _statement_matches({**statement, "Resource": "*"}, request)

    statements = _values_or_list(trust_policy["Statement"])
    if any(s["Effect"] == "Deny" and matches(s) for s in statements):
        return False
    return any(s["Effect"] == "Allow" and matches(s) for s in statements)
