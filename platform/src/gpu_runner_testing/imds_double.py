"""A local instance metadata service (IMDSv2) for the spot interruption watcher: token first, then the notices.

Speaks the real protocol: PUT /latest/api/token with a TTL header returns a token; every GET needs it (401
otherwise); a notice path answers 404 until the test posts a notice, then the JSON document EC2 serves.
Binds 127.0.0.1 only.

Several simulated instances on one host (a sweep's legs) each have their own metadata service on EC2 (every
instance reaches 169.254.169.254 and sees only its own notices), and an IMDSv2 token works only on the instance
that issued it. The double models that with `instance_of`: given a PUT's client address, it names the instance
that asked; the token is bound to that instance, and a GET with it sees that instance's notices (`interrupt(
instance=...)`) besides the ones every instance sees (`documents`).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler

from gpu_runner_testing.local_http import LocalHttpServer

INSTANCE_ACTION = "/latest/meta-data/spot/instance-action"
REBALANCE = "/latest/meta-data/events/recommendations/rebalance"


class ImdsDouble(LocalHttpServer):
    def __init__(self, instance_of: Callable[[tuple[str, int]], str | None] | None = None) -> None:
        self.documents: dict[str, dict] = {}  # what every instance sees
        self.instance_documents: dict[str, dict[str, dict]] = {}  # instance -> its own notices
        self.requests: list[tuple[str, str, int]] = []
        self.tokens: dict[str, str | None] = {}  # token -> the instance it was issued to (None: unknown)
        self.instance_of = instance_of or (lambda _address: None)
        self.down = False  # answer nothing useful (500), like an IMDS restart
        double = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                if self.path != "/latest/api/token" or not self.headers.get(
                    "X-aws-ec2-metadata-token-ttl-seconds"
                ):
                    return self._reply(400, b"")
                token = secrets.token_urlsafe(24)
                double.tokens[token] = double.instance_of(self.client_address[:2])
                self._reply(200, token.encode())

            def do_GET(self) -> None:
                if double.down:
                    return self._reply(500, b"")
                token = self.headers.get("X-aws-ec2-metadata-token", "")
                if token not in double.tokens:
                    return self._reply(401, b"")
                own = double.instance_documents.get(double.tokens[token] or "", {})
                document = own.get(self.path, double.documents.get(self.path))
                if document is None:
                    return self._reply(404, b"Not Found")
                self._reply(200, json.dumps(document).encode())

            def _reply(self, status: int, body: bytes) -> None:
                double.requests.append((self.command, self.path, status))
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        super().__init__(Handler)

    def interrupt(self, time: str = "2026-11-30T12:00:00Z", instance: str | None = None) -> None:
        """The two-minute warning: `{"action": "terminate", "time": ...}` at the instance-action path, for every
        instance or only for `instance` (as `instance_of` names it)."""
        notice = {"action": "terminate", "time": time}
        if instance is None:
            self.documents[INSTANCE_ACTION] = notice
        else:
            self.instance_documents.setdefault(instance, {})[INSTANCE_ACTION] = notice

    def recommend_rebalance(self, time: str = "2026-11-30T11:50:00Z") -> None:
        self.documents[REBALANCE] = {"noticeTime": time}
