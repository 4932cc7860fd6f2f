"""The tunnel of the jobs on GitHub-hosted runners to the team MLflow server (`gpu-runner mlflow-server connect`,
.github/actions/mlflow-tunnel): the stack's port-5000 Session document, the tunnel role's trust and policy, and a
real tunnel: StartSession through the fault proxy (moto has none: gpu_runner_testing/ssm_sessions.py), the session handed to
the plugin double as the AWS CLI hands it, and a real `mlflow server` answering through it.

Attacks that must fail: a shell on the server (no document name, the default shell document), another port
(AWS-StartPortForwardingSession, or a portNumber on ours), another instance, the passwords, stopping the server,
and the role for a pull request's or another repository's token."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.exceptions import ClientError
from mlflow.tracking import MlflowClient
from mlflow_server_stack import deployed
from parliament import analyze_policy_string

from gpu_runner.core.settings import load_settings
from gpu_runner.mlflow_server import mlflow_server, mlflow_tunnel
from gpu_runner.mlflow_server.mlflow_wake import MlflowServerError
from gpu_runner_testing import session_manager_plugin
from gpu_runner_testing.aws_fault_proxy import AwsFaultProxy
from gpu_runner_testing.github_double import DEFAULT_REPOSITORY
from gpu_runner_testing.gpu_runner_stack import REGION, managed_policies
from gpu_runner_testing.iam_requests import (
    ACCOUNT,
    Call,
    Request,
    allowed,
    record_calls,
    requests_for,
    web_identity_allowed,
)
from gpu_runner_testing.ssm_sessions import document_content
from gpu_runner_testing.stack_deploy import OIDC_URL, run_cli

_O, _N = DEFAULT_REPOSITORY.split("/")
_WF = f"{_O}/{_N}/.github/workflows"


@pytest.fixture(scope="module")
def server(stack: dict[str, Any], settings_file: Path) -> dict[str, Any]:
    """The server stack after the session's bootstrap (idempotent: test_mlflow_server may have deployed it)."""
    deployed_server = deployed(stack, settings_file)
    session, outputs = deployed_server["session"], deployed_server["outputs"]
    role = outputs["TunnelRoleArn"].rsplit("/", 1)[-1]
    return {
        **deployed_server,
        "role": session.client("iam").get_role(RoleName=role)["Role"],
        "policies": managed_policies(session, role),
    }


@pytest.fixture
def running_server(server: dict[str, Any]) -> str:
    """The server instance, running (a wake test of test_mlflow_server may have stopped it)."""
    ec2 = server["session"].client("ec2")
    instance_id = server["outputs"]["InstanceId"]
    ec2.start_instances(InstanceIds=[instance_id])
    ec2.get_waiter("instance_running").wait(InstanceIds=[instance_id], WaiterConfig={"Delay": 1})
    return instance_id


# --- what the stack grants ---------------------------------------------------------------------------------------


def test_up_prints_the_tunnel_role_variable(server: dict[str, Any]) -> None:
    steps = mlflow_server.next_steps(DEFAULT_REPOSITORY, REGION, server["outputs"])
    role = server["outputs"]["TunnelRoleArn"]
    assert f"gh variable set MLFLOW_TUNNEL_ROLE_ARN --repo {DEFAULT_REPOSITORY} --body {role}" in steps


def test_the_session_document_forwards_to_port_5000_only(
    server: dict[str, Any], stack: dict[str, Any]
) -> None:
    ssm = server["session"].client("ssm")
    name = server["outputs"]["TunnelDocument"]
    assert name == mlflow_server.tunnel_document_name(stack["settings"].project)
    assert ssm.get_document(Name=name)["DocumentType"] == "Session"
    content = document_content(ssm, name)
    assert content["sessionType"] == "Port"
    assert content["properties"]["portNumber"] == str(mlflow_server.PORT)
    assert content["properties"]["type"] == "LocalPortForwarding"
    # The server's private address, where MLflow listens, not localhost (the agent's default without a host):
    # through the tunnel no request comes from loopback, where MLflow serves its localhost-only Assistant API
    # (tests/runner/test_mlflow_server_boot.py::test_a_request_from_loopback_runs_commands_on_the_server).
    assert content["properties"]["host"] == _private_address(server)
    assert not ipaddress.ip_address(content["properties"]["host"]).is_loopback
    # The remote port and host are no parameters: nothing the caller passes can change them.
    assert set(content["parameters"]) == {"localPortNumber"}


