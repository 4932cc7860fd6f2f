"""AWS-shaped answers about prices, for the services moto lacks or answers unrealistically: the Price List API's
GetProducts (moto has none) and EC2's DescribeSpotPriceHistory (moto answers $0.00001 dated 2006 for every zone).
Used by the cost tests (through `AwsFaults.answer`) and by the offline story's fault proxy.
Shapes: AWS Price List Query API reference (GetProducts: FormatVersion aws_v1, PriceList of JSON strings with
product/terms.OnDemand/priceDimensions) and the EC2 API reference (DescribeSpotPriceHistory: spotPriceHistorySet
of instanceType, productDescription, spotPrice, timestamp, availabilityZone).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any


def price_list_product(instance_type: str, region: str, usd: str, usagetype: str = "") -> str:
    """One PriceList entry as GetProducts returns it: a JSON *string* per product, with its OnDemand and
    Reserved terms (the reserved hourly price is lower and must not be picked)."""
    sku = "CZNF2F6CSUG2M7XY"
    product = {
        "product": {
            "productFamily": "Compute Instance",
            "attributes": {
                "instanceType": instance_type, "regionCode": region, "location": "US East (N. Virginia)",
                "locationType": "AWS Region", "operatingSystem": "Linux", "tenancy": "Shared",
                "preInstalledSw": "NA", "capacitystatus": "Used", "licenseModel": "No License required",
                "usagetype": usagetype or f"BoxUsage:{instance_type}", "operation": "RunInstances",
                "marketoption": "OnDemand", "vcpu": "4", "memory": "16 GiB", "gpu": "1", "gpuMemory": "16 GB",
                "instanceFamily": "GPU instance", "servicecode": "AmazonEC2",
                "servicename": "Amazon Elastic Compute Cloud",
            },
            "sku": sku,
        },
        "serviceCode": "AmazonEC2",
        "terms": {
            "OnDemand": {
                f"{sku}.JRTCKXETXF": {
                    "priceDimensions": {
                        f"{sku}.JRTCKXETXF.6YS6EN2CT7": {
                            "unit": "Hrs", "endRange": "Inf", "beginRange": "0", "appliesTo": [],
                            "description": f"${float(usd)} per On Demand Linux {instance_type} Instance Hour",
                            "rateCode": f"{sku}.JRTCKXETXF.6YS6EN2CT7", "pricePerUnit": {"USD": usd},
                        }
                    },
                    "sku": sku, "effectiveDate": "2026-11-01T00:00:00Z", "offerTermCode": "JRTCKXETXF",
                    "termAttributes": {},
                }
            },
            "Reserved": {
                f"{sku}.38NPMPTW36": {
                    "priceDimensions": {
                        f"{sku}.38NPMPTW36.2TG2D8R56U": {
                            "unit": "Quantity", "description": "Upfront Fee", "pricePerUnit": {"USD": "1683"},
                            "appliesTo": [], "rateCode": f"{sku}.38NPMPTW36.2TG2D8R56U",
                        },
                        f"{sku}.38NPMPTW36.6YS6EN2CT7": {
                            "unit": "Hrs", "endRange": "Inf", "beginRange": "0", "appliesTo": [],
                            "description": f"Linux/UNIX (Amazon VPC), {instance_type} reserved instance applied",
                            "rateCode": f"{sku}.38NPMPTW36.6YS6EN2CT7", "pricePerUnit": {"USD": "0.1920000000"},
                        },
                    },
                    "sku": sku, "effectiveDate": "2026-11-01T00:00:00Z", "offerTermCode": "38NPMPTW36",
                    "termAttributes": {
                        "LeaseContractLength": "3yr", "OfferingClass": "standard", "PurchaseOption": "Partial Upfront"
                    },
                }
            },
        },
        "version": "20261120193645",
        "publicationDate": "2026-11-20T19:36:45Z",
    }  # fmt: skip
    return json.dumps(product)


def get_products_answer(*products: str) -> dict[str, Any]:
    return {"FormatVersion": "aws_v1", "PriceList": list(products)}


def spot_history_xml(records: list[tuple[str, str, datetime]], instance_type: str = "g4dn.xlarge") -> bytes:
    """A DescribeSpotPriceHistory answer: (availability zone, price, timestamp) per record."""
    items = "".join(
        f"<item><instanceType>{instance_type}</instanceType><productDescription>Linux/UNIX</productDescription>"
        f"<spotPrice>{price}</spotPrice><timestamp>{at.strftime('%Y-%m-%dT%H:%M:%S.000Z')}</timestamp>"
        f"<availabilityZone>{zone}</availabilityZone></item>"
        for zone, price, at in records
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<DescribeSpotPriceHistoryResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
        f"<requestId>5a7b2c1e-cost</requestId><spotPriceHistorySet>{items}</spotPriceHistorySet>"
        "</DescribeSpotPriceHistoryResponse>"
    ).encode()
