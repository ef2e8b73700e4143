"""The simulator against the paper's real-world runs (tests/data/realworld_makespan.csv), no interruptions.

The model is the planner's (FLOPS x n x K(n)). It ranks the three clusters as measured and gets
cost-first's ratio to DeepVM within 15 % (x1.06 vs x1.18); it does not get performance-first's: it
predicts the 7 g5.xlarge cluster x1.31 slower than DeepVM's 17 g4dn.xlarge, the paper measured x1.97.
DeepVM's K(n) is 1 up to the fitted inflection point b (20.1 for g5.xlarge), so the model takes 7 g5
nodes as scaling linearly, while the measured ResNet-18 speed-up of g5.xlarge is x1.03 at 8 nodes
(tests/data/scaling_resnet18.csv; single-node speeds match the FLOPS ratio). The miss is recorded as an
expected failure rather than tuned away.
"""

from __future__ import annotations

import pytest

from benchmarks.simulate_bench import RATIO_TOLERANCE, paper_rows
from tests.simulation.sim_cases import paper_catalog


@pytest.fixture(scope="module")
def rows():
    return {r.policy: r for r in paper_rows(paper_catalog())}


def test_predicted_makespans_rank_deepvm_cost_first_performance_first(rows):
    predicted = [rows[p].predicted_s for p in ("deepvm", "cost-first", "performance-first")]
    assert predicted == sorted(predicted) and len(set(predicted)) == 3, rows
    assert rows["deepvm"].predicted_s == pytest.approx(rows["deepvm"].measured_s)  # the scale the others share


def test_cost_first_ratio_to_deepvm_within_15_percent_of_measured(rows):
    row = rows["cost-first"]
    assert abs(row.ratio_error) <= RATIO_TOLERANCE, (
        f"predicted x{row.predicted_ratio:.3f}, measured x{row.measured_ratio:.3f}")


@pytest.mark.xfail(strict=True, reason="the model predicts x1.31, the paper measured x1.97 (-33 %): K(n) = 1 "
                                       "below b takes 7 g5.xlarge as linear; measured x1.03 at 8 nodes")
def test_performance_first_ratio_to_deepvm_within_15_percent_of_measured(rows):
    row = rows["performance-first"]
    assert abs(row.ratio_error) <= RATIO_TOLERANCE, (
        f"predicted x{row.predicted_ratio:.3f}, measured x{row.measured_ratio:.3f}")
