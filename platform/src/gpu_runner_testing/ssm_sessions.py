"""Session Manager's StartSession and TerminateSession, which moto 5.2.5 does not implement (its ssm responses have
neither), answered by the fault proxy in front of moto from moto's own state.

What it checks, as the service does (StartSession API reference; shapes and errors from botocore's ssm model:
StartSessionRequest Target 1-400 characters and required, DocumentName `^[a-zA-Z0-9_\\-.:/]{3,128}$`, Parameters
name 1-255 -> values; errors InvalidDocument, TargetNotConnected, InternalServerError):
- the target is an instance moto knows and it is running (a stopped box has no SSM agent online:
  TargetNotConnected);
- the document exists and is a Session document (InvalidDocument); no name is the default shell document
  SSM-SessionManagerRunShell, which only exists once an account saved Session Manager preferences (Systems Manager
  User Guide, "Start a default shell session by specifying the default session document in IAM policies"): moto's
  account has none, so it is InvalidDocument here too;
- every parameter is declared by the document and matches its allowedPattern / allowedValues. The service's
  answer to a bad parameter is not documented for StartSession; the common ValidationException (400, "Common
  Errors" of the Systems Manager API reference) stands for it.
IAM is not checked here (moto checks none): the policy tests evaluate StartSession with gpu_runner_testing/iam_requests.py.

The answer has StartSessionResponse's three members within botocore's limits (SessionId 1-96 characters,
TokenValue at most 300); StreamUrl in the form of the API reference's example (wss://ssmmessages.<region>.amazonaws
.com/v1/data-channel/<session id>?role=publish_subscribe). session_manager_plugin.py is what consumes it.
"""

from __future__ import annotations

import ast
import json
import re
import secrets
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.exceptions import ClientError

DEFAULT_DOCUMENT = "SSM-SessionManagerRunShell"
DOCUMENT_NAME = re.compile(r"[a-zA-Z0-9_\-.:/]{3,128}")
TARGET_MAX = 400
PARAMETER_NAME_MAX = 255
SESSION_ID_MAX = 96
TOKEN_MAX = 300
# The SigV4 credential scope names the region: Credential=<key>/<date>/<region>/<service>/aws4_request.
CREDENTIAL_SCOPE = re.compile(r"Credential=([^/,\s]+)/\d{8}/([a-z0-9-]+)/ssm/aws4_request")


@dataclass(frozen=True)
class Session:
    session_id: str
    target: str
    document: str
    parameters: Mapping[str, list[str]]


def document_content(ssm: Any, name: str) -> dict[str, Any]:
    """A document's content as a mapping. The service returns the JSON text; moto keeps the Content a
    CloudFormation template gave as an object and returns it unserialized (in server mode as the object's Python
    repr, which is no JSON: hence literal_eval, which evaluates literals only)."""
    content = ssm.get_document(Name=name)["Content"]
    if isinstance(content, dict):
        return content
    try:
        return json.loads(content)
    except json.JSONDecodeError:
        parsed = ast.literal_eval(content)
        if not isinstance(parsed, dict):
            raise
        return parsed


def resolved_properties(content: Mapping[str, Any], parameters: Mapping[str, list[str]]) -> dict[str, str]:
    """The document's `properties` with each parameter reference (the name in double braces) replaced by the
    given value or the parameter's default."""
    declared = content.get("parameters", {})
    values = {
        name: (parameters.get(name) or [str(spec.get("default", ""))])[0] for name, spec in declared.items()
    }

    def substitute(text: str) -> str:
        return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: values.get(m.group(1), m.group(0)), text)

    return {key: substitute(str(value)) for key, value in content.get("properties", {}).items()}


class Refused(Exception):
    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


