"""What IAM is asked when gpu-runner calls AWS, and whether a policy document allows it.

Written by hand because nothing offline evaluates IAM with resources and conditions: moto's access control
ignores both (its own docstring says so), and AWS's policy simulator is an online API. The mapping from an API
call to IAM actions, resource ARNs and condition keys follows AWS's Service Authorization Reference for the
handful of operations gpu-runner makes; an operation missing here fails the test instead of passing silently.
"""

from __future__ import annotations

import fnmatch
import re
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
    # The parsed answer, filled in after the call (what EC2 said at launch: the instance's profile ARN, which
    # moto no longer describes once the instance is terminated).
    reply: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Request:
    """One authorization IAM makes: an action on a resource, with the request's condition keys."""

    action: str
    resource: str
    # A list for a multivalued key (aws:TagKeys), a string otherwise.
    context: Mapping[str, str | list[str]] = field(default_factory=dict)
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

    def after_call(parsed: Any, **_: Any) -> None:
        if calls and isinstance(parsed, dict):
            calls[-1].reply.update(parsed)

    session.events.register("provide-client-params", keep_params)
    session.events.register("before-call", before_call)
    session.events.register("after-call", after_call)
    return calls


def launched_profiles(calls: Iterable[Call]) -> dict[str, str]:
    """Instance id -> the ARN of the instance profile EC2 reported when it launched the instance."""
    return {
        instance["InstanceId"]: instance.get("IamInstanceProfile", {}).get("Arn", "")
        for call in calls
        if call.operation == "RunInstances"
        for instance in call.reply.get("Instances", [])
    }


def _ec2_arn(region: str, kind: str, ident: str = "*", account: str = ACCOUNT) -> str:
    return f"arn:aws:ec2:{region}:{account}:{kind}/{ident}"


def _tags(specs: Iterable[Mapping[str, Any]], resource_type: str) -> dict[str, str]:
    for spec in specs:
        if spec["ResourceType"] == resource_type:
            return {t["Key"]: t["Value"] for t in spec["Tags"]}
    return {}


def _request_tags(tags: Mapping[str, str]) -> dict[str, str | list[str]]:
    """aws:RequestTag/<key> per tag, and aws:TagKeys (multivalued: every key of the request)."""
    context: dict[str, str | list[str]] = {f"aws:RequestTag/{k}": v for k, v in tags.items()}
    if tags:
        context["aws:TagKeys"] = list(tags)
    return context


# RunInstances' network and image context (Service Authorization Reference for EC2; EC2 User Guide "Supported
# resource-level permissions", RunInstances): the image carries ec2:Owner (amazon, aws-marketplace or the owning
# account), the subnet and the network interface ec2:Vpc (the VPC's ARN). A lookup that knows nothing answers ""
# and the key is left out, which no condition matches: unknown means refused, never waved through.
ImageOwner = Callable[[str, str], str]  # (region, image id) -> owner
SubnetVpc = Callable[[str, str | None], str]  # (region, subnet id or None = EC2's default subnet) -> VPC id


def _unknown(*_: object) -> str:
    return ""


