"""The `deepvm` policy in the simulator: the recovery ladder's own decisions on capacity traces, one zone or
several, and issue 24's bar on a shipped trace (few runs, a fixed seed; the README's numbers: 300 runs)."""

from __future__ import annotations

from collections import Counter
from functools import cache
from itertools import pairwise

import pytest

from provisioning.catalog.model import Catalog, Market
from provisioning.catalog.sources import resolve_catalog
from provisioning.core.errors import InputError
from provisioning.ladder.decision import Rung
from provisioning.ladder.throughput import pflop_per_hour
from provisioning.planner import PlanRequest
from provisioning.planner.interruptions import MEASURED_RELAUNCH_S, REPLACEMENT_DELAY_S
from simulation.compare import Caps, compare_policies
from simulation.market import market_case
from simulation.market_run import run_market
from simulation.policies import PolicyName, PolicyPlan, plan_policies
from simulation.recovery import Workload
from simulation.trace import CapacitySeries, Trace, TraceKind
from simulation.traces import default_trace_for, resolve_trace
from simulation.zones import TraceSpec, ZoneTraces, parse_trace_flag, zone_traces

REGION_ZONES = ("us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d", "us-east-1f")
OWN = "us-east-1c"  # where the planner puts the snapshot's cluster at $12/h (the cheapest g4dn.xlarge Spot)
ALL_ZONES = {
    "us-east-1c": "aws-v100-16-us-east-2b",
    "us-east-1a": "aws-v100-16-us-west-2a",
    "us-east-1b": "aws-v100-16-us-west-2c",
    "us-east-1d": "aws-v100-4-us-east-1f",
    "us-east-1f": "aws-v100-4-us-east-2a",
}


@cache
def snapshot() -> Catalog:
    return resolve_catalog(regions=["us-east-1"], offline=True, catalog_file=None, refresh=False)


@cache
def policies_at_12() -> dict[PolicyName, PolicyPlan]:
    chosen = plan_policies(snapshot(), PlanRequest(max_price=12.0, regions=("us-east-1",)), None, with_deadline=True)
    return {p.policy: p for p in chosen}


def traces(by_zone: dict[str, str]) -> ZoneTraces:
    given = [(TraceSpec(zone, name), resolve_trace(name)) for zone, name in by_zone.items()]
    return zone_traces(given, OWN, "us-east-1", REGION_ZONES, default_trace_for)


def compare(names: tuple[PolicyName, ...], by_zone: dict[str, str], runs: int, deadline_h: float | None):
    workload = Workload(work_pflop=27_000.0, runs=runs, seed=3, deadline_h=deadline_h)
    chosen = tuple(policies_at_12()[n] for n in names)
    report = compare_policies(chosen, snapshot(), traces(by_zone), workload, Caps(12.0)).report
    return {p.policy: p for p in report.policies}


def test_the_bar_where_on_demand_keeps_the_deadline_deepvm_keeps_it_for_less():
    """us-east-2b's series in the plan's zone (capacity gone 37 % of the time), 6 h for what on demand does in
    5.47 h: deepvm misses at most 5 %, and costs less than on demand; deadline-fallback does neither."""
    got = compare(
        (PolicyName.DEEPVM, PolicyName.ON_DEMAND, PolicyName.DEADLINE_FALLBACK),
        {OWN: "aws-v100-16-us-east-2b"},
        runs=40,
        deadline_h=6.0,
    )
    deepvm, od, fallback = got[PolicyName.DEEPVM], got[PolicyName.ON_DEMAND], got[PolicyName.DEADLINE_FALLBACK]
    assert od.p_miss_deadline == 0.0 and od.makespan_h.p90 == pytest.approx(5.469, abs=1e-3)
    assert deepvm.p_miss_deadline <= 0.05
    assert deepvm.cost_usd.mean < 0.95 * od.cost_usd.mean
    assert fallback.p_miss_deadline > 0.05 and fallback.cost_usd.mean > od.cost_usd.mean


def test_with_every_zone_of_the_region_deepvm_moves_and_its_p90_falls_several_fold():
    got = compare((PolicyName.DEEPVM, PolicyName.PLAN_ONLY), ALL_ZONES, runs=24, deadline_h=None)
    assert got[PolicyName.DEEPVM].makespan_h.p90 * 3 < got[PolicyName.PLAN_ONLY].makespan_h.p90
    assert got[PolicyName.DEEPVM].traces == tuple(ALL_ZONES[z] for z in sorted(ALL_ZONES, key=lambda z: (z != OWN, z)))


def _one_run(
    by_zone: dict[str, Trace],
    deadline_h: float | None,
    work: float = 27_000.0,
    run: int = 0,
    fallback: float | None = None,
):
    given = [(TraceSpec(zone, trace.name), trace) for zone, trace in by_zone.items()]
    zones = zone_traces(given, OWN, "us-east-1", REGION_ZONES, default_trace_for)
    workload = Workload(work_pflop=work, runs=1, seed=3, deadline_h=deadline_h)
    case = market_case(policies_at_12()[PolicyName.DEEPVM].plan, snapshot(), zones, workload, fallback, 12.0)
    return case, run_market(case, case.draws(), run, record=True)


def _series(name: str, shares: list[float]) -> Trace:
    return Trace(name, TraceKind.CAPACITY, "test", capacity=CapacitySeries(1.0, tuple(shares), 16))


