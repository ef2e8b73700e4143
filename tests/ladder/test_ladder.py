"""The recovery ladder's rungs, one situation at a time (provisioning/ladder): pure, so no cloud, no clock."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provisioning.ladder.backoff import backoff_s
from provisioning.ladder.deadline import deadline_view, earliest_finish_s, fallback_fill
from provisioning.ladder.decision import Order, Retire, Rung
from provisioning.ladder.ladder import decide
from provisioning.ladder.situation import Holding, Limits, Offer
from provisioning.planner.plan import Role
from tests.conftest import examples
from tests.ladder.situations import (
    CAP,
    CPU,
    FAST,
    GPU,
    HOLDER_USD,
    OD_USD,
    TIMING,
    od,
    refused,
    situation,
    spot,
    whole,
)

G = 4 * 65.0 * 3.6  # the fill: 4 g4dn.xlarge on demand beside the c5.xlarge holder (2.77 - 0.17 = 2.60 $/h)
TEN_HOURS = 10 * G  # PFLOP the fill trains in 10 h


def test_a_whole_cluster_holds_and_asks_again_only_at_its_next_event():
    d = decide(situation())
    assert (d.rung, d.orders, d.check_at_s) == (Rung.HOLD, (), None)
    assert d.reason.text == "the cluster is as planned"


def test_a_short_role_is_bought_like_the_plan_within_the_cap():
    d = decide(situation(whole(spot_ready=10)))
    assert d.rung is Rung.BUY_LIKE_PLAN and d.orders == (Order(spot(), Role.TRAINER, 6),)
    # three g5.xlarge repairs hold 0.90 $/h of the 2.77 cap: one more g4dn.xlarge fits
    fuller = (*whole(spot_ready=10), Holding(spot("z-a", FAST), Role.TRAINER, 3))
    assert decide(situation(fuller)).orders == (Order(spot(), Role.TRAINER, 1),)


def test_the_holder_comes_first_it_keeps_the_checkpoints():
    d = decide(situation(whole(spot_ready=10, holder=0)))
    assert d.rung is Rung.BUY_LIKE_PLAN and d.orders == (Order(od("z-a", CPU), Role.HOLDER, 1),)


def test_a_refusing_pool_is_repaired_with_the_zones_fastest_type_within_the_cap():
    d = decide(situation(whole(spot_ready=10), refusals=(refused(spot(), 900.0, 990.0),)))
    assert d.rung is Rung.REPAIR
    assert d.orders == (Order(spot("z-a", FAST), Role.TRAINER, 3),)  # 1.10 $/h of room: three at 0.30
    assert d.reason.refused == (spot(),) and d.reason.short == 6


def test_backoff_doubles_from_15_s_to_a_5_minute_cap():
    assert [backoff_s(TIMING, n) for n in range(1, 9)] == [15, 30, 60, 120, 240, 300, 300, 300]


def test_every_pool_refusing_retries_after_the_first_backoff_never_in_a_tight_loop():
    refusals = (refused(spot(), 0.0, 990.0, in_row=3), refused(spot("z-a", FAST), 0.0, 995.0))
    d = decide(situation(whole(spot_ready=10), refusals=refusals, capacity={"z-b": 0, "z-c": 0}))
    assert d.rung is Rung.RETRY and d.orders == ()
    assert d.check_at_s == 1010.0  # g5.xlarge's 15 s ends first (g4dn.xlarge's 60 s at 1050)
    later = decide(situation(whole(spot_ready=10), now_s=1010.0, refusals=refusals, capacity={"z-b": 0, "z-c": 0}))
    assert later.rung is Rung.REPAIR  # its backoff over, g5.xlarge is asked again


def _zone_out(first_s: float) -> tuple:
    return refused(spot(), first_s, 995.0, in_row=4), refused(spot("z-a", FAST), first_s, 995.0, in_row=4)


def test_a_zone_out_long_enough_moves_the_cluster_where_capacity_is_seen():
    d = decide(situation(whole(spot_ready=0), refusals=_zone_out(0.0), capacity={"z-b": 16, "z-c": 4}))
    assert d.rung is Rung.MOVE and d.move_to == "z-b"
    assert d.orders == (Order(od("z-b", CPU), Role.HOLDER, 1), Order(spot("z-b"), Role.TRAINER, 16))
    assert d.reason.outage_s == 1000.0


def test_a_move_waits_until_the_outage_has_cost_what_the_move_costs():
    # nothing trains: the move costs its holder's join beside the old one, 300 s x 0.17 / 2.57 = 19.8 s
    assert decide(situation(whole(spot_ready=0), refusals=_zone_out(985.0), capacity={"z-b": 16})).rung is Rung.RETRY
    assert decide(situation(whole(spot_ready=0), refusals=_zone_out(975.0), capacity={"z-b": 16})).rung is Rung.MOVE
    # half the trainers still train: the outage must be twice the move's cost (12 s relaunch + 19.8 s)
    half = whole(spot_ready=8)
    assert decide(situation(half, refusals=_zone_out(950.0), capacity={"z-b": 16})).rung is Rung.RETRY
    assert decide(situation(half, refusals=_zone_out(930.0), capacity={"z-b": 16})).rung is Rung.MOVE
    # ... and the work left must gain from it: 10 PFLOP is 19 s here, 42 s with the move
    assert decide(situation(half, refusals=_zone_out(0.0), capacity={"z-b": 16}, remaining=10.0)).rung is Rung.RETRY


def test_no_move_to_a_zone_seen_empty_or_refusing():
    assert (
        decide(situation(whole(spot_ready=0), refusals=_zone_out(0.0), capacity={"z-b": 0, "z-c": 0})).rung
        is Rung.RETRY
    )
    both = (*_zone_out(0.0), refused(spot("z-b"), 0.0, 995.0))
    d = decide(situation(whole(spot_ready=0), refusals=both, capacity={"z-b": 16, "z-c": 4}))
    assert d.rung is Rung.MOVE and d.move_to == "z-c" and Order(spot("z-c"), Role.TRAINER, 4) in d.orders


def test_a_move_counts_the_head_it_leaves_behind_in_the_new_zones_bill():
    """The live head (the holder that runs the controller) stays in z-a: a move to z-b bills it beside the new
    cluster, so at the plan's own price as cap two Spot trainers fewer fit there; once left behind, it counts in
    the cluster's bill. A refusing on-demand pool rules its zone out as a refusing Spot pool does."""
    base = replace(
        situation(whole(spot_ready=0), refusals=_zone_out(0.0), capacity={"z-b": 16}),
        limits=Limits(16 * 0.15 + HOLDER_USD, 16 * 0.15 + HOLDER_USD),
    )
    assert Order(spot("z-b"), Role.TRAINER, 16) in decide(base).orders
    head = Offer(od("z-a", CPU), HOLDER_USD)
    d = decide(replace(base, head=head))
    assert d.rung is Rung.MOVE
    assert d.orders == (Order(od("z-b", CPU), Role.HOLDER, 1), Order(spot("z-b"), Role.TRAINER, 14))
    assert replace(base, head=head, head_apart=True).usd_per_hour() == pytest.approx(2 * HOLDER_USD)
    refusing = replace(base, refusals=(*base.refusals, refused(od("z-b", CPU), 990.0, 995.0)))
    assert decide(refusing).move_to == "z-c"