def _run_instances(
    call: Call,
    profile_role: Callable[[str], str],
    spot_role_exists: Callable[[], bool],
    image_owner: ImageOwner = _unknown,
    subnet_vpc: SubnetVpc = _unknown,
) -> list[Request]:
    p, region = call.params, call.region
    specs = p.get("TagSpecifications", [])
    instance_ctx: dict[str, str | list[str]] = {
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
    owner = image_owner(region, p["ImageId"])
    requests.append(
        Request(
            "ec2:RunInstances",
            f"arn:aws:ec2:{region}::image/{p['ImageId']}",
            {"ec2:Owner": owner} if owner else {},
        )
    )
    vpc = subnet_vpc(region, p.get("SubnetId"))
    vpc_ctx = {"ec2:Vpc": _ec2_arn(region, "vpc", vpc)} if vpc else {}
    requests.append(Request("ec2:RunInstances", _ec2_arn(region, "subnet", p.get("SubnetId", "*")), vpc_ctx))
    requests.append(Request("ec2:RunInstances", _ec2_arn(region, "network-interface"), vpc_ctx))
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
    # Tags given at launch are a CreateTags authorization on each tagged resource, with the same tag keys.
    requests += [
        Request(
            "ec2:CreateTags",
            _ec2_arn(region, spec["ResourceType"]),
            {"ec2:CreateAction": "RunInstances", **_request_tags(_tags(specs, spec["ResourceType"]))},
        )
        for spec in specs
    ]
    if profile:
        role = profile_role(str(instance_ctx["ec2:InstanceProfile"]))
        requests.append(Request("iam:PassRole", role, {"iam:PassedToService": "ec2.amazonaws.com"}))
    return requests


def _on_instances(
    call: Call,
    action: str,
    instance_tags: Callable[[str, str], dict[str, str]],
    instance_profile: Callable[[str, str], str],
) -> list[Request]:
    ids = call.params.get("InstanceIds") or [call.params["InstanceId"]]
    requests = []
    for instance_id in ids:
        context: dict[str, str | list[str]] = {
            f"ec2:ResourceTag/{k}": v for k, v in instance_tags(call.region, instance_id).items()
        }
        # ec2:InstanceProfile: the ARN of the instance's profile; absent for an instance launched without one.
        profile = instance_profile(call.region, instance_id)
        if profile:
            context["ec2:InstanceProfile"] = profile
        requests.append(Request(action, _ec2_arn(call.region, "instance", instance_id), context))
    return requests


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
}
# The calls that may send If-None-Match (botocore 1.44.8's s3 model: PutObject, CompleteMultipartUpload and
# CopyObject have an `IfNoneMatch` member, header If-None-Match).
_CONDITIONAL_WRITES = {"PutObject", "CompleteMultipartUpload", "CopyObject"}


def _delete_action(target: Mapping[str, Any]) -> str:
    """DeleteObject removes the current version (a delete marker when versioning is on); with a VersionId it
    removes that version for good and is authorized as s3:DeleteObjectVersion (Service Authorization Reference
    for Amazon S3; S3 User Guide, "Deleting object versions from a versioning-enabled bucket")."""
    return "s3:DeleteObjectVersion" if target.get("VersionId") else "s3:DeleteObject"


# Session Manager's default shell document, used when StartSession names none (Systems Manager User Guide, "Start a
# default shell session by specifying the default session document in IAM policies"); owned by the account.
DEFAULT_SESSION_DOCUMENT = "SSM-SessionManagerRunShell"
# This evaluator's own marker (no AWS key): the request's document is the implicit default. "The session starts even
# if the user's IAM policy doesn't grant explicit permission to access the SSM-SessionManagerRunShell document",
# unless the policy's StartSession statements carry ssm:SessionDocumentAccessCheck (Systems Manager User Guide,
# "Enforce a session document permission check for the AWS CLI"): allowed() applies that rule.
IMPLICIT_DEFAULT_DOCUMENT = "iam-requests:implicit-default-session-document"
SESSION_DOCUMENT_CHECK = "ssm:SessionDocumentAccessCheck"


def _start_session(call: Call) -> list[Request]:
    """StartSession is authorized on the target instance and on the session document (Service Authorization
    Reference for AWS Systems Manager, StartSession: resource types document and instance). AWS-owned documents
    (AWS-*) have no account in their ARN, as AWS's public parameters."""
    target = call.params["Target"]
    name = call.params.get("DocumentName")
    account = "" if name and name.startswith("AWS-") else ACCOUNT
    document = f"arn:aws:ssm:{call.region}:{account}:document/{name or DEFAULT_SESSION_DOCUMENT}"
    context: dict[str, str | list[str]] = {} if name else {IMPLICIT_DEFAULT_DOCUMENT: "true"}
    return [
        Request("ssm:StartSession", _ec2_arn(call.region, "instance", target)),
        Request("ssm:StartSession", document, context),
    ]


def _batch_arn(region: str, kind: str, name: str) -> str:
    """A Batch resource ARN from a name or an ARN (SubmitJob takes either for the queue and the definition)."""
    return name if name.startswith("arn:") else f"arn:aws:batch:{region}:{ACCOUNT}:{kind}/{name}"


