"""The team MLflow server (gpu_runner/mlflow_server/mlflow-server.yaml): `gpu-runner mlflow-server up` against the moto server after
`bootstrap`, what it built, who may reach it, its first boot (the user-data moto's CloudFormation rendered, run in
the boot sandbox, starting a real `mlflow server` with basic auth), `wake` and the tunnel command.

moto's CloudFormation creates the security group, roles, policy, instance profile, launch template, instance,
volume and attachment; it skips the Data Lifecycle Manager policy and the schedules (asserted on the template
instead; cfn-lint checks their schema), ignores the instance's LaunchTemplate and SecurityGroupIds (the IMDSv2
setting and the group are asserted on the template and on the group itself), and does not snapshot a deleted
volume (DeletionPolicy: Snapshot is asserted on the template)."""

from __future__ import annotations

import contextlib
import json
import re
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import mlflow
import pytest
import yaml
from botocore.exceptions import ClientError
from botocore.validate import ParamValidator
from mlflow_server_stack import (
    LOCK,
    SERVER_TEMPLATE,
    TRAIN_CONFIG,
    deployed,
    people_role,
    run_cli,
    up,
)
from parliament import analyze_policy_string

from gpu_runner.batch import TEMPLATE as BATCH_TEMPLATE
from gpu_runner.core.aws import Aws
from gpu_runner.cost import server as server_cost
from gpu_runner.mlflow_server import mlflow_server, mlflow_server_access, mlflow_server_project, mlflow_wake
from gpu_runner_testing.aws_faults import AwsFaults
from gpu_runner_testing.github_double import DEFAULT_REPOSITORY
from gpu_runner_testing.gpu_runner_stack import (
    REGION,
    CfnLoader,
    managed_policies,
    role_policies,
    runner_role_name,
)
from gpu_runner_testing.iam_requests import ACCOUNT, Request, allowed, key_policy_allows, ssm_kms_request
from gpu_runner_testing.price_answers import get_products_answer, price_list_product

STOP = "cron(0 20 ? * MON-FRI *)"
START = "cron(0 7 ? * MON-FRI *)"


def server_template() -> dict[str, Any]:
    return yaml.load(SERVER_TEMPLATE.read_text(encoding="utf-8"), Loader=CfnLoader)


@pytest.fixture(scope="module")
def server(stack: dict[str, Any], settings_file: Path) -> dict[str, Any]:
    """`make mlflow-server-up` with a working-hours schedule, after the session's `make bootstrap`."""
    return deployed(stack, settings_file, "--stop-schedule", STOP, "--start-schedule", START)


def _secret(session: boto3.Session, name: str) -> str:
    return session.client("ssm").get_parameter(Name=name, WithDecryption=True)["Parameter"]["Value"]


def test_up_wires_the_server_to_the_runner_stack(server: dict[str, Any], stack: dict[str, Any]) -> None:
    parameters, runner = server["parameters"], stack["outputs"]
    assert parameters["RunnerSecurityGroupId"] == runner["RunnerSecurityGroupId"]
    assert parameters["BucketName"] == runner["BucketName"] == stack["bucket"]
    assert parameters["SsmPrefix"] == stack["settings"].ssm_prefix
    assert (parameters["StopSchedule"], parameters["StartSchedule"]) == (STOP, START)
    # The server runs the MLflow the clients lock (a project's lock; here the platform's, which agrees with it).
    assert parameters["MlflowVersion"] == mlflow_server.locked_mlflow_version(LOCK) == mlflow.__version__
    assert server["outputs"]["ReadyParameter"] == mlflow_wake.ready_parameter(stack["settings"].ssm_prefix)