@dataclass
class SsmSessions:
    upstream: str  # the moto server
    sessions: dict[str, Session] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def _client(self, service: str, region: str) -> Any:
        return boto3.client(
            service, region_name=region, endpoint_url=self.upstream, aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )  # fmt: skip

    def answer(self, action: str, body: str, authorization: str) -> tuple[int, dict[str, Any]]:
        scope = CREDENTIAL_SCOPE.search(authorization)
        if scope is None:
            return 400, _error("IncompleteSignature", "no SigV4 credential scope for ssm in Authorization")
        caller, region = scope.group(1), scope.group(2)
        try:
            request = json.loads(body or "{}")
            if action == "StartSession":
                return 200, self._start(request, region, caller)
            return 200, self._terminate(request)
        except Refused as refused:
            return refused.status, _error(refused.code, refused.message)

    def _start(self, request: Mapping[str, Any], region: str, caller: str) -> dict[str, Any]:
        target = request.get("Target")
        if not isinstance(target, str) or not 1 <= len(target) <= TARGET_MAX:
            raise Refused(
                "ValidationException",
                "1 validation error detected: Value at 'target' failed to satisfy constraint",
            )
        document = request.get("DocumentName", DEFAULT_DOCUMENT)
        if not DOCUMENT_NAME.fullmatch(document):
            raise Refused(
                "ValidationException", f"Value '{document}' at 'documentName' failed to satisfy constraint"
            )
        parameters = request.get("Parameters", {})
        self._check_target(target, region)
        content = self._session_document(document, region)
        self._check_parameters(document, content, parameters)
        session_id = f"{caller}-{secrets.token_hex(9)}"[-SESSION_ID_MAX:]
        with self._lock:
            self.sessions[session_id] = Session(session_id, target, document, parameters)
        return {
            "SessionId": session_id,
            "TokenValue": secrets.token_urlsafe(96)[:TOKEN_MAX],
            "StreamUrl": f"wss://ssmmessages.{region}.amazonaws.com/v1/data-channel/{session_id}?role=publish_subscribe",
        }

    def _terminate(self, request: Mapping[str, Any]) -> dict[str, Any]:
        session_id = str(request.get("SessionId", ""))
        if not 1 <= len(session_id) <= SESSION_ID_MAX:
            raise Refused("ValidationException", "Value at 'sessionId' failed to satisfy constraint")
        with self._lock:
            self.sessions.pop(session_id, None)
        return {"SessionId": session_id}

    def _check_target(self, target: str, region: str) -> None:
        try:
            reservations = self._client("ec2", region).describe_instances(InstanceIds=[target])[
                "Reservations"
            ]
        except ClientError:
            reservations = []
        states = [i["State"]["Name"] for r in reservations for i in r["Instances"]]
        if states != ["running"]:
            raise Refused("TargetNotConnected", f"{target} is not connected.")

    def _session_document(self, document: str, region: str) -> dict[str, Any]:
        # GetDocument, not DescribeDocument: moto's DescribeDocument fails on a document CloudFormation created
        # (it hashes the Content, which it kept as an object: see document_content).
        ssm = self._client("ssm", region)
        try:
            kind = ssm.get_document(Name=document)["DocumentType"]
        except ClientError:
            raise Refused("InvalidDocument", f"Document with name {document} does not exist.") from None
        if kind != "Session":
            raise Refused("InvalidDocument", f"{document} is a {kind} document, not a Session document.")
        return document_content(ssm, document)

    @staticmethod
    def _check_parameters(document: str, content: Mapping[str, Any], parameters: Any) -> None:
        declared = content.get("parameters", {})
        if not isinstance(parameters, dict):
            raise Refused("ValidationException", "Parameters must be a map of names to lists of values")
        for name, values in parameters.items():
            if not 1 <= len(name) <= PARAMETER_NAME_MAX or name not in declared:
                raise Refused("ValidationException", f"{document} has no parameter {name}")
            spec = declared[name]
            for value in values:
                pattern = spec.get("allowedPattern")
                if pattern is not None and re.search(pattern, value) is None:
                    raise Refused("ValidationException", f"{name}: '{value}' does not match {pattern}")
                allowed = spec.get("allowedValues")
                if allowed is not None and value not in allowed:
                    raise Refused("ValidationException", f"{name}: '{value}' is not one of {allowed}")


def _error(code: str, message: str) -> dict[str, Any]:
    # The JSON protocol's error document: __type and message (botocore's JSON parser reads both).
    return {"__type": code, "message": message}
