"""DeepVM's overhead model: the scaling factor and the saturation table (the fit: test_scaling_fit.py)."""

from __future__ import annotations

import dataclasses

import pytest

from provisioning.catalog.model import ScalingModel, ScalingParams
from provisioning.scaling.model import effective_nodes, saturation_point, scaling_factor, speedup


def test_scaling_factor_is_one_up_to_the_inflection_then_falls():
    p = ScalingParams(0.1339, 12.87, 6.18)
    assert all(scaling_factor(p, n) == 1.0 for n in range(1, 13))
    tail = [scaling_factor(p, n) for n in range(13, 200)]
    assert all(0 < k <= 1 for k in tail) and tail == sorted(tail, reverse=True)
    assert effective_nodes(p, 17) == pytest.approx(17 * scaling_factor(p, 17))


def test_saturation_table_and_steps_between():
    table = {0.3: 2, 1.7: 12, 5: 16, 10: 20, 12.5: 24, 15: 24, 25: 28, 30: 32}
    for bandwidth, trainers in table.items():
        assert saturation_point(bandwidth) == trainers
    assert saturation_point(0.1) == 2
    assert saturation_point(20) == 24  # between 15 and 25 Gbps: the 15 Gbps step
    assert saturation_point(100) == 32


def test_a_profiles_curve_is_read_as_its_speed_up_at_most_linear():
    """DeepVM's K is 1 below b whatever S says; a profile's curve counts n nodes as S(n) nodes' worth."""
    g5 = ScalingParams(0.0911, 18.5, 3.766, model=ScalingModel.SPEEDUP)  # DeepVM's g5.xlarge runs, fitted
    assert scaling_factor(g5, 1) == 1.0  # one node is the unit speed-ups are measured in (S(1) = 0.64 here)
    assert [round(effective_nodes(g5, n), 2) for n in (4, 8, 16)] == [0.79, 1.05, 1.67]  # measured 0.62, 1.03, 1.70
    as_deepvm = dataclasses.replace(g5, model=ScalingModel.DEEPVM)
    assert [effective_nodes(as_deepvm, n) for n in (4, 8, 16)] == [4.0, 8.0, 16.0]
    steep = ScalingParams(0.2, 5.0, 30.0, model=ScalingModel.SPEEDUP)  # S(n) > n at small n: capped at linear
    assert speedup(steep, 2) > 2 and scaling_factor(steep, 2) == 1.0
    assert all(0 < scaling_factor(steep, n) <= 1 for n in range(1, 100))