def test_up_names_what_the_server_makes_from_the_training_config(server: dict[str, Any]) -> None:
    """The experiments train.yml, sweep.yml and predict.yml log to, and the served model, as a project's
    configs/train.yaml names them (here the test's, whose experiment name holds quotes and a comma: the parameter is
    JSON, so it passes unchanged). That a project's predict and sweep log where the server expects is the project's
    own test (tests/runner/test_mlflow_server_project.py)."""
    config = yaml.safe_load(TRAIN_CONFIG.read_text(encoding="utf-8"))
    experiment, model = config["tracking"]["experiment_name"], config["registry"]["model_name"]
    parameters, outputs = server["parameters"], server["outputs"]
    assert json.loads(parameters["ExperimentNames"]) == [experiment, experiment + "-inference"]
    assert parameters["ServedModelName"] == outputs["ServedModelName"] == model
    assert outputs["PromotionsExperiment"] == f"{model} promotions"
    odd = mlflow_server_project.Served(('Ada\'s "odd", name é',), "m")
    assert json.loads(odd.experiments_json()) == ['Ada\'s "odd", name é']


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"tracking": {"experiment_name": "e"}}, "has no registry.model_name (got None)"),
        (
            {"tracking": {"experiment_name": " "}, "registry": {"model_name": "m"}},
            "has no tracking.experiment_name",
        ),
        ("not a mapping", "has no tracking.experiment_name"),
    ],
)
def test_a_training_config_without_the_names_is_refused_with_the_field(
    tmp_path: Path, config: Any, message: str
) -> None:
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(mlflow_wake.MlflowServerError, match=re.escape(message)) as refused:
        mlflow_server_project.served_layout(path)
    assert "--train-config" in str(refused.value) and "default branch" in str(refused.value)


def test_only_the_runner_group_reaches_port_5000(server: dict[str, Any], stack: dict[str, Any]) -> None:
    ec2 = server["session"].client("ec2")
    group = ec2.describe_security_groups(GroupIds=[server["outputs"]["ServerSecurityGroupId"]])[
        "SecurityGroups"
    ][0]
    (rule,) = group["IpPermissions"]
    assert (rule["IpProtocol"], rule["FromPort"], rule["ToPort"]) == ("tcp", 5000, 5000)
    assert [p["GroupId"] for p in rule["UserIdGroupPairs"]] == [stack["outputs"]["RunnerSecurityGroupId"]]
    assert rule["IpRanges"] == [] and rule["Ipv6Ranges"] == []


def test_passwords_are_stored_not_printed_and_kept_on_rerun(
    server: dict[str, Any], settings_file: Path, stack: dict[str, Any]
) -> None:
    session = server["session"]
    names = mlflow_server.parameter_names(stack["settings"].ssm_prefix)
    assert set(names) == {"admin", "ci", "promote"}
    assert (names["ci"], names["promote"]) == (
        server["outputs"]["CiPasswordParameter"],
        server["outputs"]["PromotePasswordParameter"],
    )
    before = {k: _secret(session, n) for k, n in names.items()}
    for name in names.values():
        # A SecureString under the stack's own key, not the account-wide aws/ssm.
        (meta,) = session.client("ssm").describe_parameters(
            ParameterFilters=[{"Key": "Name", "Values": [name]}]
        )["Parameters"]
        assert meta["Type"] == "SecureString" and meta["KeyId"] == server["outputs"]["PasswordKeyArn"], meta
    assert len(set(before.values())) == 3 and min(len(v) for v in before.values()) >= 40
    code, printed, err = up(settings_file, "--stop-schedule", STOP, "--start-schedule", START)
    assert code == 0, err
    assert {k: _secret(session, n) for k, n in names.items()} == before
    for text in (server["printed"], printed):
        assert all(value not in text for value in before.values())
    # What to set on GitHub: the URI as a variable, the ci password piped from SSM into a secret, promote's
    # into the production environment's secrets only.
    assert (
        f"MLFLOW_TRACKING_URI --repo {DEFAULT_REPOSITORY} --body {server['outputs']['TrackingUri']}"
        in printed
    )
    assert f"--name {names['ci']} | gh secret set MLFLOW_TRACKING_PASSWORD --repo" in printed
    assert (
        f"gh secret set MLFLOW_PROMOTE_USERNAME --env production --repo {DEFAULT_REPOSITORY} --body promote"
        in printed
    )
    assert (
        f"--name {names['promote']} | gh secret set MLFLOW_PROMOTE_PASSWORD --env production --repo"
        in printed
    )