def _batch(call: Call, job_tags: Callable[[str, str], dict[str, str]]) -> list[Request]:
    """AWS Batch's authorizations (Service Authorization Reference, "Actions, resources, and condition keys for AWS
    Batch", as bundled in parliament 1.6.4's iam_definition.json): SubmitJob on the job queue, the job definition
    and the new job (aws:RequestTag/aws:TagKeys), plus batch:TagResource on the job when it is tagged at creation;
    TerminateJob and CancelJob on the job (aws:ResourceTag); the Describe* and List* reads on "*" (no resource
    types)."""
    p, region = call.params, call.region
    if call.operation == "SubmitJob":
        tags = dict(p.get("tags", {}))
        job = f"arn:aws:batch:{region}:{ACCOUNT}:job/*"
        requests = [
            Request("batch:SubmitJob", _batch_arn(region, "job-queue", p["jobQueue"])),
            Request("batch:SubmitJob", _batch_arn(region, "job-definition", p["jobDefinition"])),
            Request("batch:SubmitJob", job, _request_tags(tags)),
        ]
        if tags:
            requests.append(Request("batch:TagResource", job, _request_tags(tags)))
        return requests
    if call.operation in {"TerminateJob", "CancelJob"}:
        context = {f"aws:ResourceTag/{k}": v for k, v in job_tags(region, p["jobId"]).items()}
        return [
            Request(f"batch:{call.operation}", f"arn:aws:batch:{region}:{ACCOUNT}:job/{p['jobId']}", context)
        ]
    if call.operation.startswith(("Describe", "List")):
        return [Request(f"batch:{call.operation}", "*")]
    raise KeyError(f"no IAM mapping for batch:{call.operation}: add it to iam_requests._batch")


def _log_stream(call: Call) -> list[Request]:
    """logs:GetLogEvents, CreateLogStream and PutLogEvents on the log stream (Service Authorization Reference for
    CloudWatch Logs: resource type log-stream, arn:...:log-group:<group>:log-stream:<stream>)."""
    group, stream = call.params["logGroupName"], call.params["logStreamName"]
    arn = f"arn:aws:logs:{call.region}:{ACCOUNT}:log-group:{group}:log-stream:{stream}"
    return [Request(f"logs:{call.operation}", arn)]


def _describe_container_instances(call: Call) -> list[Request]:
    """ecs:DescribeContainerInstances on each container instance (Service Authorization Reference for Amazon ECS:
    resource type container-instance, condition key ecs:cluster, the cluster's ARN)."""
    cluster = call.params.get("cluster", "default")
    cluster_arn = (
        cluster if cluster.startswith("arn:") else f"arn:aws:ecs:{call.region}:{ACCOUNT}:cluster/{cluster}"
    )
    return [
        Request("ecs:DescribeContainerInstances", arn, {"ecs:cluster": cluster_arn})
        for arn in call.params["containerInstances"]
    ]


def _ecs_arn(region: str, kind: str, name: str) -> str:
    return name if name.startswith("arn:") else f"arn:aws:ecs:{region}:{ACCOUNT}:{kind}/{name}"


def _container_instance_arn(region: str, cluster_arn: str, instance: str) -> str:
    """A container instance's ARN from its ARN or id: container-instance/<cluster name>/<id> (the Service
    Authorization Reference's ARN format)."""
    return (
        instance
        if instance.startswith("arn:")
        else _ecs_arn(region, "container-instance", f"{cluster_arn.rsplit('/', 1)[-1]}/{instance}")
    )


# The ECS agent's calls on a container instance (Service Authorization Reference for Amazon ECS, as bundled in
# parliament 1.6.4's iam_definition.json): these act on the cluster resource...
_ECS_CLUSTER_ACTIONS = {
    "RegisterContainerInstance",
    "DeregisterContainerInstance",
    "SubmitTaskStateChange",
    "SubmitContainerStateChange",
    "SubmitAttachmentStateChanges",
}
# ...and Poll and StartTelemetrySession on the container instance, with ecs:cluster (the cluster's ARN). Those two
# are the agent's websocket sessions (ACS, TCS), which botocore's ecs model does not describe: agent_sessions().
_ECS_AGENT_SESSIONS = ("Poll", "StartTelemetrySession")


