"""The policies compared, the summary per policy and its JSON document."""

from __future__ import annotations

import json

import numpy as np
import pytest

from provisioning.catalog.model import Market
from provisioning.planner import PlanRequest, Role
from simulation.compare import Caps, compare_policies
from simulation.policies import PolicyName, plan_policies, spot_only_plan
from simulation.recovery import Workload
from simulation.report import Quantiles
from tests.simulation.sim_cases import PAPER_CAP, everywhere, hazard, paper_catalog, paper_plan

ALL = [p.value for p in PolicyName]


def test_every_policy_at_the_papers_price_cap():
    policies = plan_policies(paper_catalog(), PlanRequest(max_price=PAPER_CAP), None, with_deadline=True)
    by_name = {p.policy.value: p for p in policies}
    assert list(by_name) == ALL
    assert (
        by_name["deepvm"].plan
        == by_name["plan-only"].plan
        == by_name["shrink-only"].plan
        == by_name["deadline-fallback"].plan
    )
    assert by_name["deepvm"].rules.ladder and not by_name["plan-only"].rules.ladder
    assert by_name["deepvm"].plan.summary() == "17 g4dn.xlarge spot + 1 c5.xlarge on-demand holder"
    assert by_name["cost-first"].plan.summary() == "1 g4dn.xlarge on-demand anchor + 15 g4dn.xlarge spot"
    assert all(g.market is Market.ON_DEMAND for g in by_name["on-demand"].plan.nodes)
    assert by_name["on-demand"].plan.price_per_hour <= PAPER_CAP
    assert (
        by_name["shrink-only"].rules.replace,
        by_name["spot-restart"].rules.restart_all,
        by_name["deadline-fallback"].rules.deadline_fallback,
    ) == (False, True, True)
    without = plan_policies(paper_catalog(), PlanRequest(max_price=PAPER_CAP), None, with_deadline=False)
    assert "deadline-fallback" not in {p.policy.value for p in without}


def test_spot_only_plan_keeps_the_trainers_and_drops_the_holders():
    plan = spot_only_plan(paper_plan(), paper_catalog())
    assert [(g.instance_type, g.market, g.count, g.role) for g in plan.nodes] == [
        ("g4dn.xlarge", Market.SPOT, 17, Role.TRAINER)
    ]
    assert plan.price_per_hour == pytest.approx(17 * 0.1578)
    assert plan.effective_flops == paper_plan().effective_flops


def test_quantiles_are_numpys():
    values = np.arange(1.0, 101.0)
    q = Quantiles.of(values)
    assert (q.mean, q.p50, q.p90, q.p99) == pytest.approx((50.5, 50.5, 90.1, 99.01))


@pytest.fixture(scope="module")
def comparison():
    policies = plan_policies(paper_catalog(), PlanRequest(max_price=PAPER_CAP), None, with_deadline=True)
    workload = Workload(work_pflop=400_000.0, runs=200, seed=3, deadline_h=17.5)  # 17.42 h at full speed
    return compare_policies(policies, paper_catalog(), everywhere(hazard(0.02)), workload, Caps(PAPER_CAP))


def test_json_document_has_the_issues_shape(comparison):
    doc = json.loads(json.dumps(comparison.report.to_dict()))  # plain JSON: no NaN, no numpy types
    assert set(doc) == {"runs", "seed", "trace", "work", "policies"}
    assert (doc["runs"], doc["seed"], doc["trace"], doc["work"]) == (200, 3, "rate:0.02/h", 400_000.0)
    assert [p["policy"] for p in doc["policies"]] == ALL
    for p in doc["policies"]:
        assert set(p) == {
            "policy",
            "plan",
            "makespan_h",
            "cost_usd",
            "usd_per_pflop",
            "interruptions_per_run",
            "restarts_per_run",
            "p_miss_deadline",
        }
        for field in ("makespan_h", "cost_usd"):
            q = p[field]
            assert set(q) == {"mean", "p50", "p90", "p99"} and q["p50"] <= q["p90"] <= q["p99"]
        assert p["usd_per_pflop"] == pytest.approx(p["cost_usd"]["mean"] / 400_000.0)
        assert 0.0 <= p["p_miss_deadline"] <= 1.0
        assert set(p["plan"]) >= {"architecture", "nodes", "price_per_hour", "effective_flops"}
    by_name = {p["policy"]: p for p in doc["policies"]}
    assert by_name["on-demand"]["interruptions_per_run"] == 0 and by_name["on-demand"]["restarts_per_run"] == 0
    assert by_name["deepvm"]["interruptions_per_run"] > 0 and by_name["plan-only"]["interruptions_per_run"] > 0
    # the fallback buys on demand when late: it misses the deadline less often than plan-only, at a higher cost
    fallback, deepvm = by_name["deadline-fallback"], by_name["plan-only"]
    assert deepvm["p_miss_deadline"] > 0 and fallback["p_miss_deadline"] < deepvm["p_miss_deadline"]
    assert fallback["cost_usd"]["mean"] > deepvm["cost_usd"]["mean"]
    assert by_name["on-demand"]["p_miss_deadline"] == 1.0  # the on-demand cluster is slower than 17.5 h
