"""P5 Spot Instances count against their own vCPU quota ("All P5 Spot Instance Requests", L-C4BD4855), not
against the P2/P3/P4 one (L-7212CCBC); on-demand P5 share "Running On-Demand P instances" (L-417A185B)."""

from __future__ import annotations

import pytest

from provisioning.catalog.market.quotas import QUOTA_CODES, fetch_vcpu_quotas
from provisioning.catalog.model import Catalog, InstanceType, Market, Price, Quota
from provisioning.planner import PlanRequest, plan_cluster

P5 = InstanceType("p5.48xlarge", "P", 192, 2048.0, 3200.0, "H100", 8, 7916.0)
P4D = InstanceType("p4d.24xlarge", "P", 96, 1152.0, 400.0, "A100", 8, 2496.0)


def _catalog(p_spot: float, p5_spot: float) -> Catalog:
    prices = [
        Price("p5.48xlarge", "r", None, Market.ON_DEMAND, 55.0),
        Price("p5.48xlarge", "r", "ra", Market.SPOT, 26.0),
        Price("p4d.24xlarge", "r", None, Market.ON_DEMAND, 22.0),
        Price("p4d.24xlarge", "r", "ra", Market.SPOT, 10.0),
    ]
    quotas = [
        Quota("r", "P", Market.ON_DEMAND, 192.0),
        Quota("r", "P", Market.SPOT, p_spot),
        Quota("r", "P5", Market.SPOT, p5_spot),
    ]
    return Catalog({"p5.48xlarge": P5, "p4d.24xlarge": P4D}, prices, quotas, source="test")


def _spot_nodes(catalog: Catalog, instance_type: str) -> int:
    result = plan_cluster(catalog, PlanRequest(max_price=200.0))
    return sum(
        g.count for p in result.plans for g in p.nodes if g.instance_type == instance_type and g.market is Market.SPOT
    )


def test_p5_spot_is_held_to_its_own_quota_not_the_p4_one():
    # no P2-P4 spot quota at all, two P5 spot nodes' worth of P5 quota: P5 spot plans exist, P4 spot ones not
    catalog = _catalog(p_spot=0.0, p5_spot=384.0)
    assert P5.quota_group_in(Market.SPOT) == "P5" and P5.quota_group_in(Market.ON_DEMAND) == "P"
    assert P4D.quota_group_in(Market.SPOT) == "P"
    assert _spot_nodes(catalog, "p5.48xlarge") > 0
    assert _spot_nodes(catalog, "p4d.24xlarge") == 0


def test_no_p5_spot_quota_means_no_p5_spot_plan_whatever_the_p4_quota():
    catalog = _catalog(p_spot=960.0, p5_spot=0.0)  # P4 spot it may buy (and does); P5 spot none
    assert _spot_nodes(catalog, "p5.48xlarge") == 0 < _spot_nodes(catalog, "p4d.24xlarge")


def test_the_live_quotas_ask_for_the_p5_spot_code():
    asked: list[str] = []

    class Quotas:
        class exceptions:
            NoSuchResourceException = KeyError

        def get_service_quota(self, ServiceCode: str, QuotaCode: str) -> dict:
            asked.append(QuotaCode)
            return {"Quota": {"Value": 192.0}}

    catalog = fetch_vcpu_quotas(Quotas(), "r", {P5.quota_group_in(m) for m in Market})
    assert QUOTA_CODES["P5"] == {Market.SPOT: "L-C4BD4855"} and QUOTA_CODES["P"][Market.SPOT] == "L-7212CCBC"
    assert sorted(asked) == ["L-417A185B", "L-7212CCBC", "L-C4BD4855"]
    assert catalog.quota("r", "P5", Market.SPOT) == 192.0


@pytest.mark.parametrize("market", list(Market))
def test_other_families_keep_one_group_in_both_markets(market):
    assert InstanceType("g5.xlarge", "G and VT", 4, 16.0, 10.0).quota_group_in(market) == "G and VT"
