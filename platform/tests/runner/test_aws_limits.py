"""Each AWS limit moto ignores: just under passes, just over is refused with AWS's error code, through the real
boto3 client, in both places the tests reach AWS (the runner tests' botocore hook, the act story's fault proxy)."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Callable, Iterator
from typing import Any
from xml.etree import ElementTree

import boto3
import pytest
from aws_limit_probes import CASES, Clients, run
from botocore.exceptions import ClientError

from gpu_runner_testing import aws_limits
from gpu_runner_testing.aws_constants import REGION
from gpu_runner_testing.aws_fault_proxy import AwsFaultProxy
from gpu_runner_testing.aws_faults import AwsFaults, ec2_error


@pytest.mark.parametrize(("limit", "under", "over", "code", "message"), CASES, ids=[c[0] for c in CASES])
def test_just_under_passes_and_just_over_is_refused_as_aws_does(
    clients: Clients,
    limit: str,
    under: Callable[[Clients], None],
    over: Callable[[Clients], None],
    code: str,
    message: str,
) -> None:
    under(clients)
    assert clients.refused() == [], limit
    with pytest.raises(ClientError) as refused:
        over(clients)
    error = refused.value.response["Error"]
    assert error["Code"] == code, error
    assert message in error["Message"], error
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert clients.refused() == [code]


def test_a_refused_launch_creates_nothing(clients: Clients) -> None:
    """The refusal is AWS's answer, not moto's: nothing exists afterwards, as on AWS."""
    with pytest.raises(ClientError):
        run(clients, user_data="u" * 16385)
    assert live(clients.ec2) == []


def test_user_data_limit_is_on_the_raw_bytes_not_the_base64() -> None:
    """16,384 raw bytes are 21,848 characters of base64, which EC2 accepts: the limit is before encoding."""
    raw = b"u" * 16384
    body = f"Action=RunInstances&UserData={base64.b64encode(raw).decode()}"
    assert len(base64.b64encode(raw)) > 16384
    assert aws_limits.check("RunInstances", body) is None
    assert aws_limits.check(
        "RunInstances", f"Action=RunInstances&UserData={base64.b64encode(raw + b'u').decode()}"
    )


def test_an_error_message_is_valid_xml_whatever_the_value() -> None:
    """A refused tag value is echoed in the message: XML-special characters must not break EC2's error document."""
    ElementTree.fromstring(ec2_error("InvalidParameterValue", "Tag value <&> exceeds"))


@contextlib.contextmanager
def reach_moto(
    kind: str, moto_endpoint: str
) -> Iterator[tuple[boto3.Session, str | None, Callable[[], list[str]]]]:
    """A boto3 session and endpoint that reach moto through one of the two doubles, and what it refused."""
    session = boto3.Session(region_name=REGION)
    if kind == "botocore hook":
        faults = AwsFaults(session)
        yield session, None, lambda: [refusal.code for _, refusal in faults.refused]
        return
    with AwsFaultProxy(moto_endpoint) as proxy:
        yield session, proxy.url, lambda: [call.injected for call in proxy.calls if call.injected]


@pytest.fixture(scope="module")
def moto_ami(amazon_image: Callable[[str], str]) -> str:
    return amazon_image(REGION)


# The same limits over the wire (the fault proxy) are in the slow tier; the botocore hook checks each on every push.
@pytest.fixture(params=["botocore hook", pytest.param("fault proxy", marks=pytest.mark.slow)])
def clients(request: pytest.FixtureRequest, moto_endpoint: str, moto_ami: str) -> Iterator[Clients]:
    with reach_moto(request.param, moto_endpoint) as (session, endpoint, refused):
        ssm = session.client("ssm", endpoint_url=endpoint)
        ec2 = session.client("ec2", endpoint_url=endpoint)
        yield Clients(ssm, ec2, moto_ami, refused)
        # moto keeps state for the session: end what the passing calls created.
        ids = [i["InstanceId"] for i in live(ec2)]
        if ids:
            ec2.terminate_instances(InstanceIds=ids)


def live(ec2: Any) -> list[dict[str, Any]]:
    reply = ec2.describe_instances(
        Filters=[
            {"Name": "tag:limits-test", "Values": ["yes"]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ]
    )
    return [i for r in reply["Reservations"] for i in r["Instances"]]
