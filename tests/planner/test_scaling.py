"""DeepVM's overhead model: the logistic fit, the scaling factor and the saturation table."""

from __future__ import annotations

import csv
import math

import pytest
from conftest import DATA

from provisioning.catalog import ScalingParams
from provisioning.scaling import (
    MEASURED_SCALING,
    effective_nodes,
    fit_logistic,
    saturation_point,
    scaling_factor,
    speedup,
)


def measured(instance_type: str) -> list[tuple[float, float]]:
    with (DATA / "scaling_resnet18.csv").open() as handle:
        return [(float(r["nodes"]), float(r["speedup"])) for r in csv.DictReader(handle)
                if r["instance_type"] == instance_type]


def rms(params: ScalingParams, points: list[tuple[float, float]]) -> float:
    return math.sqrt(sum((s - speedup(params, n)) ** 2 for n, s in points) / len(points))


def test_fit_recovers_known_parameters_from_exact_points():
    truth = ScalingParams(0.17, 11.0, 7.5)
    fitted = fit_logistic([(n, speedup(truth, n)) for n in range(1, 33)])
    assert (fitted.a, fitted.b, fitted.c) == pytest.approx((truth.a, truth.b, truth.c), rel=1e-5)


@pytest.mark.parametrize("instance_type", sorted(MEASURED_SCALING))
def test_published_fits_stay_close_to_the_measurements(instance_type):
    """Within 0.6x of speed-up (RMS) of the measurements; our own least-squares fit is at least as close."""
    points = measured(instance_type)
    best = fit_logistic(points)
    assert rms(best, points) <= rms(MEASURED_SCALING[instance_type], points)
    assert rms(MEASURED_SCALING[instance_type], points) < 0.6


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
