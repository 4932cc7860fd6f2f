"""The instances running on the session's moto server, and a teardown that terminates only a test's own.

One moto server serves a whole pytest-xdist worker, and the worker interleaves modules: test_mlflow_server's
module-scoped server instance runs while other modules' tests start and stop theirs. So a test counts only
gpu-runner's instances (tagged MANAGED_BY_KEY, which the server never is) and terminates only what it started:
moto drops a terminated instance's profile, and a region-wide sweep failed the server's later tests."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from gpu_runner.core.naming import MANAGED_BY_KEY, RunContext
from gpu_runner.core.settings import Settings
from gpu_runner.ec2_runner import lifecycle

LIVE_STATES = ["pending", "running"]


def live(client: Any, *, managed_only: bool = False) -> list[dict[str, Any]]:
    """The pending and running instances `client`'s region holds; with managed_only, gpu-runner's alone."""
    filters = [{"Name": "instance-state-name", "Values": LIVE_STATES}]
    if managed_only:
        filters.append({"Name": "tag-key", "Values": [MANAGED_BY_KEY]})
    pages = client.get_paginator("describe_instances").paginate(Filters=filters)
    return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]


def live_ids(client: Any) -> set[str]:
    return {i["InstanceId"] for i in live(client)}


def terminate_started_since(client: Any, before: set[str]) -> list[str]:
    """Terminates the instances running now that were not in `before`; returns their ids."""
    ids = sorted(live_ids(client) - before)
    if ids:
        client.terminate_instances(InstanceIds=ids)
    return ids


def run_tagged(client: Any, image_id: str, tags: Mapping[str, str] | None = None) -> str:
    """One running instance with these tags (e.g. lifecycle.instance_tags of another run; None: untagged), made
    directly in moto: another run's, repository's or principal's instance, as the launch would have tagged it."""
    extra: dict[str, Any] = {}
    if tags is not None:
        pairs = [{"Key": key, "Value": value} for key, value in tags.items()]
        extra["TagSpecifications"] = [{"ResourceType": "instance", "Tags": pairs}]
    reply = client.run_instances(
        ImageId=image_id, InstanceType="g4dn.xlarge", MinCount=1, MaxCount=1, **extra
    )
    return str(reply["Instances"][0]["InstanceId"])


def run_as_launched(client: Any, image_id: str, settings: Settings, ctx: RunContext | None) -> str:
    """An instance tagged as `launch` tags `ctx`'s (lifecycle.instance_tags; None: untagged): another run's, slot's
    or repository's instance, without launching it."""
    if ctx is None:
        return run_tagged(client, image_id)
    tags = lifecycle.instance_tags(settings, ctx, runner_id=1, expires_at=datetime.now(UTC))
    return run_tagged(client, image_id, tags)
