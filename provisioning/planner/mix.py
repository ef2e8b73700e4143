"""Heterogeneous clusters (`--mix`): several GPU types training together in one availability zone.

DeepVM's model has one GPU type per plan. With a mix, data-parallel training still synchronises every
trainer each step (per-trainer batches proportional to speed keep them in step), so the scaling factor
depends on the total trainer count N; we take, conservatively, the smallest K_v(N) among the types used:

    E = K_mix(N) * sum_v f_v n_v,   K_mix(N) = min over used v of K_v(N)

with f_v = FLOPP_spot(v) for the deepvm objective (Z) and flops_v for throughput. With one type this
is exactly DeepVM's objective, so a mix is never worse than the best single-type plan.

Notation (a: AZ, v: GPU type offered in a, w: holder type of a's region, k: total trainers)
    z_a      AZ a hosts the cluster (binary)        sa_a, tier_a   its architecture (binary)
    n_av     spot trainers of type v (integer)      anc_av         the anchor is of type v (binary)
    used_av  type v is in the cluster (binary)      u_aw, m_aw     holder type chosen, holder count
    y_k      the cluster has k trainers (binary)    F_k            sum_v f_v n_v when y_k = 1, else 0
Objective: max E, then (second solve, E fixed at its optimum) min price.
Constraints (numbered in the code):
    (1) sum_a z_a = 1,  sa_a + tier_a = z_a,  sum_v anc_av = sa_a,  sum_w u_aw = tier_a,  sum_v n_av >= z_a
    (2) used_av <= z_a,  n_av <= cap_v used_av,  anc_av <= used_av <= n_av + anc_av,
        n_av + anc_av <= max_nodes_v  (a profiled curve's node bound, ScalingParams.max_nodes)
    (3) sum_k y_k = 1,  sum_k k y_k = sum (n_av + anc_av),  F_k <= k y_k,  sum_k F_k = sum f_v (n + anc)
        (f_v scaled so the best type weighs 1: with k trainers F <= k, a tight big-M)
    (4) E <= sum_k K_v(k) F_k + max_k k (1 - K_v(k)) (1 - sum_a used_av)  for every type v;  E <= sum_k F_k
    (5) holders: u_aw <= m_aw <= cap_w u_aw;  sum_w mem_w m_aw >= size * slots * tier_a
    (6) saturation: sum_v n_av <= sat(v, w) m_aw - 1 + M (2 - used_av - u_aw)   for v, w in a
    (7) price <= max price;  (8) quotas per region, group and market;  node limit as bounds
"""

from __future__ import annotations

import math

import pulp

from provisioning.catalog import Catalog, InstanceType, Market
from provisioning.planner.milp import SolverError, solve
from provisioning.planner.options import PRICE_TOLERANCE, HolderOption, Limits, TrainerOption, trainer_offers
from provisioning.planner.plan import Architecture, NodeGroup, Objective, Plan, Role
from provisioning.scaling import capped_notes, saturation_point, scaling_factor


def _undominated_holders(holders: list[HolderOption]) -> list[HolderOption]:
    """Holder types no other type of the region beats on price, network and memory at once."""

    def beats(a: HolderOption, b: HolderOption) -> bool:
        return (a.region == b.region and a.on_demand_price <= b.on_demand_price
                and a.itype.network_gbps >= b.itype.network_gbps
                and (a.itype.memory_gib or 0) >= (b.itype.memory_gib or 0)
                and a.itype.quota_group == b.itype.quota_group and a.itype.vcpus <= b.itype.vcpus)

    ordered = sorted(holders, key=lambda h: (h.region, h.on_demand_price, -h.itype.network_gbps, h.itype.name))
    kept: list[HolderOption] = []
    for holder in ordered:
        if not any(beats(k, holder) for k in kept):
            kept.append(holder)
    return kept


def plan_mix(catalog: Catalog, regions: list[str], holders: list[HolderOption], limits: Limits,
             objective: Objective) -> Plan | None:
    """The best mixed cluster for a value objective (deepvm or throughput), or None if none fits."""
    offers = [o for o in trainer_offers(catalog, regions) if _node_cap(o.itype, o.region, Market.SPOT, limits) > 0]
    if not offers:
        return None
    model = _MixModel(offers, _undominated_holders(holders), limits, objective)
    return model.best(catalog)


def _node_cap(itype: InstanceType, region: str, market: Market, limits: Limits) -> int:
    cap = limits.nodes_within_quota(region, itype, market)
    return cap if limits.node_limit is None else min(cap, limits.node_limit)


