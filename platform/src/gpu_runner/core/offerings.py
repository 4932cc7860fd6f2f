"""Which instance types EC2 offers where: one DescribeInstanceTypeOfferings per launch, and a bundled table.

The live answer decides what `launch` tries (a type AWS does not offer in a zone is never a "no capacity"); the
bundled, dated table (offerings.json) names the alternatives in error messages and lets the template's hook
check the answered instance types before a project exists. `python -m gpu_runner.core.offerings refresh-table`
rewrites the table from DescribeInstanceTypeOfferings (AWS credentials allowed ec2:DescribeInstanceTypeOfferings).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from gpu_runner.core import log_output
from gpu_runner.core.errors import SettingsError

log = logging.getLogger(__name__)

TABLE_FILE = "offerings.json"
# GPU instance families start with g or p (g4dn, g5, g6e, p4d, p5, ...): the table keeps only those.
GPU_FAMILY_PREFIXES = ("g", "p")


def is_gpu_type(instance_type: str) -> bool:
    return instance_type.startswith(GPU_FAMILY_PREFIXES)


def load_table(path: Path | None = None) -> dict[str, Any]:
    if path is not None:
        return json.loads(path.read_text(encoding="utf-8"))
    return json.loads(resources.files(__package__).joinpath(TABLE_FILE).read_text(encoding="utf-8"))


def table_types(region: str, table: Mapping[str, Any] | None = None) -> tuple[str, ...] | None:
    """The GPU instance types the bundled table lists for `region`; None for a region it does not know."""
    table = load_table() if table is None else table
    types = table.get("regions", {}).get(region)
    return tuple(types) if isinstance(types, list) else None


@dataclass(frozen=True)
class Offered:
    """Where each configured type is offered: its zones, and the zone of each configured subnet."""

    zones: Mapping[str, frozenset[str]]
    subnet_zones: Mapping[str, str]

    def allows(self, instance_type: str, subnet_id: str | None) -> bool:
        zones = self.zones.get(instance_type, frozenset())
        if subnet_id is None:  # EC2 picks a default subnet: any zone of the region will do
            return bool(zones)
        return self.subnet_zones.get(subnet_id) in zones


def offered_types(
    ec2: Any, instance_types: Iterable[str], zones: Iterable[str] = ()
) -> dict[str, frozenset[str]]:
    """The availability zones (of `zones`, or every zone of the client's region) where each of
    `instance_types` is offered: one DescribeInstanceTypeOfferings, paginated. Types offered nowhere are left out."""
    filters = [{"Name": "instance-type", "Values": sorted(set(instance_types))}]
    if zones := sorted(set(zones)):
        filters.append({"Name": "location", "Values": zones})
    found: dict[str, set[str]] = {}
    pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
        LocationType="availability-zone", Filters=filters
    )
    for page in pages:
        for offering in page.get("InstanceTypeOfferings", []):
            found.setdefault(offering["InstanceType"], set()).add(offering["Location"])
    return {instance_type: frozenset(where) for instance_type, where in found.items()}


def subnet_zones(ec2: Any, subnet_ids: Iterable[str]) -> dict[str, str]:
    ids = list(subnet_ids)
    if not ids:
        return {}
    reply = ec2.describe_subnets(SubnetIds=ids)
    return {subnet["SubnetId"]: subnet["AvailabilityZone"] for subnet in reply.get("Subnets", [])}


def check(
    ec2: Any,
    *,
    region: str,
    instance_types: tuple[str, ...],
    subnet_ids: tuple[str, ...] = (),
    table: Mapping[str, Any] | None = None,
) -> Offered:
    """What `launch` may try. Logs one line for the (type, zone) pairs EC2 does not offer; raises SettingsError
    naming `instance_types` and what the region offers when no configured type is offered where it would run."""
    by_subnet = subnet_zones(ec2, subnet_ids)
    offered = Offered(offered_types(ec2, instance_types, by_subnet.values()), by_subnet)
    where = f"{region} ({', '.join(sorted(set(by_subnet.values())))})" if by_subnet else region
    pools = [(t, s) for t in instance_types for s in (subnet_ids or (None,))]
    skipped = [(t, s) for t, s in pools if not offered.allows(t, s)]
    if len(skipped) == len(pools):
        raise SettingsError(
            f"instance_types in configs/gpu-runner.yaml: none of {', '.join(instance_types)} is offered in {where} "
            f"(DescribeInstanceTypeOfferings); {_alternatives(region, table)}"
        )
    if skipped:
        shown = ", ".join(f"{t} in {by_subnet.get(s, s)}" if s else t for t, s in skipped)
        log.info(f"skipping what EC2 does not offer in {where}: {shown} (DescribeInstanceTypeOfferings)")
    return offered


def _alternatives(region: str, table: Mapping[str, Any] | None) -> str:
    table = load_table() if table is None else table
    types = table_types(region, table)
    if not types:
        return f"the bundled table has no entry for {region}: see the EC2 console's instance types for the region"
    return f"GPU types offered in {region} as of {table.get('as_of', 'undated')}: {', '.join(types)}"


def refresh_table(session: Any, path: Path, *, regions: Iterable[str] | None = None,
                  today: datetime | None = None) -> int:  # fmt: skip
    """Rewrite the table: per region, the GPU types DescribeInstanceTypeOfferings (location type region) lists."""
    table = load_table(path)
    wanted = list(regions or table.get("regions", {}))
    result: dict[str, list[str]] = {}
    for region in wanted:
        pages = session.client("ec2", region_name=region).get_paginator("describe_instance_type_offerings")
        types = {
            o["InstanceType"]
            for page in pages.paginate(LocationType="region")
            for o in page.get("InstanceTypeOfferings", [])
        }
        result[region] = sorted(t for t in types if is_gpu_type(t))
    table["regions"] = result
    table["as_of"] = (today or datetime.now(UTC)).strftime("%Y-%m-%d")
    table["source"] = "AWS DescribeInstanceTypeOfferings (LocationType region), read by refresh-table"
    path.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    log.info(f"{len(result)} regions written to {path} (as of {table['as_of']})")
    return len(result)


def main(argv: list[str] | None = None) -> int:
    import boto3  # only the refresh command needs a session of its own

    parser = argparse.ArgumentParser(prog="python -m gpu_runner.core.offerings", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    refresh = commands.add_parser(
        "refresh-table", help="rewrite the table from DescribeInstanceTypeOfferings"
    )
    refresh.add_argument(
        "--path", type=Path, default=Path(str(resources.files(__package__).joinpath(TABLE_FILE)))
    )
    args = parser.parse_args(argv)
    log_output.to_stdout()
    return 0 if refresh_table(boto3.Session(), args.path) else 1


if __name__ == "__main__":
    sys.exit(main())
