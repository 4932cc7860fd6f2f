"""The stack's KMS key policies: who may decrypt the GitHub credential and the JIT configs."""

from __future__ import annotations

import json
from typing import Any

from gpu_runner.core import credential, naming
from gpu_runner.core.naming import RunContext, parameter_name
from gpu_runner_testing.github_double import DEFAULT_REPOSITORY
from gpu_runner_testing.gpu_runner_stack import (
    CREDENTIAL_WRITER,
    REGION,
    managed_policies,
    role_policies,
    runner_role_name,
)
from gpu_runner_testing.iam_requests import (
    Request,
    allowed,
    key_policy_allows,
    ssm_kms_request,
)


def test_only_the_launch_and_reaper_roles_can_read_the_github_credential(stack: dict[str, Any]) -> None:
    """The credential's parameter: readable by the launch and reaper roles' policies, not the runner role's
    (which may read everything below ssm_prefix); its key decrypts for those two roles only, through SSM."""
    session, outputs = stack["session"], stack["outputs"]
    name = outputs["GitHubCredentialParameter"]
    assert name == credential.parameter_name(stack["settings"])
    read = Request("ssm:GetParameter", f"arn:aws:ssm:{REGION}:123456789012:parameter{name}")
    assert allowed(role_policies(stack, "TrainRoleArn"), read)
    assert allowed(role_policies(stack, "ReaperRoleArn"), read)
    # The default branch's launch role (predict.yml's gpu start and stop jobs) is a launch role too.
    assert allowed(role_policies(stack, "PredictLaunchRoleArn"), read)
    assert not allowed(managed_policies(session, runner_role_name(stack)), read)
    # The sweep role (branch code of sweep.yml's plan and collect jobs) neither reads the parameter ...
    assert not allowed(role_policies(stack, "SweepRoleArn"), read)
    # Nor does the predict role (predict.yml's resolve and cpu jobs).
    assert not allowed(role_policies(stack, "PredictRoleArn"), read)
    # The value is a SecureString under the stack's key, not the AWS-managed aws/ssm key.
    ssm = session.client("ssm")
    (meta,) = ssm.describe_parameters(ParameterFilters=[{"Key": "Name", "Values": [name]}])["Parameters"]
    assert meta["Type"] == "SecureString" and meta["KeyId"] == outputs["GitHubCredentialKeyArn"]
    # Key policy: kms:Decrypt only for the two roles and only through SSM; the account itself gets no decrypt, so
    # no IAM policy in the account can grant one (AWS KMS Developer Guide, "Key policies": without a key policy
    # statement for the account, IAM policies do not apply).
    kms = session.client("kms")
    raw = kms.get_key_policy(KeyId=outputs["GitHubCredentialKeyArn"], PolicyName="default")["Policy"]
    # AWS answers a JSON string; moto's CloudFormation keeps the template's KeyPolicy object as it was given.
    policy = json.loads(raw) if isinstance(raw, str) else raw
    decrypters = [
        s for s in policy["Statement"]
        if s["Effect"] == "Allow" and any(a in ("kms:Decrypt", "kms:*") for a in json_list(s["Action"]))
    ]  # fmt: skip
    (statement,) = decrypters
    assert sorted(json_list(statement["Principal"]["AWS"])) == sorted(
        [outputs["TrainRoleArn"], outputs["PredictLaunchRoleArn"], outputs["ReaperRoleArn"]]
    )
    assert statement["Condition"] == {"StringEquals": {"kms:ViaService": f"ssm.{REGION}.amazonaws.com"}}
    for s in policy["Statement"]:
        assert (
            not any(a.startswith("kms:Decrypt") or a == "kms:*" for a in json_list(s["Action"]))
            or s is statement
        )
    # ... nor decrypts it, not even with an IAM policy granting it everything: the key policy does not name it.
    decrypt = ssm_kms_request("kms:Decrypt", REGION, outputs["GitHubCredentialKeyArn"], name)
    everything = [
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
    ]
    assert not key_policy_allows(policy, outputs["SweepRoleArn"], everything, decrypt)
    assert not key_policy_allows(policy, outputs["PredictRoleArn"], everything, decrypt)
    assert key_policy_allows(policy, outputs["TrainRoleArn"], [], decrypt)  # the evaluator is not vacuous


