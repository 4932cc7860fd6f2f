"""`gpu-runner bootstrap`: deploy gpu_runner/setup/gpu-runner.yaml with CloudFormation, then say what to set on GitHub.

Project, region, SSM prefix and instance types come from the settings file, so the roles are scoped to exactly
what launch, teardown and the reaper use. Re-running it updates the stack (or reports it up to date).
"""

from __future__ import annotations

import logging
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError, WaiterError

from gpu_runner.core import naming
from gpu_runner.core.errors import RunnerError
from gpu_runner.core.github import DEFAULT_BASE_URL
from gpu_runner.core.settings import BRANCH_PREFIX, BUCKET, Settings, prefixes_overlap
from gpu_runner.core.stack_names import REPOSITORY, stack_name
from gpu_runner.pin.project_pin import COMMIT
from gpu_runner.setup import TEMPLATE, lambda_zip, trust_size

log = logging.getLogger(__name__)

# The roles get generated names, so CAPABILITY_IAM suffices (no CAPABILITY_NAMED_IAM).
CAPABILITIES = ["CAPABILITY_IAM"]
OIDC_ARN = re.compile(r"arn:aws[a-z-]*:iam::\d{12}:oidc-provider/token\.actions\.githubusercontent\.com")
# What aws:PrincipalArn holds for a caller: the root, a user or a role (for a role's sessions, the role's ARN with its
# path: IAM User Guide, "AWS global condition context keys"). IAM names: [\w+=,.@-] (IAM API Reference, CreateRole).
PRINCIPAL_ARN = re.compile(r"arn:aws[a-z-]*:iam::\d{12}:(?:root|(?:user|role)(?:/[\w+=,.@-]+)+)")
ASSUMED_ROLE_ARN = re.compile(r"arn:(aws[a-z-]*):sts::(\d{12}):assumed-role/([\w+=,.@-]+)/[^/]+")
FAILED_STATES = ("CREATE_FAILED", "UPDATE_FAILED", "DELETE_FAILED")
NO_UPDATES = "No updates are to be performed"
HINTS = {
    "BucketAlreadyExists": " (bucket names are global: set another as bucket in configs/gpu-runner.yaml, without --bucket)",
    "InsufficientCapabilitiesException": " (the template changed to name its roles: add CAPABILITY_NAMED_IAM)",
    "AccessDenied": " (bootstrap needs credentials that may create IAM roles, S3 buckets and EC2 security groups)",
}


class BootstrapError(RunnerError):
    """The stack could not be deployed; the message names the input or the failed resource."""


