"""kill -9 of trainers, holders and persisting holders during saves; restore must stay complete and valid."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from dc_faults import KINDS, run_chain


def _run(tmp_path, chains: int, cycles: int):
    with ThreadPoolExecutor(chains) as pool:
        futures = [pool.submit(run_chain, tmp_path / f"chain{i}", cycles, seed=i) for i in range(chains)]
        results = [f.result() for f in futures]
    kills = {k: sum(r.kills[k] for r in results) for k in KINDS}
    return kills, results


@pytest.mark.mpi
def test_kill9_cycles(tmp_path):
    kills, results = _run(tmp_path, chains=2, cycles=26)
    assert sum(kills.values()) >= 50 and all(kills[k] >= 16 for k in KINDS), kills
    for r in results:  # progress was made across kills: the chain did not keep restoring the same old step
        assert r.restored[-1] > r.restored[1] >= 0


@pytest.mark.mpi
@pytest.mark.soak
def test_kill9_soak(tmp_path):
    kills, _ = _run(tmp_path, chains=2, cycles=150)
    assert sum(kills.values()) >= 300
