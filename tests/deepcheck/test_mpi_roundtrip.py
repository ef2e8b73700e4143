"""Real mpirun + torch: save with one world, restore bit for bit with others (Tiering and Single Anchor)."""

from __future__ import annotations

import json

import pytest
from dc_mpi import run_mpi

pytestmark = pytest.mark.mpi


def _results(tmp_path, mode, n):
    return [json.loads((tmp_path / f"{mode}-{r}.json").read_text()) for r in range(n)]


def test_save_then_restore_in_other_worlds(tmp_path):
    ref, ckdir = tmp_path / "ref.pt", tmp_path / "ck"
    run_mpi(3, "train_worker.py", "save", "TTH", str(ckdir), str(ref))
    saved = {r["rank"]: r for r in _results(tmp_path, "save", 2)}
    for r in saved.values():
        assert r["levels"] == ["L1", "L2"]
        assert r["flush"]["step"] == 6 and r["flush"]["level"] in ("L1", "L2")

    # Single Anchor: three trainers, one of which also holds; the newest complete checkpoint is the flush at
    # step 6, so drop it to prove the step-5 one (taken right before the weights were mutated) is intact.
    newest = sorted(ckdir.iterdir())[-1]
    assert newest.name.startswith("ckpt-000000000006")
    (newest / "manifest.json").unlink()
    run_mpi(3, "train_worker.py", "restore", "BTT", str(ckdir), str(ref))
    restored = _results(tmp_path, "restore", 3)
    for r in restored:
        assert r["step"] == 5 and r["latest"] == 5 and r["levels"] == ["L2"]
        assert r["bitwise"] and r["scheduler"] and r["loads"]
        assert r["data"] == {"epoch": 0, "batch": 5}
    for t in (0, 1):  # trainers that existed at save time get their rank state and RNG stream back
        assert restored[t]["rank_state"] == {"rank": t, "cursor": 1000 + t}
        assert restored[t]["after_restore_rand"] == saved[t]["after_save_rand"]
    assert restored[2]["rank_state"] is None


@pytest.mark.parametrize(("scale", "loads_torch"), [(1, "0"), (8, "1")])
def test_a_job_that_never_imports_torch_saves_and_restores(tmp_path, scale, loads_torch):
    # fault_worker.py saves plain bytes and never imports torch itself. Its small shards are summed without
    # torch; 8x bigger ones make the service thread import it while save() keeps looking for tensors. A
    # bare sys.modules lookup found torch half-initialized then, and the first save died (AttributeError).
    log, pids = tmp_path / "log", tmp_path / "pids"
    pids.mkdir()
    log.touch()
    for _ in range(2):  # the second job restores what the first saved
        run_mpi(4, "fault_worker.py", str(tmp_path / "ck"), str(log), str(pids), "20", str(scale))
    lines = log.read_text().split()
    assert lines[:2] == ["ready", "-1"] and lines[-4:] == ["torch", loads_torch, "closed", "39"]
    assert "ready" in lines[2:] and int(lines[lines.index("ready", 2) + 1]) >= 0


def test_a_state_held_in_parts_by_its_trainers_is_sent_by_each_owner_and_restored_whole(tmp_path):
    """DeepCheck.save's `owners` (training.node.kepttable: a launched script's kept files): each trainer sends
    exactly the bytes of its own leaves (one none at all), and a restore gives every trainer all of them."""
    run_mpi(5, "owners_worker.py", "TTTHH", str(tmp_path / "ck"), str(tmp_path))
    results = [json.loads((tmp_path / f"owners-{r}.json").read_text()) for r in range(3)]
    for r in results:
        assert r["step"] == 2 and r["exact"], r
        assert r["names"] == ["file-0-a", "file-0-b", "file-2-a"]
        assert r["lie"].startswith("StateError"), r["lie"]  # trainer 0's mistake fails every trainer's save
    sent = [r["sent"] for r in results]
    assert sent[1] == [0, 0]  # trainer 1 holds nothing and sends nothing
    assert 300_008 <= sent[0][0] < 300_008 + 2 * 64  # its two leaves and their alignment: not a third of the total
    assert sent[2] == [1 << 20, 1 << 20]