@dataclass(frozen=True)
class StackInputs:
    repository: str  # owner/name
    bucket: str
    # No defaults: the settings file is the prefixes' one source (bootstrap fills them from there).
    train_branch_prefix: str
    sweep_branch_prefix: str
    default_branch: str = "main"
    # The platform's reusable workflows the launch roles trust: owner/name and the full commit SHA the project pins.
    platform_repository: str = ""
    platform_commit: str = ""
    owner_id: str = ""
    repository_id: str = ""
    oidc_provider_arn: str = ""
    vpc_id: str = ""
    checkpoint_retention_days: int = 30
    # The only principal the GitHub credential's key lets encrypt (credential_writer: bootstrap's caller).
    credential_writer_arn: str = ""
    # Filled in by bootstrap (bucket_access.py): who besides the stack's roles may use the objects, and the VPC's
    # S3 gateway endpoint that binds the runner role's S3 requests to the VPC.
    bucket_administrators: str = ""
    s3_gateway_endpoint: str = "none"
    s3_endpoint_route_tables: str = ""

    def __post_init__(self) -> None:
        problems = []
        if not REPOSITORY.fullmatch(self.repository):
            problems.append(f"--repository: '{self.repository}' is not owner/name (e.g. your-org/ml-project)")
        if not BUCKET.fullmatch(self.bucket) or ".." in self.bucket:
            problems.append(
                f"--bucket: '{self.bucket}' is not a valid S3 bucket name (3-63 lowercase letters, digits, "
                "dots and dashes); set bucket in configs/gpu-runner.yaml"
            )
        for flag, value in (
            ("--branch-prefix", self.train_branch_prefix),
            ("--sweep-branch-prefix", self.sweep_branch_prefix),
            ("--default-branch", self.default_branch),
        ):
            if not BRANCH_PREFIX.fullmatch(value):
                problems.append(f"{flag}: '{value}' may only hold letters, digits and . _ / -")
        if not REPOSITORY.fullmatch(self.platform_repository) or not COMMIT.fullmatch(self.platform_commit):
            problems.append(
                f"--platform: '{self.platform_repository}@{self.platform_commit}' is not "
                "<owner>/<template>@<commit> with a full commit SHA; leave it out to read pyproject.toml's pin"
            )
        if prefixes_overlap(self.train_branch_prefix, self.sweep_branch_prefix):
            problems.append(
                f"--sweep-branch-prefix: '{self.sweep_branch_prefix}' overlaps the train branch prefix "
                f"'{self.train_branch_prefix}' (one starts with the other); set sweep_branch_prefix in "
                "configs/gpu-runner.yaml to a prefix of its own"
            )
        for flag, value in (
            ("--branch-prefix", self.train_branch_prefix),
            ("--sweep-branch-prefix", self.sweep_branch_prefix),
        ):
            if self.default_branch.startswith(value):
                problems.append(
                    f"{flag}: the default branch '{self.default_branch}' starts with '{value}', so the roles would "
                    "trust every push to it; use a prefix the default branch is outside of"
                )
        for flag, value in (("--owner-id", self.owner_id), ("--repository-id", self.repository_id)):
            if value and not value.isdigit():
                problems.append(f"{flag}: '{value}' must be GitHub's numeric id (gh api repos/OWNER/NAME)")
        if bool(self.owner_id) != bool(self.repository_id):
            problems.append("--owner-id/--repository-id: give both numeric ids or neither")
        if self.oidc_provider_arn and not OIDC_ARN.fullmatch(self.oidc_provider_arn):
            problems.append(
                f"--oidc-provider-arn: '{self.oidc_provider_arn}' is not the ARN of a "
                "token.actions.githubusercontent.com OIDC provider"
            )
        if self.vpc_id and not re.fullmatch(r"vpc-[0-9a-f]{8,17}", self.vpc_id):
            problems.append(f"--vpc-id: '{self.vpc_id}' is not a VPC id like vpc-0123456789abcdef0")
        if self.checkpoint_retention_days < 1:
            problems.append("--checkpoint-retention-days: must be at least 1")
        if self.credential_writer_arn and not PRINCIPAL_ARN.fullmatch(self.credential_writer_arn):
            problems.append(
                f"--credential-writer-arn: '{self.credential_writer_arn}' is not the ARN of an IAM role or user "
                "(arn:aws:iam::<account>:role/<path/name>); give the role or user that runs bootstrap"
            )
        if problems:
            raise BootstrapError("invalid bootstrap input:\n" + "\n".join(f"  {p}" for p in problems))


@dataclass(frozen=True)
class Identity:
    """What bootstrap asks to name its caller (credential_writer), and whether this run stores the credential."""

    sts: Any
    iam: Any
    storing: bool


def credential_writer(sts: Any, iam: Any, *, storing: bool) -> str:
    """Who runs bootstrap, as aws:PrincipalArn will name it when they store the GitHub credential: a user's (or the
    root's) ARN as GetCallerIdentity gives it; for a role session (arn:<partition>:sts::<account>:assumed-role/<role>/
    <session>) the role's own ARN, path included, which only IAM knows (GetRole). A caller no key policy can name
    (a federated user) is refused when this run stores the credential, else nobody may store it ("")."""
    arn = sts.get_caller_identity()["Arn"]
    if PRINCIPAL_ARN.fullmatch(arn):
        return arn
    assumed = ASSUMED_ROLE_ARN.fullmatch(arn)
    if assumed is None:
        if not storing:
            log.info(
                f"# bootstrap runs as {arn}, which no key policy can name: nobody may store the GitHub credential "
                "until bootstrap runs again as an IAM role or user (or with --credential-writer-arn)"
            )
            return ""
        raise BootstrapError(
            f"--credential-writer-arn: bootstrap runs as {arn}, which no key policy can name; pass the ARN of the "
            "IAM role or user that stores the GitHub credential"
        )
    try:
        return iam.get_role(RoleName=assumed[3])["Role"]["Arn"]
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "")
        raise BootstrapError(
            f"--credential-writer-arn: could not read role {assumed[3]} ({code}; its ARN holds its path): pass "
            "the role's ARN, arn:aws:iam::<account>:role/<path/name>"
        ) from None


