"""Prices of the instance actually used: on-demand from the AWS Price List API, spot from the EC2 spot price
history of its availability zone, and a bundled, dated table (prices.json) when those calls are not permitted
or fail. Every price carries its source, which is logged with the cost.

Nothing here raises: a price is only an estimate for the cost record, and teardown must never fail over it.
`python -m gpu_runner.cost.pricing refresh-table` rewrites the table's on-demand prices from the Price List API.
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

from botocore.exceptions import BotoCoreError, ClientError

from gpu_runner.core import log_output
from gpu_runner.core.aws import Aws

log = logging.getLogger(__name__)
TABLE_FILE = "prices.json"
SOURCE_PRICING_API = "aws-pricing-api"
SOURCE_SPOT_HISTORY = "ec2-spot-price-history"
SOURCE_UNKNOWN = "unknown"
# Both spellings EC2 uses for Linux spot prices (accounts with and without EC2-Classic history).
SPOT_PRODUCTS = ("Linux/UNIX", "Linux/UNIX (Amazon VPC)")


@dataclass(frozen=True)
class Price:
    usd: float  # per hour for instances, per GB-month for volumes
    source: str


def load_table(path: Path | None = None) -> dict[str, Any]:
    if path is not None:
        return json.loads(path.read_text(encoding="utf-8"))
    return json.loads(resources.files(__package__).joinpath(TABLE_FILE).read_text(encoding="utf-8"))


def table_source(table: Mapping[str, Any]) -> str:
    return f"bundled-table-{table.get('as_of', 'undated')}"


def _from_table(table: Mapping[str, Any], region: str, kind: str, instance_type: str = "") -> Price | None:
    entry = table.get("regions", {}).get(region, {}).get(kind)
    value = entry.get(instance_type) if isinstance(entry, dict) else entry
    return Price(float(value), table_source(table)) if isinstance(value, int | float) else None


def pricing_api_region(region: str) -> str:
    """The Price List API answers from three regions only; each serves every region's prices. Nearest one."""
    if region.startswith(("eu-", "me-", "af-", "il-")):
        return "eu-central-1"
    if region.startswith("ap-"):
        return "ap-south-1"
    return "us-east-1"


def on_demand_filters(instance_type: str, region: str) -> list[dict[str, str]]:
    """Linux, shared tenancy, no pre-installed software, capacity in use: the plain on-demand instance hour."""
    fields = {
        "instanceType": instance_type,
        "regionCode": region,
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
    }
    return [{"Type": "TERM_MATCH", "Field": key, "Value": value} for key, value in fields.items()]


def parse_on_demand(price_list: Iterable[str | Mapping[str, Any]]) -> float | None:
    """The hourly USD price in a GetProducts PriceList (JSON strings, one product each)."""
    candidates: list[tuple[bool, float]] = []
    for item in price_list:
        product = json.loads(item) if isinstance(item, str) else item
        usage = product.get("product", {}).get("attributes", {}).get("usagetype", "")
        for term in product.get("terms", {}).get("OnDemand", {}).values():
            for dimension in term.get("priceDimensions", {}).values():
                usd = dimension.get("pricePerUnit", {}).get("USD")
                if dimension.get("unit") == "Hrs" and usd is not None and float(usd) > 0:
                    # BoxUsage is the instance hour itself (not a reservation or a capacity block).
                    candidates.append(("BoxUsage" in usage, float(usd)))
    candidates.sort(key=lambda c: not c[0])  # BoxUsage first, otherwise in the API's order
    return candidates[0][1] if candidates else None


def _why(error: Exception) -> str:
    if isinstance(error, ClientError):
        err = error.response.get("Error", {})
        return f"{err.get('Code', 'error')}: {err.get('Message', '')}".strip()
    return f"{type(error).__name__}: {error}"


def on_demand_price(aws: Aws, instance_type: str, region: str, *, table: Mapping[str, Any]) -> Price:
    try:
        client = aws.lookup_client("pricing", pricing_api_region(region))
        reply = client.get_products(
            ServiceCode="AmazonEC2", Filters=on_demand_filters(instance_type, region), MaxResults=10
        )
        usd = parse_on_demand(reply.get("PriceList", []))
        if usd is not None:
            return Price(usd, SOURCE_PRICING_API)
        why = "no matching product"
    except (ClientError, BotoCoreError, ValueError, KeyError) as error:
        why = _why(error)
    return _fallback(table, region, "on_demand_usd_per_hour", instance_type, "on-demand price", region,
                     f"Pricing API: {why}")  # fmt: skip