class _MixModel:
    def __init__(self, offers: list[TrainerOption], holders: list[HolderOption], limits: Limits, objective: Objective):
        self.offers, self.holders, self.limits, self.objective = offers, holders, limits, objective
        self._unit = 1.0
        self._unit = max(self._value_per_node(o) for o in offers)
        self.problem = pulp.LpProblem("deepvm_mix", pulp.LpMaximize)
        add = self.problem.add_variable
        azs = sorted({(o.region, o.availability_zone) for o in offers})
        self.az = {a: add(f"z_{i}", cat=pulp.LpBinary) for i, a in enumerate(azs)}
        self.sa = {a: add(f"sa_{i}", cat=pulp.LpBinary) for i, a in enumerate(azs)}
        self.tier = {a: add(f"tier_{i}", cat=pulp.LpBinary) for i, a in enumerate(azs)}
        self.n = [add(f"n_{i}", 0, self._spot_cap(o), cat=pulp.LpInteger) for i, o in enumerate(offers)]
        self.used = [add(f"used_{i}", cat=pulp.LpBinary) for i in range(len(offers))]
        # integer in [0, 1] rather than binary: PuLP's binary category would overwrite the upper bound 0
        self.anchor = [add(f"anc_{i}", 0, 1 if self._anchor_ok(o) else 0, cat=pulp.LpInteger)
                       for i, o in enumerate(offers)]
        pairs = [(a, h) for a in azs for h in holders if h.region == a[0]]
        self.u = {p: add(f"u_{i}", cat=pulp.LpBinary) for i, p in enumerate(pairs)}
        self.m = {p: add(f"m_{i}", 0, self._holder_cap(p[1]), cat=pulp.LpInteger) for i, p in enumerate(pairs)}
        self.max_trainers = self._most_trainers(azs)
        self.y = [add(f"y_{k}", cat=pulp.LpBinary) for k in range(1, self.max_trainers + 1)]
        self.fk = [add(f"F_{k}", 0, k) for k in range(1, self.max_trainers + 1)]
        self.effective = add("E", 0, self.max_trainers)
        self._constraints(azs)

    def _value_per_node(self, offer: TrainerOption) -> float:
        return offer.itype.flops / offer.spot_price * 3600 if self.objective is Objective.DEEPVM else offer.itype.flops

    def _most_trainers(self, azs: list[tuple[str, str]]) -> int:
        """A bound on the cluster's trainers: all spot nodes the caps allow, or the budget over the cheapest."""
        most = 1
        for a in azs:
            here = [o for o in self.offers if (o.region, o.availability_zone) == a]
            bound = sum(self._spot_cap(o) for o in here)
            if self.limits.max_price is not None:
                bound = min(bound, int((self.limits.max_price + PRICE_TOLERANCE) // min(o.spot_price for o in here)))
            most = max(most, bound + 1)  # + the anchor
        return most

    def _weight(self, offer: TrainerOption) -> float:
        """Value per node scaled so the best type weighs 1: keeps the MILP's numbers near the node counts."""
        return self._value_per_node(offer) / self._unit

    def _spot_cap(self, offer: TrainerOption) -> int:
        cap = _node_cap(offer.itype, offer.region, Market.SPOT, self.limits)
        if offer.scaling.max_nodes is not None:
            cap = min(cap, offer.scaling.max_nodes)
        if self.limits.max_price is not None:
            cap = min(cap, int((self.limits.max_price + PRICE_TOLERANCE) // offer.spot_price))
        return max(cap, 0)

    def _holder_cap(self, holder: HolderOption) -> int:
        cap = _node_cap(holder.itype, holder.region, Market.ON_DEMAND, self.limits)
        if self.limits.max_price is not None:
            cap = min(cap, int((self.limits.max_price + PRICE_TOLERANCE) // holder.on_demand_price))
        return cap

    def _anchor_ok(self, offer: TrainerOption) -> bool:
        memory = offer.itype.memory_gib
        return (offer.on_demand_price is not None
                and _node_cap(offer.itype, offer.region, Market.ON_DEMAND, self.limits) >= 1
                and (memory is None or memory >= self.limits.checkpoint_gib))

    def _price(self) -> pulp.LpAffineExpression:
        terms = [(n, o.spot_price) for n, o in zip(self.n, self.offers)]
        terms += [(a, o.on_demand_price) for a, o in zip(self.anchor, self.offers) if o.on_demand_price is not None]
        terms += [(m, h.on_demand_price) for (_, h), m in self.m.items()]
        return pulp.LpAffineExpression(terms)

    def _constraints(self, azs: list[tuple[str, str]]) -> None:
        p = self.problem
        p += pulp.lpSum(self.az.values()) == 1, "c1_one_az"
        for i, a in enumerate(azs):
            here = [j for j, o in enumerate(self.offers) if (o.region, o.availability_zone) == a]
            pairs = [pair for pair in self.u if pair[0] == a]
            p += self.sa[a] + self.tier[a] == self.az[a], f"c1_arch_{i}"
            p += pulp.lpSum(self.anchor[j] for j in here) == self.sa[a], f"c1_anchor_{i}"
            p += pulp.lpSum(self.n[j] for j in here) >= self.az[a], f"c1_some_spot_{i}"  # an anchor alone is no cluster
            p += pulp.lpSum(self.u[pair] for pair in pairs) == self.tier[a], f"c1_holders_{i}"
            for j in here:
                p += self.used[j] <= self.az[a], f"c2_in_az_{j}"
            for pair in pairs:
                holder = pair[1]
                p += self.m[pair] >= self.u[pair], f"c5_min_{i}_{holder.itype.name}"
                p += self.m[pair] <= self._holder_cap(holder) * self.u[pair], f"c5_max_{i}_{holder.itype.name}"
                spot_here = pulp.lpSum(self.n[j] for j in here)
                big = sum(self._spot_cap(self.offers[j]) for j in here) + 1
                for j in here:
                    bandwidth = min(self.offers[j].itype.network_gbps, holder.itype.network_gbps)
                    slack = big * (2 - self.used[j] - self.u[pair])
                    limit = saturation_point(bandwidth) * self.m[pair] - 1 + slack
                    p += spot_here <= limit, f"c6_{j}_{i}_{holder.itype.name}"
            memory = pulp.lpSum((pair[1].itype.memory_gib or 0) * self.m[pair] for pair in pairs)
            p += memory >= self.limits.checkpoint_gib * self.tier[a], f"c5_memory_{i}"
        for j, offer in enumerate(self.offers):
            p += self.n[j] <= self._spot_cap(offer) * self.used[j], f"c2_used_{j}"
            p += self.used[j] <= self.n[j] + self.anchor[j], f"c2_some_{j}"
            p += self.anchor[j] <= self.used[j], f"c2_anchor_used_{j}"
            if offer.scaling.max_nodes is not None:  # the anchor counts towards the curve's node bound
                p += self.n[j] + self.anchor[j] <= offer.scaling.max_nodes, f"c2_curve_{j}"
        trainers = pulp.lpSum(self.n) + pulp.lpSum(self.anchor)
        weighted = pulp.lpSum(self._weight(o) * (n + a) for n, a, o in zip(self.n, self.anchor, self.offers))
        p += pulp.lpSum(self.y) == 1, "c3_one_size"
        p += pulp.lpSum((k + 1) * y for k, y in enumerate(self.y)) == trainers, "c3_size"
        p += pulp.lpSum(self.fk) == weighted, "c3_split"
        for k, (y, fk) in enumerate(zip(self.y, self.fk)):
            p += fk <= (k + 1) * y, f"c3_fk_{k}"  # k + 1 trainers weigh at most 1 each
        p += self.effective <= pulp.lpSum(self.fk), "c4_k_at_most_1"
        for name in sorted({o.itype.name for o in self.offers}):
            idx = [j for j, o in enumerate(self.offers) if o.itype.name == name]
            scaling = self.offers[idx[0]].scaling
            factors = [scaling_factor(scaling, k + 1) for k in range(len(self.fk))]
            bound = pulp.lpSum(f * fk for f, fk in zip(factors, self.fk))
            slack = max((k + 1) * (1 - f) for k, f in enumerate(factors))  # what K_v can cost at most
            p += self.effective <= bound + slack * (1 - pulp.lpSum(self.used[j] for j in idx)), f"c4_{name}"
        if self.limits.max_price is not None:
            p += self._price() <= self.limits.max_price + PRICE_TOLERANCE, "c7_price"
        self._quotas()

    def _quotas(self) -> None:
        usage: dict[tuple[str, str, Market], list[tuple[pulp.LpVariable, float]]] = {}
        for n, a, o in zip(self.n, self.anchor, self.offers):
            usage.setdefault((o.region, o.itype.quota_group, Market.SPOT), []).append((n, o.itype.vcpus))
            usage.setdefault((o.region, o.itype.quota_group, Market.ON_DEMAND), []).append((a, o.itype.vcpus))
        for (_, h), m in self.m.items():
            usage.setdefault((h.region, h.itype.quota_group, Market.ON_DEMAND), []).append((m, h.itype.vcpus))
        for (region, group, market), terms in usage.items():
            quota = self.limits.quota(region, group, market)
            if math.isfinite(quota):
                self.problem += pulp.LpAffineExpression(terms) <= quota, f"c8_{region}_{group}_{market.name}"

    def best(self, catalog: Catalog) -> Plan | None:
        try:
            solve(self.problem, [(self.effective, 1.0)])
        except SolverError:
            if self.problem.status == pulp.LpStatusInfeasible:
                return None
            raise
        best = self.effective.value() or 0.0
        self.problem += self.effective >= best - 1e-7 * max(1.0, best), "lex_effective"
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

    def _plan(self, catalog: Catalog, az: tuple[str, str], nodes: tuple[NodeGroup, ...]) -> Plan:
        trainers = [g for g in nodes if g.role is not Role.HOLDER]
        total = sum(g.count for g in trainers)
        by_name = {o.itype.name: o for o in self.offers if (o.region, o.availability_zone) == az}
        k = min(scaling_factor(by_name[g.instance_type].scaling, total) for g in trainers)
        flops = k * sum(by_name[g.instance_type].itype.flops * g.count for g in trainers)
        z = k * sum(self._value_per_node(by_name[g.instance_type]) * g.count for g in trainers)
        return Plan(
            architecture=Architecture.SINGLE_ANCHOR if any(g.role is Role.ANCHOR for g in nodes)
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
        return mixed + tuple(note for name, count in sorted(per_type.items())
                             for note in capped_notes(name, by_name[name].scaling, count))  # fmt: skip
