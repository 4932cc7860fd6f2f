"""Service Quotas answers for the G and VT vCPU quotas, through the botocore hook (AwsFaults.answer).

moto 5.2.5 knows no ec2 quota: GetServiceQuota answers NoSuchResourceException ("This service is not available in
the current Region") and GetAWSDefaultServiceQuota is not implemented. So the tests answer both with bodies shaped
as botocore's service-quotas model says (tests/runner/test_doctor.py checks the shape against the model).
"""

from __future__ import annotations

from typing import Any

from gpu_runner.core import quotas
from gpu_runner_testing.aws_constants import REGION
from gpu_runner_testing.aws_faults import AwsFaults

QUOTA_NAMES = dict([quotas.ON_DEMAND_QUOTA, quotas.SPOT_QUOTA])


def quota_body(code: str, value: float, region: str = REGION) -> dict[str, Any]:
    """A GetServiceQuota / GetAWSDefaultServiceQuota answer, every key a member of botocore's ServiceQuota shape."""
    return {
        "Quota": {
            "ServiceCode": "ec2",
            "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
            "QuotaArn": f"arn:aws:servicequotas:{region}:123456789012:ec2/{code}",
            "QuotaCode": code,
            "QuotaName": QUOTA_NAMES[code],
            "Value": value,
            "Unit": "None",
            "Adjustable": True,
            "GlobalQuota": False,
            "UsageMetric": {
                "MetricNamespace": "AWS/Usage",
                "MetricName": "ResourceCount",
                "MetricDimensions": {
                    "Class": "Standard/OnDemand",
                    "Resource": "vCPU",
                    "Service": "EC2",
                    "Type": "Resource",
                },
                "MetricStatisticRecommendation": "Maximum",
            },
            "QuotaAppliedAtLevel": "ACCOUNT",
        }
    }


def answer_quotas(faults: AwsFaults, on_demand: float, spot: float, region: str = REGION) -> None:
    """Every GetServiceQuota of the two codes answered with these applied values, for the rest of the test."""
    for code, value in ((quotas.ON_DEMAND_QUOTA[0], on_demand), (quotas.SPOT_QUOTA[0], spot)):
        faults.answer(
            "service-quotas",
            "GetServiceQuota",
            quota_body(code, value, region),
            times=-1,
            when=lambda params, code=code: params.get("QuotaCode") == code,
        )
