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
    for r in results:  # checkpoints kept completing between kills, and restores never went backwards
        assert sum(step >= 0 for step in r.restored) >= len(r.restored) // 2
        assert r.restored[-1] > 0 and r.restored == sorted(r.restored)


@pytest.mark.mpi
@pytest.mark.soak
def test_kill9_soak(tmp_path):
    kills, _ = _run(tmp_path, chains=2, cycles=150)
    assert sum(kills.values()) >= 300