def default_vpc(ec2: Any, region: str) -> str:
    """The region's default VPC: the train role may launch only into the stack's VPC, so the stack must name it
    (an instance without a subnet goes to a default subnet of the default VPC, EC2 API Reference, RunInstances)."""
    vpcs = ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}]).get("Vpcs", [])
    if not vpcs:
        raise BootstrapError(f"--vpc-id: {region} has no default VPC; pass the VPC of your runner subnets")
    return str(vpcs[0]["VpcId"])


def prefix_problem(ssm_prefix: str, repository: str) -> str | None:
    """The SSM prefix must end with the repository (/<owner>/<name>): a prefix shared by two repositories would
    let each one's roles and reaper reach the other's runner configs."""
    tail = "/" + repository.lower()
    if ssm_prefix.rstrip("/").lower().endswith(tail) and ssm_prefix.rstrip("/").lower() != tail:
        return None
    return (
        f"ssm_prefix: '{ssm_prefix}' does not end with the repository /{repository}, so another repository with "
        f"the same project slug would share it; set ssm_prefix: /gpu-runner/{repository} in the settings file "
        "(launch, the instance and the reaper all read it there)"
    )


# The stack parameters that say which repository its roles trust, and the flag that sets each.
TRUST_PARAMETERS = {
    "GitHubOwner": "--repository",
    "GitHubRepository": "--repository",
    "GitHubOwnerId": "--owner-id",
    "GitHubRepositoryId": "--repository-id",
}


def trust_conflicts(existing: Mapping[str, str], wanted: Mapping[str, str]) -> list[str]:
    """Where an existing stack trusts another repository than the one asked for: names compared without case
    (GitHub's are case-insensitive); an id the stack holds must be given again, unchanged (an empty id would
    widen the trust to any repository that takes the name, a new one would move it)."""
    conflicts = []
    for key, flag in TRUST_PARAMETERS.items():
        have, want = existing.get(key, ""), wanted.get(key, "")
        if key.endswith("Id") and not have:
            continue  # the stack trusts any id: giving one now narrows it
        if have.lower() != want.lower():
            conflicts.append(f"{key} is '{have}' ({flag} gave '{want}')")
    return conflicts


def stack_parameters(
    settings: Settings, inputs: StackInputs, code: lambda_zip.UploadedCode | None = None
) -> list[dict[str, str]]:
    """`code`: the reaper Lambda's package in the bucket; None deploys the stack without the Lambda (first run)."""
    owner, _, name = inputs.repository.partition("/")
    values = {
        "Project": settings.project,
        "GitHubOwner": owner,
        "GitHubRepository": name,
        "GitHubOwnerId": inputs.owner_id,
        "GitHubRepositoryId": inputs.repository_id,
        "TrainBranchPrefix": inputs.train_branch_prefix,
        "SweepBranchPrefix": inputs.sweep_branch_prefix,
        "DefaultBranch": inputs.default_branch,
        "PlatformRepository": inputs.platform_repository,
        "PlatformCommit": inputs.platform_commit,
        "BucketName": inputs.bucket,
        "CheckpointRetentionDays": str(inputs.checkpoint_retention_days),
        "SsmPrefix": settings.ssm_prefix.rstrip("/"),
        "JitConfigKeyAlias": naming.jit_config_key_alias(settings.ssm_prefix),
        "GitHubCredentialKeyAlias": naming.github_credential_key_alias(settings.ssm_prefix),
        "CredentialWriterArn": inputs.credential_writer_arn,
        "AllowedInstanceTypes": ",".join(settings.instance_types),
        "ExistingOidcProviderArn": inputs.oidc_provider_arn,
        "VpcId": inputs.vpc_id,
        "ReaperCodeKey": code.key if code else "",
        "ReaperCodeVersion": code.version if code else "",
        "MaxRuntimeMinutes": str(settings.max_runtime_minutes),
        "IdleTimeoutMinutes": str(settings.idle_timeout_minutes),
        "WaitTimeoutSeconds": str(settings.wait_timeout_seconds),
        "ReapGraceMinutes": str(settings.reap_grace_minutes),
        "BucketAdministrators": inputs.bucket_administrators,
        "S3GatewayEndpoint": inputs.s3_gateway_endpoint,
        "S3EndpointRouteTableIds": inputs.s3_endpoint_route_tables,
    }
    return [{"ParameterKey": key, "ParameterValue": value} for key, value in values.items()]


