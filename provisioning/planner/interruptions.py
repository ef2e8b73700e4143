"""Plans that count Spot interruptions (`deepvm plan --interruptions`): expected goodput per dollar.

Every MILP variable is one complete plan (architecture, GPU type, trainer count, holders), so whatever
depends only on the plan is a constant coefficient: counting interruptions changes the objective's
numbers, not the model, and the MILP stays exact.

Notation, for one plan of n trainers of GPU type v in region r
    n_s   its spot trainers (Tiering: all n; Single Anchor: n - 1)    n_o = n - n_s on-demand (the anchor)
    m     mean hours a spot node of v in r runs before it is reclaimed; lambda = 1 / m
    d     hours until a replacement for a reclaimed node trains (launch, boot, push, setup)
    a     share of time a planned spot slot holds a node: m / (m + d) (a life, then a wait for the
          replacement); for a capacity trace, the series' mean share (its gaps are the wait)
    S     hours the whole cluster stops per reclaim: the relaunch on the survivors (the flush included)
          and the relaunch that folds the replacement in, 2 x the relaunch time

    goodput share   g = (n_o + a n_s) / n  x  (1 - a n_s lambda S)
                        trainers present     time not stopped: reclaims come at a n_s lambda per hour
    expected $/h    = price - (1 - a) n_s spot price            (an empty slot does not bill)

Every objective then counts goodput instead of effective FLOPS: deepvm maximises Z g, throughput E g,
cost minimises expected $/h / (E g), and a deadline needs E g >= W / T and costs expected $/h x W / (E g).
K(n) stays at the planned n (a missing node is a short dip, not a smaller cluster), and the price cap
binds the full price (every slot filled). A node alone keeps f = a (1 - a lambda S) of its throughput
(`SpotPool.node_factor`); a cluster loses more than its nodes do alone, since each of its n_s nodes stops
all of them: 17 spot nodes are reclaimed 17 times as often as one. On-demand nodes are never reclaimed.

Defaults (flags override them):
- relaunch: 6.3 s, measured by benchmarks/train_recovery_bench.py (README, Benchmarks: a Spot notice to
  training again on the survivors, controller on the head, 2 cores; 0 steps lost with the notice), since
  issue 22's warm starts (8.1 s with every rank importing torch, 12.1 s before issue 22).
- replacement delay: 300 s, NOT measured: deepvm measures no AWS launch (the sandbox's hosts boot in
  seconds). It is our estimate of AWS's Spot launch plus a GPU image's boot plus deepvm's push and setup.
AWS gives a two-minute notice before a reclaim, so no work is lost beyond the stops; a reclaim without
notice would lose up to one checkpoint interval more, which `deepvm simulate` models and this does not.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from provisioning.catalog.model import Market
from provisioning.planner.candidates import Candidate
from provisioning.planner.plan import Architecture, Plan, Role

# README, Benchmarks: `train_recovery_bench.py --scenarios notice-head notice-head-cold`, notice -> training again
# (managed), the sandbox's 2 shared cores at load ~3.5: with warm starts (training.node.warm) 6.1, 6.3, 6.4 and
# 6.9 s in four runs (2026-11-28), each in a pair with every rank started cold (13.3-14.4 s, x0.44-0.75); the
# median. 8.1 s before warm starts (2026-11-25), 12.1 s before issue 22's relaunch work (2026-11-23)
MEASURED_RELAUNCH_S = 6.3
REPLACEMENT_DELAY_S = 300.0  # our estimate for AWS (not measured), see the module docstring
RELAUNCHES_PER_RECLAIM = 2  # continue on the survivors, then fold the replacement in


@dataclass(frozen=True)
class RecoveryCosts:
    """What one reclaim costs a deepvm cluster, in seconds."""

    relaunch_s: float = MEASURED_RELAUNCH_S
    replacement_delay_s: float = REPLACEMENT_DELAY_S

    @property
    def stop_h(self) -> float:
        """S: hours the whole cluster stops per reclaim."""
        return RELAUNCHES_PER_RECLAIM * self.relaunch_s / 3600.0

    @property
    def replacement_delay_h(self) -> float:
        return self.replacement_delay_s / 3600.0


@dataclass(frozen=True)
class SpotPool:
    """How often Spot nodes of one type (in one region) are reclaimed, and how much they are there."""

    mttf_h: float  # m: mean hours between reclaims of one node (math.inf: never reclaimed)
    alive_share: float  # a: share of time a planned spot slot holds a node
    source: str  # where m and a come from: the trace's name and source, e.g. "gce-v100: GCE preemptible ..."

    @property
    def hazard_per_h(self) -> float:
        return 0.0 if math.isinf(self.mttf_h) else 1.0 / self.mttf_h

    def node_factor(self, recovery: RecoveryCosts) -> float:
        """f: the share of its throughput one spot node keeps, alone."""
        return self.alive_share * max(0.0, 1.0 - self.alive_share * self.hazard_per_h * recovery.stop_h)


@dataclass(frozen=True)
class Interruptions:
    """What `--interruptions` said: a pool per (region, instance type), and the recovery costs."""

    label: str  # finishes "counting interruptions ...": "at 10-15%/month", "as in trace aws-p3-bamboo"
    spec: str  # what the user typed
    default: SpotPool  # every type the mapping below does not name
    recovery: RecoveryCosts = field(default_factory=RecoveryCosts)
    per_type: Mapping[tuple[str, str], SpotPool] = field(default_factory=dict)  # (region, type) -> pool

    def pool(self, region: str, instance_type: str) -> SpotPool:
        return self.per_type.get((region, instance_type), self.default)

    def to_dict(self) -> dict[str, str | float]:
        """What was counted, in a saved plan's request."""
        return {
            "spec": self.spec,
            "label": self.label,
            "relaunch_s": self.recovery.relaunch_s,
            "replacement_delay_s": self.recovery.replacement_delay_s,
        }

    def share(self, region: str, instance_type: str, spot: int, on_demand: int) -> float:
        """g for `spot` spot and `on_demand` on-demand trainers of one type (module docstring)."""
        total = spot + on_demand
        if spot == 0 or total == 0:
            return 1.0
        pool = self.pool(region, instance_type)
        a, rate = pool.alive_share, pool.hazard_per_h
        present = (on_demand + a * spot) / total
        return present * max(0.0, 1.0 - a * spot * rate * self.recovery.stop_h)

    def expected_price(self, region: str, instance_type: str, spot: int, spot_price: float, price: float) -> float:
        """The $/h a plan bills on average: an empty spot slot bills nothing."""
        a = self.pool(region, instance_type).alive_share
        return price - (1.0 - a) * spot * spot_price

    def candidate_share(self, c: Candidate) -> float:
        spot, on_demand = _candidate_trainers(c)
        return self.share(c.trainer.region, c.trainer.itype.name, spot, on_demand)

    def candidate_price(self, c: Candidate, price: float) -> float:
        spot, _ = _candidate_trainers(c)
        return self.expected_price(c.trainer.region, c.trainer.itype.name, spot, c.trainer.spot_price, price)


