"""Every error code gpu_runner.ec2_runner.ec2 classifies is one AWS documents: EC2's error-code list (encoded in
ec2_error_codes.json beside this module, with its URL and date) or, for throttling, botocore's own retry configuration, read from the
installed botocore here (machine-readable, so it cannot drift unnoticed)."""

from __future__ import annotations

import json
from pathlib import Path

import botocore
import pytest
from botocore.retries.standard import ThrottledRetryableChecker

from gpu_runner.ec2_runner import ec2

DATA = json.loads((Path(__file__).with_name("ec2_error_codes.json")).read_text(encoding="utf-8"))
EC2_DOCUMENTED = frozenset(DATA["seen"]) | frozenset(DATA["listed"])


def botocore_ec2_throttling_codes() -> frozenset[str]:
    """The codes botocore's legacy retry config (data/_retry.json) retries for EC2 as throttling."""
    retry = json.loads((Path(botocore.__file__).parent / "data" / "_retry.json").read_text(encoding="utf-8"))
    policies = retry["retry"]["ec2"]["__default__"]["policies"]
    return frozenset(p["applies_when"]["response"]["service_error_code"] for p in policies.values())


def classified_codes() -> dict[str, frozenset[str]]:
    return {
        "CAPACITY_CODES": ec2.CAPACITY_CODES,
        "NOT_OFFERED_CODES": ec2.NOT_OFFERED_CODES,
        "SUBNET_FULL_CODES": ec2.SUBNET_FULL_CODES,
        "SPOT_ONLY_CODES": ec2.SPOT_ONLY_CODES,
        "SPOT_FALLBACK_HINTS": frozenset(ec2.SPOT_FALLBACK_HINTS),
        "TRANSIENT_CODES": ec2.TRANSIENT_CODES,
        "FATAL_HINTS": frozenset(ec2.FATAL_HINTS),
    }


def undocumented(tables: dict[str, frozenset[str]]) -> dict[str, list[str]]:
    known = EC2_DOCUMENTED | botocore_ec2_throttling_codes() | frozenset(DATA["documented_elsewhere"])
    return {name: sorted(codes - known) for name, codes in tables.items() if codes - known}


def test_every_classified_code_is_documented() -> None:
    assert undocumented(classified_codes()) == {}


def test_a_planted_unknown_code_fails_the_check() -> None:
    planted = {**classified_codes(), "CAPACITY_CODES": ec2.CAPACITY_CODES | {"InsufficientGpuCapacity"}}
    assert undocumented(planted) == {"CAPACITY_CODES": ["InsufficientGpuCapacity"]}


def test_throttling_codes_are_botocores_for_ec2() -> None:
    from_retry_json = botocore_ec2_throttling_codes()
    assert from_retry_json == {"RequestLimitExceeded", "EC2ThrottledException"}, from_retry_json
    assert from_retry_json == ec2.THROTTLING_CODES
    # The standard retry mode treats the same codes as throttling (its fixed list).
    standard = ThrottledRetryableChecker()._throttled_error_codes
    assert set(standard) >= ec2.THROTTLING_CODES
    assert ec2.THROTTLING_CODES <= ec2.TRANSIENT_CODES


@pytest.mark.parametrize("code", sorted(botocore_ec2_throttling_codes()))
def test_each_botocore_throttling_code_is_retried_by_launch(code: str) -> None:
    assert code in ec2.TRANSIENT_CODES and ec2.classify(code) == "fatal"  # retried in place, then fatal


def test_no_code_is_in_two_classes() -> None:
    tables = [ec2.CAPACITY_CODES, ec2.NOT_OFFERED_CODES, ec2.SUBNET_FULL_CODES, ec2.SPOT_ONLY_CODES]
    assert sum(len(t) for t in tables) == len(frozenset().union(*tables))
    assert not (ec2.TRANSIENT_CODES & frozenset().union(*tables))
