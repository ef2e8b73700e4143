"""Issue 24's bar, measured: the recovery ladder (`deepvm`) against today's policies on the shipped capacity traces.

    python benchmarks/market_bar.py [--runs-paper 500] [--runs-snapshot 300] [--markdown]

Every row is one `deepvm simulate` (the command that gives it is printed with it), on the same runs and seed
for every policy: `deepvm` (the ladder), `plan-only` (deepvm before it: the plan's fixed slots), the
simulator's older `deadline-fallback`, and `on-demand` (the best all-on-demand cluster at the same cap).
Baseline and ours side by side, with the ratios: p90 makespan of deepvm over plan-only's, mean cost of
deepvm over on-demand's.

1. The issue's first table: the paper's catalog (tests/data/deepvm_data.json) at $3/h, 100,000 PFLOP on the
   16-node V100 series of us-east-2b, without a deadline and at 15 h (the earliest deadline $3/h of on-demand
   keeps is 14.8 h: the issue's 12 h is now refused, with that number; at 12 h with a $4/h fallback cap).
2. The snapshot at $12/h in us-east-1, 27,000 PFLOP, 10 h: one zone (us-east-2b's series in the plan's zone)
   and all five zones of the region (each shipped series standing for one zone, on one clock).
3. The bar, trace by trace: each of the six shipped capacity series in the plan's zone, the snapshot at $12/h,
   27,000 PFLOP and a 6 h deadline, which on-demand alone keeps (5.47 h). The bar: deepvm's P(miss) <= 5 %,
   its mean cost at most on-demand's, and clearly below it (by 5 %) where Spot capacity exists.

Exit status 1 when the bar fails on any trace.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from provisioning.catalog.files import load_catalog_file  # noqa: E402
from provisioning.catalog.model import Catalog  # noqa: E402
from provisioning.catalog.sources import resolve_catalog  # noqa: E402
from provisioning.planner import PlanRequest  # noqa: E402
from simulation.compare import Caps, compare_policies  # noqa: E402
from simulation.policies import PolicyName, plan_policies  # noqa: E402
from simulation.recovery import Workload  # noqa: E402
from simulation.report import PolicySummary  # noqa: E402
from simulation.traces import default_trace_for, resolve_trace  # noqa: E402
from simulation.zones import TraceSpec, zone_traces  # noqa: E402

SHOWN = (PolicyName.DEEPVM, PolicyName.PLAN_ONLY, PolicyName.DEADLINE_FALLBACK, PolicyName.ON_DEMAND)
CAPACITY = (
    "aws-v100-16-us-east-2b",
    "aws-v100-16-us-west-2a",
    "aws-v100-16-us-west-2c",
    "aws-v100-4-us-east-1f",
    "aws-v100-4-us-east-2a",
    "aws-v100-4-us-west-2c",
)
SNAPSHOT_ZONES = {
    "us-east-1c": "aws-v100-16-us-east-2b",
    "us-east-1a": "aws-v100-16-us-west-2a",
    "us-east-1b": "aws-v100-16-us-west-2c",
    "us-east-1d": "aws-v100-4-us-east-1f",
    "us-east-1f": "aws-v100-4-us-east-2a",
}
CLEARLY_BELOW = 0.95  # "clearly below on-demand's cost": at least 5 % below


@dataclass(frozen=True)
class Scenario:
    label: str
    catalog: str  # "paper" or "snapshot"
    work: float
    deadline_h: float | None
    traces: dict[str, str]  # zone ("" for the plan's own) -> shipped trace
    fallback: float | None = None

    def command(self, runs: int, seed: int) -> str:
        where = (
            "--catalog data.json --max-price 3"
            if self.catalog == "paper"
            else "--offline --max-price 12 --region us-east-1"
        )
        traces = " ".join(f"--trace {f'{z}=' if z else ''}{t}" for z, t in self.traces.items())
        deadline = "" if self.deadline_h is None else f" --deadline {self.deadline_h:g}"
        fallback = "" if self.fallback is None else f" --fallback-max-price {self.fallback:g}"
        return f"deepvm simulate {where} --work {self.work:g} {traces}{deadline}{fallback} --runs {runs} --seed {seed}"


def run(
    s: Scenario, catalogs: dict[str, tuple[Catalog, PlanRequest]], runs: int, seed: int
) -> dict[PolicyName, PolicySummary]:
    catalog, request = catalogs[s.catalog]
    policies = [
        p for p in plan_policies(catalog, request, None, with_deadline=s.deadline_h is not None) if p.policy in SHOWN
    ]
    plan = policies[0].plan
    zones = sorted({p.availability_zone for p in catalog.prices if p.region == plan.region and p.availability_zone})
    given = [(TraceSpec(z or None, t), resolve_trace(t)) for z, t in s.traces.items()]
    traces = zone_traces(given, plan.availability_zone, plan.region, zones, default_trace_for)
    workload = Workload(work_pflop=s.work, runs=runs, seed=seed, deadline_h=s.deadline_h)
    assert request.max_price is not None
    report = compare_policies(tuple(policies), catalog, traces, workload, Caps(request.max_price, s.fallback)).report
    return {p.policy: p for p in report.policies}


def rows(s: Scenario, got: dict[PolicyName, PolicySummary]) -> list[str]:
    out = []
    for name in SHOWN:
        p = got.get(name)
        if p is None:
            continue
        miss = "-" if p.p_miss_deadline is None else f"{100 * p.p_miss_deadline:.1f} %"
        out.append(
            f"| {s.label} | {name.value} | {p.makespan_h.mean:.2f} h | {p.makespan_h.p90:.2f} h | {miss} | "
            f"${p.cost_usd.mean:.2f} |"
        )
    ours, plan_only, od = got[PolicyName.DEEPVM], got[PolicyName.PLAN_ONLY], got[PolicyName.ON_DEMAND]
    out.append(
        f"| {s.label} | ratio | | deepvm / plan-only x{ours.makespan_h.p90 / plan_only.makespan_h.p90:.2f} "
        f"| | deepvm / on-demand x{ours.cost_usd.mean / od.cost_usd.mean:.2f} |"
    )
    return out


def bar(got: dict[PolicyName, PolicySummary]) -> tuple[bool, str]:
    """Issue 24's bar where on-demand alone keeps the deadline."""
    ours, od = got[PolicyName.DEEPVM], got[PolicyName.ON_DEMAND]
    assert ours.p_miss_deadline is not None and od.p_miss_deadline == 0.0
    ok = ours.p_miss_deadline <= 0.05 and ours.cost_usd.mean <= CLEARLY_BELOW * od.cost_usd.mean
    return ok, (
        f"P(miss) {100 * ours.p_miss_deadline:.1f} % (<= 5 %), cost ${ours.cost_usd.mean:.2f} = "
        f"x{ours.cost_usd.mean / od.cost_usd.mean:.2f} on-demand's (<= x{CLEARLY_BELOW})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs-paper", type=int, default=500)
    parser.add_argument("--runs-snapshot", type=int, default=300)
    args = parser.parse_args()
    paper = load_catalog_file(REPO / "tests" / "data" / "deepvm_data.json")
    snapshot = resolve_catalog(regions=["us-east-1"], offline=True, catalog_file=None, refresh=False)
    catalogs = {
        "paper": (paper, PlanRequest(max_price=3.0)),
        "snapshot": (snapshot, PlanRequest(max_price=12.0, regions=("us-east-1",))),
    }
    east2b = {"": "aws-v100-16-us-east-2b"}
    tables = [
        (Scenario("paper $3/h, us-east-2b", "paper", 100_000.0, None, east2b), args.runs_paper, 1),
        (Scenario("paper $3/h, us-east-2b, 15 h", "paper", 100_000.0, 15.0, east2b), args.runs_paper, 1),
        (
            Scenario("paper $3/h, us-east-2b, 12 h, fallback $4/h", "paper", 100_000.0, 12.0, east2b, 4.0),
            args.runs_paper,
            1,
        ),
        (Scenario("snapshot $12/h, one zone, 10 h", "snapshot", 27_000.0, 10.0, east2b), args.runs_snapshot, 3),
        (
            Scenario(
                "snapshot $12/h, all 5 zones, 10 h",
                "snapshot",
                27_000.0,
                10.0,
                {z: t for z, t in SNAPSHOT_ZONES.items()},
            ),
            args.runs_snapshot,
            3,
        ),
    ]
    print("| scenario | policy | makespan mean | p90 | P(miss) | cost mean |")
    print("| --- | --- | --- | --- | --- | --- |")
    commands = []
    for scenario, runs, seed in tables:
        print("\n".join(rows(scenario, run(scenario, catalogs, runs, seed))))
        commands.append(scenario.command(runs, seed))
    print()
    print(
        "The bar, each shipped capacity series in the plan's zone (snapshot $12/h, 27,000 PFLOP, 6 h deadline; "
        "on-demand alone: 5.47 h):"
    )
    print("| trace | deepvm P(miss) | deepvm cost | on-demand cost | ratio | deadline-fallback P(miss), cost | bar |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    failed = []
    for trace in CAPACITY:
        scenario = Scenario(trace, "snapshot", 27_000.0, 6.0, {"": trace})
        got = run(scenario, catalogs, args.runs_snapshot, 3)
        ok, why = bar(got)
        ours, od, old = got[PolicyName.DEEPVM], got[PolicyName.ON_DEMAND], got[PolicyName.DEADLINE_FALLBACK]
        print(
            f"| {trace} | {100 * (ours.p_miss_deadline or 0):.1f} % | ${ours.cost_usd.mean:.2f} | "
            f"${od.cost_usd.mean:.2f} | x{ours.cost_usd.mean / od.cost_usd.mean:.2f} | "
            f"{100 * (old.p_miss_deadline or 0):.1f} %, ${old.cost_usd.mean:.2f} | {'met' if ok else 'MISSED'} |"
        )
        commands.append(scenario.command(args.runs_snapshot, 3))
        if not ok:
            failed.append(f"{trace}: {why}")
    print()
    print("Each row is (the README writes data.json for tests/data/deepvm_data.json):")
    print("\n".join(f"  {c}" for c in commands))
    for line in failed:
        print(f"bar MISSED on {line}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