def _candidate_trainers(c: Candidate) -> tuple[int, int]:
    """(spot, on-demand) trainers of a candidate."""
    return (c.count - 1, 1) if c.architecture is Architecture.SINGLE_ANCHOR else (c.count, 0)


@dataclass(frozen=True)
class PlanGoodput:
    """One plan's figures with interruptions counted."""

    plan: Plan
    instance_type: str
    spot_trainers: int
    on_demand_trainers: int
    share: float  # g
    expected_goodput_tflops: float  # effective TFLOPS x g
    expected_usd_per_hour: float

    def to_dict(self) -> dict[str, float | int]:
        return {
            "goodput_factor": round(self.share, 6),
            "expected_goodput_tflops": self.expected_goodput_tflops,
            "expected_usd_per_hour": round(self.expected_usd_per_hour, 6),
            "spot_trainers": self.spot_trainers,
        }


def plan_goodput(plan: Plan, interruptions: Interruptions) -> PlanGoodput:
    """A single-type plan's goodput share and expected price (the plan as built by the planner)."""
    trainers = [g for g in plan.nodes if g.role in (Role.TRAINER, Role.ANCHOR)]
    names = {g.instance_type for g in trainers}
    if len(names) != 1:
        raise ValueError("interruptions are counted for single-type plans only (--mix is refused with them)")
    name = names.pop()
    spot = sum(g.count for g in trainers if g.market is Market.SPOT)
    on_demand = sum(g.count for g in trainers if g.market is Market.ON_DEMAND)
    spot_price = next((g.usd_per_hour for g in trainers if g.market is Market.SPOT), 0.0)
    share = interruptions.share(plan.region, name, spot, on_demand)
    return PlanGoodput(
        plan=plan,
        instance_type=name,
        spot_trainers=spot,
        on_demand_trainers=on_demand,
        share=share,
        expected_goodput_tflops=plan.effective_flops * share,
        expected_usd_per_hour=interruptions.expected_price(plan.region, name, spot, spot_price, plan.price_per_hour),
    )