def _fallback(
    table: Mapping[str, Any],
    region: str,
    key: str,
    instance_type: str,
    what: str,
    where: str,
    why: str,
) -> Price:
    """The bundled table's price when AWS did not answer; 0 with source 'unknown' (and a warning) without one."""
    price = _from_table(table, region, key, instance_type)
    if price is not None:
        log.info(
            "%s of %s in %s: %s; using the %s price $%s/h",
            what,
            instance_type,
            where,
            why,
            price.source,
            price.usd,
        )
        return price
    log.warning("warning: no %s for %s in %s (%s; not in the bundled table): cost logged as 0 with source "
                "'unknown'", what, instance_type, where, why)  # fmt: skip
    return Price(0.0, SOURCE_UNKNOWN)


def time_weighted_average(points: Iterable[tuple[datetime, float]], start: datetime, end: datetime) -> float:
    """Average of a step function (each price holds from its timestamp until the next) over [start, end]."""
    ordered = sorted(points)
    if not ordered:
        raise ValueError("no prices")
    # The price in effect at start: the last one set at or before it (or the first one after it).
    in_effect = [p for p in ordered if p[0] <= start]
    current = in_effect[-1][1] if in_effect else ordered[0][1]
    if end <= start:
        return current
    total, cursor = 0.0, start
    for at, price in ordered:
        if at <= start:
            continue
        if at >= end:
            break
        total += current * (at - cursor).total_seconds()
        cursor, current = at, price
    total += current * (end - cursor).total_seconds()
    return total / (end - start).total_seconds()


def spot_price(
    aws: Aws,
    instance_type: str,
    region: str,
    availability_zone: str,
    start: datetime,
    end: datetime,
    *,
    table: Mapping[str, Any],
) -> Price:
    """The time-weighted average spot price over the run window: EC2 bills spot per second at the price in
    effect each second, so this is what the window cost (the answer includes the price in effect at start)."""
    try:
        client = aws.lookup_client("ec2", region)
        records: list[dict[str, Any]] = []
        pages = client.get_paginator("describe_spot_price_history").paginate(
            InstanceTypes=[instance_type],
            ProductDescriptions=list(SPOT_PRODUCTS),
            AvailabilityZone=availability_zone,
            StartTime=start,
            EndTime=end,
        )
        for page in pages:
            records += page.get("SpotPriceHistory", [])
        ours = [
            r
            for r in records
            if r.get("AvailabilityZone") == availability_zone and r.get("InstanceType") == instance_type
        ]
        # One product description, the plain one when both are listed (they carry the same prices).
        for product in SPOT_PRODUCTS:
            points = [
                (r["Timestamp"], float(r["SpotPrice"])) for r in ours if r["ProductDescription"] == product
            ]
            if points:
                return Price(time_weighted_average(points, start, end), SOURCE_SPOT_HISTORY)
        why = f"no history for {availability_zone}"
    except (ClientError, BotoCoreError, ValueError, KeyError) as error:
        why = _why(error)
    return _fallback(table, region, "spot_typical_usd_per_hour", instance_type, "spot price",
                     availability_zone or region, f"spot price history: {why}")  # fmt: skip


def volume_price(region: str, *, table: Mapping[str, Any]) -> Price:
    """gp3 storage per GB-month, from the table only: it changes rarely and is a small part of the cost."""
    price = _from_table(table, region, "gp3_usd_per_gb_month")
    if price is None:
        log.warning("warning: no gp3 price for %s in the bundled table: root volume cost logged as 0", region)
        return Price(0.0, SOURCE_UNKNOWN)
    return price


def refresh_table(aws: Aws, path: Path, *, today: datetime | None = None) -> int:
    """Rewrite the table's on-demand prices (every type and region it lists) from the Price List API."""
    table = load_table(path)
    updated = 0
    for region, entry in table.get("regions", {}).items():
        for instance_type in list(entry.get("on_demand_usd_per_hour", {})):
            price = on_demand_price(aws, instance_type, region, table={})
            if price.source == SOURCE_PRICING_API:
                entry["on_demand_usd_per_hour"][instance_type] = round(price.usd, 4)
                updated += 1
    table["as_of"] = (today or datetime.now(UTC)).strftime("%Y-%m")
    path.write_text(json.dumps(table, indent=2) + "\n", encoding="utf-8")
    log.info("%s on-demand prices refreshed in %s (as of %s)", updated, path, table["as_of"])
    return updated


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpu_runner.cost.pricing", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    refresh = commands.add_parser("refresh-table", help="rewrite on-demand prices from the Price List API")
    default = Path(str(resources.files(__package__).joinpath(TABLE_FILE)))
    refresh.add_argument("--path", type=Path, default=default)
    args = parser.parse_args(argv)
    log_output.to_stdout()  # the lines a user reads, on stdout as print wrote them before the module logger
    return 0 if refresh_table(Aws(), args.path) else 1


if __name__ == "__main__":
    sys.exit(main())