def test_a_move_under_way_is_waited_for():
    d = decide(situation(whole(spot_ready=0), moving_to="z-b", refusals=_zone_out(0.0)))
    assert d.rung is Rung.MOVING and d.orders == ()


def _deadline_at(slack_s: float) -> float:
    """The deadline that leaves `slack_s` against the fill (4 g4dn.xlarge on demand) at now = 1000 s."""
    return 1000.0 + 36_000.0 + slack_s


def test_with_two_joins_of_slack_the_job_stays_on_spot():
    d = decide(situation(remaining=TEN_HOURS, deadline_s=_deadline_at(700.0)))
    assert d.rung is Rung.HOLD and d.reason.slack_s == pytest.approx(700.0)
    assert d.check_at_s is None  # Spot outruns the fill: the slack only grows until the next event


def test_between_one_and_two_joins_of_slack_stand_ins_grow_with_the_danger():
    """s = 450 s, j = 300 s: Q(n_h) >= g (2 - 1.5) - Q(0) asks for half the fill, 2 stand-ins; 2 x 0.526 $/h
    beside 2.57 exceeds the 2.77 cap by 0.85: six Spot trainers go (those not joined first, at the join)."""
    d = decide(situation(remaining=TEN_HOURS, deadline_s=_deadline_at(450.0)))
    assert d.rung is Rung.FALLBACK and not d.reason.deadline_at_risk
    assert d.orders == (Order(od(), Role.TRAINER, 2, stand_in=True),)
    assert d.retire == (Retire(spot(), Role.TRAINER, 6),)
    # at 6 $/h the fill is 11 nodes: at the same slack against it, 6 stand-ins, and room for them beside Spot
    roomy = decide(situation(remaining=TEN_HOURS, deadline_s=1000.0 + 36_000.0 * 4 / 11 + 450.0, fallback=6.0))
    assert roomy.retire == () and roomy.orders == (Order(od(), Role.TRAINER, 6, stand_in=True),)