def _ecs(call: Call) -> list[Request]:
    """What the ECS agent on a container instance asks of ECS (the botocore-described operations)."""
    p, region = call.params, call.region
    if call.operation == "DiscoverPollEndpoint":
        return [Request("ecs:DiscoverPollEndpoint", "*")]
    cluster = _ecs_arn(region, "cluster", p.get("cluster", "default"))
    if call.operation in _ECS_CLUSTER_ACTIONS:
        return [Request(f"ecs:{call.operation}", cluster)]
    if call.operation == "UpdateContainerInstancesState":
        return [
            Request(
                "ecs:UpdateContainerInstancesState",
                _container_instance_arn(region, cluster, instance),
                {"ecs:cluster": cluster},
            )
            for instance in p["containerInstances"]
        ]
    if call.operation == "DescribeContainerInstances":
        return _describe_container_instances(call)
    raise KeyError(f"no IAM mapping for ecs:{call.operation}: add it to iam_requests._ecs")


def agent_sessions(region: str, cluster: str, container_instance: str) -> list[Request]:
    """The agent's two websocket sessions for one container instance: ecs:Poll (the ACS connection that hands it
    tasks) and ecs:StartTelemetrySession (metrics), each on the container instance with ecs:cluster."""
    cluster_arn = _ecs_arn(region, "cluster", cluster)
    instance = _container_instance_arn(region, cluster_arn, container_instance)
    return [
        Request(
            f"ecs:{action}", instance, {"aws:RequestedRegion": region, "ecs:cluster": cluster_arn}, action
        )
        for action in _ECS_AGENT_SESSIONS
    ]


def _ecr(call: Call) -> list[Request]:
    """Pulling an image (Service Authorization Reference for Amazon ECR): GetAuthorizationToken has no resource
    type; BatchGetImage, GetDownloadUrlForLayer and BatchCheckLayerAvailability act on the repository, in the
    registry of registryId (the caller's account when absent)."""
    if call.operation == "GetAuthorizationToken":
        return [Request("ecr:GetAuthorizationToken", "*")]
    if call.operation in {"BatchGetImage", "GetDownloadUrlForLayer", "BatchCheckLayerAvailability"}:
        account = call.params.get("registryId", ACCOUNT)
        arn = f"arn:aws:ecr:{call.region}:{account}:repository/{call.params['repositoryName']}"
        return [Request(f"ecr:{call.operation}", arn)]
    raise KeyError(f"no IAM mapping for ecr:{call.operation}: add it to iam_requests._ecr")


def launch_path_requests(region: str, repository: str) -> dict[str, Request]:
    """The launch path only the launch roles may take: the GitHub credential, a runner's just-in-time config and a
    new instance (the rows every other role's refusal table holds)."""
    parameters = f"arn:aws:ssm:{region}:{ACCOUNT}:parameter/gpu-runner/{repository}"
    return {
        "read-the-github-credential": Request("ssm:GetParameter", f"{parameters}-github-credential"),
        "read-a-runner-config": Request("ssm:GetParameter", f"{parameters}/7-1/jitconfig"),
        "run-instances": Request(
            "ec2:RunInstances",
            f"arn:aws:ec2:{region}:{ACCOUNT}:instance/*",
            {"ec2:InstanceType": "g4dn.xlarge", "aws:RequestedRegion": region},
        ),
    }


def s3_context(owner: str = ACCOUNT) -> dict[str, str]:
    """aws:ResourceAccount, the bucket owner's account, is in the context of every S3 request (IAM User Guide,
    "AWS global condition context keys": available when the resource is known); moto's buckets are ACCOUNT's."""
    return {"aws:ResourceAccount": owner}


