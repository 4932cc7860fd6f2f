"""Fault injection for the offline story: an AWS-aware proxy in front of moto, and crash-by-SIGKILL.

The workflow's gpu-runner steps reach "AWS" through AWS_ENDPOINT_URL, which the configure-aws-credentials double
points at this proxy. It forwards every request to the moto server unchanged, except those a rule matches:
- answer with the real EC2 (query/XML) or SSM (JSON) error document, so botocore classifies and retries it
  exactly as a real AWS answer (throttling, capacity, quota);
- or forward it, then SIGKILL the calling command and drop the connection: a crash right after the call
  succeeded on the AWS side (the created instance exists, the caller never learns its id).
Every request no rule answers is held against AWS's documented limits that moto ignores (gpu_runner_testing/aws_limits.py,
the same rules as the unit tests' botocore hook): one that crosses a limit gets AWS's refusal, never moto's success.
Hand-written because no offline proxy knows EC2 and SSM actions; it binds 127.0.0.1 only.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from gpu_runner_testing import aws_limits
from gpu_runner_testing.aws_faults import ec2_error, json_error
from gpu_runner_testing.local_http import LocalHttpServer
from gpu_runner_testing.ssm_sessions import SsmSessions

# The JSON protocol's targets of the two Session Manager calls (botocore's ssm model: targetPrefix AmazonSSM).
SESSION_TARGETS = ("AmazonSSM.StartSession", "AmazonSSM.TerminateSession")
# Response status of each injected error, as AWS sends it.
STATUS = {
    "RequestLimitExceeded": 503,
    "ThrottlingException": 400,
    "InsufficientInstanceCapacity": 500,
    "VcpuLimitExceeded": 400,
}


def kill_matching(*words: str, under: Path | None = None) -> list[int]:
    """SIGKILL every process (never this one) whose argv holds each of `words` as a whole argument or as the
    name of an executable file it runs (`gpu-runner` matches `.venv/bin/gpu-runner`, not the role ARN
    `...:role/gpu-runner` on act's own command line); with `under`, only processes whose working directory lies
    inside it, so a story running beside another kills its own processes only. A crash with no clean-up of any
    kind, like an OOM kill or a runner machine that vanished."""
    killed = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = [a.decode(errors="replace") for a in (entry / "cmdline").read_bytes().split(b"\0") if a]
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:
            continue
        if not argv or (under is not None and not cwd.is_relative_to(under)):
            continue
        if all(any(_names(arg, word) for arg in argv) for word in words):
            try:
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
            except ProcessLookupError:
                pass
    return killed


def _names(arg: str, word: str) -> bool:
    return arg == word or ("/" in arg and Path(arg).name == word and os.access(arg, os.X_OK))


@dataclass
class Rule:
    """Matches `action` (e.g. RunInstances, PutParameter) and, optionally, a predicate on the raw body."""

    action: str
    times: int = 1  # -1: every matching request
    error: str = ""  # an AWS error code to answer with, or "" to forward
    when: Callable[[str], bool] | None = None
    kill: tuple[str, ...] = ()  # SIGKILL the processes matching these needles (the caller crashes)
    forward: bool = True  # with `kill`: crash after the call reached AWS (True) or before (False)
    hits: int = 0
    answer: Callable[[str], bytes] | None = None  # a successful answer (EC2 XML, or JSON) built from the body


@dataclass
class ProxyCall:
    action: str
    status: int
    injected: str = ""


@dataclass
class AwsFaultProxy(LocalHttpServer):
    upstream: str
    rules: list[Rule] = field(default_factory=list)
    calls: list[ProxyCall] = field(default_factory=list)
    killed: list[int] = field(default_factory=list)
    under: Path | None = None  # a rule's kill reaches only processes working inside it (the story's scratch)
    # StartSession / TerminateSession, which moto lacks: answered from moto's state (gpu_runner_testing/ssm_sessions.py).
    sessions: SsmSessions | None = None

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        if self.sessions is None:
            self.sessions = SsmSessions(self.upstream)
        parts = urlsplit(self.upstream)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                proxy._handle(self)

            def log_message(self, format: str, *args: object) -> None:
                pass

        super().__init__(Handler)

    def count(self, action: str, injected: str | None = None) -> int:
        return sum(
            1 for c in self.calls if c.action == action and (injected is None or c.injected == injected)
        )

    @staticmethod
    def _action(handler: BaseHTTPRequestHandler, body: str) -> str:
        target = handler.headers.get("X-Amz-Target", "")
        if target:  # JSON protocol (SSM): "AmazonSSM.PutParameter"
            return target.rpartition(".")[2]
        return parse_qs(body).get("Action", [""])[0]  # query protocol (EC2)

    def _match(self, action: str, body: str) -> Rule | None:
        with self._lock:
            for rule in self.rules:
                if rule.action == action and rule.times != 0 and (rule.when is None or rule.when(body)):
                    rule.times -= 1 if rule.times > 0 else 0
                    rule.hits += 1
                    return rule
        return None

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        raw = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        body = raw.decode(errors="replace")
        action = self._action(handler, body)
        rule = self._match(action, body)
        if rule and rule.error:
            json_protocol = bool(handler.headers.get("X-Amz-Target"))
            status = STATUS.get(rule.error, 400)
            message = f"injected by the e2e fault proxy: {rule.error}"
            payload = json_error(rule.error, message) if json_protocol else ec2_error(rule.error, message)
            self.calls.append(ProxyCall(action, status, rule.error))
            self._reply(
                handler,
                status,
                [("Content-Type", "application/x-amz-json-1.1" if json_protocol else "text/xml")],
                payload,
            )
            return
        if rule and rule.answer:
            self.calls.append(ProxyCall(action, 200, "answered"))
            json_protocol = bool(handler.headers.get("X-Amz-Target"))
            content_type = "application/x-amz-json-1.1" if json_protocol else "text/xml"
            self._reply(handler, 200, [("Content-Type", content_type)], rule.answer(body))
            return
        refusal = aws_limits.check(action, body)  # a rule with an error answered above
        if refusal is not None:
            self.calls.append(ProxyCall(action, refusal.status, refusal.code))
            self._refuse(handler, refusal)
            return
        if rule and rule.kill and not rule.forward:
            self.calls.append(ProxyCall(action, 0, "crash"))
            self.killed += kill_matching(*rule.kill, under=self.under)
            handler.close_connection = True
            return
        if self.sessions is not None and handler.headers.get("X-Amz-Target", "") in SESSION_TARGETS:
            status, document = self.sessions.answer(action, body, handler.headers.get("Authorization", ""))
            self.calls.append(ProxyCall(action, status, "answered"))
            self._reply(
                handler,
                status,
                [("Content-Type", "application/x-amz-json-1.1")],
                json.dumps(document).encode(),
            )
            return
        status, headers, payload = self._forward(handler, raw)
        self.calls.append(ProxyCall(action, status, "crash" if rule and rule.kill else ""))
        if rule and rule.kill:
            self.killed += kill_matching(*rule.kill, under=self.under)
            handler.close_connection = True
            return  # the caller is dead: it never sees the answer
        self._reply(handler, status, headers, payload)

    def _refuse(self, handler: BaseHTTPRequestHandler, refusal: aws_limits.Refusal) -> None:
        if refusal.service == "ec2":
            payload, content_type = ec2_error(refusal.code, refusal.message), "text/xml"
        else:
            payload, content_type = json_error(refusal.code, refusal.message), "application/x-amz-json-1.1"
        self._reply(handler, refusal.status, [("Content-Type", content_type)], payload)

    def _forward(
        self, handler: BaseHTTPRequestHandler, raw: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        connection = http.client.HTTPConnection(*self._upstream, timeout=60)
        try:
            skip = {"host", "content-length", "connection"}
            headers = {k: v for k, v in handler.headers.items() if k.lower() not in skip}
            connection.request("POST", handler.path, body=raw, headers=headers)
            response = connection.getresponse()
            payload = response.read()
            kept = [
                (k, v)
                for k, v in response.getheaders()
                if k.lower() not in {"transfer-encoding", "connection", "content-length"}
            ]
            return response.status, kept, payload
        finally:
            connection.close()

    @staticmethod
    def _reply(
        handler: BaseHTTPRequestHandler, status: int, headers: list[tuple[str, str]], payload: bytes
    ) -> None:
        handler.send_response(status)
        for key, value in headers:
            handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)
