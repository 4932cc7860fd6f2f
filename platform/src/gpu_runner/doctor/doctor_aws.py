"""The AWS half of `gpu-runner doctor`: read-only look-ups that a first launch would otherwise find out the hard way.

Which credentials: the default boto3 chain (an admin's `aws sso login`, as for `make bootstrap`). Every call is a
Get/List/Describe/Head: iam:GetRole, iam:GetOpenIDConnectProvider, iam:GetInstanceProfile,
cloudformation:DescribeStacks, servicequotas:GetServiceQuota, ec2:DescribeInstanceTypes,
ec2:DescribeInstanceTypeOfferings, ec2:DescribeSubnets, ec2:DescribeImages, ec2:DescribeSecurityGroups,
ssm:GetParameter, s3:HeadBucket (s3:ListBucket permission), sts:GetCallerIdentity.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any
from urllib.parse import unquote

from botocore.exceptions import ClientError

from gpu_runner.core import quotas
from gpu_runner.core.aws import Aws
from gpu_runner.core.offerings import offered_types
from gpu_runner.core.stack_names import batch_stack_name, stack_name
from gpu_runner.doctor.doctor_checks import Check, Outcome, Target, failed, passed

OIDC_HOST = "token.actions.githubusercontent.com"
OIDC_AUDIENCE = "sts.amazonaws.com"
# The role EC2 needs for the first spot request of an account ("Service-linked role for Spot Instance
# requests", Amazon EC2 User Guide): name AWSServiceRoleForEC2Spot, service spot.amazonaws.com.
SPOT_ROLE = "AWSServiceRoleForEC2Spot"
SPOT_SERVICE = "spot.amazonaws.com"
# The G and VT quotas and how they are read: quotas.py, shared with `gpu-runner capacity`.
ON_DEMAND_QUOTA, SPOT_QUOTA = quotas.ON_DEMAND_QUOTA, quotas.SPOT_QUOTA
STACK_OUTPUTS = (
    "TrainRoleArn",
    "ReaperRoleArn",
    "SweepRoleArn",
    "PredictRoleArn",
    "PredictLaunchRoleArn",
    "PromoteRoleArn",
    "RunnerInstanceProfile",
    "RunnerSecurityGroupId",
    "BucketName",
)
BOOTSTRAP_FIX = "make bootstrap (it deploys gpu_runner/setup/gpu-runner.yaml and prints the settings to use)"
BATCH_FIX = "make batch-up (after make bootstrap: the submit role trusts the platform commit the gpu-runner stack trusts)"
PLATFORM_FIX = "run doctor in the project's root (it reads pyproject.toml's pin) or pass --platform <owner>/<template>@<commit>"


def check_identity(target: Target, aws: Aws) -> Iterator[Outcome]:
    # The quick-giving-up client: a region that does not exist (no endpoint) fails in seconds, not minutes.
    arn = aws.lookup_client("sts", target.settings.region).get_caller_identity()["Arn"]
    yield passed("AWS credentials", f"{arn} in {target.settings.region}")


# ---------------------------------------------------------------------- the bootstrap stack and its trust
def check_stack(target: Target, aws: Aws) -> Iterator[Outcome]:
    name = stack_name(target.settings.project, target.repository)
    cfn = aws.client("cloudformation", target.settings.region)
    stack = _described_stack(cfn, name)
    if stack is None:
        yield failed("stack", f"{name} does not exist in {target.settings.region}", BOOTSTRAP_FIX)
        return
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    missing = [key for key in STACK_OUTPUTS if key not in outputs]
    status = stack["StackStatus"]
    if missing or not status.endswith("_COMPLETE") or "ROLLBACK" in status:
        yield failed(
            "stack",
            f"{name} is {status}" + (f" without output(s) {', '.join(missing)}" if missing else ""),
            BOOTSTRAP_FIX,
        )
        return
    target.outputs = outputs
    yield passed("stack", f"{name} is {status}")
    yield from _platform_trust(target, cfn, stack)


def _described_stack(cfn: Any, name: str) -> dict[str, Any] | None:
    """The stack `name` as DescribeStacks answers it, or None when CloudFormation says it does not exist."""
    try:
        stacks = cfn.describe_stacks(StackName=name)["Stacks"]
    except ClientError as error:
        if "does not exist" not in error.response.get("Error", {}).get("Message", ""):
            raise
        return None
    return stacks[0] if stacks else None


def _trusted_platform(stack: dict[str, Any]) -> str:
    parameters = {p["ParameterKey"]: p.get("ParameterValue", "") for p in stack.get("Parameters", [])}
    return f"{parameters.get('PlatformRepository', '')}@{parameters.get('PlatformCommit', '')}"


def _platform_trust(target: Target, cfn: Any, stack: dict[str, Any]) -> Iterator[Outcome]:
    """The platform commit the stack's launch roles (and, with backend: batch, the Batch stack's submit role)
    trust against the project's pin: after `make platform-update` the workflows call the new commit, which no
    role trusts until bootstrap (and batch-up) run again."""
    trusted = _trusted_platform(stack)
    if target.platform is None:
        yield failed("platform trust", f"the roles trust {trusted}; no pin to compare it with", PLATFORM_FIX)
        return
    pinned = f"{target.platform.repository}@{target.platform.commit}"
    if trusted.lower() != pinned.lower():
        yield failed(
            "platform trust",
            f"the launch roles trust {trusted}, the project pins {pinned}: its GPU workflows would be refused",
            "make bootstrap (the roles trust the platform commit pyproject.toml pins; run it after every "
            "`make platform-update`)",
        )
        return
    if target.settings.backend == "batch":
        name = batch_stack_name(target.settings.project, target.repository)
        batch = _described_stack(cfn, name)
        if batch is None:
            yield failed("platform trust", f"backend: batch, but {name} does not exist", BATCH_FIX)
            return
        if _trusted_platform(batch).lower() != pinned.lower():
            yield failed(
                "platform trust",
                f"{name}'s submit role trusts {_trusted_platform(batch)}, the project pins {pinned}: "
                "batch.yml would be refused",
                BATCH_FIX,
            )
            return
    yield passed("platform trust", f"the roles trust the pinned platform {pinned}")


def _role_name(arn: str) -> str:
    return arn.rsplit("/", 1)[-1]


def check_oidc_provider(target: Target, aws: Aws) -> Iterator[Outcome]:
    arn = target.outputs.get("OidcProviderArn", "")
    if not arn:
        yield failed("OIDC provider", "the stack names no OIDC provider", BOOTSTRAP_FIX)
        return
    iam = aws.client("iam", target.settings.region)
    try:
        provider = iam.get_open_id_connect_provider(OpenIDConnectProviderArn=arn)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "NoSuchEntity":
            raise
        yield failed(
            "OIDC provider",
            f"{arn} does not exist",
            "make bootstrap without --oidc-provider-arn creates it (or pass the ARN of the account's "
            f"{OIDC_HOST} provider)",
        )
        return
    url = provider.get("Url", "").removeprefix("https://")
    audiences = provider.get("ClientIDList", [])
    if url != OIDC_HOST or OIDC_AUDIENCE not in audiences:
        yield failed(
            "OIDC provider",
            f"{arn} is for {url or '?'} with audiences {audiences}",
            f"use the {OIDC_HOST} provider with audience {OIDC_AUDIENCE} (make bootstrap creates it)",
        )
        return
    yield passed("OIDC provider", f"{OIDC_HOST} with audience {OIDC_AUDIENCE}")


def _iam_like(pattern: str, value: str) -> bool:
    """IAM's StringLike: `*` is any run of characters, `?` exactly one; everything else is literal."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, flags=re.DOTALL) is not None