def test_a_zone_without_capacity_sends_the_cluster_where_there_is_some_within_a_minute():
    """The plan's zone never has Spot, us-east-1a always does: after two refusals (15 s, then 30 s of backoff)
    the outage has cost what a move costs (a relaunch and the anchor's join beside its successor, ~25 s)."""
    never, full = _series("never", [0.0] * 40), _series("full", [1.0] * 40)
    case, one = _one_run({OWN: never, "us-east-1a": full}, None)
    moves = [(t, d) for t, d in one.decisions if d.rung is Rung.MOVE]
    assert len(moves) == 1 and moves[0][0] * 3600 == pytest.approx(45.0)
    move = moves[0][1]
    assert move.move_to == "us-east-1a" and {o.pool.zone for o in move.orders} == {"us-east-1a"}
    # g4dn.xlarge Spot is 0.1578 $/h there (0.1499 in us-east-1c): 72 fit the $12 cap beside the anchor, not 76
    assert {(o.pool.market, o.count) for o in move.orders} == {(Market.ON_DEMAND, 1), (Market.SPOT, 72)}
    facts = {t.instance_type: t for t in case.types}
    moved_h = 27_000.0 / pflop_per_hour([(facts["g4dn.xlarge"], 73)])  # the anchor trains alone until they join
    assert moved_h < one.makespan_h < moved_h + (45.0 + REPLACEMENT_DELAY_S + MEASURED_RELAUNCH_S) / 3600 + 1e-6


def test_without_other_zones_a_tight_deadline_buys_stand_ins_and_gives_them_back_when_spot_returns():
    """Spot is there one hour in three, the deadline 6.5 h for 5.47 h of on-demand work: the whole fill (21
    stand-ins) carries the job through the gap; when Spot is back and two Spot trainers have won slack, 6
    stand-ins go for Spot trainers (one as each of the first 6 joins), and the job ends in time."""
    gaps = _series("gaps", [1.0, 0.0, 0.0] * 14)
    _, one = _one_run({OWN: gaps}, 6.5)
    rungs = Counter(d.rung for _, d in one.decisions)
    assert rungs[Rung.FALLBACK] >= 1 and rungs[Rung.RETURN_TO_SPOT] >= 1
    back = next(d for _, d in one.decisions if d.rung is Rung.RETURN_TO_SPOT).orders[0]
    assert back.pool.market is Market.SPOT and back.retires is not None and 0 < back.retires.count < back.count
    assert one.makespan_h <= 6.5
    stand_ins = [o for _, d in one.decisions for o in d.orders if o.stand_in]
    assert all(o.pool.market is Market.ON_DEMAND and o.pool.zone == OWN for o in stand_ins)


def test_a_refusing_pool_is_retried_with_backoff_not_in_a_loop():
    never = _series("never", [0.0] * 40)
    _, one = _one_run({OWN: never}, None, work=2_000.0)
    tries = [t for t, d in one.decisions if d.rung is Rung.BUY_LIKE_PLAN and d.orders[0].pool.market is Market.SPOT]
    gaps = [round((b - a) * 3600) for a, b in pairwise(tries)]
    assert gaps[:6] == [15, 30, 60, 120, 240, 300] and set(gaps[6:]) <= {300}
    assert one.interruptions == 0  # the anchor alone trains: the 2,000 PFLOP take 8.5 h of it
    assert one.makespan_h == pytest.approx(2_000.0 / (65 * 3.6), rel=0.01)


def test_the_series_share_one_clock_cut_to_the_shortest():
    zones = traces({OWN: "aws-v100-16-us-east-2b", "us-east-1a": "aws-v100-16-us-west-2a"})
    kept = dict(zones.by_zone)
    assert [z for z, _ in zones.by_zone] == [OWN, "us-east-1a"]
    assert kept[OWN].capacity.horizon_h == pytest.approx(270.6, abs=0.1)  # 3,247 samples, untouched
    assert len(kept["us-east-1a"].capacity.shares) == 3247  # 4,736 cut to the same
    assert zones.trace_for("g4dn.xlarge", "us-east-1", "us-east-1d") is kept[OWN]  # no trace: the plan's own


@pytest.mark.parametrize(
    ("flag", "zone", "spec"),
    [
        ("us-east-1a=aws-v100-16-us-east-2b", "us-east-1a", "aws-v100-16-us-east-2b"),
        ("aws-v100-16-us-east-2b", None, "aws-v100-16-us-east-2b"),
        ("./traces/a.json", None, "./traces/a.json"),
    ],
)
def test_trace_flags(flag, zone, spec):
    assert parse_trace_flag(flag) == TraceSpec(zone, spec)


def test_zone_errors_are_one_line():
    with pytest.raises(InputError, match="us-west-2a is not a zone of the plan's region us-east-1"):
        traces({"us-west-2a": "aws-v100-16-us-east-2b"})
    twice = [
        (TraceSpec(None, "aws-v100-16-us-east-2b"), resolve_trace("aws-v100-16-us-east-2b")),
        (TraceSpec(OWN, "aws-v100-4-us-east-1f"), resolve_trace("aws-v100-4-us-east-1f")),
    ]
    with pytest.raises(InputError, match="two traces for us-east-1c"):
        zone_traces(twice, OWN, "us-east-1", REGION_ZONES, default_trace_for)