def _private_address(server: dict[str, Any]) -> str:
    described = (
        server["session"].client("ec2").describe_instances(InstanceIds=[server["outputs"]["InstanceId"]])
    )
    return str(described["Reservations"][0]["Instances"][0]["PrivateIpAddress"])


TRUST_TABLE = [
    # (who, sub, may assume the tunnel role)
    ("a train branch's comment job", f"repo:{_O}/{_N}:ref:refs/heads/train/demo:job_workflow_ref:{_WF}/train.yml@refs/heads/train/demo", True),
    ("the default branch's stop workflow from a sweep branch, immutable ids", f"repo:{_O}@1001/{_N}@2002:ref:refs/heads/sweep/a:job_workflow_ref:{_WF}/gpu-runner-stop.yml@refs/heads/main", True),
    ("promote.yml in the production environment", f"repo:{_O}/{_N}:environment:production:job_workflow_ref:{_WF}/promote.yml@refs/heads/main", True),
    ("a pull request's workflow", f"repo:{_O}/{_N}:pull_request:job_workflow_ref:{_WF}/train.yml@refs/pull/7/merge", False),
    ("a pull request, immutable ids", f"repo:{_O}@1001/{_N}@2002:pull_request:job_workflow_ref:{_WF}/ci.yml@refs/pull/7/merge", False),
    ("a repository whose name starts with ours", f"repo:{_O}/{_N}-fork:ref:refs/heads/main:job_workflow_ref:{_O}/{_N}-fork/.github/workflows/x.yml@refs/heads/main", False),
    ("another owner's repository of the same name", f"repo:evil/{_N}:ref:refs/heads/main:job_workflow_ref:evil/{_N}/.github/workflows/x.yml@refs/heads/main", False),
]  # fmt: skip


@pytest.mark.parametrize(("who", "sub", "expected"), TRUST_TABLE, ids=[row[0] for row in TRUST_TABLE])
def test_tunnel_role_trusts_this_repository_but_no_pull_request(
    server: dict[str, Any], stack: dict[str, Any], who: str, sub: str, expected: bool
) -> None:
    trust = server["role"]["AssumeRolePolicyDocument"]
    claims = {f"{OIDC_URL}:aud": "sts.amazonaws.com", f"{OIDC_URL}:sub": sub}
    assert web_identity_allowed(trust, stack["oidc"], claims) is expected, who
    other = {**claims, f"{OIDC_URL}:aud": "https://github.com/evil"}
    assert not web_identity_allowed(trust, stack["oidc"], other), who


def _parliament(document: dict[str, Any]) -> list[str]:
    """parliament's findings but one: its bundled Service Authorization data (parliament 1.6.4,
    iam_definition.json) lists only ssm:resourceTag/* and aws:ResourceTag/* for StartSession, while the Systems
    Manager User Guide documents ssm:SessionDocumentAccessCheck on it ("Enforce a session document permission
    check for the AWS CLI"). Only that exact finding, on that key and action, is set aside."""
    return [
        f"{f.issue}: {f.detail}"
        for f in analyze_policy_string(json.dumps(document)).findings
        if not (f.issue == "UNKNOWN_CONDITION_FOR_ACTION" and _only_the_document_check(f.detail))
    ]


def _only_the_document_check(detail: Any) -> bool:
    text = json.dumps(detail)
    return "ssm:SessionDocumentAccessCheck" in text and "ssm:StartSession" in text


def _session_call(target: str, document: str | None, parameters: dict[str, list[str]] | None = None) -> Call:
    params: dict[str, Any] = {"Target": target}
    if document is not None:
        params["DocumentName"] = document
    if parameters is not None:
        params["Parameters"] = parameters
    return Call("ssm", "StartSession", REGION, params)


def _permits(policies: list[dict[str, Any]], call: Call) -> bool:
    requests = requests_for(
        call, instance_tags=lambda *_: {}, profile_role=str, spot_role_exists=lambda: True
    )
    return all(allowed(policies, request) for request in requests)