def test_passwords_under_aws_ssm_move_under_the_stack_key_unchanged(
    server: dict[str, Any], stack: dict[str, Any]
) -> None:
    """A server deployed before the stack had its key: `up` writes each password again, same value, under it."""
    session = server["session"]
    ssm = session.client("ssm")
    prefix = f"/migrate-{uuid.uuid4().hex[:8]}"
    names = mlflow_server.parameter_names(prefix)
    ssm.put_parameter(Name=names["ci"], Value="old-ci-password", Type="SecureString")  # aws/ssm
    try:
        mlflow_server_access.store_passwords(ssm, prefix, server["outputs"]["PasswordKeyArn"])
        assert _secret(session, names["ci"]) == "old-ci-password"
        for name in names.values():
            (meta,) = ssm.describe_parameters(ParameterFilters=[{"Key": "Name", "Values": [name]}])[
                "Parameters"
            ]
            assert meta["KeyId"] == server["outputs"]["PasswordKeyArn"], name
    finally:
        ssm.delete_parameters(Names=list(names.values()))


def test_password_key_who_decrypts(server: dict[str, Any], stack: dict[str, Any]) -> None:
    """The passwords' key policy, as KMS evaluates it for Parameter Store's calls: the server role decrypts the
    three passwords, the Batch execution role (when there is one) the ci password only, the people `up` names
    read and write them; the runner role, the train role and another principal of the account (even with kms:*
    everywhere in its IAM policy) decrypt none. Only through SSM, never straight from KMS."""
    session, outputs = server["session"], server["outputs"]
    key_arn = outputs["PasswordKeyArn"]
    raw = session.client("kms").get_key_policy(KeyId=key_arn, PolicyName="default")["Policy"]
    # AWS answers a JSON string; moto's CloudFormation keeps the template's KeyPolicy object as it was given.
    policy = raw if isinstance(raw, dict) else json.loads(raw)
    # moto's CloudFormation leaves an `!If [..., AWS::NoValue]` list element as null; CloudFormation drops it.
    policy = {**policy, "Statement": [s for s in policy["Statement"] if s is not None]}
    names = mlflow_server.parameter_names(server["parameters"]["SsmPrefix"])
    server_role = session.client("iam").get_instance_profile(
        InstanceProfileName=_profile_name(session, outputs["InstanceId"])
    )["InstanceProfile"]["Roles"][0]["Arn"]
    runner = session.client("iam").get_role(RoleName=runner_role_name(stack))["Role"]["Arn"]
    everything = [
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "kms:*", "Resource": "*"}]}
    ]

    def may(principal: str, action: str, parameter: str, via: str = "ssm", iam: Any = ()) -> bool:
        request = ssm_kms_request(action, REGION, key_arn, parameter, via)
        return key_policy_allows(policy, principal, list(iam), request)

    for name in names.values():
        assert may(server_role, "kms:Decrypt", name)
        assert not may(server_role, "kms:Decrypt", name, via="")  # straight to KMS
        assert not may(server_role, "kms:Encrypt", name)
        assert may(people_role(), "kms:Decrypt", name) and may(people_role(), "kms:Encrypt", name)
        assert not may(people_role(), "kms:Decrypt", name, via="")
        for other in (runner, stack["outputs"]["TrainRoleArn"], stack["outputs"]["SweepRoleArn"],
                      f"arn:aws:iam::{ACCOUNT}:role/another-admin"):  # fmt: skip
            assert not may(other, "kms:Decrypt", name, iam=everything), (other, name)
            assert not may(other, "kms:Encrypt", name, iam=everything), (other, name)
    # Not another parameter either (the key names these three).
    assert not may(server_role, "kms:Decrypt", f"{server['parameters']['SsmPrefix']}-github-credential")
    # The account may still administer the key, never use it.
    admin = f"arn:aws:iam::{ACCOUNT}:role/another-admin"
    assert key_policy_allows(policy, admin, everything, Request("kms:PutKeyPolicy", key_arn))
    # Without a batch stack, no Batch statement at all; with one, the next test.
    assert not any(s.get("Sid", "").startswith("BatchJobs") for s in policy["Statement"])