def _refuse_long_trust(body: str, parameters: list[dict[str, str]], region: str, quotas: Any) -> None:
    """A trust policy over IAM's length quota fails the stack half-way (trust_size.py): refused before any deploy,
    naming the quota increase. The quota is asked only when a policy is longer than the default."""
    given = {p["ParameterKey"]: p["ParameterValue"] for p in parameters}
    lengths = trust_size.trust_lengths(body, given, region)
    if max(lengths.values(), default=0) <= trust_size.DEFAULT_QUOTA:
        return
    quota: float = trust_size.DEFAULT_QUOTA
    if quotas is not None:
        try:
            quota = trust_size.applied_quota(quotas)
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            raise BootstrapError(
                f"the roles' trust policies would be up to {max(lengths.values())} characters, over IAM's default "
                f"'Role trust policy length' quota ({trust_size.DEFAULT_QUOTA}), and its value in this account "
                f"could not be read ({code}; bootstrap needs servicequotas:GetServiceQuota in "
                f"{trust_size.QUOTA_REGION})"
            ) from None
    problems = trust_size.too_long(lengths, quota)
    if problems:
        raise BootstrapError("invalid bootstrap input:\n" + "\n".join(f"  {p}" for p in problems))


def _existing_parameters(cfn: Any, name: str) -> dict[str, str]:
    """The parameters of the stack as deployed ({} when there is none yet)."""
    try:
        stacks = cfn.describe_stacks(StackName=name)["Stacks"]
    except ClientError as error:
        if "does not exist" in error.response.get("Error", {}).get("Message", ""):
            return {}
        raise
    return {p["ParameterKey"]: p.get("ParameterValue", "") for p in stacks[0].get("Parameters", [])}


def _bucket_access(
    settings: Settings, inputs: StackInputs, existing: Mapping[str, str], *, ec2: Any, sts: Any, iam: Any
) -> StackInputs:
    """Who besides the stack's roles may use the bucket's objects (the administrators it has, and the caller) and
    the VPC's S3 gateway endpoint (bucket_access.py)."""
    from gpu_runner.setup import bucket_access

    caller = bucket_access.caller_principal(sts, iam) if sts is not None else None
    admins = bucket_access.administrators(existing.get("BucketAdministrators", ""), caller)
    endpoint, tables = inputs.s3_gateway_endpoint, inputs.s3_endpoint_route_tables
    if ec2 is not None and inputs.vpc_id:
        endpoint, tables = bucket_access.s3_endpoint_plan(
            ec2, settings.region, inputs.vpc_id, existing.get("S3GatewayEndpoint", "none")
        )
    return replace(inputs, bucket_administrators=admins, s3_gateway_endpoint=endpoint,
                   s3_endpoint_route_tables=tables)  # fmt: skip


def _refuse_foreign_stack(cfn: Any, name: str, repository: str, parameters: list[dict[str, str]]) -> None:
    """An update must never move a stack's trust to another repository (or widen it): refuse, naming the fix."""
    try:
        stacks = cfn.describe_stacks(StackName=name)["Stacks"]
    except ClientError as error:
        if "does not exist" in error.response.get("Error", {}).get("Message", ""):
            return
        raise
    existing = {p["ParameterKey"]: p.get("ParameterValue", "") for p in stacks[0].get("Parameters", [])}
    wanted = {p["ParameterKey"]: p["ParameterValue"] for p in parameters}
    conflicts = trust_conflicts(existing, wanted)
    if conflicts:
        trusted = f"{existing.get('GitHubOwner', '?')}/{existing.get('GitHubRepository', '?')}"
        raise BootstrapError(
            f"stack {name} trusts another repository ({trusted}) than {repository}: "
            + "; ".join(conflicts)
            + ". Pass the values it was created with; for another repository run bootstrap from that "
            f"repository's project (its name gives it its own stack), or delete this stack first with "
            f"`aws cloudformation delete-stack --stack-name {name}` (the bucket is kept)"
        )


