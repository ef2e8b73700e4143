"""DeepVM's simulation sweep: at every price our Z is at least the paper's exhaustive search's."""

from __future__ import annotations

import json

import pytest
from conftest import DATA

from benchmarks import deepvm_reference as paper
from benchmarks.plan_sweep import PAPER_BUFFER, PAPER_CHECKPOINT, main, sweep_prices

SIMUL = DATA / "deepvm_simul_data.json"


def test_ours_matches_or_beats_the_paper_at_every_price_from_0_1_to_10_as_the_benchmark_prints_it(capsys):
    """The sweep once, as benchmarks/plan_sweep.py runs and prints it (--json): every price's row."""
    assert main(["--catalog", str(SIMUL), "--literal-prices", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["all_ok"] and doc["summary"]["prices"] == 100
    assert doc["summary"]["speedup"] > 1
    table = doc["table"]
    assert [row["max_price"] for row in table] == sweep_prices()
    assert table[0]["max_price"] == 0.1 and table[-1]["max_price"] == 10.0 and len(table) == 100
    failures = [row for row in table if not row["ok"]]
    assert not failures, failures[:3]
    solved = [row for row in table if row["paper"]["z"] is not None]
    assert len(solved) >= 95  # only the lowest prices buy no cluster at all
    for row in solved:
        assert row["ours"]["z"] == pytest.approx(row["paper"]["z"], rel=1e-9)  # exact: equal, not just >=


@pytest.mark.parametrize("price", [1.3, 6.7])
def test_pruned_reference_equals_the_literal_exhaustive_search(price):
    data = json.loads(SIMUL.read_text())
    literal = paper.exhaustive_search(data, price, PAPER_BUFFER, PAPER_CHECKPOINT)
    pruned = paper.pruned_search(data, price, PAPER_BUFFER, PAPER_CHECKPOINT)
    assert (literal.z, literal.gpu["name"], literal.n) == (pruned.z, pruned.gpu["name"], pruned.n)
