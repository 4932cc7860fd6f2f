"""Instance type offerings: the bundled table agrees with AWS's published offerings (as the moto server answers
them), and the look-up `launch` makes is one DescribeInstanceTypeOfferings call."""

from __future__ import annotations

import json
from importlib import resources

import boto3
import pytest

from gpu_runner.core import offerings
from gpu_runner.core.errors import SettingsError
from gpu_runner.cost import pricing
from gpu_runner_testing.aws_constants import OTHER_REGION, REGION
from gpu_runner_testing.iam_requests import record_calls

TABLE = offerings.load_table()


def test_moto_agrees_g6_is_not_offered_in_eu_west_1(moto_endpoint: str) -> None:
    ec2 = boto3.Session(region_name=OTHER_REGION).client("ec2")
    found = offerings.offered_types(ec2, ["g6.xlarge", "g4dn.xlarge", "g5.xlarge"])
    assert set(found) == {"g4dn.xlarge", "g5.xlarge"}
    assert found["g4dn.xlarge"] == {f"{OTHER_REGION}{zone}" for zone in "abc"}


def test_the_look_up_is_one_call_filtered_to_the_subnets_zones(moto_endpoint: str) -> None:
    session = boto3.Session(region_name=REGION)
    calls = record_calls(session)
    found = offerings.offered_types(session.client("ec2"), ["g4dn.xlarge"], [f"{REGION}a", f"{REGION}e"])
    assert found == {"g4dn.xlarge": frozenset({f"{REGION}a"})}  # us-east-1e offers no g4dn.xlarge
    (call,) = calls
    assert call.operation == "DescribeInstanceTypeOfferings"
    assert call.params["LocationType"] == "availability-zone"
    assert {f["Name"]: f["Values"] for f in call.params["Filters"]} == {
        "instance-type": ["g4dn.xlarge"],
        "location": [f"{REGION}a", f"{REGION}e"],
    }


@pytest.mark.slow  # asks moto for every region's offerings
def test_bundled_table_matches_the_published_offerings(moto_endpoint: str, tmp_path) -> None:
    """refresh-table against the moto server (which answers from AWS's published offerings) reproduces the
    bundled table exactly: the table cannot drift from its named source unnoticed."""
    path = tmp_path / "offerings.json"
    path.write_text(resources.files("gpu_runner.core").joinpath(offerings.TABLE_FILE).read_text())
    offerings.refresh_table(boto3.Session(), path)
    assert offerings.load_table(path)["regions"] == TABLE["regions"]
    assert (
        TABLE["as_of"]
        and "moto 5.2.5" in TABLE["source"]
        and "DescribeInstanceTypeOfferings" in TABLE["source"]
    )


def test_a_planted_type_in_the_table_is_caught(moto_endpoint: str, tmp_path) -> None:
    path = tmp_path / "offerings.json"
    planted = {**TABLE, "regions": {OTHER_REGION: [*TABLE["regions"][OTHER_REGION], "g6.xlarge"]}}
    path.write_text(json.dumps(planted))
    offerings.refresh_table(boto3.Session(), path)
    assert "g6.xlarge" not in offerings.load_table(path)["regions"][OTHER_REGION]


def test_check_names_the_field_and_the_alternatives(moto_endpoint: str) -> None:
    ec2 = boto3.Session(region_name=OTHER_REGION).client("ec2")
    with pytest.raises(
        SettingsError, match=r"instance_types in configs/gpu-runner.yaml: none of g6.xlarge"
    ) as info:
        offerings.check(ec2, region=OTHER_REGION, instance_types=("g6.xlarge",))
    assert f"as of {TABLE['as_of']}" in str(info.value) and "g4dn.xlarge" in str(info.value)


def test_price_table_holds_only_offered_types() -> None:
    """The GPU types priced in a region are offered there (the offerings table holds GPU families only); the one
    CPU type, the team MLflow server's t3.small, is checked against moto's offerings in test_mlflow_server.py."""
    prices = pricing.load_table()
    for region, entry in prices["regions"].items():
        offered = set(offerings.table_types(region, TABLE) or ())
        for kind in ("on_demand_usd_per_hour", "spot_typical_usd_per_hour"):
            listed = {t for t in entry.get(kind, {}) if t.startswith(("g", "p"))}
            assert listed <= offered, (region, kind, sorted(listed - offered))
            assert set(entry.get(kind, {})) - listed <= {"t3.small"}, (region, kind)