def stack_status(cfn: Any, name: str) -> str | None:
    try:
        stacks = cfn.describe_stacks(StackName=name)["Stacks"]
    except ClientError as error:
        if "does not exist" in error.response.get("Error", {}).get("Message", ""):
            return None
        raise
    return stacks[0]["StackStatus"] if stacks else None


def _failure_reasons(cfn: Any, name: str) -> list[str]:
    events = cfn.describe_stack_events(StackName=name).get("StackEvents", [])
    return [
        f"{e['LogicalResourceId']}: {e.get('ResourceStatusReason', e['ResourceStatus'])}"
        for e in events
        if e.get("ResourceStatus") in FAILED_STATES and e["LogicalResourceId"] != name
    ]


def deploy(
    cfn: Any,
    name: str,
    template_body: str,
    parameters: list[dict[str, str]],
    *,
    delay_seconds: int = 10,
) -> dict[str, str]:
    """Create or update the stack and wait for it; returns its outputs."""
    status = stack_status(cfn, name)
    if status == "ROLLBACK_COMPLETE":
        raise BootstrapError(
            f"stack {name} is in ROLLBACK_COMPLETE (its first creation failed and cannot be updated): delete it "
            f"with `aws cloudformation delete-stack --stack-name {name}` (the bucket is kept) and run bootstrap again"
        )
    common = {"StackName": name, "TemplateBody": template_body, "Parameters": parameters}
    try:
        if status is None:
            log.info(f"creating stack {name}")
            cfn.create_stack(**common, Capabilities=CAPABILITIES, OnFailure="ROLLBACK")
            waiter = "stack_create_complete"
        else:
            log.info(f"updating stack {name} ({status})")
            cfn.update_stack(**common, Capabilities=CAPABILITIES)
            waiter = "stack_update_complete"
    except ClientError as error:
        message = error.response.get("Error", {}).get("Message", "")
        if NO_UPDATES in message:
            log.info(f"stack {name} is up to date")
            return stack_outputs(cfn, name)
        code = error.response.get("Error", {}).get("Code", "")
        hint = HINTS.get(code, "")
        raise BootstrapError(f"CloudFormation refused stack {name}: {code}: {message}{hint}") from None
    try:
        cfn.get_waiter(waiter).wait(StackName=name, WaiterConfig={"Delay": delay_seconds, "MaxAttempts": 180})
    except WaiterError:
        reasons = _failure_reasons(cfn, name) or ["no failed resource reported"]
        raise BootstrapError(
            f"stack {name} ended in {stack_status(cfn, name)}:\n" + "\n".join(f"  {r}" for r in reasons)
        ) from None
    log.info(f"stack {name}: {stack_status(cfn, name)}")
    return stack_outputs(cfn, name)