def test_tunnel_role_opens_port_5000_and_nothing_else(server: dict[str, Any]) -> None:
    policies, outputs = server["policies"], server["outputs"]
    instance, document = outputs["InstanceId"], outputs["TunnelDocument"]
    assert _parliament(policies[0]) == []
    assert _permits(policies, _session_call(instance, document, {"localPortNumber": ["0"]}))
    refused = {
        "a shell (no document: the default shell document)": _session_call(instance, None),
        "the default shell document by name": _session_call(instance, "SSM-SessionManagerRunShell"),
        "AWS's port forwarding document (any port)": _session_call(
            instance, "AWS-StartPortForwardingSession"
        ),
        "forwarding to another host of the VPC": _session_call(
            instance, "AWS-StartPortForwardingSessionToRemoteHost"
        ),
        "ssh over Session Manager": _session_call(instance, "AWS-StartSSHSession"),
        "our document on another instance": _session_call("i-0123456789abcdef0", document),
    }
    for what, call in refused.items():
        assert not _permits(policies, call), what
    arn = f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{instance}"
    for action in ("ec2:StopInstances", "ec2:TerminateInstances", "ec2:ModifyInstanceAttribute"):
        assert not allowed(policies, Request(action, arn)), action
    prefix = "/gpu-runner/" + DEFAULT_REPOSITORY
    for name in (
        f"{prefix}-mlflow-admin-password",
        f"{prefix}-mlflow-ci-password",
        f"{prefix}-github-credential",
    ):
        assert not allowed(
            policies, Request("ssm:GetParameter", f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter{name}")
        )
    assert not allowed(policies, Request("s3:GetObject", "arn:aws:s3:::any-bucket/mlflow-artifacts/x"))


def test_without_the_document_check_the_shell_would_be_open(server: dict[str, Any]) -> None:
    """What the ssm:SessionDocumentAccessCheck condition buys, with the evaluator's rule for the default document:
    the same grant without it starts the default shell (Systems Manager User Guide, "Enforce a session document
    permission check for the AWS CLI")."""
    (policy,) = server["policies"]
    statements = [
        {key: value for key, value in s.items() if key != "Condition"}
        if s["Action"] == "ssm:StartSession"
        else s
        for s in policy["Statement"]
    ]
    unchecked = [{**policy, "Statement": statements}]
    shell = _session_call(server["outputs"]["InstanceId"], None)
    assert _permits(unchecked, shell)
    assert not _permits(server["policies"], shell)


# --- the StartSession double, held to the service --------------------------------------------------------------


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[AwsFaultProxy]:
    with AwsFaultProxy(moto_endpoint) as running:
        yield running


def _ssm(proxy: AwsFaultProxy) -> Any:
    return boto3.client("ssm", region_name=REGION, endpoint_url=proxy.url)


def test_start_session_double_answers_in_the_model_s_shape(
    proxy: AwsFaultProxy, server: dict[str, Any], running_server: str
) -> None:
    document = server["outputs"]["TunnelDocument"]
    answer = _ssm(proxy).start_session(Target=running_server, DocumentName=document,
                                       Parameters={"localPortNumber": ["0"]})  # fmt: skip
    shape = (
        botocore.session.get_session().get_service_model("ssm").operation_model("StartSession").output_shape
    )
    assert set(answer) - {"ResponseMetadata"} == set(shape.members)
    assert 1 <= len(answer["SessionId"]) <= 96 and len(answer["TokenValue"]) <= 300
    assert answer["StreamUrl"].startswith(f"wss://ssmmessages.{REGION}.amazonaws.com/v1/data-channel/")
    assert _ssm(proxy).terminate_session(SessionId=answer["SessionId"])["SessionId"] == answer["SessionId"]


@pytest.mark.parametrize(
    ("document", "parameters", "code"),
    [
        ("ours", {"portNumber": ["22"]}, "ValidationException"),
        ("ours", {"localPortNumber": ["70000"]}, "ValidationException"),
        ("mlflow-tunnel-nobody", {}, "InvalidDocument"),
        (None, {}, "InvalidDocument"),
    ],
    ids=[
        "a port parameter our document lacks",
        "a local port out of range",
        "an unknown document",
        "no document",
    ],
)
def test_start_session_double_refuses_what_the_service_refuses(
    proxy: AwsFaultProxy, server: dict[str, Any], running_server: str, document: str | None,
    parameters: dict[str, list[str]], code: str,
) -> None:  # fmt: skip
    kwargs: dict[str, Any] = (
        {"Target": running_server, "Parameters": parameters} if parameters else {"Target": running_server}
    )
    if document is not None:
        kwargs["DocumentName"] = server["outputs"]["TunnelDocument"] if document == "ours" else document
    with pytest.raises(ClientError) as refused:
        _ssm(proxy).start_session(**kwargs)
    assert refused.value.response["Error"]["Code"] == code
    errors = (
        botocore.session.get_session().get_service_model("ssm").operation_model("StartSession").error_shapes
    )
    assert code in {e.name for e in errors} | {"ValidationException"}


# --- connect: a real tunnel to a real MLflow ---------------------------------------------------------------------


@pytest.fixture
def plugin_env(
    tmp_path: Path, mlflow_server: str, running_server: str, server: dict[str, Any]
) -> dict[str, str]:
    """The plugin double first on PATH, and the server instance's port 5000 standing at the real MLflow server."""
    session_manager_plugin.install(tmp_path / "bin")
    port = mlflow_server.rsplit(":", 1)[-1]
    return {
        "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        session_manager_plugin.TARGETS_ENV: json.dumps(
            {f"{running_server}:{_private_address(server)}:5000": f"127.0.0.1:{port}"}
        ),
        session_manager_plugin.RECORD_ENV: str(tmp_path / "connections.txt"),
        session_manager_plugin.ARGV_ENV: str(tmp_path / "argv.jsonl"),
    }


