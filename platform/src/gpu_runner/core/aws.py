"""boto3 clients per region with retries for throttling, created from one session (tests hook into it)."""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config

# "standard" mode retries throttling and transient errors with exponential backoff and jitter.
RETRY_CONFIG = Config(retries={"mode": "standard", "max_attempts": 8}, connect_timeout=10, read_timeout=60)
# For callers that decide per error whether to try again (RunInstances: see ec2._run_instances). In `retries`,
# `total_max_attempts` counts the first call; `max_attempts` counts retries only (RETRY_CONFIG: 9 calls in all).
SINGLE_ATTEMPT_CONFIG = Config(
    retries={"mode": "standard", "total_max_attempts": 1}, connect_timeout=10, read_timeout=60
)

# Price look-ups at teardown: one retry, short timeouts. The bundled price table is the fallback, so a slow or
# unreachable endpoint must not hold up the stop job.
LOOKUP_CONFIG = Config(
    retries={"mode": "standard", "total_max_attempts": 2}, connect_timeout=5, read_timeout=20
)


class Aws:
    """Hands out one cached client per (service, region) from a single boto3 session."""

    def __init__(self, session: boto3.Session | None = None) -> None:
        self.session = session or boto3.Session()
        self._clients: dict[tuple[str, str], Any] = {}

    def client(self, service: str, region: str) -> Any:
        key = (service, region)
        if key not in self._clients:
            self._clients[key] = self.session.client(service, region_name=region, config=RETRY_CONFIG)
        return self._clients[key]

    def single_attempt_client(self, service: str, region: str) -> Any:
        """A client that never retries on its own: its caller decides which errors deserve another try."""
        key = (f"{service}:single-attempt", region)
        if key not in self._clients:
            self._clients[key] = self.session.client(
                service, region_name=region, config=SINGLE_ATTEMPT_CONFIG
            )
        return self._clients[key]

    def lookup_client(self, service: str, region: str) -> Any:
        """A client for optional look-ups (prices) that gives up quickly: its caller has a fallback."""
        key = (f"{service}:lookup", region)
        if key not in self._clients:
            self._clients[key] = self.session.client(service, region_name=region, config=LOOKUP_CONFIG)
        return self._clients[key]
