"""AWS clients for tests: EC2 goes to moto (in-process or a server over HTTP); Pricing and Service Quotas,
which moto does not implement, are answered by a small fake hooked into botocore's event system, so
real botocore parameter validation and pagination still run.
"""

from __future__ import annotations

import json
from typing import Any

import boto3
from botocore.awsrequest import AWSResponse

from provisioning.catalog.market.aws import AwsClients


def price_item(instance_type: str, region: str, usd: float) -> str:
    """One PriceList entry as the Pricing API returns it (a JSON string)."""
    return json.dumps(
        {
            "product": {
                "productFamily": "Compute Instance",
                "attributes": {
                    "instanceType": instance_type,
                    "regionCode": region,
                    "operatingSystem": "Linux",
                    "tenancy": "Shared",
                },
                "sku": "SKU1",
            },
            "serviceCode": "AmazonEC2",
            "terms": {
                "OnDemand": {
                    "SKU1.JRTCKXETXF": {
                        "priceDimensions": {
                            "SKU1.JRTCKXETXF.6YS6EN2CT7": {
                                "unit": "Hrs",
                                "pricePerUnit": {"USD": f"{usd:.10f}"},
                                "description": f"${usd} per On Demand Linux {instance_type} Instance Hour",
                            }
                        },
                        "sku": "SKU1",
                        "effectiveDate": "2025-07-01T00:00:00Z",
                    }
                }
            },
        }
    )


class FakeMarketClients(AwsClients):
    """Real boto3 clients; every API call is recorded in `calls` as "service.Operation"."""

    def __init__(self, on_demand_usd: float = 1.0, quota_vcpus: float = 96.0) -> None:
        super().__init__(boto3.session.Session())
        self.on_demand_usd = on_demand_usd
        self.quota_vcpus = quota_vcpus
        self.calls: list[str] = []
        # Failure knobs: "service" or "service.Operation" -> the exception that call raises.
        self.failures: dict[str, Exception] = {}
        events = self.session.events
        events.register("before-parameter-build", self._record)
        events.register("before-call.pricing.GetProducts", self._get_products)
        events.register("before-call.service-quotas.GetServiceQuota", self._get_service_quota)

    def _record(self, params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        call = f"{model.service_model.service_name}.{model.name}"
        self.calls.append(call)
        failure = self.failures.get(call) or self.failures.get(call.split(".")[0])
        if failure is not None:
            raise failure
        context["api_params"] = params

    def _get_products(self, context: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        filters = {f["Field"]: f["Value"] for f in context["api_params"]["Filters"]}
        names = filters["instanceType"].split(",")
        items = [price_item(name, filters["regionCode"], self.on_demand_usd) for name in names]
        return AWSResponse(None, 200, {}, None), {"FormatVersion": "aws_v1", "PriceList": items}

    def _get_service_quota(self, context: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        code = context["api_params"]["QuotaCode"]
        quota = {"ServiceCode": "ec2", "QuotaCode": code, "Value": self.quota_vcpus}
        return AWSResponse(None, 200, {}, None), {"Quota": quota}

    def count(self, prefix: str) -> int:
        return sum(1 for call in self.calls if call.startswith(prefix))
