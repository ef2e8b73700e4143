"""The least-squares fit of S(n) (provisioning/scaling/fit.py): DeepVM's data, uncertainty, warnings."""

from __future__ import annotations

import csv
import random

import pytest
from conftest import DATA

from provisioning.catalog.model import ScalingParams
from provisioning.scaling.fit import FitError, fit_speedup, rmse
from provisioning.scaling.model import MEASURED_SCALING, effective_nodes, speedup

# Root-mean-square error on DeepVM's measurements (tests/data/scaling_resnet18.csv): the least-squares
# optimum, and DeepVM's published parameters (MEASURED_SCALING) on the same points.
RMSE = {
    "g3s.xlarge": (0.423, 0.543),
    "g4dn.xlarge": (0.127, 0.197),
    "g5.xlarge": (0.153, 0.461),
}


def measured(instance_type: str) -> list[tuple[float, float]]:
    with (DATA / "scaling_resnet18.csv").open() as handle:
        return [
            (float(r["nodes"]), float(r["speedup"]))
            for r in csv.DictReader(handle)
            if r["instance_type"] == instance_type
        ]


def within(fit_value: float, sd: float | None, published: float, sds: float = 2.0) -> bool:
    return sd is not None and abs(fit_value - published) <= sds * sd


@pytest.mark.parametrize("instance_type", sorted(MEASURED_SCALING))
def test_fit_reproduces_deepvm_published_curves_within_uncertainty_or_better(instance_type):
    """Each of a, b, c within two standard deviations of DeepVM's value, or a closer fit (lower RMSE).

    g3s and g5: all three within 1.5 sd. g4dn: b and c are 2.6 and 3.3 sd away, but DeepVM's curve misses
    the points by 55% more (0.197 against 0.127)."""
    points = measured(instance_type)
    published = MEASURED_SCALING[instance_type]
    fit = fit_speedup(points)
    ours, theirs = rmse(fit.params, points), rmse(published, points)
    print(
        f"{instance_type}: a={fit.a.value:.4f}±{fit.a.sd:.4f} b={fit.b.value:.2f}±{fit.b.sd:.2f} "
        f"c={fit.c.value:.3f}±{fit.c.sd:.3f} RMSE {ours:.3f}; DeepVM's a={published.a:.4f} b={published.b:.2f} "
        f"c={published.c:.3f} RMSE {theirs:.3f}"
    )
    assert (round(ours, 3), round(theirs, 3)) == RMSE[instance_type]
    assert fit.rmse == pytest.approx(ours)
    reproduced = all(
        within(e.value, e.sd, p) for e, p in ((fit.a, published.a), (fit.b, published.b), (fit.c, published.c))
    )
    assert reproduced or ours < theirs
    assert reproduced == (instance_type != "g4dn.xlarge")
    assert fit.max_nodes == 32


def test_exact_points_give_back_their_curve_with_no_doubt():
    truth = ScalingParams(0.17, 11.0, 7.5)
    fit = fit_speedup([(n, speedup(truth, n)) for n in range(1, 33)])
    assert (fit.a.value, fit.b.value, fit.c.value) == pytest.approx((truth.a, truth.b, truth.c), rel=1e-5)
    assert fit.rmse < 1e-6 and all(e.sd is not None and e.sd < 1e-5 for e in (fit.a, fit.b, fit.c))
    assert fit.warnings == ()


def test_uncertainty_covers_the_truth_of_noisy_repeats():
    """Three repeats at each size with 3% noise: the truth lies within three standard deviations."""
    truth = ScalingParams(0.3, 6.0, 5.0)
    noise = random.Random(7)
    points = [(n, speedup(truth, n) * (1 + noise.gauss(0, 0.03))) for n in (1, 2, 4, 6, 8, 12, 16) for _ in range(3)]
    fit = fit_speedup(points)
    for estimate, true in ((fit.a, truth.a), (fit.b, truth.b), (fit.c, truth.c)):
        assert estimate.sd is not None and 0 < estimate.sd < 0.2 * abs(true)
        assert abs(estimate.value - true) <= 3 * estimate.sd
    assert fit.warnings == ()


def test_three_sizes_fix_the_curve_and_leave_its_uncertainty_unknown():
    fit = fit_speedup([(1, 1.0), (2, 1.6), (3, 2.0)])
    assert fit.rmse < 1e-9
    assert (fit.a.sd, fit.b.sd, fit.c.sd) == (None, None, None)
    assert fit.warnings == (
        "3 node counts fix the 3 parameters exactly: the curve's shape beyond 3 nodes is a guess; measure more sizes",
    )


def test_falling_speed_up_warns_and_is_fitted_as_a_job_that_does_not_scale():
    """A job that gets slower with nodes: the steep curve that levelled off before one node, on which the
    planner's effective node count n K(n) stays below one node, not the flat one that scales linearly."""
    fit = fit_speedup([(1, 1.0), (2, 0.9), (3, 0.8), (4, 0.75)])
    assert (
        fit.warnings[0] == "the speed-up falls from 1 on 1 node to 0.9 on 2 nodes (and 2 more drops): "
        "not a logistic curve"
    )
    assert all(effective_nodes(fit.params, n) < 1.0 for n in range(1, 50))


def test_small_drops_are_noise_and_high_rmse_warns():
    g4dn = fit_speedup(measured("g4dn.xlarge"))  # 5.49 at 28 nodes, 5.25 at 32: a 4% drop
    assert g4dn.warnings == ()
    zigzag = fit_speedup([(1, 1.0), (2, 3.0), (3, 1.5), (4, 4.0), (5, 2.0), (6, 4.2)])
    assert any(
        w.startswith("the curve misses the measurements by") and "over 10% of the largest speed-up (4.2)" in w
        for w in zigzag.warnings
    )


def test_one_size_cannot_be_fitted():
    with pytest.raises(FitError, match="two node counts"):
        fit_speedup([(1, 1.0), (1, 1.0)])
