"""kill -9 of trainers, holders and persisting holders during saves; restore must stay complete and valid."""

from __future__ import annotations

import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from dc_faults import KINDS, run_chain


@pytest.fixture
def private_dir():
    """Not tmp_path: on a shared machine other pytest sessions rotate /tmp/pytest-of-* under long tests."""
    path = Path(tempfile.mkdtemp(prefix="deepcheck-faults-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _run(tmp_path, chains: int, cycles: int):
    with ThreadPoolExecutor(chains) as pool:
        futures = [pool.submit(run_chain, tmp_path / f"chain{i}", cycles, seed=i) for i in range(chains)]
        results = [f.result() for f in futures]
    kills = {k: sum(r.kills[k] for r in results) for k in KINDS}
    print("kill -9 counts:", kills)
    return kills, results


@pytest.mark.mpi
@pytest.mark.timeout(900)
def test_kill9_cycles(private_dir):
    kills, results = _run(private_dir, chains=2, cycles=13)  # 26 kill -9s; the soak below runs 300
    assert sum(kills.values()) >= 25 and kills["trainer"] >= 8 and kills["persisting"] >= 4, kills
    for r in results:  # checkpoints kept completing between kills, and restores never went backwards
        assert sum(step >= 0 for step in r.restored) >= len(r.restored) // 2
        assert r.restored[-1] > 0 and r.restored == sorted(r.restored)


@pytest.mark.mpi
@pytest.mark.soak
@pytest.mark.timeout(7200)
def test_kill9_soak(private_dir):
    kills, _ = _run(private_dir, chains=2, cycles=150)
    assert sum(kills.values()) >= 300
