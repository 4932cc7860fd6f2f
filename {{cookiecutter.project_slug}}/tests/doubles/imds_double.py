"""A local instance metadata service (IMDSv2) for the spot interruption watcher: token first, then the notices.

Speaks the real protocol: PUT /latest/api/token with a TTL header returns a token; every GET needs it (401
otherwise); a notice path answers 404 until the test posts a notice, then the JSON document EC2 serves.
Binds 127.0.0.1 only.
"""

from __future__ import annotations

import json
import secrets
from http.server import BaseHTTPRequestHandler

from doubles.local_http import LocalHttpServer

INSTANCE_ACTION = "/latest/meta-data/spot/instance-action"
REBALANCE = "/latest/meta-data/events/recommendations/rebalance"


class ImdsDouble(LocalHttpServer):
    def __init__(self) -> None:
        self.documents: dict[str, dict] = {}
        self.requests: list[tuple[str, str, int]] = []
        self.tokens: set[str] = set()
        self.down = False  # answer nothing useful (500), like an IMDS restart
        double = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                if self.path != "/latest/api/token" or not self.headers.get(
                    "X-aws-ec2-metadata-token-ttl-seconds"
                ):
                    return self._reply(400, b"")
                token = secrets.token_urlsafe(24)
                double.tokens.add(token)
                self._reply(200, token.encode())

            def do_GET(self) -> None:
                if double.down:
                    return self._reply(500, b"")
                if self.headers.get("X-aws-ec2-metadata-token") not in double.tokens:
                    return self._reply(401, b"")
                document = double.documents.get(self.path)
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

    def interrupt(self, time: str = "2026-11-30T12:00:00Z") -> None:
        """The two-minute warning: `{"action": "terminate", "time": ...}` at the instance-action path."""
        self.documents[INSTANCE_ACTION] = {"action": "terminate", "time": time}

    def recommend_rebalance(self, time: str = "2026-11-30T11:50:00Z") -> None:
        self.documents[REBALANCE] = {"noticeTime": time}