def runner_stack(
    cfn: Any, name: str, reuses: str, error: type[RunnerError] = BootstrapError
) -> tuple[dict[str, str], dict[str, str]]:
    """The gpu-runner stack's outputs and parameters, for a stack deployed beside it (`reuses`: what it takes from
    it); `error` names the stack that needs it, when bootstrap has not run in this region."""
    try:
        described = cfn.describe_stacks(StackName=name)["Stacks"][0]
    except ClientError as refused:
        if "does not exist" in refused.response.get("Error", {}).get("Message", ""):
            raise error(
                f"no gpu-runner stack {name} in this region: run `make bootstrap` first ({reuses})"
            ) from None
        raise
    outputs = {o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs", [])}
    parameters = {p["ParameterKey"]: p.get("ParameterValue", "") for p in described.get("Parameters", [])}
    return outputs, parameters


def stack_outputs(cfn: Any, name: str) -> dict[str, str]:
    stack = cfn.describe_stacks(StackName=name)["Stacks"][0]
    return {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}


def next_steps(repository: str, outputs: Mapping[str, str]) -> str:
    """The exact commands and settings that connect the repository to the stack."""
    repo = shlex.quote(repository)

    def variable(key: str, value: str) -> str:
        return f"gh variable set {key} --repo {repo} --body {shlex.quote(value)}"

    lines = [
        "# 1. GitHub variables the workflows read (AWS through OIDC: no AWS keys anywhere):",
        variable("AWS_ROLE_ARN", outputs["TrainRoleArn"]),
        variable("AWS_REAPER_ROLE_ARN", outputs["ReaperRoleArn"]),
        variable("AWS_SWEEP_ROLE_ARN", outputs["SweepRoleArn"]),
        variable("AWS_PREDICT_ROLE_ARN", outputs["PredictRoleArn"]),
        variable("AWS_PREDICT_LAUNCH_ROLE_ARN", outputs["PredictLaunchRoleArn"]),
        variable("AWS_PROMOTE_ROLE_ARN", outputs["PromoteRoleArn"]),
        "# 2. Runner registration: the GitHub App's key (manual/setup.md, step 2) goes into AWS, never into a",
        "#    repository secret: run bootstrap again with --app-id <id> --app-private-key-file <key.pem> (or",
        f"#    --token-file <file with a PAT>); it writes the SecureString {outputs.get('GitHubCredentialParameter', '')}.",
        "#    Delete any GPU_RUNNER_APP_PRIVATE_KEY / GPU_RUNNER_TOKEN repository secret left from older versions:",
        f"#    gh secret delete GPU_RUNNER_APP_PRIVATE_KEY --repo {repo}",
        "# 3. MLflow (optional; without it runs are kept as a workflow artifact): `make mlflow-server-up` deploys",
        "#    the team server (gpu_runner/mlflow_server/mlflow-server.yaml) and prints the MLFLOW_TRACKING_URI to set; or your own:",
        f'gh variable set MLFLOW_TRACKING_URI --repo {repo} --body "<https://your MLflow server>"',
        "# 4. In configs/gpu-runner.yaml:",
        f"#    instance_profile: {outputs['RunnerInstanceProfile']}",
        f"#    security_group_ids: [{outputs['RunnerSecurityGroupId']}]",
        f"# Bucket for data, checkpoints and exports: s3://{outputs['BucketName']}",
        f"# AWS-side reaper (every 15 minutes, nothing to set): Lambda {outputs.get('ReaperFunctionName', '?')}",
    ]
    return "\n".join(lines)


def _deploy_reaper_code(s3: Any, bucket: str) -> lambda_zip.UploadedCode:
    data = lambda_zip.build_zip()
    try:
        code = lambda_zip.upload(s3, bucket, data)
    except ClientError as error:
        code_name = error.response.get("Error", {}).get("Code", "")
        raise BootstrapError(
            f"could not upload the reaper Lambda's package to s3://{bucket}/{lambda_zip.code_key(data)}: "
            f"{code_name} (bootstrap needs s3:GetObject and s3:PutObject on the stack's bucket)"
        ) from None
    log.info(f"reaper Lambda package: s3://{bucket}/{code.key} ({len(data)} bytes)")
    return code


def verify_reaper_code(lambda_client: Any, function: str, code: lambda_zip.UploadedCode) -> None:
    """The function runs exactly the package bootstrap built: an object swapped in the bucket between upload and
    deploy (the runner role may write to the bucket) is refused here, not run every 15 minutes with the
    reaper's permissions. Lambda computes CodeSha256 from the package it stored."""
    deployed = lambda_client.get_function_configuration(FunctionName=function)["CodeSha256"]
    if deployed != code.sha256:
        raise BootstrapError(
            f"reaper Lambda {function} runs a package with SHA-256 {deployed}, not the {code.sha256} bootstrap "
            f"uploaded to {code.key}: someone else wrote to that key; check who may write to the bucket, then run "
            "bootstrap again"
        )


def store_github_credential(
    settings: Settings,
    ssm: Any,
    outputs: Mapping[str, str],
    *,
    app_id: str = "",
    app_private_key_file: Path | None = None,
    token_file: Path | None = None,
) -> str | None:
    """The one-time step: the GitHub credential into the stack's SecureString (None when none was given)."""
    from gpu_runner.core import credential

    if not (app_id or app_private_key_file or token_file):
        return None

    def read(flag: str, path: Path | None) -> str:
        if path is None:
            return ""
        try:
            return path.read_text(encoding="utf-8")
        except OSError as error:
            raise BootstrapError(f"{flag}: cannot read {path} ({error.strerror})") from None

    value = credential.encode(
        app_id=app_id, private_key=read("--app-private-key-file", app_private_key_file),
        token=read("--token-file", token_file),
    )  # fmt: skip
    name = credential.store(ssm, settings, outputs["GitHubCredentialKeyArn"], value)
    log.info(
        f"stored the GitHub credential in SSM SecureString {name} (decrypt: the launch and reaper roles only; "
        "encrypt: only the principal that ran bootstrap)"
    )
    return name


def set_oidc_subject(repository: str, env: Mapping[str, str]) -> bool:
    """The repository's OIDC `sub` template (oidc_subject.py) with the admin's GITHUB_TOKEN; without one, says
    the exact command (the roles refuse every token until it is set)."""
    from gpu_runner.setup import oidc_subject

    token = env.get("GITHUB_TOKEN", "").strip()
    if not token:
        keys = " ".join(f"-f include_claim_keys[]={k}" for k in oidc_subject.CLAIM_KEYS)
        log.info(
            "# REQUIRED once (the roles trust only the customised OIDC subject): export GITHUB_TOKEN=$(gh auth token) "
            "and run bootstrap again, or:\n"
            f"#    gh api --method PUT repos/{repository}/actions/oidc/customization/sub "
            f"-F use_default=false {keys}"
        )
        return False
    changed = oidc_subject.set_subject_template(
        repository, token, env.get("GITHUB_API_URL") or DEFAULT_BASE_URL
    )
    keys = ", ".join(oidc_subject.CLAIM_KEYS)
    log.info(f"OIDC subject template of {repository}: {keys}" + ("" if changed else " (already set)"))
    return changed


def bootstrap(
    settings: Settings,
    cfn: Any,
    inputs: StackInputs,
    *,
    s3: Any,
    lambda_client: Any,
    template: Path = TEMPLATE,
    delay_seconds: int = 10,
    ec2: Any = None,
    quotas: Any = None,
    identity: Identity | None = None,
) -> dict[str, str]:
    """`quotas`: a Service Quotas client in trust_size.QUOTA_REGION, asked only for long trust policies;
    `identity`: names the caller as the credential's writer when inputs.credential_writer_arn is empty."""
    try:
        body = template.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BootstrapError(
            f"--template: {template} not found (the default is the one gpu_runner ships)"
        ) from None
    problem = prefix_problem(settings.ssm_prefix, inputs.repository)
    if problem:
        raise BootstrapError(f"invalid bootstrap input:\n  {problem}")
    if not inputs.credential_writer_arn and identity is not None:  # after every check that needs no AWS call
        writer = credential_writer(identity.sts, identity.iam, storing=identity.storing)
        inputs = replace(inputs, credential_writer_arn=writer)
    if not inputs.vpc_id and ec2 is not None:  # the train role's network scope names the VPC
        inputs = replace(inputs, vpc_id=default_vpc(ec2, settings.region))
    name = stack_name(settings.project, inputs.repository)
    _refuse_long_trust(body, stack_parameters(settings, inputs), settings.region, quotas)
    inputs = _bucket_access(
        settings,
        inputs,
        _existing_parameters(cfn, name),
        ec2=ec2,
        sts=identity.sts if identity else None,
        iam=identity.iam if identity else None,
    )
    parameters = stack_parameters(settings, inputs)
    _refuse_foreign_stack(cfn, name, inputs.repository, parameters)
    if stack_status(cfn, name) is None:
        # The Lambda's package lives in the stack's bucket: a new stack is created without the Lambda first.
        deploy(cfn, name, body, parameters, delay_seconds=delay_seconds)
    code = _deploy_reaper_code(s3, inputs.bucket)
    outputs = deploy(cfn, name, body, stack_parameters(settings, inputs, code), delay_seconds=delay_seconds)
    missing = {
        "TrainRoleArn",
        "ReaperRoleArn",
        "SweepRoleArn",
        "PredictRoleArn",
        "PredictLaunchRoleArn",
        "PromoteRoleArn",
        "RunnerInstanceProfile",
        "RunnerSecurityGroupId",
        "BucketName",
        "ReaperFunctionName",
        "GitHubCredentialKeyArn",
        "GitHubCredentialParameter",
    }
    missing -= set(outputs)
    if missing:
        raise BootstrapError(
            f"stack {name} lacks output(s) {', '.join(sorted(missing))}: is {template} ours?"
        )
    verify_reaper_code(lambda_client, outputs["ReaperFunctionName"], code)
    log.info(next_steps(inputs.repository, outputs))
    return outputs
