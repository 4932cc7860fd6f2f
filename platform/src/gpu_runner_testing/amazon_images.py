"""The Amazon-owned image the tests launch: an Amazon Linux 2 x86_64 image from the list moto ships.

DescribeImages with Owners=["amazon"] alone answers with all 1,301 images of moto 5.2.5: 2-4 s of server CPU and
XML for each call (measured 2026-12-01), and its first was a Windows Nano image. The `name` filter, with the
wildcards DescribeImages documents (Amazon EC2 API Reference, DescribeImages, Filters: name), answers with two,
in every region the tests use, in 0.04 s.
"""

from __future__ import annotations

from typing import Any

AMAZON_LINUX_2 = [{"Name": "name", "Values": ["amzn2-ami-hvm-*-x86_64-gp2"]}]


def first_amazon_image(ec2: Any) -> str:
    """The lowest id among the Amazon Linux 2 images `ec2` (a boto3 EC2 client) answers with."""
    images = ec2.describe_images(Owners=["amazon"], Filters=AMAZON_LINUX_2)["Images"]
    if not images:
        raise LookupError(
            f"moto answered DescribeImages with no {AMAZON_LINUX_2[0]['Values'][0]} image owned by amazon in "
            f"{ec2.meta.region_name}: pick another name in gpu_runner_testing/amazon_images.py"
        )
    return min(image["ImageId"] for image in images)
