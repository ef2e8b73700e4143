"""Heterogeneous clusters (`--mix`): several GPU types training together in one availability zone.

DeepVM's model has one GPU type per plan. With a mix, data-parallel training still synchronises every
trainer each step (per-trainer batches proportional to speed keep them in step), so the scaling factor
depends on the total trainer count N; we take, conservatively, the smallest K_v(N) among the types used:

    E = K_mix(N) * sum_v f_v n_v,   K_mix(N) = min over used v of K_v(N)

with f_v = FLOPP_spot(v) for the deepvm objective (Z) and flops_v for throughput. With one type this
is exactly DeepVM's objective, so a mix is never worse than the best single-type plan.

Notation (a: AZ, v: GPU type offered in a, w: holder type of a's region, c: a scaling curve K_c,
          s: a saturation level n_sat, d = (a, k, kappa): a cluster shape, see y_d)
    z_a      AZ a hosts the cluster (binary)        sa_a, tier_a   its architecture (binary)
    n_av     spot trainers of type v (integer)      anc_av         the anchor is of type v (binary)
    used_av  type v is in the cluster (binary)      u_aw, m_aw     holder type chosen, holder count
    y_d      the cluster is in AZ a, has k trainers and scaling factor kappa (binary); kappa ranges
             over the values K_c(k) of the curves c offered in a, and the shape exists only if it can
             reach the floor (below)
    F_dc     sum of f_v (n_av + anc_av) over the types v of curve c when y_d = 1, else 0 (continuous)
    l_as     Tiering in a at saturation level s (binary)  h_as  the holder count when l_as = 1, else 0
    f_v is scaled so the best type weighs 1. d admits type v if K_c(v)(k) >= kappa. W_d bounds the weight
    of k trainers of the types d admits within the price cap (heaviest(): a Lagrangian bound).
Objective: max E = sum_d kappa_d sum_c F_dc, then (second solve, E fixed at its optimum) min price.
Constraints (numbered in the code):
    (1) sum_a z_a = 1,  sa_a + tier_a = z_a,  sum_v anc_av = sa_a,  sum_w u_aw = tier_a,  sum_v n_av >= z_a
    (2) n_av <= cap_v used_av,  anc_av <= used_av <= n_av + anc_av,
        n_av + anc_av <= max_nodes_v  (a profiled curve's node bound, ScalingParams.max_nodes)
    (3) sum_{d in a} y_d = z_a,  sum_{d in a} k_d y_d = sum_v (n_av + anc_av),  sum_c F_dc <= W_d y_d
    (4) the factor is no larger than any used type's: used_av <= sum of y_d over the d in a that admit v;
        sum_{d in a} F_dc <= sum_{v of curve c} f_v (n_av + anc_av), with F_dc only where d admits curve c
        (max E fills it; as an equality, CBC 2.10's presolve cut off feasible plans: tests/planner/
        test_mix_oracle.py found one)
    (5) holders: u_aw <= m_aw <= cap_w u_aw;  sum_w mem_w m_aw >= size * slots * tier_a
    (6) saturation: sum_s l_as = tier_a,  l_as <= sum_{w: n_sat(w) >= s} u_aw,  used_av <= sa_a + sum_{s <=
        n_sat(v)} l_as,  h_as <= cap l_as,  sum_s h_as = sum_w m_aw,  sum_v n_av + tier_a <= sum_s s h_as + M sa_a
    (7) price <= max price;  (8) quotas per region, group and market;  node limit as bounds

Why this shape. Tiering needs N < n_sat(min(bw_v, bw_w)) m for every used v; n_sat does not decrease
with bandwidth, so that is min(n_sat(v), n_sat(w)): one level s per cluster, bounded by the holder's and
every trainer's, replaces a big-M row per trainer and holder type. Choosing (k, kappa) per AZ, with the
weight of each curve's trainers split over the shapes that admit it, keeps the LP relaxation from
crediting one type's nodes with another's scaling factor or from pooling nodes of several AZs into one
size; W_d keeps it from crediting a few heavy nodes with the factor of many light ones. On the built-in
catalog at $12/h its bound is 27.74 for an optimum of 27.72, where big-M rows on K left it at 54.

Floor. A plan already known (the best single-type plan) has some value E_0; the optimum is at least
E_0, so a shape with kappa W_d < E_0 (1 - FLOOR_SLACK) cannot be optimal and is not built. If the
optimum found turns out below that level (the known plan was no mixed plan, e.g. other limits), the
model is solved again without a floor, so the answer is exact either way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pulp

from provisioning.catalog.model import Catalog, Market, ScalingParams
from provisioning.planner.candidates import anchor_allowed, spot_node_cap
from provisioning.planner.milp import SolverError, solve
from provisioning.planner.options import PRICE_TOLERANCE, HolderOption, Limits, TrainerOption, trainer_offers
from provisioning.planner.plan import Architecture, NodeGroup, Objective, Plan, Role
from provisioning.scaling.model import capped_notes, saturation_point, scaling_factor

# Shapes are pruned below the floor's value less this share, far above float noise in E.
FLOOR_SLACK = 1e-6
# The second solve keeps plans whose E is within this share of the optimum (ties go to the lower price).
TIE_SHARE = 1e-7

AZ = tuple[str, str]  # (region, availability zone)


def _undominated_holders(holders: list[HolderOption]) -> list[HolderOption]:
    """Holder types no other type of the region beats on price, network and memory at once."""

    def beats(a: HolderOption, b: HolderOption) -> bool:
        return (
            a.region == b.region
            and a.on_demand_price <= b.on_demand_price
            and a.itype.network_gbps >= b.itype.network_gbps
            and (a.itype.memory_gib or 0) >= (b.itype.memory_gib or 0)
            and a.itype.quota_group == b.itype.quota_group
            and a.itype.vcpus <= b.itype.vcpus
        )

    ordered = sorted(holders, key=lambda h: (h.region, h.on_demand_price, -h.itype.network_gbps, h.itype.name))
    kept: list[HolderOption] = []
    for holder in ordered:
        if not any(beats(k, holder) for k in kept):
            kept.append(holder)
    return kept


def plan_mix(
    catalog: Catalog,
    regions: list[str],
    holders: list[HolderOption],
    limits: Limits,
    objective: Objective,
    known: Sequence[Plan] = (),
    progress: Callable[[str], None] = lambda stage: None,
) -> Plan | None:
    """The best mixed cluster for a value objective (deepvm or throughput), or None if none fits.

    `known`: plans found otherwise (single-type ones); the best of them is the floor that prunes shapes.
    `progress` hears each solve as it starts, so that a caller can tell the user what is being waited on.
    """
    offers = [o for o in trainer_offers(catalog, regions) if spot_node_cap(o, limits) > 0]
    if not offers:
        return None
    holders = _undominated_holders(holders)
    try:
        return _MixModel(offers, holders, limits, objective, known).best(catalog, progress)
    except _BelowFloor:
        return _MixModel(offers, holders, limits, objective, ()).best(catalog, progress)


@dataclass(frozen=True)
class NodeBound:
    """A node type as the weight bound sees it: weight f, price p, at most `cap` nodes."""

    weight: float
    price: float
    cap: int


def heaviest(nodes: Sequence[NodeBound], budget: float | None, most: int) -> list[float]:
    """W(k), k = 0..most: an upper bound on the weight of exactly k nodes costing at most `budget` in all.

    Lagrangian relaxation of the budget B: for any lam >= 0, k nodes costing at most B weigh at most
    lam B + the k largest (f - lam p), each type up to its cap. lam = 0 is the k heaviest nodes; the least
    over lam in {0} and the types' f / p is taken. -inf where the caps allow fewer than k nodes.
    """
    lams = [0.0] if budget is None else sorted({0.0} | {n.weight / n.price for n in nodes if n.price > 0})
    bound = [math.inf] * (most + 1)
    for lam in lams:
        total, k = (budget or 0.0) * lam, 0
        for value, cap in sorted(((n.weight - lam * n.price, n.cap) for n in nodes), reverse=True):
            for _ in range(min(cap, most - k)):
                total += value
                k += 1
                bound[k] = min(bound[k], total)
        for short in range(k + 1, most + 1):
            bound[short] = -math.inf
    return bound


class _BelowFloor(Exception):
    """The optimum of the pruned model is below its floor: the pruning may have cut the true optimum."""


@dataclass(frozen=True)
class _Shape:
    """d = (a, k, kappa): AZ a, k trainers, scaling factor kappa; W_d a bound on its trainers' weight."""

    az: AZ
    k: int
    kappa: float
    most_weight: float

    def admits(self, curve: ScalingParams) -> bool:
        return self.kappa <= scaling_factor(curve, self.k)