def test_only_the_bootstrap_caller_encrypts_the_github_credential(stack: dict[str, Any]) -> None:
    """Whoever may encrypt with the credential's key may write a value the launch and reaper roles decrypt and
    trust: only the principal that ran bootstrap (the stack's CredentialWriterArn, matched as aws:PrincipalArn),
    through Parameter Store, for that one parameter. Another principal of the account, even one whose IAM
    policies allow kms:* everywhere, and every role of the stack are refused, so a PutParameter of theirs under
    this key fails (what they can still write, a String or another key, launch refuses: test_credential_check)."""
    session, outputs = stack["session"], stack["outputs"]
    key_arn, name = outputs["GitHubCredentialKeyArn"], outputs["GitHubCredentialParameter"]
    parameters = session.client("cloudformation").describe_stacks(StackName=stack["name"])["Stacks"][0]
    given = {p["ParameterKey"]: p["ParameterValue"] for p in parameters["Parameters"]}
    assert given["CredentialWriterArn"] == CREDENTIAL_WRITER  # bootstrap's --credential-writer-arn
    # The alias every reader resolves to check the parameter's key (credential.checked_version).
    alias = naming.github_credential_key_alias(stack["settings"].ssm_prefix)
    assert session.client("kms").describe_key(KeyId=alias)["KeyMetadata"]["Arn"] == key_arn
    raw = session.client("kms").get_key_policy(KeyId=key_arn, PolicyName="default")["Policy"]
    policy = raw if isinstance(raw, dict) else json.loads(raw)
    everything = [
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "kms:*", "Resource": "*"}]}
    ]

    def may(principal: str, action: str, parameter: str = name, via: str = "ssm") -> bool:
        request = ssm_kms_request(action, REGION, key_arn, parameter, via)
        return key_policy_allows(policy, principal, everything, request)

    # Standard tier: kms:Encrypt; an advanced parameter: kms:GenerateDataKey (test_jit_config_key_... says so).
    assert may(CREDENTIAL_WRITER, "kms:Encrypt") and may(CREDENTIAL_WRITER, "kms:GenerateDataKey")
    assert not may(CREDENTIAL_WRITER, "kms:Encrypt", via=""), "straight to KMS, outside Parameter Store"
    assert not may(CREDENTIAL_WRITER, "kms:Encrypt", parameter="/someone-else/secret"), "another parameter"
    assert not may(CREDENTIAL_WRITER, "kms:Decrypt"), "the writer stores it, it never reads it back"
    others = [
        "arn:aws:iam::123456789012:role/admin",  # an administrator who did not run bootstrap
        "arn:aws:iam::123456789012:user/deployer",
        outputs["TrainRoleArn"], outputs["PredictLaunchRoleArn"], outputs["ReaperRoleArn"],
        outputs["SweepRoleArn"], outputs["PredictRoleArn"],
        session.client("iam").get_role(RoleName=runner_role_name(stack))["Role"]["Arn"],
    ]  # fmt: skip
    for principal in others:
        for action in ("kms:Encrypt", "kms:GenerateDataKey"):
            assert not may(principal, action), f"{principal} may {action} the GitHub credential"
    # The account still administers the key (never locked out): an administrator allowed kms:PutKeyPolicy can
    # always rewrite this policy, which is the boundary (manual/security.md).
    admin = Request("kms:PutKeyPolicy", key_arn)
    assert key_policy_allows(policy, "arn:aws:iam::123456789012:role/admin", everything, admin)


def test_jit_config_key_only_the_runner_role_decrypts_and_only_through_ssm(stack: dict[str, Any]) -> None:
    """The customer-managed key: the launch role encrypts, the runner role decrypts, both only through Parameter
    Store and only for parameters under the prefix; no other principal of the account, whatever its IAM policies."""
    session, outputs, settings = stack["session"], stack["outputs"], stack["settings"]
    kms = session.client("kms")
    key_arn = outputs["JitConfigKeyArn"]
    aliases = {a["AliasName"]: a.get("TargetKeyId") for a in kms.list_aliases()["Aliases"]}
    alias = naming.jit_config_key_alias(settings.ssm_prefix)
    assert aliases[alias] == key_arn.rsplit("/", 1)[-1], "launch encrypts under this alias"
    raw = kms.get_key_policy(KeyId=key_arn, PolicyName="default")["Policy"]
    # AWS answers a JSON string; moto's CloudFormation keeps the template's KeyPolicy object as it was given.
    key_policy = raw if isinstance(raw, dict) else json.loads(raw)
    runner = session.client("iam").get_role(RoleName=runner_role_name(stack))["Role"]["Arn"]
    train = stack["outputs"]["TrainRoleArn"]
    predict_launch = stack["outputs"]["PredictLaunchRoleArn"]
    reaper_role = stack["outputs"]["ReaperRoleArn"]
    ours = parameter_name(
        settings.ssm_prefix, RunContext(DEFAULT_REPOSITORY, "7001", "1", "train/x", "a" * 40)
    )
    elsewhere = "/someone-else/7001-1/jitconfig"
    everything = [
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "kms:*", "Resource": "*"}]}
    ]

    def may(principal: str, action: str, parameter: str = ours, via: str = "ssm", iam: Any = ()) -> bool:
        request = ssm_kms_request(action, REGION, key_arn, parameter, via)
        return key_policy_allows(key_policy, principal, list(iam), request)

    assert may(runner, "kms:Decrypt")
    assert not may(runner, "kms:Decrypt", via="")  # straight to KMS, outside Parameter Store
    assert not may(runner, "kms:Decrypt", via="ec2")
    assert not may(runner, "kms:Decrypt", parameter=elsewhere)
    assert not may(runner, "kms:Encrypt") and not may(runner, "kms:GenerateDataKey")
    assert may(train, "kms:Encrypt") and may(train, "kms:GenerateDataKey")  # standard and advanced tier
    assert not may(train, "kms:Decrypt"), "the launch role writes configs, it never reads one back"
    assert not may(train, "kms:GenerateDataKey", via="")
    # The default branch's launch role (predict.yml's gpu device) writes configs the same way, and only that.
    assert may(predict_launch, "kms:GenerateDataKey") and not may(predict_launch, "kms:Decrypt")
    assert not may(predict_launch, "kms:Encrypt", via="")
    # Another principal of the account, even one whose IAM policies allow kms:* everywhere.
    for principal in (
        reaper_role,
        stack["outputs"]["PredictRoleArn"],
        "arn:aws:iam::123456789012:role/admin",
    ):
        assert not may(principal, "kms:Decrypt", iam=everything)
        assert not may(principal, "kms:Encrypt", iam=everything)
    # The account may still administer the key (never locked out), not use it.
    admin = Request("kms:PutKeyPolicy", key_arn)
    assert key_policy_allows(key_policy, "arn:aws:iam::123456789012:role/admin", everything, admin)


def json_list(value: Any) -> list[str]:
    return value if isinstance(value, list) else [value]