def test_below_one_join_the_whole_fill_is_bought_and_the_risk_said_but_spot_is_not_given_up_for_it():
    """At 200 s of slack even the whole fill bought now may be late: no guarantee is left to buy, so the
    stand-ins are what the cap has free (2.30 $/h beside 2 Spot trainers: all 4), and none beside 16."""
    d = decide(situation(whole(spot_ready=2), remaining=TEN_HOURS, deadline_s=_deadline_at(200.0)))
    assert d.rung is Rung.FALLBACK and d.orders[0].count == 4 and d.retire == () and d.reason.deadline_at_risk
    assert "cannot be kept for sure" in d.reason.text
    full = decide(situation(remaining=TEN_HOURS, deadline_s=_deadline_at(200.0)))
    assert full.rung is Rung.HOLD and full.reason.deadline_at_risk and full.orders == full.retire == ()


def test_stand_ins_go_back_for_spot_when_the_slack_allows_each_retired_as_spot_joins():
    held = (
        Holding(spot(), Role.TRAINER, 3),
        Holding(od("z-a", CPU), Role.HOLDER, 1),
        Holding(od(), Role.TRAINER, 4, stand_in=True),
    )
    d = decide(situation(held, remaining=TEN_HOURS, deadline_s=_deadline_at(5000.0)))
    assert d.rung is Rung.RETURN_TO_SPOT
    # 13 short, 0.05 + 4 x 0.526 $/h of room; all 4 stand-ins may go, one as each of the first 4 joins
    assert d.orders == (Order(spot(), Role.TRAINER, 13, retires=Retire(od(), Role.TRAINER, 4)),)
    # at 400 s of slack one fewer would break the rule a join from now (2 x 3 x 234 < g (2 - 100/300)): all stay
    tight = decide(situation(held, remaining=TEN_HOURS, deadline_s=_deadline_at(400.0)))
    assert tight.rung is Rung.HOLD and "4 stand-ins held" in tight.reason.text


def test_stand_ins_held_while_the_spot_pool_cools_ask_again_when_its_backoff_runs_out():
    """Spot could replace the stand-ins but its pool refused lately: the ladder holds, and asks again when the
    backoff runs out (not only at the job's next event: stand-ins training steadily make none)."""
    held = (
        Holding(spot(), Role.TRAINER, 3),
        Holding(od("z-a", CPU), Role.HOLDER, 1),
        Holding(od(), Role.TRAINER, 4, stand_in=True),
    )
    cool = (refused(spot(), 900.0, 990.0, in_row=3),)  # 60 s from 990 s: cooling until 1050 s
    d = decide(situation(held, refusals=cool, remaining=TEN_HOURS, deadline_s=_deadline_at(5000.0)))
    assert d.rung is Rung.HOLD and d.check_at_s == 1050.0
    assert "4 stand-ins held, 13 Spot trainers short" in d.reason.text  # the fallback's cap leaves no room


