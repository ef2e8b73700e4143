"""The simulator against the paper's real-world runs (tests/data/realworld_makespan.csv), no interruptions.

Two models predict the same three clusters (benchmarks/paper_realworld.py prints both):
- default, DeepVM's curves through its K(n): ranks them as measured and gets cost-first's ratio to DeepVM
  (x1.06 predicted, x1.18 measured), but not performance-first's (x1.31 predicted, x1.97 measured, -33 %).
  K(n) is 1 up to the inflection point b (20.1 for g5.xlarge), as the paper defines it (its planner
  returns L(n) / L(n) there), so 7 g5.xlarge count as 7 nodes' worth, while DeepVM measured x1.03 on 8
  (tests/data/scaling_resnet18.csv). That miss stays recorded as a strict expected failure.
- profiled, what a user of deepvm does when the default curve is wrong for a job: a profile per type
  made from DeepVM's measured scaling, read as the measured speed-up. Cost-first x1.05 (-11 %),
  performance-first x2.20 (+12 %): both within 15 %, ranked as measured.
"""

from __future__ import annotations

import pytest

from benchmarks.paper_realworld import paper_profiles, paper_rows, ranked_as_measured
from provisioning.catalog.model import ScalingModel
from tests.simulation.sim_cases import paper_catalog


@pytest.fixture(scope="module")
def models():
    catalog = paper_catalog()
    return {"default": paper_rows(catalog), "profiled": paper_rows(catalog, paper_profiles(catalog))}


def shown(rows) -> str:
    return "; ".join(f"{r.policy} x{r.predicted_ratio:.3f} predicted, x{r.measured_ratio:.3f} measured" for r in rows)


@pytest.mark.parametrize("model", ["default", "profiled"])
def test_predicted_makespans_rank_deepvm_cost_first_performance_first(models, model):
    rows = models[model]
    assert [r.policy for r in rows] == ["deepvm", "cost-first", "performance-first"]
    assert ranked_as_measured(rows), shown(rows)
    assert rows[0].predicted_s == pytest.approx(rows[0].measured_s)  # the scale the others share


@pytest.mark.parametrize(
    "model, policy",
    [
        ("profiled", "cost-first"),
        ("profiled", "performance-first"),
        ("default", "cost-first"),
        pytest.param(
            "default",
            "performance-first",
            marks=pytest.mark.xfail(
                strict=True,
                reason="DeepVM's K(n) = 1 below b takes 7 g5.xlarge as linear: x1.31 predicted, x1.97 "
                "measured (-33 %); DeepVM measured x1.03 on 8 g5.xlarge",
            ),
        ),
    ],
)
def test_baseline_ratio_to_deepvm_within_15_percent_of_measured(models, model, policy):
    row = next(r for r in models[model] if r.policy == policy)
    assert row.within_tolerance, f"{model}: {shown(models[model])}"


def test_the_profiles_are_deepvm_profile_documents_of_the_scaling_runs():
    """What makes the profiled figure: one profile per measured type, the least-squares fit of every size,
    read as the speed-up (not through K, which would put 7 g5.xlarge back at 7 nodes' worth)."""
    profiles = {p.instance_type: p for p in paper_profiles(paper_catalog())}
    assert sorted(profiles) == ["g3s.xlarge", "g4dn.xlarge", "g5.xlarge"]
    g5 = profiles["g5.xlarge"]
    assert [s.nodes for s in g5.sizes] == [1, 2, 4, 8, 12, 16, 20, 24, 28, 32]
    assert g5.sizes[3].speedup == pytest.approx(1.026913, rel=1e-5)  # the CSV's, from its times
    assert g5.fit.b.value > 7 and g5.scaling().model is ScalingModel.SPEEDUP
    assert any("not a logistic curve" in w for w in g5.warnings)  # 2 nodes ran slower than 1
