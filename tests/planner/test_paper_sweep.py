"""DeepVM's simulation sweep: at every price our Z is at least the paper's exhaustive search's."""

from __future__ import annotations

import json

import pytest
from conftest import DATA

from benchmarks import deepvm_reference as paper
from benchmarks.plan_sweep import PAPER_BUFFER, PAPER_CHECKPOINT, compare, main, our_plans, paper_rows, sweep_prices
from provisioning.catalog.files import load_catalog_file

SIMUL = DATA / "deepvm_simul_data.json"


def test_ours_matches_or_beats_the_paper_at_every_price_from_0_1_to_10():
    data = json.loads(SIMUL.read_text())
    prices = sweep_prices()
    assert prices[0] == 0.1 and prices[-1] == 10.0 and len(prices) == 100
    table = compare(prices, our_plans(load_catalog_file(SIMUL), prices), paper_rows(data, prices, paper.pruned_search))
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


def test_benchmark_json_output(capsys):
    assert main(["--catalog", str(SIMUL), "--literal-prices", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["all_ok"] and doc["summary"]["prices"] == 100
    assert doc["summary"]["speedup"] > 1