def test_server_policy_is_parliament_clean_and_scoped(server: dict[str, Any]) -> None:
    session = server["session"]
    iam = session.client("iam")
    role = iam.get_instance_profile(
        InstanceProfileName=_profile_name(session, server["outputs"]["InstanceId"])
    )["InstanceProfile"]["Roles"][0]["RoleName"]
    (document,) = managed_policies(session, role)
    assert [f.issue for f in analyze_policy_string(json.dumps(document)).findings] == []
    assert iam.list_role_policies(RoleName=role)["PolicyNames"] == []
    # No AWS managed policy: AmazonSSMManagedInstanceCore allows ssm:GetParameter(s) on "*", every parameter of
    # the account (moto's CloudFormation skips AWS managed policies it does not know, so the template too).
    assert "ManagedPolicyArns" not in server_template()["Resources"]["ServerRole"]["Properties"]
    prefix = server["parameters"]["SsmPrefix"]
    bucket = server["parameters"]["BucketName"]
    assert allowed(
        [document], Request("s3:PutObject", f"arn:aws:s3:::{bucket}/mlflow-artifacts/1/a/model.pkl")
    )
    key = f"mlflow-server/requirements-{server['parameters']['RequirementsSha256']}.txt"
    assert allowed([document], Request("s3:GetObject", f"arn:aws:s3:::{bucket}/{key}"))
    assert not allowed([document], Request("s3:PutObject", f"arn:aws:s3:::{bucket}/{key}"))
    # Not the project's data, checkpoints or exports, nor the runners' configs or the GitHub credential.
    for resource in (f"arn:aws:s3:::{bucket}/checkpoints/x", f"arn:aws:s3:::{bucket}/data/train.npz"):
        assert not allowed([document], Request("s3:GetObject", resource))
    for name in (f"{prefix}/7-1/jitconfig", f"{prefix}-github-credential", "/another/team/secret"):
        for action in ("ssm:GetParameter", "ssm:GetParameters", "ssm:GetParametersByPath"):
            assert not allowed([document], Request(action, _parameter_arn(name))), (action, name)
    for name in mlflow_server.parameter_names(prefix).values():
        assert allowed([document], Request("ssm:GetParameter", _parameter_arn(name)))
    # Session Manager: exactly AWS's minimal instance policy (ssm:UpdateInstanceInformation and ssmmessages'
    # four channel actions), nothing else on "*".
    anywhere = [st for st in document["Statement"] if st["Resource"] == "*"]
    assert [sorted(st["Action"]) for st in anywhere] == [sorted([
        "ssm:UpdateInstanceInformation", "ssmmessages:CreateControlChannel", "ssmmessages:CreateDataChannel",
        "ssmmessages:OpenControlChannel", "ssmmessages:OpenDataChannel",
    ])]  # fmt: skip
    # Its own stack's parameters (what each boot makes), no other stack's.
    stack_id = session.client("cloudformation").describe_stacks(StackName=server["name"])["Stacks"][0][
        "StackId"
    ]
    assert allowed([document], Request("cloudformation:DescribeStacks", stack_id))
    assert not allowed(
        [document], Request("cloudformation:DescribeStacks", stack_id.replace("mlflow-server", "x"))
    )


