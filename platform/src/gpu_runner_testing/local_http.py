"""One local HTTP server on 127.0.0.1 (a free port) in a daemon thread, for the test doubles that speak HTTP."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self


class LocalHttpServer:
    """Base of a double: serve `handler` while in a `with` block."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        # serve_forever checks for shutdown() every poll_interval (0.5 s by default): with the default, each
        # double's exit waited ~0.25 s on average, paid by every test that starts one.
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