def _kill(pid: int) -> None:
    with suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)


def test_connect_reaches_mlflow_through_the_tunnel_with_only_the_tunnel_role(
    proxy: AwsFaultProxy, server: dict[str, Any], settings_file: Path, plugin_env: dict[str, str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    for key, value in plugin_env.items():
        monkeypatch.setenv(key, value)
    session = boto3.Session(region_name=REGION)
    calls = record_calls(session)
    ec2 = session.client("ec2", endpoint_url=proxy.url)
    ssm = session.client("ssm", endpoint_url=proxy.url)
    settings = load_settings(settings_file)
    tunnel = mlflow_tunnel.connect(
        ec2, ssm, settings, log_file=tmp_path / "tunnel.log", wake=False, timeout_seconds=60
    )
    try:
        assert tunnel.instance_id == server["outputs"]["InstanceId"]
        assert tunnel.tracking_uri.startswith("http://127.0.0.1:")
        # A real MLflow call through it: an experiment created and read back.
        client = MlflowClient(tracking_uri=tunnel.tracking_uri)
        experiment = client.create_experiment(f"through-the-tunnel-{tmp_path.name}")
        assert client.get_experiment(experiment).name == f"through-the-tunnel-{tmp_path.name}"
        assert (tmp_path / "connections.txt").read_text().count("\n") >= 2
    finally:
        _kill(tunnel.pid)
    # Every call connect made is one the tunnel role may make, and it made StartSession on our document.
    assert [c.operation for c in calls].count("StartSession") == 1
    for call in calls:
        for request in requests_for(
            call, instance_tags=lambda *_: {}, profile_role=str, spot_role_exists=lambda: True
        ):
            assert allowed(server["policies"], request), request


def test_connect_hands_the_session_to_the_plugin_as_the_aws_cli_does(
    proxy: AwsFaultProxy, server: dict[str, Any], settings_file: Path, plugin_env: dict[str, str], tmp_path: Path,
    running_server: str, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The same session started by the real AWS CLI (awscli in the dev group) and by connect: the plugin sees the
    same argument layout and the same answer keys from both."""
    for key, value in plugin_env.items():
        monkeypatch.setenv(key, value)
    document = server["outputs"]["TunnelDocument"]
    aws = Path(sys.executable).parent / "aws"
    cli_run = subprocess.Popen(
        [str(aws), "ssm", "start-session", "--region", REGION, "--endpoint-url", proxy.url, "--target",
         running_server, "--document-name", document, "--parameters", '{"localPortNumber":["0"]}'],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True, env=dict(os.environ),
    )  # fmt: skip
    argv_file = tmp_path / "argv.jsonl"
    try:
        _wait_for_lines(argv_file, 1, cli_run)
    finally:
        _kill(cli_run.pid)
    session = boto3.Session(region_name=REGION)
    tunnel = mlflow_tunnel.connect(
        session.client("ec2", endpoint_url=proxy.url), session.client("ssm", endpoint_url=proxy.url),
        load_settings(settings_file), log_file=tmp_path / "tunnel.log", wake=False, timeout_seconds=60,
    )  # fmt: skip
    _kill(tunnel.pid)
    by_cli, by_us = (json.loads(line) for line in argv_file.read_text().splitlines())
    assert by_cli["argv"][0] == by_us["argv"][0] == session_manager_plugin.RESPONSE_ENV
    assert by_cli["argv"][1:3] == by_us["argv"][1:3] == [REGION, "StartSession"]
    assert by_cli["argv"][5] == by_us["argv"][5] == proxy.url
    assert (
        set(json.loads(by_cli["argv"][4]))
        == set(json.loads(by_us["argv"][4]))
        == {"Target", "DocumentName", "Parameters"}
    )
    assert set(by_cli["response"]) == set(by_us["response"]) == {"SessionId", "TokenValue", "StreamUrl"}


def _wait_for_lines(path: Path, count: int, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().splitlines()) >= count:
            return
        assert process.poll() is None, f"aws ssm start-session exited {process.returncode}"
        time.sleep(0.2)
    raise AssertionError(f"the plugin double was not called within {timeout} s")


def test_connect_to_a_stopped_server_without_wake_names_the_refusal(
    proxy: AwsFaultProxy, server: dict[str, Any], settings_file: Path, plugin_env: dict[str, str], tmp_path: Path,
    running_server: str, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    for key, value in plugin_env.items():
        monkeypatch.setenv(key, value)
    ec2 = boto3.client("ec2", region_name=REGION)
    ec2.stop_instances(InstanceIds=[running_server])
    ec2.get_waiter("instance_stopped").wait(InstanceIds=[running_server], WaiterConfig={"Delay": 1})
    code, _out, err = run_cli(
        ["--settings", str(settings_file), "mlflow-server", "connect", "--no-wake", "--timeout", "20",
         "--log-file", str(tmp_path / "tunnel.log")],
        {"AWS_ENDPOINT_URL": proxy.url, "GITHUB_OUTPUT": str(tmp_path / "out")},
    )  # fmt: skip
    assert code != 0 and "TargetNotConnected" in err, err
    assert not (tmp_path / "out").exists() and not (tmp_path / "connections.txt").exists()


def test_connect_writes_the_step_outputs(
    proxy: AwsFaultProxy, settings_file: Path, plugin_env: dict[str, str], tmp_path: Path
) -> None:
    outputs = tmp_path / "github-output"
    code, _out, err = run_cli(
        ["--settings", str(settings_file), "mlflow-server", "connect", "--no-wake", "--timeout", "60",
         "--log-file", str(tmp_path / "tunnel.log")],
        {**plugin_env, "AWS_ENDPOINT_URL": proxy.url, "GITHUB_OUTPUT": str(outputs)},
    )  # fmt: skip
    assert code == 0, err
    written = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
    try:
        assert set(written) == {"tracking-uri", "pid"}
        assert MlflowClient(tracking_uri=written["tracking-uri"]).search_experiments()
    finally:
        _kill(int(written["pid"]))


def test_connect_without_a_server_says_what_to_do(
    tmp_path: Path, settings_file: Path, moto_endpoint: str
) -> None:
    import yaml

    other = tmp_path / "settings.yaml"
    other.write_text(
        yaml.safe_dump({**yaml.safe_load(settings_file.read_text()), "project": "no-server-here"})
    )
    session = boto3.Session(region_name=REGION)
    with pytest.raises(MlflowServerError, match=r"make mlflow-server-up.*MLFLOW_TUNNEL_ROLE_ARN"):
        mlflow_tunnel.connect(session.client("ec2"), session.client("ssm"), load_settings(other),
                              log_file=tmp_path / "t.log")  # fmt: skip


def test_an_old_plugin_is_refused_before_any_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plugin = tmp_path / "session-manager-plugin"
    plugin.write_text("#!/bin/sh\necho 1.2.463.0\n")
    plugin.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MlflowServerError, match=re.escape("1.2.463.0 is older than 1.2.497.0")):
        mlflow_tunnel.check_plugin_version()


def test_the_plugin_double_refuses_another_command_line(tmp_path: Path) -> None:
    assert session_manager_plugin.main(["session-manager-plugin", "{}", REGION]) == 1
    assert session_manager_plugin.main(["p", "{}", REGION, "TerminateSession", "", "{}", "http://x"]) == 1