def test_batch_jobs_decrypt_the_ci_password_only(server: dict[str, Any], stack: dict[str, Any]) -> None:
    """With a batch stack, `up` finds its job execution role (gpu_runner/batch/batch.yaml ExecutionRole, which resolves the
    ci password into a job's environment) and the key lets that role decrypt the ci password through SSM, no
    other. batch.yaml stays as it is: a role the key policy names needs no IAM grant for the key.

    moto's CloudFormation cannot update an AWS::KMS::Key (it has no update for it), so the key is checked as
    CloudFormation renders the template's own PasswordKey (and the ServerRole it names) in a stack of its own."""
    batch_template = yaml.load(BATCH_TEMPLATE.read_text(encoding="utf-8"), Loader=CfnLoader)
    assert batch_template["Resources"]["ExecutionRole"]["Type"] == "AWS::IAM::Role"
    session = server["session"]
    cfn, iam = session.client("cloudformation"), session.client("iam")
    batch = f"batch-{uuid.uuid4().hex[:8]}"
    assert mlflow_server_access.batch_execution_role(cfn, iam, batch) == ""  # no batch stack: no statement
    trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"Service":
             "ecs-tasks.amazonaws.com"}, "Action": "sts:AssumeRole"}]}  # fmt: skip
    role_only = {"Resources": {"ExecutionRole": {"Type": "AWS::IAM::Role",
                                                 "Properties": {"AssumeRolePolicyDocument": trust}}}}  # fmt: skip
    cfn.create_stack(StackName=batch, TemplateBody=json.dumps(role_only), Capabilities=["CAPABILITY_IAM"])
    template = server_template()
    key_only = {
        "Parameters": {
            k: template["Parameters"][k]
            # BucketName: the ServerRole's gpu-runner:bucket tag (the bucket policy admits the roles tagged so).
            for k in ("SsmPrefix", "PasswordReaderArns", "BatchExecutionRoleArn", "BucketName")
        },
        "Conditions": {"HasBatchExecutionRole": template["Conditions"]["HasBatchExecutionRole"]},
        "Resources": {k: template["Resources"][k] for k in ("ServerRole", "PasswordKey")},
        "Outputs": {"Key": {"Value": {"Fn::GetAtt": ["PasswordKey", "Arn"]}}},
    }
    rendered = f"key-{uuid.uuid4().hex[:8]}"
    try:
        role = mlflow_server_access.batch_execution_role(cfn, iam, batch)
        assert role.startswith(f"arn:aws:iam::{ACCOUNT}:role/")
        prefix = server["parameters"]["SsmPrefix"]
        values = {
            "SsmPrefix": prefix,
            "PasswordReaderArns": people_role(),
            "BatchExecutionRoleArn": role,
            "BucketName": server["parameters"]["BucketName"],
        }
        cfn.create_stack(StackName=rendered, TemplateBody=json.dumps(key_only), Capabilities=["CAPABILITY_IAM"],
                         Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in values.items()])  # fmt: skip
        key_arn = cfn.describe_stacks(StackName=rendered)["Stacks"][0]["Outputs"][0]["OutputValue"]
        raw = session.client("kms").get_key_policy(KeyId=key_arn, PolicyName="default")["Policy"]
        policy = raw if isinstance(raw, dict) else json.loads(raw)
        names = mlflow_server.parameter_names(prefix)
        for user, name in names.items():
            request = ssm_kms_request("kms:Decrypt", REGION, key_arn, name)
            assert key_policy_allows(policy, role, [], request) == (user == "ci"), user
            assert not key_policy_allows(
                policy, role, [], ssm_kms_request("kms:Encrypt", REGION, key_arn, name)
            )
        direct = ssm_kms_request("kms:Decrypt", REGION, key_arn, names["ci"], via="")
        assert not key_policy_allows(policy, role, [], direct)
    finally:
        cfn.delete_stack(StackName=batch)
        with contextlib.suppress(ClientError):
            cfn.delete_stack(StackName=rendered)


def test_the_password_readers_are_the_callers_role_and_those_named(moto_endpoint: str) -> None:
    """`up` names its caller in the key policy: a role session as its role (path included, from iam:GetRole),
    an IAM user as itself; a caller a key policy cannot name alone (the root user would hand the key to every IAM
    policy of the account; moto answers a user ARN of its own shape) needs --password-reader."""
    session = boto3.Session(region_name=REGION)
    iam, sts = session.client("iam"), session.client("sts")
    name = f"team-admin-{uuid.uuid4().hex[:6]}"
    trust = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"AWS": ACCOUNT},
                                                                 "Action": "sts:AssumeRole"}]})  # fmt: skip
    role = iam.create_role(RoleName=name, Path="/people/", AssumeRolePolicyDocument=trust)["Role"]["Arn"]
    assert role == f"arn:aws:iam::{ACCOUNT}:role/people/{name}"
    credentials = sts.assume_role(RoleArn=role, RoleSessionName="ada")["Credentials"]
    as_role = boto3.Session(aws_access_key_id=credentials["AccessKeyId"], region_name=REGION,
                            aws_secret_access_key=credentials["SecretAccessKey"],
                            aws_session_token=credentials["SessionToken"])  # fmt: skip
    other = f"arn:aws:iam::{ACCOUNT}:user/grace"
    assert mlflow_server_access.password_readers(as_role.client("sts"), iam, [other]) == [role, other]
    with pytest.raises(
        mlflow_wake.MlflowServerError, match=r"run `up` as an IAM role or user.*--password-reader"
    ):
        mlflow_server_access.password_readers(sts, iam)  # moto's own caller: arn:aws:sts::...:user/moto
    assert mlflow_server_access.password_readers(sts, iam, [other]) == [other]
    for wrong in (f"arn:aws:iam::{ACCOUNT}:root", "grace", f"arn:aws:sts::{ACCOUNT}:assumed-role/{name}/ada"):
        with pytest.raises(
            mlflow_wake.MlflowServerError, match=r"--password-reader: .* is not an IAM role or user"
        ):
            mlflow_server_access.password_readers(sts, iam, [wrong])