class _MixModel:
    def __init__(
        self,
        offers: list[TrainerOption],
        holders: list[HolderOption],
        limits: Limits,
        objective: Objective,
        known: Sequence[Plan],
    ):
        self.offers, self.holders, self.limits, self.objective = offers, holders, limits, objective
        self._unit = 1.0
        self._unit = max(self._value_per_node(o) for o in offers)
        self.floor = max((self._known_value(plan) for plan in known), default=0.0) * (1 - FLOOR_SLACK)
        self.problem = pulp.LpProblem("deepvm_mix", pulp.LpMaximize)
        add = self.problem.add_variable
        azs = sorted({(o.region, o.availability_zone) for o in offers})
        self.here = {a: [j for j, o in enumerate(offers) if (o.region, o.availability_zone) == a] for a in azs}
        self.az = {a: add(f"z_{i}", cat=pulp.LpBinary) for i, a in enumerate(azs)}
        self.sa = {a: add(f"sa_{i}", cat=pulp.LpBinary) for i, a in enumerate(azs)}
        self.tier = {a: add(f"tier_{i}", cat=pulp.LpBinary) for i, a in enumerate(azs)}
        self.n = [add(f"n_{i}", 0, self._spot_cap(o), cat=pulp.LpInteger) for i, o in enumerate(offers)]
        self.used = [add(f"used_{i}", cat=pulp.LpBinary) for i in range(len(offers))]
        # integer in [0, 1] rather than binary: PuLP's binary category would overwrite the upper bound 0
        self.anchor = [
            add(f"anc_{i}", 0, 1 if self._anchor_ok(o) else 0, cat=pulp.LpInteger) for i, o in enumerate(offers)
        ]
        pairs = [(a, h) for a in azs for h in holders if h.region == a[0]]
        self.u = {p: add(f"u_{i}", cat=pulp.LpBinary) for i, p in enumerate(pairs)}
        self.m = {p: add(f"m_{i}", 0, self._holder_cap(p[1]), cat=pulp.LpInteger) for i, p in enumerate(pairs)}
        self.level = {a: self._levels(i, a) for i, a in enumerate(azs)}
        self.y: dict[_Shape, pulp.LpVariable] = {}
        self.f: dict[_Shape, dict[ScalingParams, pulp.LpVariable]] = {}
        for i, a in enumerate(azs):
            curves = sorted({self.offers[j].scaling for j in self.here[a]}, key=repr)
            for shape in self._shapes(a):
                name = f"{i}_{shape.k}_{len(self.y)}"
                self.y[shape] = add(f"y_{name}", cat=pulp.LpBinary)
                self.f[shape] = {
                    curve: add(f"F_{name}_{c}", 0, shape.most_weight)
                    for c, curve in enumerate(curves)
                    if shape.admits(curve)
                }
        self.effective = pulp.LpAffineExpression(
            [(f, shape.kappa) for shape, split in self.f.items() for f in split.values()]
        )
        self._constraints(azs)

    def _levels(self, i: int, a: AZ) -> dict[int, tuple[pulp.LpVariable, pulp.LpVariable]]:
        """(l_as, h_as) for every n_sat of a trainer type of the AZ or a holder type of its region."""
        holders = [h for h in self.holders if h.region == a[0]]
        most = max((self._holder_cap(h) for h in holders), default=0)
        levels = sorted(
            {saturation_point(self.offers[j].itype.network_gbps) for j in self.here[a]}
            | {saturation_point(h.itype.network_gbps) for h in holders}
        )
        add = self.problem.add_variable
        return {
            s: (add(f"l_{i}_{s}", cat=pulp.LpBinary), add(f"h_{i}_{s}", 0, most, cat=pulp.LpInteger)) for s in levels
        }

    def _shapes(self, az: AZ) -> list[_Shape]:
        """Every (k, kappa) of an AZ whose best case, kappa W_d, reaches the floor."""
        shapes = []
        offers = [self.offers[j] for j in self.here[az]]
        most = self._most_trainers(az)
        bounds: dict[frozenset[ScalingParams], list[float]] = {}
        for k in range(1, most + 1):
            for kappa in sorted({scaling_factor(o.scaling, k) for o in offers}):
                admitted = frozenset(o.scaling for o in offers if kappa <= scaling_factor(o.scaling, k))
                if admitted not in bounds:
                    bounds[admitted] = self._heaviest([o for o in offers if o.scaling in admitted], most)
                weight = bounds[admitted][k]
                if kappa * weight >= self.floor and weight > 0:
                    shapes.append(_Shape(az, k, kappa, weight))
        return shapes

    def _heaviest(self, offers: list[TrainerOption], most: int) -> list[float]:
        """W(k), k = 0..most, for trainers of these types: each at its cheaper price (spot, or on demand
        as the anchor), up to its spot cap plus the anchor and within its curve's node bound."""
        nodes = []
        for o in offers:
            anchor = self._anchor_ok(o)
            price = min(o.spot_price, o.on_demand_price or 0.0) if anchor else o.spot_price
            cap = self._spot_cap(o) + (1 if anchor else 0)
            if o.scaling.max_nodes is not None:
                cap = min(cap, o.scaling.max_nodes)
            nodes.append(NodeBound(self._weight(o), price, cap))
        budget = None if self.limits.max_price is None else self.limits.max_price + PRICE_TOLERANCE
        return heaviest(nodes, budget, most)

    def _value_per_node(self, offer: TrainerOption) -> float:
        return offer.itype.flops / offer.spot_price * 3600 if self.objective is Objective.DEEPVM else offer.itype.flops

    def _weight(self, offer: TrainerOption) -> float:
        """Value per node scaled so the best type weighs 1: keeps the MILP's numbers near the node counts."""
        return self._value_per_node(offer) / self._unit

    def _scaled(self, az: AZ, trainers: Sequence[NodeGroup]) -> tuple[dict[str, TrainerOption], float] | None:
        """The AZ's offers by type name and K_mix(N) of these trainers; None if one of their types is not offered."""
        by_name = {o.itype.name: o for o in self.offers if (o.region, o.availability_zone) == az}
        if not trainers or any(g.instance_type not in by_name for g in trainers):
            return None
        total = sum(g.count for g in trainers)
        return by_name, min(scaling_factor(by_name[g.instance_type].scaling, total) for g in trainers)

    def _known_value(self, plan: Plan) -> float:
        """E of a plan found elsewhere, in this model's units (0 if its trainers are not all offered here)."""
        trainers = [g for g in plan.nodes if g.role is not Role.HOLDER]
        found = self._scaled((plan.region, plan.availability_zone), trainers)
        if found is None:
            return 0.0
        by_name, k = found
        return k * sum(self._weight(by_name[g.instance_type]) * g.count for g in trainers)

    def _most_trainers(self, az: AZ) -> int:
        """A bound on an AZ's trainers: all spot nodes the caps allow, or the budget over the cheapest."""
        here = [self.offers[j] for j in self.here[az]]
        bound = sum(self._spot_cap(o) for o in here)
        if self.limits.max_price is not None:
            bound = min(bound, int((self.limits.max_price + PRICE_TOLERANCE) // min(o.spot_price for o in here)))
        return bound + 1  # + the anchor

    def _spot_cap(self, offer: TrainerOption) -> int:
        cap = spot_node_cap(offer, self.limits)
        if self.limits.max_price is not None:
            cap = min(cap, int((self.limits.max_price + PRICE_TOLERANCE) // offer.spot_price))
        return max(cap, 0)

    def _holder_cap(self, holder: HolderOption) -> int:
        cap = self.limits.nodes_within_quota(holder.region, holder.itype, Market.ON_DEMAND)
        if self.limits.max_price is not None:
            cap = min(cap, int((self.limits.max_price + PRICE_TOLERANCE) // holder.on_demand_price))
        return cap

    def _anchor_ok(self, offer: TrainerOption) -> bool:
        return anchor_allowed(offer, self.limits)

    def _price(self) -> pulp.LpAffineExpression:
        terms = [(n, o.spot_price) for n, o in zip(self.n, self.offers)]
        terms += [(a, o.on_demand_price) for a, o in zip(self.anchor, self.offers) if o.on_demand_price is not None]
        terms += [(m, h.on_demand_price) for (_, h), m in self.m.items()]
        return pulp.LpAffineExpression(terms)

    def _constraints(self, azs: list[AZ]) -> None:
        p = self.problem
        p += pulp.lpSum(self.az.values()) == 1, "c1_one_az"
        for i, a in enumerate(azs):
            here = self.here[a]
            spot = pulp.lpSum(self.n[j] for j in here)
            pairs = [pair for pair in self.u if pair[0] == a]
            p += self.sa[a] + self.tier[a] == self.az[a], f"c1_arch_{i}"
            p += pulp.lpSum(self.anchor[j] for j in here) == self.sa[a], f"c1_anchor_{i}"
            p += spot >= self.az[a], f"c1_some_spot_{i}"  # an anchor alone is no cluster
            p += pulp.lpSum(self.u[pair] for pair in pairs) == self.tier[a], f"c1_holders_{i}"
            self._shape_rows(i, a)
            for pair in pairs:
                holder = pair[1]
                p += self.m[pair] >= self.u[pair], f"c5_min_{i}_{holder.itype.name}"
                p += self.m[pair] <= self._holder_cap(holder) * self.u[pair], f"c5_max_{i}_{holder.itype.name}"
            memory = pulp.lpSum((pair[1].itype.memory_gib or 0) * self.m[pair] for pair in pairs)
            p += memory >= self.limits.checkpoint_gib * self.tier[a], f"c5_memory_{i}"
            self._saturation_rows(i, a, pairs)
        for j, offer in enumerate(self.offers):
            p += self.n[j] <= self._spot_cap(offer) * self.used[j], f"c2_used_{j}"
            p += self.used[j] <= self.n[j] + self.anchor[j], f"c2_some_{j}"
            p += self.anchor[j] <= self.used[j], f"c2_anchor_used_{j}"
            if offer.scaling.max_nodes is not None:  # the anchor counts towards the curve's node bound
                p += self.n[j] + self.anchor[j] <= offer.scaling.max_nodes, f"c2_curve_{j}"
        if self.limits.max_price is not None:
            p += self._price() <= self.limits.max_price + PRICE_TOLERANCE, "c7_price"
        self._quotas()

    def _shape_rows(self, i: int, a: AZ) -> None:
        """(3) one shape per cluster, its size the trainer count; (4) its factor admits every used type."""
        p = self.problem
        shapes = [shape for shape in self.y if shape.az == a]
        here = self.here[a]
        p += pulp.lpSum(self.y[shape] for shape in shapes) == self.az[a], f"c3_one_shape_{i}"
        trainers = pulp.lpSum(self.n[j] + self.anchor[j] for j in here)
        p += pulp.lpSum(shape.k * self.y[shape] for shape in shapes) == trainers, f"c3_size_{i}"
        for shape in shapes:
            split = pulp.lpSum(self.f[shape].values())
            p += split <= shape.most_weight * self.y[shape], f"c3_weight_{self.y[shape].name}"
        for c, curve in enumerate(sorted({self.offers[j].scaling for j in here}, key=repr)):
            weight = pulp.lpSum(
                self._weight(self.offers[j]) * (self.n[j] + self.anchor[j])
                for j in here
                if self.offers[j].scaling == curve
            )
            split = pulp.lpSum(self.f[shape][curve] for shape in shapes if curve in self.f[shape])
            p += split <= weight, f"c4_weight_{i}_{c}"
        for j in here:
            admitting = [self.y[shape] for shape in shapes if shape.admits(self.offers[j].scaling)]
            p += self.used[j] <= pulp.lpSum(admitting), f"c4_factor_{j}"

    def _saturation_rows(self, i: int, a: AZ, pairs: list[tuple[AZ, HolderOption]]) -> None:
        """(6) Tiering: fewer spot trainers than the level s times the holders; s within every link's n_sat."""
        p = self.problem
        levels = self.level[a]
        p += pulp.lpSum(choose for choose, _ in levels.values()) == self.tier[a], f"c6_one_level_{i}"
        for s, (choose, holders) in levels.items():
            fast = [self.u[pair] for pair in pairs if saturation_point(pair[1].itype.network_gbps) >= s]
            p += choose <= pulp.lpSum(fast), f"c6_holder_level_{i}_{s}"
            p += holders <= (holders.upBound or 0) * choose, f"c6_level_holders_{i}_{s}"
        p += (
            (pulp.lpSum(holders for _, holders in levels.values()) == pulp.lpSum(self.m[pair] for pair in pairs)),
            f"c6_holders_{i}",
        )
        spot = pulp.lpSum(self.n[j] for j in self.here[a])
        most_spot = sum(self._spot_cap(self.offers[j]) for j in self.here[a])
        carried = pulp.lpSum(s * holders for s, (_, holders) in levels.items())
        p += spot + self.tier[a] <= carried + most_spot * self.sa[a], f"c6_saturation_{i}"
        for j in self.here[a]:
            n_sat = saturation_point(self.offers[j].itype.network_gbps)
            slow_enough = [choose for s, (choose, _) in levels.items() if s <= n_sat]
            p += self.used[j] <= self.sa[a] + pulp.lpSum(slow_enough), f"c6_trainer_level_{j}"

    def _quotas(self) -> None:
        usage: dict[tuple[str, str, Market], list[tuple[pulp.LpVariable, float]]] = {}
        for n, a, o in zip(self.n, self.anchor, self.offers):
            usage.setdefault((o.region, o.itype.quota_group_in(Market.SPOT), Market.SPOT), []).append(
                (n, o.itype.vcpus)
            )
            usage.setdefault((o.region, o.itype.quota_group, Market.ON_DEMAND), []).append((a, o.itype.vcpus))
        for (_, h), m in self.m.items():
            usage.setdefault((h.region, h.itype.quota_group, Market.ON_DEMAND), []).append((m, h.itype.vcpus))
        for (region, group, market), terms in usage.items():
            quota = self.limits.quota(region, group, market)
            if math.isfinite(quota):
                self.problem += pulp.LpAffineExpression(terms) <= quota, f"c8_{region}_{group}_{market.name}"

    def best(self, catalog: Catalog, progress: Callable[[str], None]) -> Plan | None:
        """Max E, then the lowest price among the plans within TIE_SHARE of it."""
        progress("mixed clusters: the largest effective throughput")
        try:
            solve(self.problem, list(self.effective.items()))
        except SolverError:
            if self.problem.status != pulp.LpStatusInfeasible:
                raise
            if self.floor > 0:
                raise _BelowFloor() from None
            return None
        best = self.effective.value() or 0.0
        tie = best - TIE_SHARE * max(1.0, best)
        if tie < self.floor:
            raise _BelowFloor()
        for shape, y in self.y.items():
            if shape.kappa * shape.most_weight < tie:  # cannot tie with the optimum: out of the second solve
                y.upBound = 0
        self.problem += self.effective >= tie, "lex_effective"
        progress("mixed clusters: the cheapest at that throughput")
        solve(self.problem, [(var, -price) for var, price in self._price().items()])
        return self._decode(catalog)

    def _decode(self, catalog: Catalog) -> Plan:
        az = next(a for a, z in self.az.items() if (z.value() or 0) > 0.5)
        nodes: list[NodeGroup] = []
        for a, o in zip(self.anchor, self.offers):
            if (a.value() or 0) > 0.5:
                nodes.append(NodeGroup.of(o.itype, Market.ON_DEMAND, 1, Role.ANCHOR, o.on_demand_price or 0.0))
        for n, o in zip(self.n, self.offers):
            count = round(n.value() or 0)
            if count:
                nodes.append(NodeGroup.of(o.itype, Market.SPOT, count, Role.TRAINER, o.spot_price))
        for (_, h), m in self.m.items():
            count = round(m.value() or 0)
            if count:
                nodes.append(NodeGroup.of(h.itype, Market.ON_DEMAND, count, Role.HOLDER, h.on_demand_price))
        return self._plan(catalog, az, tuple(nodes))

    def _plan(self, catalog: Catalog, az: AZ, nodes: tuple[NodeGroup, ...]) -> Plan:
        trainers = [g for g in nodes if g.role is not Role.HOLDER]
        found = self._scaled(az, trainers)
        assert found is not None  # decoded from this model's own offers
        by_name, k = found
        flops = k * sum(by_name[g.instance_type].itype.flops * g.count for g in trainers)
        z = k * sum(self._value_per_node(by_name[g.instance_type]) * g.count for g in trainers)
        return Plan(
            architecture=Architecture.SINGLE_ANCHOR
            if any(g.role is Role.ANCHOR for g in nodes)
            else Architecture.TIERING,
            region=az[0],
            availability_zone=az[1],
            nodes=nodes,
            price_per_hour=sum(g.count * g.usd_per_hour for g in nodes),
            effective_flops=flops,
            objective_value=z,
            objective=self.objective,
            catalog_source=catalog.source,
            prices_as_of=catalog.as_of,
            notes=self._notes(trainers, by_name),
        )

    @staticmethod
    def _notes(trainers: list[NodeGroup], by_name: dict[str, TrainerOption]) -> tuple[str, ...]:
        per_type: dict[str, int] = {}
        for g in trainers:
            per_type[g.instance_type] = per_type.get(g.instance_type, 0) + g.count
        mixed = ("mixed GPU types: K(n) is the smallest of the types' scaling factors",) if len(per_type) > 1 else ()
        return mixed + tuple(
            note
            for name, count in sorted(per_type.items())
            for note in capped_notes(name, by_name[name].scaling, count)
        )
