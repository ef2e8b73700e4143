"""DeepVM's overhead model: the scaling factor and the saturation table (the fit: test_scaling_fit.py)."""

from __future__ import annotations

import pytest

from provisioning.catalog import ScalingParams
from provisioning.scaling import effective_nodes, saturation_point, scaling_factor


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