def test_with_the_spot_trainers_whole_and_training_the_spare_stand_ins_go_at_once_not_before():
    """The fallback's cap had room for Spot and stand-ins both: once the Spot trainers train again, the stand-ins
    the slack no longer needs go without an order; while a Spot trainer is only on its way, they stay."""
    stand_ins = Holding(od(), Role.TRAINER, 4, stand_in=True)
    holder = Holding(od("z-a", CPU), Role.HOLDER, 1)
    whole_again = decide(
        situation(
            (Holding(spot(), Role.TRAINER, 16), holder, stand_ins),
            remaining=TEN_HOURS,
            deadline_s=_deadline_at(5000.0),
            fallback=6.0,
        )
    )
    assert whole_again.rung is Rung.RETURN_TO_SPOT and whole_again.orders == ()
    assert whole_again.retire == (Retire(od(), Role.TRAINER, 4, stand_in=True),)
    coming = decide(
        situation(
            (Holding(spot(), Role.TRAINER, 15, coming=1), holder, stand_ins),
            remaining=TEN_HOURS,
            deadline_s=_deadline_at(5000.0),
            fallback=6.0,
        )
    )
    assert coming.retire == () and coming.rung is not Rung.RETURN_TO_SPOT


def test_the_budget_stops_the_job_before_a_checkpoint_would_overrun_it():
    d = decide(situation(budget=10.0, spent=9.995))  # 2.57 $/h for the 12 s of a stop: 0.0086
    assert d.rung is Rung.STOP and "budget" in d.reason.text and d.orders == ()
    running = decide(situation(budget=10.0, spent=5.0))
    assert running.rung is Rung.HOLD and running.check_at_s == pytest.approx(1000.0 + 5.0 / 2.57 * 3600 - 12.0)


def test_the_fill_is_the_plans_trainer_type_and_the_earliest_finish_is_the_fills():
    s = situation(remaining=TEN_HOURS)
    fill = fallback_fill(s)
    assert fill.offer is not None and fill.offer.pool == od() and fill.count == 4
    assert earliest_finish_s(s) == pytest.approx(1000.0 + 36_000.0)
    poor = situation(remaining=TEN_HOURS, fallback=0.5)  # the holder alone takes 0.17 of it: no trainer fits
    assert fallback_fill(poor).count == 0 and math.isinf(earliest_finish_s(poor))


def test_decisions_are_pure():
    s = situation(
        whole(spot_ready=10),
        refusals=(refused(spot(), 900.0, 990.0),),
        deadline_s=_deadline_at(450.0),
        remaining=TEN_HOURS,
    )
    before = repr(s)
    assert decide(s) == decide(s) and repr(s) == before


@settings(max_examples=examples(60))
@given(slack=st.floats(-300.0, 900.0), present=st.integers(0, 4), coming=st.integers(0, 4))
def test_after_a_fallback_the_rule_holds_or_the_whole_fill_is_held(slack, present, coming):
    """Can't Be Late's rule for the cluster (deadline.py): Q(n_h) >= g (2 - s / j) - Q(n_p)."""
    coming = min(coming, 4 - present)
    held = (*whole(spot_ready=0), Holding(od(), Role.TRAINER, present, coming, stand_in=True))
    s = situation(held, remaining=TEN_HOURS, deadline_s=_deadline_at(slack))
    d = decide(s)
    bought = d.orders[0].count if d.rung is Rung.FALLBACK else 0
    n_h = present + coming + bought
    need = G * (2.0 - deadline_view(s).slack_s / 300.0) - present * 65.0 * 3.6
    assert n_h == 4 or n_h * 65.0 * 3.6 >= need - 1e-6
    assert n_h <= 4 and (bought == 0 or d.orders[0].pool == od())


def test_plan_types_without_on_demand_fall_back_to_any_trainer_type():
    from dataclasses import replace

    s = situation(remaining=TEN_HOURS)
    no_gpu_od = tuple(o for o in s.offers if o.pool != od())
    fill = fallback_fill(replace(s, offers=(*no_gpu_od, *[o for o in s.offers if o.pool == od("z-b")])))
    assert fill.count == 0  # on demand is bought in the cluster's zone only
    other = replace(s, offers=(*no_gpu_od, _od_fast()))
    assert fallback_fill(other).offer == _od_fast()


def _od_fast():
    from provisioning.ladder.situation import Offer

    return Offer(od("z-a", FAST), 2 * OD_USD)


def test_a_holding_without_a_price_is_a_callers_bug():
    with pytest.raises(ValueError, match="no offer"):
        situation((Holding(spot("z-q"), Role.TRAINER, 1),))
    assert CAP > 0 and GPU  # the module's figures are what the docstrings above count with
