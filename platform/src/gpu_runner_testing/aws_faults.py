"""Inject AWS error responses into real boto3 clients, at the HTTP layer.

moto has no notion of capacity, quotas or throttling. A `before-send` hook answers chosen requests with the real
EC2/SSM error document instead of sending them, so botocore parses, classifies and (for throttling) retries them
exactly as it would a real AWS answer. Every other request goes to the moto server untouched.

The same hook answers services moto does not have (the Price List API) or answers it cannot give (realistic
spot prices) with a successful body shaped like AWS's (`AwsFaults.answer`).

Every request no injected fault answered is held against AWS's documented limits that moto ignores (aws_limits.py:
SSM value size per tier, user-data size, tag lengths and counts, ClientToken length): one that crosses a limit gets
AWS's refusal instead of moto's success, and is recorded in `AwsFaults.refused`.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

import boto3
from botocore.awsrequest import AWSResponse

from gpu_runner_testing import aws_limits

Predicate = Callable[[dict[str, str]], bool]


class _Body:
    def __init__(self, payload: bytes) -> None:
        self._payload = payload

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._payload


@dataclass
class _Fault:
    service: str
    operation: str
    code: str
    status: int
    remaining: int
    when: Predicate | None
    message: str
    body: bytes | None = None  # a successful answer instead of an error


def ec2_error(code: str, message: str) -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>{code}</Code>'
        f"<Message>{escape(message)}</Message></Error></Errors><RequestID>00000000-fault</RequestID></Response>"
    ).encode()


def query_error(code: str, message: str) -> bytes:
    """The error document of the query-protocol services other than EC2 (CloudFormation, IAM, STS)."""
    return (
        f"<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code><Message>{escape(message)}</Message></Error>"
        "<RequestId>00000000-fault</RequestId></ErrorResponse>"
    ).encode()


QUERY_SERVICES = {"cloudformation", "iam", "sts"}


def s3_error(code: str, message: str) -> bytes:
    """S3's REST error document (Amazon S3 API reference, "Error responses": Code, Message, RequestId, HostId)."""
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{escape(message)}</Message>'
        "<RequestId>0000FAULT</RequestId><HostId>fault</HostId></Error>"
    ).encode()


def json_error(code: str, message: str) -> bytes:
    return json.dumps({"__type": code, "message": message}).encode()


def request_params(request: Any) -> dict[str, str]:
    """The flat parameters of a query-protocol request (EC2), or the JSON body (SSM)."""
    body = request.body or b""
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    if body.startswith("{"):
        return {k: json.dumps(v) if not isinstance(v, str) else v for k, v in json.loads(body).items()}
    return {key: values[0] for key, values in parse_qs(body).items()}


# moto writes "User initiated (2026-12-01 10:11:12 UTC)" where EC2 writes "... GMT)" (real describe-instances
# output, e.g. "User initiated (2018-06-26 07:19:42 GMT)"; getmoto/moto#7486): answer in EC2's form.
_MOTO_TRANSITION_TIME = re.compile(rb"(\(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) UTC\)")


def ec2_transition_times_in_gmt(response_dict: dict[str, Any], **_: Any) -> None:
    """`before-parse` hook: rewrite moto's StateTransitionReason times into the form EC2 really sends."""
    body = response_dict.get("body")
    if isinstance(body, bytes):
        response_dict["body"] = _MOTO_TRANSITION_TIME.sub(rb"\1 GMT)", body)


class AwsFaults:
    """Registered on a boto3 Session: every client created from it afterwards can be given faults."""

    def __init__(self, session: boto3.Session) -> None:
        self.session = session
        self.injected: list[tuple[str, str, str, dict[str, str]]] = []
        # (operation, refusal) of each request that crossed a documented AWS limit
        self.refused: list[tuple[str, aws_limits.Refusal]] = []
        self._faults: list[_Fault] = []
        self._lock = threading.Lock()
        session.events.register("before-send", self._before_send)
        session.events.register("before-parse.ec2", ec2_transition_times_in_gmt)

    def fail(
        self,
        service: str,
        operation: str,
        code: str,
        *,
        times: int = 1,
        status: int = 400,
        when: Predicate | None = None,
        message: str = "",
    ) -> None:
        """Answer the next `times` matching calls with `code` (times=-1: every call)."""
        with self._lock:
            self._faults.append(_Fault(service, operation, code, status, times, when, message))

    def answer(
        self,
        service: str,
        operation: str,
        body: bytes | dict[str, Any],
        *,
        times: int = 1,
        when: Predicate | None = None,
    ) -> None:
        """Answer the next `times` matching calls with HTTP 200 and `body` (a dict is sent as JSON, for the
        JSON-protocol services; EC2 needs its XML as bytes)."""
        payload = json.dumps(body).encode() if isinstance(body, dict) else body
        with self._lock:
            self._faults.append(_Fault(service, operation, "", 200, times, when, "", payload))

    def _before_send(self, request: Any, **kwargs: Any) -> AWSResponse | None:
        event_name: str = kwargs.get("event_name", "")
        _, service, operation = [*event_name.split("."), "", ""][:3]
        # An S3 request's body is the object itself, not parameters: predicates see its method and URL (bucket, key).
        params = (
            {"method": request.method, "url": request.url} if service == "s3" else request_params(request)
        )
        with self._lock:
            for fault in self._faults:
                if (fault.service, fault.operation) != (service, operation) or fault.remaining == 0:
                    continue
                if fault.when is not None and not fault.when(params):
                    continue
                fault.remaining -= 1 if fault.remaining > 0 else 0
                self.injected.append((service, operation, fault.code or "answered", params))
                if fault.body is not None:
                    return AWSResponse(request.url, 200, {}, _Body(fault.body))
                message = fault.message or f"injected {fault.code}"
                if service == "ec2":
                    payload = ec2_error(fault.code, message)
                elif service in QUERY_SERVICES:
                    payload = query_error(fault.code, message)
                elif service == "s3":
                    payload = s3_error(fault.code, message)
                else:
                    payload = json_error(fault.code, message)
                return AWSResponse(request.url, fault.status, {}, _Body(payload))
        return self._enforce_limits(request, operation)

    def _enforce_limits(self, request: Any, operation: str) -> AWSResponse | None:
        body = request.body or b""
        refusal = aws_limits.check(
            operation, body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        )
        if refusal is None:
            return None
        with self._lock:
            self.refused.append((operation, refusal))
        payload = (
            ec2_error(refusal.code, refusal.message)
            if refusal.service == "ec2"
            else json_error(refusal.code, refusal.message)
        )
        return AWSResponse(request.url, refusal.status, {}, _Body(payload))
