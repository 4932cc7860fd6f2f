"""Who may use the bucket's objects, and from where: what `bootstrap` passes the stack (issue 30, Low).

The bucket's policy (gpu_runner/setup/gpu-runner.yaml, BucketTlsOnlyPolicy) refuses the objects to every principal of the
account but the stack's roles, the roles tagged with the bucket and BucketAdministrators: bootstrap adds the
principal it runs as (the person who then uploads data and the held-out set) and keeps those already there, so a
second administrator's bootstrap locks nobody out.

The runner role's S3 requests must come through an S3 gateway endpoint of the VPC its credentials were delivered to
(RunnerPolicy, S3OnlyFromTheStackVpc): bootstrap creates one on the VPC's route tables, or keeps to the one the
VPC has. Each route table the endpoint is given gets a route to S3's prefix list, and several gateway endpoints of
one service take different route tables (Amazon VPC User Guide, "Gateway VPC endpoints"): a second one on the
same tables is not an option.
"""

from __future__ import annotations

import logging
from typing import Any

from botocore.exceptions import ClientError

log = logging.getLogger(__name__)

# CreateRole's RoleName: [\w+=,.@-]+ (botocore's IAM model, roleNameType); aws:PrincipalArn of a role session is the
# role's ARN with its path (IAM User Guide, "AWS global condition context keys": aws:PrincipalArn).
_ASSUMED_ROLE = ":assumed-role/"


def caller_principal(sts: Any, iam: Any) -> str | None:
    """The aws:PrincipalArn requests of this caller carry: a user's or federated user's ARN as GetCallerIdentity
    names it, the role's ARN (with its path, from GetRole) for a role session; None for the account root, which
    the bucket's policy admits anyway."""
    arn = str(sts.get_caller_identity()["Arn"])
    if arn.endswith(":root"):
        return None
    if ":user/" in arn:
        # An IAM user: arn:<partition>:iam::<account>:user/<path><name> (IAM User Guide, "AWS global condition
        # context keys", aws:PrincipalArn; GetCallerIdentity answers the same ARN: AWS STS API Reference).
        return arn.replace(":sts::", ":iam::", 1)
    if _ASSUMED_ROLE not in arn:
        return arn
    prefix, _, rest = arn.partition(_ASSUMED_ROLE)
    role = rest.split("/", 1)[0]
    try:
        return str(iam.get_role(RoleName=role)["Role"]["Arn"])
    except ClientError as error:
        # Without iam:GetRole the path is unknown: the role's own name under any path.
        fallback = f"{prefix.replace(':sts:', ':iam:')}:role/*{role}"
        log.info(f"bucket administrators: {role}'s path not readable ({error}); admitting {fallback}")
        return fallback


def administrators(existing: str, caller: str | None) -> str:
    """The stack's BucketAdministrators: those it has, and the caller (once, in the order added)."""
    names = [name for name in existing.split(",") if name]
    if caller and caller not in names:
        names.append(caller)
    return ",".join(names)


def s3_endpoint_plan(ec2: Any, region: str, vpc_id: str, current: str) -> tuple[str, str]:
    """(S3GatewayEndpoint, S3EndpointRouteTableIds) for the VPC: `create` on all its route tables when it has no
    S3 gateway endpoint or the one it has is this stack's (`current` is the stack's present value), else
    `existing` (warning about route tables that endpoint does not reach: instances there would be refused S3)."""
    tables = sorted(
        table["RouteTableId"]
        for table in ec2.describe_route_tables(Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])[
            "RouteTables"
        ]
    )
    if current == "create":
        return "create", ",".join(tables)
    endpoints = ec2.describe_vpc_endpoints(
        Filters=[
            {"Name": "vpc-id", "Values": [vpc_id]},
            {"Name": "service-name", "Values": [f"com.amazonaws.{region}.s3"]},
            {"Name": "vpc-endpoint-type", "Values": ["Gateway"]},
        ]
    )["VpcEndpoints"]
    if not endpoints:
        return "create", ",".join(tables)
    reached = {table for endpoint in endpoints for table in endpoint.get("RouteTableIds", [])}
    missing = [table for table in tables if table not in reached]
    if missing:
        log.warning(
            f"VPC {vpc_id} has an S3 gateway endpoint, but not on route table(s) {', '.join(missing)}: a runner in "
            "a subnet routed by one of them is refused S3 (its requests must come through the VPC's endpoint); add "
            "those route tables to the endpoint"
        )
    return "existing", ""