def _profile_name(session: boto3.Session, instance_id: str) -> str:
    instance = session.client("ec2").describe_instances(InstanceIds=[instance_id])["Reservations"][0][
        "Instances"
    ][0]
    return instance["IamInstanceProfile"]["Arn"].rsplit("/", 1)[-1]


def _parameter_arn(name: str) -> str:
    return f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter{name}"


def _instance_request(action: str, server: dict[str, Any], tags: dict[str, str]) -> Request:
    arn = f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{server['outputs']['InstanceId']}"
    return Request(action, arn, {f"ec2:ResourceTag/{k}": v for k, v in tags.items()})


def test_what_branch_code_and_training_code_can_do_to_the_server(
    server: dict[str, Any], stack: dict[str, Any]
) -> None:
    """A branch writer holds the train role in the start job (and the sweep role in its own jobs); training code
    holds the runner role. None may read the passwords; only the train role may start the server, none may stop
    or terminate it, and it carries no tag the reaper or the terminate grants look for."""
    session = server["session"]
    instance = session.client("ec2").describe_instances(InstanceIds=[server["outputs"]["InstanceId"]])
    tags = {t["Key"]: t["Value"] for t in instance["Reservations"][0]["Instances"][0]["Tags"]}
    assert tags["mlflow-server:project"] == stack["settings"].project
    assert not any(key.startswith("gpu-runner:") for key in tags)
    roles = {
        "train": role_policies(stack, "TrainRoleArn"),
        "sweep": role_policies(stack, "SweepRoleArn"),
        "predict": role_policies(stack, "PredictRoleArn"),
        "reaper": role_policies(stack, "ReaperRoleArn"),
        "runner": managed_policies(session, runner_role_name(stack)),
    }
    names = mlflow_server.parameter_names(server["parameters"]["SsmPrefix"])
    for role, policies in roles.items():
        for name in names.values():
            assert not allowed(policies, Request("ssm:GetParameter", _parameter_arn(name))), (role, name)
        for action in ("ec2:StopInstances", "ec2:TerminateInstances"):
            assert not allowed(policies, _instance_request(action, server, tags)), (role, action)
        may_start = allowed(policies, _instance_request("ec2:StartInstances", server, tags))
        assert may_start == (role == "train"), role
    ready = _parameter_arn(server["outputs"]["ReadyParameter"])
    assert allowed(roles["train"], Request("ssm:GetParameter", ready))
    # The start grant follows the tag: an instance of the same project without it is refused.
    assert not allowed(roles["train"], _instance_request("ec2:StartInstances", server, {"Name": "x"}))


def test_template_settings_moto_does_not_apply() -> None:
    resources = server_template()["Resources"]
    metadata = resources["ServerLaunchTemplate"]["Properties"]["LaunchTemplateData"]["MetadataOptions"]
    assert metadata == {"HttpTokens": "required", "HttpPutResponseHopLimit": 1}
    assert (
        resources["DataVolume"]["DeletionPolicy"]
        == resources["DataVolume"]["UpdateReplacePolicy"]
        == "Snapshot"
    )
    assert resources["DataVolume"]["Properties"]["Encrypted"] is True
    details = resources["SnapshotPolicy"]["Properties"]["PolicyDetails"]
    volume_tags = {t["Key"]: t["Value"] for t in resources["DataVolume"]["Properties"]["Tags"]}
    (target,) = details["TargetTags"]
    assert target["Key"] in volume_tags
    assert details["Schedules"][0]["RetainRule"]["Count"] == {"Ref": "SnapshotsKept"}
    for rule, action in (("StopScheduleRule", "stopInstances"), ("StartScheduleRule", "startInstances")):
        target_arn = resources[rule]["Properties"]["Target"]["Arn"]
        assert target_arn == {"Fn::Sub": "arn:${AWS::Partition}:scheduler:::aws-sdk:ec2:" + action}
    schedule = resources["SchedulePolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert [s["Resource"] for s in schedule] == [
        {"Fn::Sub": "arn:${AWS::Partition}:ec2:${AWS::Region}:${AWS::AccountId}:instance/${Server}"}
    ]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--stop-schedule", "20:00"), "--stop-schedule: '20:00' is not a six-field cron(...)"),
        (("--start-schedule", START), "--start-schedule: set --stop-schedule too"),
    ],
)
def test_bad_schedules_are_refused_before_any_call(
    settings_file: Path, extra: tuple[str, ...], message: str
) -> None:
    code, _, err = up(settings_file, *extra)
    assert code != 0 and message in err, err


