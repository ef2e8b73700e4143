"""DeepVM's overhead model: how much of n nodes' FLOPS a data-parallel job really gets.

Notation (the DeepVM paper, CCGrid 2024, its planner's overhead model):
    S(n)  = c / (1 + exp(-a (n - b)))      logistic speed-up fitted to measured training times
    L(n)  = S'(b) (n - b) + S(b)           tangent of S at its inflection point b
    K(n)  = 1 for n <= b, else S(n) / L(n)  scaling factor in (0, 1]
    gain(n) = n K(n)                       effective nodes: throughput is flops * gain(n)
and the network saturation point n_sat(bw): above n_sat trainers per checkpoint holder the holders'
links saturate, so Tiering needs n / m < n_sat(min(bw_trainer, bw_holder)).

K(n) = 1 up to b is DeepVM's own definition (its planner returns L(n) / L(n) there), so DeepVM's and
the catalog's curves keep it: the planner reproduces the paper's decisions exactly. It is a ranking
factor, not a measurement: below b it counts every node as fully used whatever S(n) says. A profile
(`deepvm profile`, ScalingModel.SPEEDUP) is a measurement of the job's speed-up, and the planner takes it
at its word: gain(n) = min(n, S(n)), so K(n) = min(1, S(n) / n), with K(1) = 1 (speed-ups are measured
over one node, which is the unit, whatever the fitted curve says at n = 1). Through DeepVM's K, a
profile of a job that gains nothing from 8 nodes (DeepVM's own ResNet-18 data on g5.xlarge: x1.03, b = 18.5
fitted) would still be planned as 8 nodes' worth.
"""

from __future__ import annotations

import math

from provisioning.catalog.model import DEFAULT_SCALING, InstanceType, ScalingModel, ScalingParams


def speedup(p: ScalingParams, n: float) -> float:
    exponent = -p.a * (n - p.b)
    return 0.0 if exponent > 700 else p.c / (1.0 + math.exp(exponent))  # exp overflows past 709: S is 0 there


def _speedup_slope_at_b(p: ScalingParams) -> float:
    return p.c * p.a / 4.0  # S'(b): the logistic's derivative at its inflection point


def tangent_at_inflection(p: ScalingParams, n: float) -> float:
    return _speedup_slope_at_b(p) * (n - p.b) + p.c / 2.0


def scaling_factor(p: ScalingParams, n: float) -> float:
    """K(n): the share of linear scaling that n nodes keep (DeepVM's: 1 up to the inflection point; a
    profile's: its speed-up over n, at most 1)."""
    if p.model is ScalingModel.SPEEDUP:
        return 1.0 if n <= 1 else min(1.0, speedup(p, n) / n)
    if n <= p.b:
        return 1.0
    return speedup(p, n) / tangent_at_inflection(p, n)


def capped_notes(instance_type: str, p: ScalingParams, count: int) -> tuple[str, ...]:
    """What a plan says when it holds as many nodes of a type as the type's curve is trusted for."""
    if p.max_nodes is None or count < p.max_nodes:
        return ()
    return (
        f"{instance_type}: capped at {p.max_nodes} nodes, as far as its profiled scaling curve is trusted "
        "(1.5 x the most nodes profiled)",
    )


def effective_nodes(p: ScalingParams, n: int) -> float:
    """n K(n): how many nodes' worth of FLOPS n data-parallel nodes deliver."""
    return n * scaling_factor(p, n)


# n_sat by the bandwidth (Gbps) between trainers and holders, measured by DeepVM
# (datasets/deepvm/checkpoint_transfer_vs_remote_nodes.csv shows the knee). A step function between them.
_SATURATION_STEPS: tuple[tuple[float, int], ...] = (
    (0.3, 2),
    (1.7, 12),
    (5.0, 16),
    (10.0, 20),
    (12.5, 24),
    (15.0, 24),
    (25.0, 28),
    (30.0, 32),
)


def saturation_point(bandwidth_gbps: float) -> int:
    """n_sat(bw): trainers one holder can absorb before its network link saturates.

    DeepVM's table for its measured bandwidths; between them the value of the highest table bandwidth
    not above bw (a link is at least as good as any slower one), and 2 below the smallest.
    """
    point = _SATURATION_STEPS[0][1]
    for bandwidth, trainers in _SATURATION_STEPS:
        if bandwidth_gbps + 1e-9 >= bandwidth:
            point = trainers
    return point


# DeepVM's published fits of S(n) to its ResNet-18 measurements (datasets/deepvm/scaling_resnet18.csv;
# the values its real-world planner uses). They are not the least-squares optimum of that CSV: RMS error
# 0.54 / 0.20 / 0.46x of speed-up for g3s / g4dn / g5 where scaling_fit.fit_speedup reaches 0.42 / 0.13 /
# 0.15. We keep them because they are what reproduces the paper's decisions; tests/planner/
# test_scaling_fit.py checks both numbers.
MEASURED_SCALING: dict[str, ScalingParams] = {
    "g3s.xlarge": ScalingParams(a=0.1408559584, b=14.49263334, c=13.53250952),
    "g4dn.xlarge": ScalingParams(a=0.1338806402, b=12.87424514, c=6.176666667),
    "g5.xlarge": ScalingParams(a=0.08533428072, b=20.06669931, c=4.962225551),
}


def scaling_of(instance_type: InstanceType) -> ScalingParams:
    """The catalog's own parameters, else our measured fit for that type, else the default."""
    if instance_type.scaling is not None:
        return instance_type.scaling
    return MEASURED_SCALING.get(instance_type.name, DEFAULT_SCALING)


def curve_source(instance_type: InstanceType) -> str:
    """Where scaling_of's curve comes from: "catalog" (the catalog's own; a profile's once applied),
    "deepvm" (DeepVM's measured ResNet-18 fit) or "default"."""
    if instance_type.scaling is not None:
        return "catalog"
    return "deepvm" if instance_type.name in MEASURED_SCALING else "default"