def _s3(call: Call) -> list[Request]:
    bucket, context = call.params["Bucket"], s3_context()
    if call.operation in {"ListObjectsV2", "ListObjects"}:
        # s3:prefix: the request's `prefix` parameter, a condition key of ListBucket (Service Authorization
        # Reference for Amazon S3); a listing without one has no such key, which no condition on it matches.
        if "Prefix" in call.params:
            context = {**context, "s3:prefix": call.params["Prefix"]}
        return [Request("s3:ListBucket", f"arn:aws:s3:::{bucket}", context)]
    if call.operation == "DeleteObjects":
        return [
            Request(_delete_action(obj), f"arn:aws:s3:::{bucket}/{obj['Key']}", context)
            for obj in call.params["Delete"]["Objects"]
        ]
    resource = f"arn:aws:s3:::{bucket}/{call.params.get('Key', '')}"
    if call.operation == "DeleteObject":
        return [Request(_delete_action(call.params), resource, context)]
    if call.operation in _CONDITIONAL_WRITES and "IfNoneMatch" in call.params:
        # s3:if-none-match: the request's If-None-Match header (botocore's `IfNoneMatch`), a condition key of
        # s3:PutObject (Service Authorization Reference for Amazon S3, as bundled in parliament 1.6.4's
        # iam_definition.json). Absent when the call does not send the header: CreateMultipartUpload, UploadPart
        # and UploadPartCopy never do ("these APIs don't accept conditional headers", S3 User Guide, "Enforce
        # conditional writes on Amazon S3 buckets"); CopySourceIfNoneMatch is another header, not this key.
        context = {**context, "s3:if-none-match": call.params["IfNoneMatch"]}
    if call.operation in {"CopyObject", "UploadPartCopy"}:
        # A copy is a write of the destination and a read of the source (CopyObject API reference, "Permissions").
        source = call.params["CopySource"]
        source = source if isinstance(source, str) else f"{source['Bucket']}/{source['Key']}"
        return [
            Request("s3:PutObject", resource, context),
            Request("s3:GetObject", f"arn:aws:s3:::{source.lstrip('/').split('?', 1)[0]}", s3_context()),
        ]
    if call.operation in _S3_OBJECT_ACTIONS:
        return [Request(_S3_OBJECT_ACTIONS[call.operation], resource, context)]
    raise KeyError(f"no IAM mapping for s3:{call.operation}: add it to iam_requests._s3")


def requests_for(
    call: Call,
    *,
    instance_tags: Callable[[str, str], dict[str, str]],
    profile_role: Callable[[str], str],
    spot_role_exists: Callable[[], bool],
    instance_profile: Callable[[str, str], str] = lambda region, instance_id: "",
    image_owner: ImageOwner = _unknown,
    subnet_vpc: SubnetVpc = _unknown,
    job_tags: Callable[[str, str], dict[str, str]] = lambda region, job_id: {},
) -> list[Request]:
    """The IAM authorizations one API call needs. Unknown operations raise: extend the mapping, never skip.

    `instance_profile(region, id)` is the ARN of the instance's profile ("" for none: a policy that requires
    ec2:InstanceProfile then refuses, as IAM does when the key is missing)."""
    key = f"{call.service}:{call.operation}"
    if key == "ec2:RunInstances":
        requests = _run_instances(call, profile_role, spot_role_exists, image_owner, subnet_vpc)
    elif key in {"ec2:TerminateInstances", "ec2:GetConsoleOutput", "ec2:StartInstances"}:
        requests = _on_instances(call, key, instance_tags, instance_profile)
    elif key in {
        "ec2:DescribeInstances",
        "ec2:DescribeImages",
        "ec2:DescribeInstanceTypeOfferings",
        "ec2:DescribeSubnets",
        "ec2:DescribeSpotPriceHistory",
        "ec2:DescribeInstanceTypes",
    }:
        requests = [Request(key, "*")]
    elif key in {"ssm:GetParameter", "ssm:DeleteParameter"}:
        requests = [Request(key, _parameter_arn(call.region, call.params["Name"]))]
    elif key == "ssm:PutParameter":
        arn = _parameter_arn(call.region, call.params["Name"])
        requests = [Request(key, arn)]
        if call.params.get("Tags"):
            requests.append(Request("ssm:AddTagsToResource", arn))
    elif key == "ssm:StartSession":
        requests = _start_session(call)
    elif key == "kms:DescribeKey":
        # Authorized on the key, whatever the request names it by (an alias here): DescribeKey's only resource type
        # is `key` (Service Authorization Reference, as parliament 1.6.4's iam_definition.json copies it). The key
        # is the one KMS answered with.
        requests = [Request(key, call.reply["KeyMetadata"]["Arn"])]
    elif key in {"ssm:DescribeParameters", "pricing:GetProducts"}:
        requests = [Request(key, "*")]
    elif key in {"service-quotas:GetServiceQuota", "service-quotas:GetAWSDefaultServiceQuota"}:
        # boto3's service name is service-quotas, IAM's prefix servicequotas; neither action has resource-level
        # permissions (Service Authorization Reference, "Actions, resources, and condition keys for Service Quotas").
        requests = [Request(f"servicequotas:{call.operation}", "*")]
    elif call.service == "s3":
        requests = _s3(call)
    elif call.service == "batch":
        requests = _batch(call, job_tags)
    elif key in {"logs:GetLogEvents", "logs:CreateLogStream", "logs:PutLogEvents"}:
        # All three on the log stream (Service Authorization Reference for CloudWatch Logs).
        requests = _log_stream(call)
    elif call.service == "ecs":
        requests = _ecs(call)
    elif call.service == "ecr":
        requests = _ecr(call)
    elif key == "sts:GetCallerIdentity":
        # "No permissions are required to perform this operation" (AWS STS API Reference, GetCallerIdentity): no
        # authorization at all, so no policy can refuse it.
        requests = []
    else:
        raise KeyError(f"no IAM mapping for {key}: add it to iam_requests.requests_for")
    # aws:RequestedRegion, the region the request was sent to, is in the context of every request (IAM User Guide,
    # "AWS global condition context keys").
    return [
        Request(r.action, r.resource, {"aws:RequestedRegion": call.region, **r.context}, key)
        for r in requests
    ]