def test_up_without_the_runner_stack_says_to_bootstrap(
    tmp_path: Path, settings_file: Path, moto_endpoint: str
) -> None:
    other = tmp_path / "settings.yaml"
    settings = yaml.safe_load(settings_file.read_text())
    other.write_text(yaml.safe_dump({**settings, "project": "never-bootstrapped"}))
    code, _, err = up(other)
    assert code != 0 and "run `make bootstrap` first" in err, err


def test_tunnel_command_is_a_valid_start_session(server: dict[str, Any], settings_file: Path) -> None:
    """The printed command, parsed as the AWS CLI maps it onto StartSession, is valid for botocore's SSM model;
    the same check refuses a value of the wrong shape, so it is not vacuous."""
    code, printed, err = run_cli(["--settings", str(settings_file), "mlflow-server", "tunnel", "--repository",
                                  DEFAULT_REPOSITORY, "--local-port", "15000", "--print-only"])  # fmt: skip
    assert code == 0, err
    argv = printed.strip().split(" ")
    assert argv[:3] == ["aws", "ssm", "start-session"]
    options = dict(zip(argv[3::2], argv[4::2], strict=True))
    params = {
        "Target": options["--target"],
        "DocumentName": options["--document-name"],
        "Parameters": json.loads(options["--parameters"].strip("'")),
    }
    assert params["Target"] == server["outputs"]["InstanceId"]
    # The stack's own document, which fixes the remote port: no portNumber to pass (or to change).
    assert (
        params["DocumentName"]
        == server["outputs"]["TunnelDocument"]
        == server["parameters"]["TunnelDocumentName"]
    )
    assert params["Parameters"] == {"localPortNumber": ["15000"]}
    shape = (
        botocore.session.get_session().get_service_model("ssm").operation_model("StartSession").input_shape
    )
    assert not ParamValidator().validate(params, shape).has_errors()
    wrong = {**params, "Parameters": {"localPortNumber": "15000"}}
    assert ParamValidator().validate(wrong, shape).has_errors()