@dataclass(frozen=True)
class InterruptionReport:
    """The ranking with interruptions next to the one without, and why they differ."""

    interruptions: Interruptions
    plans: tuple[PlanGoodput, ...]  # the ranked plans (with interruptions), best first
    without: PlanGoodput  # the best plan when interruptions are not counted
    without_value: float  # its objective value with interruptions counted (plans[0]'s is at least as good)

    @property
    def best(self) -> PlanGoodput:
        return self.plans[0]

    @property
    def changed(self) -> bool:
        """Whether the plan chosen without interruptions is worse once they count (not merely a tie that
        the solver broke another way, such as the same cluster in another region at the same price)."""
        return not math.isclose(self.without_value, self.best.plan.objective_value, rel_tol=1e-9)

    def summary(self) -> str:
        """One line: how the decision changed, and why."""
        new, old = self.best, self.without
        label = self.interruptions.label
        if not self.changed:
            pool = self.interruptions.pool(new.plan.region, new.instance_type)
            return (
                f"counting interruptions {label}, the best plan stays {new.plan.summary()}: they cost it "
                f"{_lost(new)} of its throughput (a spot node is reclaimed {_every(pool)} on average), "
                "not enough to change the ranking"
            )
        return (
            f"counting interruptions {label}, the best plan moves from {old.plan.summary()} to "
            f"{new.plan.summary()}, because interruptions cost it {_lost(new)} of its throughput against "
            f"{_lost(old)}{_reason(new, old, self.interruptions)}"
        )


def _lost(g: PlanGoodput) -> str:
    """The share of throughput interruptions take, to 3 significant digits (bands take thousandths of one %)."""
    return f"{100 * (1 - g.share):.3g}%"


def _reason(new: PlanGoodput, old: PlanGoodput, interruptions: Interruptions) -> str:
    reasons = []
    if new.spot_trainers != old.spot_trainers:
        reasons.append(f"{_nodes(new.spot_trainers)} to lose instead of {old.spot_trainers}")
    if new.on_demand_trainers > old.on_demand_trainers:
        reasons.append("an on-demand anchor that is never reclaimed")
    new_pool = interruptions.pool(new.plan.region, new.instance_type)
    old_pool = interruptions.pool(old.plan.region, old.instance_type)
    if new_pool != old_pool:
        reasons.append(
            f"{new.instance_type} spot nodes are reclaimed {_every(new_pool)} on average against "
            f"{_every(old_pool)} for {old.instance_type}"
        )
    return f" ({'; '.join(reasons)})" if reasons else ""


def _every(pool: SpotPool) -> str:
    return "never" if math.isinf(pool.mttf_h) else f"every {pool.mttf_h:,.0f} h"


def _nodes(count: int) -> str:
    return f"{count} spot node" if count == 1 else f"{count} spot nodes"