def _values(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


# A policy variable: `${key}` in a condition value or a Resource is that key's value in the request context ("IAM
# policy elements: Variables and tags", IAM User Guide: "You can use policy variables in the Resource element and in
# string comparisons in the Condition element", string and ARN operators only). No default-value form here.
_POLICY_VARIABLE = re.compile(r"\$\{([^}]+)\}")
# "${*}", "${?}" and "${$}" stand for the character itself, never a wildcard (same page, "Special characters").
_SPECIAL_VARIABLES = {"*": "*", "?": "?", "$": "$"}


def _literal(text: str) -> str:
    """`text` as an fnmatch pattern that matches only itself: a substituted value is data, not wildcards."""
    return re.sub(r"([*?\[])", r"[\1]", text)


def _resolved(value: str, context: Mapping[str, str | list[str]], *, pattern: bool = False) -> str | None:
    """`value` with its policy variables replaced from `context`; None when one is absent (nothing can match:
    the IAM User Guide, same page, "If AWS cannot resolve a variable this might cause the entire statement to be
    invalid"; in a Resource, "the resource that includes a policy variable with no value will not match any
    resource"). `pattern`: the result is matched as a wildcard pattern (StringLike, ArnLike, Resource), so each
    substituted value is escaped to match only itself."""
    names = [name for name in _POLICY_VARIABLE.findall(value) if name not in _SPECIAL_VARIABLES]
    if any("," in name for name in names):
        raise ValueError(f"policy variable default values are not supported by this evaluator: {value}")
    if any(name not in context or isinstance(context[name], list) for name in names):
        return None

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        text = _SPECIAL_VARIABLES.get(name) or str(context[name])
        return _literal(text) if pattern else text

    return _POLICY_VARIABLE.sub(substitute, value)


def _resource_pattern(resource: str, context: Mapping[str, str | list[str]]) -> str | None:
    """A statement's Resource with its policy variables resolved. "You can use a policy variable in the Resource
    element, but only in the resource portion of the ARN. This portion of the ARN appears after the fifth colon"
    (same page, "Resource element"): a variable before it is a policy error here, not a silent match."""
    if _POLICY_VARIABLE.search(":".join(resource.split(":", 5)[:5])):
        raise ValueError(f"a policy variable before the resource portion of the ARN: {resource}")
    return _resolved(resource, context, pattern=True)


# The negated string operators this evaluator supports, and the positive operator each negates.
_NEGATED = {
    "StringNotEquals": "StringEquals",
    "StringNotLike": "StringLike",
    "ArnNotEquals": "ArnEquals",
    "ArnNotLike": "ArnLike",
}


def _null_holds(key: str, expected: Any, context: Mapping[str, str | list[str]]) -> bool:
    """The Null operator: "true" holds when `key` is absent from the request context, "false" when it is present
    ("Use a Null condition operator to check if a condition key is absent at the time of authorization. In the
    policy statement, use true (the key doesn't exist - it is null) or false (the key exists and its value is
    not null)": IAM User Guide, "IAM JSON policy elements: Condition operators", Null, read 2026-12-02).
    Several values are OR'd, as for every operator."""
    wanted = {value.lower() for value in _values(expected)}
    if not wanted or not wanted <= {"true", "false"}:
        raise ValueError(f"Null takes true or false, not {expected!r} (for {key})")
    return ("false" if key in context else "true") in wanted


def _condition_holds(operator: str, key: str, expected: Any, context: Mapping[str, str | list[str]]) -> bool:
    if operator.startswith("ForAllValues:"):
        # Every value of the multivalued key must match; "also returns true if there are no context keys in the
        # request" (IAM User Guide, "Multivalued context key examples", read 2026-12-01).
        base = operator.partition(":")[2]
        values = _values(context.get(key, []))
        return all(_condition_holds(base, key, expected, {**context, key: value}) for value in values)
    if operator == "Null":
        return _null_holds(key, expected, context)
    if operator == "BoolIfExists":
        # "If the policy key is present in the context of the request, process the key as specified in the
        # policy. If the key is not present, evaluate the condition element as true" (IAM User Guide, "IAM JSON
        # policy elements: Condition operators", ...IfExists condition operators).
        return key not in context or _condition_holds("Bool", key, expected, context)
    if operator.startswith(("ForAnyValue:", "Null")) or operator.endswith("IfExists"):
        raise ValueError(f"condition operator {operator} is not supported by this evaluator: add it")
    if operator in _NEGATED:
        # "If the policy condition requires that the key is not matched, such as StringNotLike or ArnNotLike,
        # and the right key is not present, the condition is true" (IAM User Guide, "IAM JSON policy elements:
        # Condition operators", read 2026-12-02). Present: true when no value matches (the negation of the
        # positive operator over the condition's values, which are OR'd).
        if key not in context:
            return True
        return not _condition_holds(_NEGATED[operator], key, expected, context)
    if key not in context:
        return False  # no IfExists operators in our policies: a missing key never matches
    actual = context[key]
    if isinstance(actual, list):
        raise ValueError(f"{key} is multivalued: a policy must test it with ForAllValues/ForAnyValue")
    if operator not in {"StringEquals", "ArnEquals", "StringLike", "ArnLike"} and _POLICY_VARIABLE.search(
        str(expected)
    ):
        raise ValueError(f"policy variables work only with string and ARN operators, not {operator}")
    like = operator in {"StringLike", "ArnLike"}
    wanted = [v for v in (_resolved(w, context, pattern=like) for w in _values(expected)) if v is not None]
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
    resources = (_resource_pattern(r, request.context) for r in _values(statement.get("Resource", [])))
    if not any(r is not None and fnmatch.fnmatchcase(request.resource, r) for r in resources):
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
    if request.context.get(IMPLICIT_DEFAULT_DOCUMENT) and _default_document_unchecked(statements):
        return True  # the default shell document, not checked without ssm:SessionDocumentAccessCheck
    return any(s["Effect"] == "Allow" and _statement_matches(s, request) for s in statements)


def _default_document_unchecked(statements: Iterable[Mapping[str, Any]]) -> bool:
    """Some Allow statement grants ssm:StartSession without the document access check: "it must be included in
    all policy statements which allow the ssm:StartSession action" to be enforced (same guide page)."""
    return any(
        s["Effect"] == "Allow"
        and any(fnmatch.fnmatchcase("ssm:startsession", a.lower()) for a in _values(s.get("Action", [])))
        and not any(SESSION_DOCUMENT_CHECK in pairs for pairs in s.get("Condition", {}).values())
        for s in statements
    )


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


# --- KMS: what Parameter Store asks of the key, and whether the key policy allows it --------------------------


def ssm_kms_request(action: str, region: str, key_arn: str, parameter: str, via: str = "ssm") -> Request:
    """The KMS authorization Parameter Store makes with the caller's credentials when it encrypts (standard:
    kms:Encrypt, advanced: kms:GenerateDataKey) or decrypts (kms:Decrypt) a SecureString: encryption context
    PARAMETER_ARN = the parameter's ARN (AWS KMS Developer Guide, "How AWS Systems Manager Parameter Store uses
    AWS KMS"), kms:ViaService = the calling service's "<service>.<region>.amazonaws.com" ("kms:ViaService").
    `via=""`: the caller asked KMS directly (no kms:ViaService in the request)."""
    context = {"kms:EncryptionContext:PARAMETER_ARN": _parameter_arn(region, parameter)}
    if via:
        context["kms:ViaService"] = f"{via}.{region}.amazonaws.com"
    return Request(action, key_arn, context, f"ssm via {action}")


def _principals(statement: Mapping[str, Any]) -> list[str]:
    principal = statement.get("Principal", {})
    return _values(principal.get("AWS", [])) if isinstance(principal, Mapping) else _values(principal)


def key_policy_allows(
    key_policy: Mapping[str, Any],
    principal: str,
    identity_policies: Iterable[Mapping[str, Any]],
    request: Request,
) -> bool:
    """KMS's rule: a key policy statement naming `principal` allows it, or one naming the account root does and
    the principal's own IAM policies allow it too ("Unless the key policy explicitly allows it, you cannot use
    IAM policies to allow access to a KMS key": AWS KMS Developer Guide, "Key policies in AWS KMS"). Explicit
    denies in either win. Same-account principals only (the root ARN is built from ACCOUNT).

    The request carries aws:PrincipalArn, the caller's ARN (for a role session, the role's ARN): "This key is
    always included in the request context" (IAM User Guide, "AWS global condition context keys")."""
    root = f"arn:aws:iam::{ACCOUNT}:root"
    request = Request(
        request.action, request.resource, {"aws:PrincipalArn": principal, **request.context}, request.call
    )
    statements = _values_or_list(key_policy["Statement"])
    named = {"Version": "2012-10-17", "Statement": [s for s in statements if principal in _principals(s)]}
    via_root = {"Version": "2012-10-17", "Statement": [s for s in statements if root in _principals(s)]}
    identity = list(identity_policies)
    if any(
        s["Effect"] == "Deny" and _statement_matches(s, request)
        for policy in [named, via_root, *identity]
        for s in _values_or_list(policy["Statement"])
    ):
        return False
    return allowed([named], request) or (allowed([via_root], request) and allowed(identity, request))


def resource_policy_allows(
    resource_policy: Mapping[str, Any],
    principal: str,
    identity_policies: Iterable[Mapping[str, Any]],
    request: Request,
) -> bool:
    """A request of `principal` (an IAM ARN of this account) to a resource with a resource-based policy (a bucket
    policy): an explicit Deny in either policy wins; otherwise an Allow in either is enough ("Within a single
    account ... an allow in either an identity-based policy or a resource-based policy allows the request": IAM
    User Guide, "Policy evaluation logic", same-account requests). A statement of the resource policy applies to
    the principal when its Principal is "*" or names the principal's ARN or the account root. Same-account
    principals only."""
    root = f"arn:aws:iam::{ACCOUNT}:root"

    def applies(statement: Mapping[str, Any]) -> bool:
        if "NotPrincipal" in statement:
            raise ValueError("NotPrincipal is not supported by this evaluator")
        named = _principals(statement)
        return statement.get("Principal") == "*" or "*" in named or principal in named or root in named

    applying = {"Version": "2012-10-17",
                "Statement": [s for s in _values_or_list(resource_policy["Statement"]) if applies(s)]}  # fmt: skip
    identity = list(identity_policies)
    if any(
        s["Effect"] == "Deny" and _statement_matches(s, request)
        for policy in [applying, *identity]
        for s in _values_or_list(policy["Statement"])
    ):
        return False
    return allowed([applying], request) or allowed(identity, request)


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
