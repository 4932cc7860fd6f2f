"""`max_live_instances`: one push must not start as many GPU instances as the account's quota allows (issue 30).

`launch` counts this repository's live GPU instances before it registers a runner or calls RunInstances and
refuses the next one at the limit. Live: pending or running (EC2 bills a running instance, and a pending one is
about to run: EC2 User Guide, "Instance state changes"), with gpu-runner's managed-by tag and this repository's
`gpu-runner:repository` tag, so another project's or repository's instances in the account do not count. One
DescribeInstances, which the launch roles already hold (gpu_runner/setup/gpu-runner.yaml, DescribeAndPrices).

The count and the launch are two calls, not one transaction: launches that count at the same moment (a sweep
wave's legs, pushes to several branches) all see the same number and may all launch, so the limit can be passed by
at most the number of launches racing, less one. manual/gpu-training.md says so.
"""

from __future__ import annotations

import logging
from typing import Any

from gpu_runner.core import naming
from gpu_runner.core.errors import LaunchBlockedError
from gpu_runner.core.settings import Settings

log = logging.getLogger(__name__)
LIVE_STATES = ["pending", "running"]


def live_instances(client: Any, repository: str) -> list[str]:
    """Ids of this repository's pending and running gpu-runner instances."""
    filters = [
        {"Name": "instance-state-name", "Values": LIVE_STATES},
        {"Name": f"tag:{naming.MANAGED_BY_KEY}", "Values": [naming.MANAGED_BY_VALUE]},
        {"Name": f"tag:{naming.TAG_REPOSITORY}", "Values": [naming.tag_value(repository)]},
    ]
    pages = client.get_paginator("describe_instances").paginate(Filters=filters)
    return sorted(i["InstanceId"] for page in pages for r in page["Reservations"] for i in r["Instances"])


def check(settings: Settings, repository: str, client: Any) -> None:
    """LaunchBlockedError when the repository already has max_live_instances live instances; no-op without one."""
    limit = settings.max_live_instances
    if limit is None:
        return
    live = live_instances(client, repository)
    log.info(f"max_live_instances {limit}: {len(live)} live ({', '.join(live) or 'none'})")
    if len(live) >= limit:
        raise LaunchBlockedError(
            f"max_live_instances: {len(live)} GPU instance(s) of {repository} are live (pending or running), the "
            f"limit is {limit}; nothing launched. Wait for a run to finish or cancel one, or raise "
            "max_live_instances in the default branch's configs/gpu-runner.yaml"
        )
