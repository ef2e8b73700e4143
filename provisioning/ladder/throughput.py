"""How fast a set of nodes trains: the planner's model, for any cluster the ladder considers.

For N trainers with F TFLOPS between them (simulation/cluster.py, provisioning/planner/mix.py):

    rate = F * K_min(N) * 3.6 PFLOP per hour,   K_min(N) = min over the trainer types present of K_v(N)

With one type this is DeepVM's flops x n x K(n). Nodes that do not train (checkpoint holders) add nothing.
The ladder compares clusters through this model; where the job's own rate was measured, the prediction is
scaled by measured / modelled for the cluster as it is (`efficiency`), so a slow job is not promised the
planner's speed elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

from provisioning.catalog.model import ScalingParams
from provisioning.ladder.situation import Holding, Situation, TypeFacts
from provisioning.planner.objectives import PFLOP_PER_TFLOPS_HOUR
from provisioning.scaling.model import scaling_factor


@lru_cache(maxsize=65536)
def _k(curve: ScalingParams, trainers: int) -> float:
    return scaling_factor(curve, trainers)


def pflop_per_hour(counts: Iterable[tuple[TypeFacts, int]]) -> float:
    """The model's rate for `count` trainers of each type (types that do not train are ignored)."""
    return _rate(tuple(counts))


@lru_cache(maxsize=65536)
def _rate(counts: tuple[tuple[TypeFacts, int], ...]) -> float:
    """pflop_per_hour, once per composition: the ladder and the simulator ask about the same few again and again."""
    trainers, tflops, curves = 0, 0.0, []
    for facts, count in counts:
        if count <= 0 or not facts.trains:
            continue
        trainers += count
        tflops += count * facts.tflops
        curves.append(facts.scaling)
    if trainers == 0:
        return 0.0
    return tflops * min(_k(c, trainers) for c in curves) * PFLOP_PER_TFLOPS_HOUR


def counts_of(s: Situation, holdings: Iterable[Holding], ready_only: bool) -> list[tuple[TypeFacts, int]]:
    """(type, nodes) of holdings: those that train now (`ready_only`) or every one held."""
    return [(s.facts[h.pool.instance_type], h.ready if ready_only else h.held) for h in holdings]


def efficiency(s: Situation) -> float:
    """Measured rate / the model's for the nodes that train now (1 when either is unknown)."""
    modelled = pflop_per_hour(counts_of(s, s.holdings, ready_only=True))
    measured = s.progress.pflop_per_hour
    if modelled <= 0 or measured <= 0:
        return 1.0
    return measured / modelled
