"""Spot interruption notices, watched while training: checkpoint and stop inside EC2's two-minute warning.

A thread polls the instance metadata service (IMDSv2, a session token first) for the spot instance-action notice
and the rebalance recommendation. A rebalance recommendation (an early "at elevated risk") makes the next
batch push the latest checkpoint to S3; an instance-action notice (termination in two minutes) makes it back up,
push, and stop training with TrainingInterrupted, which the CLI turns into exit status 75 so the workflow's stop
job knows to re-dispatch the training.

Plain urllib rather than botocore's IMDS fetcher: botocore only reads credentials and region from IMDS, not the
spot and event paths.

TensorFlow-free (a thread and urllib): the Keras callback that acts on a notice between batches is
the project's callbacks.StopOnInterruption.
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass

# The variable the caller's GPU job sets from the start job's `market` output (spot or on-demand).
GPU_MARKET = "GPU_MARKET"
DEFAULT_ENDPOINT = "http://169.254.169.254"
TOKEN_TTL_SECONDS = 21600
INSTANCE_ACTION = "/latest/meta-data/spot/instance-action"
REBALANCE = "/latest/meta-data/events/recommendations/rebalance"


@dataclass(frozen=True)
class Notice:
    kind: str  # "instance-action" or "rebalance"
    detail: dict
    seen_at: float


def should_watch(setting: str | bool, env: Mapping[str, str] | None = None) -> bool:
    """ "auto": only on spot capacity (train.yml sets GPU_MARKET), where IMDS exists and notices can come."""
    env = os.environ if env is None else env
    if setting == "auto":
        return env.get(GPU_MARKET) == "spot"
    return bool(setting)


class ImdsClient:
    """The two IMDSv2 calls the watcher needs; the endpoint follows botocore's AWS_EC2_METADATA_SERVICE_ENDPOINT."""

    def __init__(self, endpoint: str | None = None, timeout: float = 2.0) -> None:
        self.endpoint = (
            endpoint or os.environ.get("AWS_EC2_METADATA_SERVICE_ENDPOINT") or DEFAULT_ENDPOINT
        ).rstrip("/")
        self.timeout = timeout
        self._token = ""
        self._token_expires = 0.0

    def _fetch_token(self) -> str:
        if time.monotonic() >= self._token_expires:
            request = urllib.request.Request(
                self.endpoint + "/latest/api/token",
                method="PUT",
                headers={"X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL_SECONDS)},
            )
            with urllib.request.urlopen(request, timeout=self.timeout) as reply:
                self._token = reply.read().decode()
            self._token_expires = time.monotonic() + TOKEN_TTL_SECONDS - 60
        return self._token

    def get_json(self, path: str) -> dict | None:
        """The document at `path`, or None when IMDS answers 404 (no notice)."""
        request = urllib.request.Request(
            self.endpoint + path, headers={"X-aws-ec2-metadata-token": self._fetch_token()}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as reply:
                return json.loads(reply.read() or b"{}")
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            if error.code == 401:  # token expired early (instance clock, IMDS restart): fetch a new one
                self._token_expires = 0.0
            raise


class InterruptionWatcher:
    """Polls every `interval` seconds in a daemon thread until stopped or an instance-action notice arrives."""

    def __init__(self, client: ImdsClient, interval: float = 5.0, log: Callable[[str], None] = print) -> None:
        self.client, self.interval, self.log = client, interval, log
        self.rebalance: Notice | None = None
        self.instance_action: Notice | None = None
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="spot-interruption-watcher", daemon=True)

    def __enter__(self) -> InterruptionWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval + 5)

    def poll_once(self) -> None:
        if self.rebalance is None and (detail := self.client.get_json(REBALANCE)) is not None:
            self.rebalance = Notice("rebalance", detail, time.monotonic())
            self.log(f"spot rebalance recommendation ({detail}): checkpointing to S3 at the next batch")
        if (detail := self.client.get_json(INSTANCE_ACTION)) is not None:
            self.instance_action = Notice("instance-action", detail, time.monotonic())
            self.log(f"spot interruption notice ({detail}): checkpointing and stopping at the next batch")

    def _run(self) -> None:
        while not self._stop.is_set() and self.instance_action is None:
            try:
                self.poll_once()
            except (OSError, ValueError) as error:  # IMDS hiccups must never stop the training
                self.errors += 1
                if self.errors == 1:
                    self.log(f"WARNING: instance metadata not readable ({error}); still watching")
            self._stop.wait(self.interval)