def test_tunnel_without_the_plugin_says_where_to_get_it(
    server: dict[str, Any], settings_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    code, _, err = run_cli(["--settings", str(settings_file), "mlflow-server", "tunnel", "--repository",
                            DEFAULT_REPOSITORY])  # fmt: skip
    assert code != 0 and "session-manager-plugin is not on PATH" in err and "userguide" in err, err


# --- wake: the start job's step ---------------------------------------------------------------------------------


def _wake(stack: dict[str, Any], **kwargs: Any) -> str | None:
    session, settings = stack["session"], stack["settings"]
    return mlflow_wake.wake(session.client("ec2"), session.client("ssm"), project=settings.project,
                            ssm_prefix=settings.ssm_prefix, **kwargs)  # fmt: skip


def test_wake_starts_a_stopped_server_and_waits_for_its_fresh_mark(
    server: dict[str, Any], stack: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    session = server["session"]
    ec2, ssm = session.client("ec2"), session.client("ssm")
    instance_id, ready = server["outputs"]["InstanceId"], server["outputs"]["ReadyParameter"]
    # A mark from an earlier boot, stale once the schedule has stopped the server. No clock margin here: the
    # test's clock is moto's, so "older than the start request" is exact.
    ssm.put_parameter(Name=ready, Type="String", Value="http://10.0.0.8:5000", Overwrite=True)
    ec2.stop_instances(InstanceIds=[instance_id])
    monkeypatch.setattr(mlflow_wake, "CLOCK_MARGIN", timedelta(0))
    time.sleep(0.05)
    sleeps: list[float] = []

    def boot_then_mark(seconds: float) -> None:
        sleeps.append(seconds)
        state = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]["State"]
        assert state["Name"] in ("pending", "running")  # wake started it before it waited
        if len(sleeps) == 2:  # the server's mlflow-ready unit, a while after the start
            ssm.put_parameter(Name=ready, Type="String", Value="http://10.0.0.9:5000", Overwrite=True)

    assert _wake(stack, sleep=boot_then_mark, poll_seconds=0.01) == "http://10.0.0.9:5000"
    assert len(sleeps) == 2  # the stale mark was not taken for the new boot's


def test_wake_times_out_with_the_boot_log_command_and_no_launch(
    server: dict[str, Any], stack: dict[str, Any]
) -> None:
    ec2 = server["session"].client("ec2")
    instance_id = server["outputs"]["InstanceId"]
    ec2.stop_instances(InstanceIds=[instance_id])
    later = datetime.now(UTC) + timedelta(hours=1)  # every mark there is predates this start
    with pytest.raises(mlflow_wake.MlflowServerError) as error:
        _wake(stack, sleep=lambda s: None, poll_seconds=0.0, timeout_seconds=0.05, now=lambda: later)
    assert f"get-console-output --instance-id {instance_id}" in str(error.value)
    assert "no GPU was launched" in str(error.value)


def test_wake_returns_at_once_for_a_running_ready_server(
    server: dict[str, Any], stack: dict[str, Any]
) -> None:
    session = server["session"]
    session.client("ec2").start_instances(InstanceIds=[server["outputs"]["InstanceId"]])
    session.client("ssm").put_parameter(
        Name=server["outputs"]["ReadyParameter"], Type="String", Value="http://10.0.0.9:5000", Overwrite=True
    )

    def no_sleep(seconds: float) -> None:
        raise AssertionError("a ready server needs no wait")

    assert _wake(stack, sleep=no_sleep) == "http://10.0.0.9:5000"


def test_wake_without_a_server_does_nothing(moto_endpoint: str) -> None:
    session = boto3.Session(region_name=REGION)
    assert mlflow_wake.wake(session.client("ec2"), session.client("ssm"), project="no-server-here",
                            ssm_prefix="/gpu-runner/x/y", sleep=lambda s: None) is None  # fmt: skip


# --- the CPU side of the cost report ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stop", "start", "hours"),
    [
        # 07:00-20:00 on weekdays: 13 h x 5 days a week, 730/168 weeks a month.
        (STOP, START, 13 * 5 * 730 / 168),
        ("cron(30 18 ? * MON,WED,FRI *)", "cron(0 9 ? * MON,WED,FRI *)", 9.5 * 3 * 730 / 168),
        ("", "", 730.0),
        (STOP, "", 730.0),  # started on demand only: counted always on (an upper bound)
        (STOP, "cron(0 7 ? * MON-SAT *)", 730.0),  # different days: not read, counted always on
    ],
)
def test_running_hours_follow_the_schedules(stop: str, start: str, hours: float) -> None:
    assert server_cost.running_hours_per_month(stop, start)[0] == pytest.approx(hours)


def test_server_cost_is_priced_like_the_gpus(server: dict[str, Any], aws: Aws, faults: AwsFaults) -> None:
    """The deployed stack's own parameters, the Pricing API's answer, the table's gp3 price."""
    faults.answer("pricing", "GetProducts", get_products_answer(
        price_list_product("t3.small", "us-east-1", "0.0208000000", usagetype="BoxUsage:t3.small")))  # fmt: skip
    cfn = server["session"].client("cloudformation")
    parameters = server_cost.deployed_server_parameters(cfn, server["name"])
    assert parameters is not None and parameters["InstanceType"] == "t3.small"
    cost = server_cost.server_cost(aws, parameters, "us-east-1")
    gb = server_cost.ROOT_VOLUME_GB + int(parameters["DataVolumeGb"])
    assert cost.monthly_usd == pytest.approx(13 * 5 * 730 / 168 * 0.0208 + gb * 0.08)
    assert "t3.small" in cost.basis and "aws-pricing-api" in cost.basis
    assert server_cost.deployed_server_parameters(cfn, "no-such-stack") is None
    # The bundled price is for a type AWS offers there (moto answers from AWS's published offerings).
    offered = boto3.client("ec2", region_name="us-east-1").describe_instance_type_offerings(
        Filters=[{"Name": "instance-type", "Values": ["t3.small"]}]
    )["InstanceTypeOfferings"]
    assert [o["InstanceType"] for o in offered] == ["t3.small"]
    # The root volume counted is the launch template's.
    (mapping,) = server_template()["Resources"]["ServerLaunchTemplate"]["Properties"]["LaunchTemplateData"][
        "BlockDeviceMappings"
    ]
    assert mapping["Ebs"]["VolumeSize"] == server_cost.ROOT_VOLUME_GB