def _document(raw: Any) -> dict[str, Any]:
    # boto3 decodes the URL-encoded policy JSON; a raw string (other clients) is decoded here.
    return json.loads(unquote(raw)) if isinstance(raw, str) else dict(raw)


def _listify(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def _web_identity_statements(document: dict[str, Any], provider_arn: str) -> list[dict[str, Any]]:
    statements = document.get("Statement", [])
    statements = statements if isinstance(statements, list) else [statements]
    return [
        s
        for s in statements
        if s.get("Effect") == "Allow"
        and "sts:AssumeRoleWithWebIdentity" in _listify(s.get("Action", []))
        and provider_arn in _listify((s.get("Principal") or {}).get("Federated", []))
    ]


def trust_problems(
    document: dict[str, Any], provider_arn: str, wanted: Sequence[str], refused: Sequence[str]
) -> str:
    """Why the trust policy does not admit exactly `wanted` subjects (empty: it does).

    `wanted`: subjects GitHub puts in the token for the branches that must work; `refused`: subjects of other
    repositories, branches and events that must not get in. Both are tested against every Allow statement for
    the provider, as STS evaluates them (an audience check and a subject pattern in the same statement).
    """
    statements = _web_identity_statements(document, provider_arn)
    if not statements:
        return f"no statement lets {provider_arn} assume the role (sts:AssumeRoleWithWebIdentity)"

    def admits(statement: dict[str, Any], subject: str) -> bool:
        conditions = statement.get("Condition") or {}
        audiences = _listify((conditions.get("StringEquals") or {}).get(f"{OIDC_HOST}:aud", []))
        if OIDC_AUDIENCE not in audiences or len(audiences) != 1:
            return False
        exact = _listify((conditions.get("StringEquals") or {}).get(f"{OIDC_HOST}:sub", []))
        like = _listify((conditions.get("StringLike") or {}).get(f"{OIDC_HOST}:sub", []))
        return subject in exact or any(_iam_like(p, subject) for p in like)

    def unconditioned(statement: dict[str, Any]) -> bool:
        conditions = statement.get("Condition") or {}
        has_sub = any(
            f"{OIDC_HOST}:sub" in (conditions.get(op) or {}) for op in ("StringEquals", "StringLike")
        )
        audience = (conditions.get("StringEquals") or {}).get(f"{OIDC_HOST}:aud")
        return not has_sub or not audience

    if any(unconditioned(s) for s in statements):
        return (
            f"a statement lacks the {OIDC_HOST}:aud or :sub condition, so any GitHub repository may assume it"
        )
    missing = [s for s in wanted if not any(admits(st, s) for st in statements)]
    if missing:
        return f"does not trust {missing[0]}"
    extra = [s for s in refused if any(admits(st, s) for st in statements)]
    if extra:
        return f"also trusts {extra[0]} (too broad)"
    return ""


def _subjects(repository: str, ref: str, workflow: str, workflow_ref: str, source: str = "") -> str:
    """The `sub` GitHub writes once bootstrap set the template repo, context, job_workflow_ref (oidc_subject.py);
    `source`: the repository the called workflow lives in (default: `repository`'s own)."""
    workflows = f"{source or repository}/.github/workflows"
    return f"repo:{repository}:ref:refs/heads/{ref}:job_workflow_ref:{workflows}/{workflow}@{workflow_ref}"


def _other_commit(commit: str) -> str:
    """A full SHA that is not `commit`: the platform at another commit (an older release, a fork's commit)."""
    return ("1" if commit == "0" * 40 else "0") * 40


def check_role_trust(target: Target, aws: Aws) -> Iterator[Outcome]:
    if target.platform is None:
        yield failed(
            "role trust", "no platform commit to check the launch roles' trust against", PLATFORM_FIX
        )
        return
    provider = target.outputs.get("OidcProviderArn", "")
    owner, _, name = target.repository.partition("/")
    prefix, main = target.train_branch_prefix, target.default_branch
    # The settings' sweep prefix (its one source; the stack was deployed with it).
    sweep = target.settings.sweep_branch_prefix
    at_main = f"refs/heads/{main}"
    platform, commit = target.platform.repository, target.platform.commit
    platform_owner, _, platform_name = platform.partition("/")

    def start(
        repository: str, ref: str, workflow_ref: str = commit, source: str = platform, job: str = "start"
    ) -> str:
        """The platform's launch workflow (at the pinned commit unless another is named), called from `ref`."""
        return _subjects(repository, ref, f"gpu-runner-{job}.yml", workflow_ref, source)

    def own_copy(ref: str, workflow_ref: str) -> str:
        """The project's own gpu-runner-start.yml (before the platform held it, the trusted one at the default
        branch): never a launch role now."""
        return _subjects(target.repository, ref, "gpu-runner-start.yml", workflow_ref)

    def impostors(ref: str) -> list[str]:
        """The launch workflow as the trust must refuse it for a run of `ref`: the platform at another commit, a
        fork of the platform at the pinned one, the project's own copies at the default branch and at `ref`."""
        return [
            start(target.repository, ref, _other_commit(commit)),
            start(target.repository, ref, source=f"{platform_owner}-fork/{platform_name}"),
            own_copy(ref, at_main),
            own_copy(ref, f"refs/heads/{ref}"),
        ]

    def own(ref: str, workflow: str) -> str:
        """A job of the branch's own workflow file (job_workflow_ref names the file at the run's ref)."""
        return _subjects(target.repository, ref, workflow, f"refs/heads/{ref}")

    def in_production(workflow: str, workflow_ref: str = at_main, environment: str = "production") -> str:
        """A job that names an environment: its context is environment:<name>, not the ref."""
        workflows = f"{target.repository}/.github/workflows"
        return f"repo:{target.repository}:environment:{environment}:job_workflow_ref:{workflows}/{workflow}@{workflow_ref}"

    foreign = [
        start(f"{owner}/{name}-fork", f"{prefix}x"),
        start(f"{owner}-other/{name}", f"{prefix}x"),
        f"repo:{target.repository}:pull_request",
        f"repo:{target.repository}:environment:production",
        # GitHub's default `sub`: the template was never set (or was reset).
        f"repo:{target.repository}:ref:refs/heads/{prefix}x",
        f"repo:{target.repository}:ref:refs/heads/{sweep}x",
    ]
    roles = [
        (
            "train role trust",
            "TrainRoleArn",
            [
                start(target.repository, f"{branches}{b}", job=job)
                for branches in (prefix, sweep)
                for b in ("first", "exp/lr-0.01")
                for job in ("start", "stop")
            ],
            [
                *foreign,
                # A branch's own workflow, or a launch workflow other than the pinned platform's: never the role.
                own(f"{prefix}x", "train.yml"),
                own(f"{sweep}x", "sweep.yml"),
                *impostors(f"{prefix}x"),
                *impostors(f"{sweep}x"),
                *([] if main.startswith((prefix, sweep)) else [start(target.repository, main)]),
            ],
            f"branches {prefix}* and {sweep}* (through {platform}'s gpu-runner-start/stop.yml at {commit[:12]})",
        ),
        (
            "reaper role trust",
            "ReaperRoleArn",
            [_subjects(target.repository, main, "reap.yml", at_main)],
            [
                *foreign,
                own(f"{main}-x", "reap.yml"),
                own(f"{prefix}x", "reap.yml"),
                own(f"{sweep}x", "reap.yml"),
            ],
            f"branch {main} (reap.yml)",
        ),
        (
            "sweep role trust",
            "SweepRoleArn",
            [own(f"{sweep}{b}", "sweep.yml") for b in ("first", "exp/lr-0.01")],
            [
                *foreign,
                f"repo:{target.repository}:pull_request:job_workflow_ref:{target.repository}/.github/workflows/"
                f"sweep.yml@refs/pull/1/merge",
                # sweep.yml on a train branch or the default branch, another workflow on a sweep branch, and the
                # launch workflows' subjects: none of them may touch the studies.
                own(f"{prefix}x", "sweep.yml"),
                *([] if main.startswith(sweep) else [own(main, "sweep.yml")]),
                own(f"{sweep}x", "train.yml"),
                own(f"{sweep}x", "ci.yml"),
                start(target.repository, f"{sweep}x"),
                _subjects(target.repository, f"{sweep}x", "sweep.yml", at_main),
            ],
            f"branches {sweep}* (their sweep.yml)",
        ),
        (
            # Issue 16: predict.yml's own jobs (resolve, the cpu device's predict), default branch only.
            "predict role trust",
            "PredictRoleArn",
            [own(main, "predict.yml")],
            [
                *foreign,
                f"repo:{target.repository}:ref:refs/heads/{main}",
                f"repo:{target.repository}:pull_request:job_workflow_ref:{target.repository}/.github/workflows/"
                "predict.yml@refs/pull/1/merge",
                # predict.yml of another branch, or the default branch's dispatched on another branch.
                own(f"{prefix}x", "predict.yml"),
                own(f"{sweep}x", "predict.yml"),
                own(f"{main}-x", "predict.yml"),
                _subjects(target.repository, f"{main}-x", "predict.yml", at_main),
                # The default branch's other workflows, and the launch workflows on it (the predict launch role's).
                own(main, "train.yml"),
                own(main, "reap.yml"),
                start(target.repository, main),
            ],
            f"branch {main} (predict.yml)",
        ),
        (
            # The gpu device's start and stop jobs of predict.yml: the launch workflows on the default branch.
            "predict launch role trust",
            "PredictLaunchRoleArn",
            [start(target.repository, main, job=job) for job in ("start", "stop")],
            [
                *foreign,
                f"repo:{target.repository}:ref:refs/heads/{main}",
                f"repo:{target.repository}:pull_request:job_workflow_ref:{platform}/.github/workflows/"
                f"gpu-runner-start.yml@{commit}",
                # The train and sweep branches' launches are the train role's; a branch's own copy nobody's.
                *([] if main.startswith((prefix, sweep)) else [start(target.repository, f"{prefix}x")]),
                *([] if main.startswith((prefix, sweep)) else [start(target.repository, f"{sweep}x")]),
                start(target.repository, f"{main}-x"),
                *impostors(main),
                own(main, "predict.yml"),
                own(main, "train.yml"),
            ],
            f"branch {main} (through {platform}'s gpu-runner-start/stop.yml at {commit[:12]})",
        ),
        (
            # Issue 30: promote.yml reads the held-out set; its job names the environment `production`, whose
            # context replaces the ref in `sub` (GitHub docs, "OpenID Connect reference").
            "promote role trust",
            "PromoteRoleArn",
            [in_production("promote.yml")],
            [
                *foreign,
                in_production("promote.yml", f"refs/heads/{main}-x"),
                in_production("predict.yml"),
                in_production("promote.yml", environment="staging"),
                own(main, "promote.yml"),
                f"repo:{target.repository}:pull_request:job_workflow_ref:{target.repository}/.github/workflows/"
                "promote.yml@refs/pull/1/merge",
            ],
            f"environment production (promote.yml of branch {main})",
        ),
    ]
    iam = aws.client("iam", target.settings.region)
    for check, output, wanted, refused, what in roles:
        arn = target.outputs[output]
        try:
            role = iam.get_role(RoleName=_role_name(arn))["Role"]
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "NoSuchEntity":
                raise
            yield failed(check, f"{arn} does not exist", BOOTSTRAP_FIX)
            continue
        problem = trust_problems(_document(role["AssumeRolePolicyDocument"]), provider, wanted, refused)
        if problem:
            yield failed(
                check,
                f"{_role_name(arn)} {problem}",
                f"make bootstrap BOOTSTRAP_ARGS='--default-branch {main}' restores the template's trust "
                f"(repository {target.repository}, train branches {prefix}*, sweep branches {sweep}*, the "
                f"platform's workflows at the pinned {commit[:12]})",
            )
        else:
            yield passed(check, f"{_role_name(arn)} trusts {target.repository} {what} only")


# ---------------------------------------------------------------------- spot, quotas, offerings
def check_spot_role(target: Target, aws: Aws) -> Iterator[Outcome]:
    if not target.settings.use_spot:
        yield passed("spot service-linked role", "not needed (use_spot: false)")
        return
    try:
        aws.client("iam", target.settings.region).get_role(RoleName=SPOT_ROLE)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "NoSuchEntity":
            raise
        yield failed(
            "spot service-linked role",
            f"{SPOT_ROLE} does not exist, so the first spot launch is refused",
            f"aws iam create-service-linked-role --aws-service-name {SPOT_SERVICE} (once per account)",
        )
        return
    yield passed("spot service-linked role", f"{SPOT_ROLE} exists")


def _vcpus(target: Target, aws: Aws, types: Sequence[str]) -> dict[str, int]:
    return quotas.vcpus(aws.client("ec2", target.settings.region), types)


def _quota_value(target: Target, aws: Aws, code: str) -> float:
    return quotas.quota_value(aws.client("service-quotas", target.settings.region), code)


def check_quotas(target: Target, aws: Aws) -> Iterator[Outcome]:
    gpu_types = [t for t in target.settings.instance_types if quotas.counted(t)]
    if not gpu_types:
        yield passed("vCPU quota", "no G or VT instance type configured (other families are not checked)")
        return
    reason = ""
    try:
        vcpus = _vcpus(target, aws, gpu_types)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "InvalidInstanceType":
            raise
        vcpus, reason = {}, error.response["Error"].get("Message", "")
    unknown = [t for t in gpu_types if t not in vcpus]
    if unknown:
        yield failed(
            "vCPU quota",
            f"EC2 in {target.settings.region} refused instance_types {', '.join(gpu_types)}: {reason}",
            "fix instance_types in configs/gpu-runner.yaml (spelling, e.g. g4dn.xlarge)",
        )
        return
    largest = max(gpu_types, key=lambda t: vcpus[t])
    needed = vcpus[largest]
    others = [t for t in target.settings.instance_types if t not in gpu_types]
    unchecked = f" ({', '.join(others)}: other families' quotas are not checked)" if others else ""
    read = [ON_DEMAND_QUOTA, *([SPOT_QUOTA] if target.settings.use_spot else [])]
    for code, title in read:
        value = _quota_value(target, aws, code)
        check = f"vCPU quota {code}"
        if value < needed:
            yield failed(
                check,
                f"'{title}' is {value:g} vCPUs, {largest} needs {needed}",
                quotas.increase_command(code, max(needed, 8), target.settings.region),
            )
        else:
            yield passed(
                check, f"'{title}' is {value:g} vCPUs, the largest type {largest} needs {needed}{unchecked}"
            )


def _offered(target: Target, aws: Aws, zones: Iterable[str] = ()) -> dict[str, frozenset[str]]:
    """Instance type -> the zones (of `zones`, or of the whole region) offering it: launch's own look-up."""
    ec2 = aws.client("ec2", target.settings.region)
    return offered_types(ec2, target.settings.instance_types, zones)


def check_offerings(target: Target, aws: Aws) -> Iterator[Outcome]:
    settings = target.settings
    # A type is offered in a region exactly when some zone of it offers the type.
    region_offers = _offered(target, aws)
    missing = [t for t in settings.instance_types if t not in region_offers]
    if missing:
        yield failed(
            "instance types offered",
            f"{', '.join(missing)} not offered in {settings.region}",
            "remove them from instance_types in configs/gpu-runner.yaml, or choose another region",
        )
        return
    if not settings.subnet_ids:
        yield passed(
            "instance types offered",
            f"{', '.join(settings.instance_types)} in {settings.region} (no subnet_ids: EC2 picks the zone)",
        )
        return
    ec2 = aws.client("ec2", settings.region)
    try:
        subnets = ec2.describe_subnets(SubnetIds=list(settings.subnet_ids))["Subnets"]
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "InvalidSubnetID.NotFound":
            raise
        yield failed(
            "instance types offered",
            f"subnet_ids: {error.response['Error'].get('Message', 'a subnet does not exist')} in {settings.region}",
            "list subnets of this region's VPC in configs/gpu-runner.yaml subnet_ids",
        )
        return
    zones = {s["SubnetId"]: s["AvailabilityZone"] for s in subnets}
    zone_offers = _offered(target, aws, zones.values())
    gaps = [
        f"{t} in {zones[s]} ({s})"
        for s in settings.subnet_ids
        for t in settings.instance_types
        if zones[s] not in zone_offers.get(t, frozenset())
    ]
    if gaps:
        yield failed(
            "instance types offered",
            f"not offered: {', '.join(gaps)}",
            "use subnets in zones that offer every instance type, or drop the type (launch skips such pools)",
        )
        return
    yield passed(
        "instance types offered",
        f"{', '.join(settings.instance_types)} in {settings.region} and zones {', '.join(sorted(set(zones.values())))}",
    )


# ---------------------------------------------------------------------- image, network, storage, profile
def check_ami(target: Target, aws: Aws) -> Iterator[Outcome]:
    settings = target.settings
    source = f"ami_id {settings.ami_id}" if settings.ami_id else f"parameter {settings.ami_parameter}"
    image_id = settings.ami_id
    if not image_id:
        try:
            image_id = aws.client("ssm", settings.region).get_parameter(Name=settings.ami_parameter)[
                "Parameter"
            ]["Value"]
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ParameterNotFound":
                raise
            yield failed(
                "AMI",
                f"{source} does not exist in {settings.region}",
                "set ami_parameter (or ami_id) in configs/gpu-runner.yaml to an image of this region",
            )
            return
    images = aws.client("ec2", settings.region).describe_images(
        Filters=[{"Name": "image-id", "Values": [image_id]}]
    )["Images"]
    if not images:
        yield failed(
            "AMI",
            f"{source} names {image_id}, which is not visible in {settings.region}",
            "set ami_parameter (or ami_id) in configs/gpu-runner.yaml to an image of this region",
        )
        return
    image = images[0]
    root = next(
        (
            m
            for m in image.get("BlockDeviceMappings", [])
            if m.get("DeviceName") == image.get("RootDeviceName")
        ),
        None,
    )
    size = int(((root or {}).get("Ebs") or {}).get("VolumeSize", 0))
    if size > settings.root_volume_gb:
        yield failed(
            "AMI",
            f"{image_id}'s root snapshot is {size} GB, larger than root_volume_gb {settings.root_volume_gb}",
            f"set root_volume_gb: {size} (or more) in configs/gpu-runner.yaml",
        )
        return
    yield passed(
        "AMI",
        f"{source} -> {image_id}, root snapshot {size} GB fits root_volume_gb {settings.root_volume_gb}",
    )


def check_security_groups(target: Target, aws: Aws) -> Iterator[Outcome]:
    groups = list(target.settings.security_group_ids)
    stack_group = target.outputs.get("RunnerSecurityGroupId", "")
    if not groups:
        yield failed(
            "security group",
            "security_group_ids is empty, so instances get the VPC's default group (it admits traffic from its "
            "members)",
            f"set security_group_ids: [{stack_group or '<RunnerSecurityGroupId of the stack>'}] in "
            "configs/gpu-runner.yaml",
        )
        return
    ec2 = aws.client("ec2", target.settings.region)
    try:
        found = ec2.describe_security_groups(GroupIds=groups)["SecurityGroups"]
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "InvalidGroup.NotFound":
            raise
        yield failed(
            "security group",
            f"{error.response['Error'].get('Message', 'a group does not exist')} in {target.settings.region}",
            f"set security_group_ids: [{stack_group or '<RunnerSecurityGroupId of the stack>'}]",
        )
        return
    open_groups = [g["GroupId"] for g in found if g.get("IpPermissions")]
    if open_groups:
        yield failed(
            "security group",
            f"{', '.join(open_groups)} has inbound rules",
            "remove every inbound rule (the runner only connects out), or use the stack's group "
            f"{stack_group or ''}".rstrip(),
        )
        return
    yield passed("security group", f"{', '.join(groups)} has no inbound rule")


def check_bucket(target: Target, aws: Aws) -> Iterator[Outcome]:
    bucket = target.outputs["BucketName"]
    try:
        aws.client("s3", target.settings.region).head_bucket(Bucket=bucket)
    except ClientError as error:
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if status == 404:
            yield failed("bucket", f"s3://{bucket} does not exist", BOOTSTRAP_FIX)
            return
        if status == 403:
            yield failed(
                "bucket",
                f"s3://{bucket}: access denied",
                "run doctor with the credentials make bootstrap used",
            )
            return
        raise
    yield passed("bucket", f"s3://{bucket} exists")


def check_instance_profile(target: Target, aws: Aws) -> Iterator[Outcome]:
    profile = target.settings.instance_profile
    stack_profile = target.outputs.get("RunnerInstanceProfile", "")
    if not profile:
        yield failed(
            "instance profile",
            "instance_profile is empty, so the instance cannot read its runner config",
            f"set instance_profile: {stack_profile or '<RunnerInstanceProfile of the stack>'} in configs/gpu-runner.yaml",
        )
        return
    name = profile.rsplit("/", 1)[-1]  # a name or an ARN
    try:
        found = aws.client("iam", target.settings.region).get_instance_profile(InstanceProfileName=name)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "NoSuchEntity":
            raise
        yield failed(
            "instance profile", f"{profile} does not exist", f"set instance_profile: {stack_profile}"
        )
        return
    roles = found["InstanceProfile"].get("Roles", [])
    if not roles:
        yield failed("instance profile", f"{profile} has no role", BOOTSTRAP_FIX)
        return
    yield passed("instance profile", f"{name} with role {roles[0]['RoleName']}")


def _needs_stack(check: Check) -> Check:
    """Checks that read the stack's outputs say so, instead of a KeyError, when the stack check failed."""

    @functools.wraps(check)
    def run(target: Target, aws: Aws) -> Iterator[Outcome]:
        if not target.outputs:
            return iter(())  # the stack line already said what to fix
        return iter(check(target, aws))

    return run


CHECKS: list[tuple[str, Check]] = [
    ("stack", check_stack),
    ("OIDC provider", _needs_stack(check_oidc_provider)),
    ("role trust", _needs_stack(check_role_trust)),
    ("spot service-linked role", check_spot_role),
    ("vCPU quota", check_quotas),
    ("instance types offered", check_offerings),
    ("AMI", check_ami),
    ("security group", check_security_groups),
    ("bucket", _needs_stack(check_bucket)),
    ("instance profile", check_instance_profile),
]
