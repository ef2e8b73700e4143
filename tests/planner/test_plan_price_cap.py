"""The --max-price a plan was made under travels with it (Plan.price_cap): read from `deepvm plan --json`'s
"max_price" or a saved plan's "request", kept through the state store's form, never below the plan's own
price. It is what a running job's recovery ladder may spend per hour (training/control/market.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from provisioning.planner.plan_document import plan_from_dict, read_plan_document
from tests.cloud.plans import make_plan


@pytest.mark.parametrize("where", ["max_price", "request"])
def test_the_ranked_plans_cap_is_each_plans_unless_below_its_price(where):
    cheap, dear = make_plan(spot=2), make_plan(spot=8)
    cap = (cheap.price_per_hour + dear.price_per_hour) / 2
    document = {
        "plans": [cheap.to_dict(), dear.to_dict()],
        **({"max_price": cap} if where == "max_price" else {"request": {"max_price": cap}}),
    }
    first, second = (entry.plan for entry in read_plan_document(document))
    assert first.price_cap == pytest.approx(cap)
    assert second.price_cap is None  # a cap below the plan's price is not the one it was made under


@pytest.mark.parametrize("cap", [None, "3", True, -1.0, float("inf")])
def test_no_cap_or_one_that_is_not_a_positive_number_leaves_it_unknown(cap):
    document = {"plans": [make_plan().to_dict()], "max_price": cap}
    (entry,) = read_plan_document(document)
    assert entry.plan.price_cap is None


def test_a_plans_own_cap_wins_and_survives_its_dict_form():
    plan = replace(make_plan(), price_cap=9.5)
    assert plan_from_dict(plan.to_dict()).price_cap == 9.5
    (entry,) = read_plan_document({"plans": [plan.to_dict()], "max_price": 20.0})
    assert entry.plan.price_cap == 9.5
    assert "price_cap" not in make_plan().to_dict()  # a plan without one writes what it always wrote
