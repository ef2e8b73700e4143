"""Which checkpoints restore may use, from holders' inventories (pure logic, no MPI)."""

from __future__ import annotations

from dc_fixtures import make_checkpoint

from deepcheck.protocol import Inventory, Level
from deepcheck.restore import candidates


def test_newest_complete_first_with_every_copy_listed():
    old, _ = make_checkpoint(1)
    new, _ = make_checkpoint(2)
    partial, _ = make_checkpoint(3)  # manifest known but shard 1 exists nowhere
    invs = [
        Inventory(
            5,
            True,
            {new.ckpt: [0, 1]},
            {old.ckpt: {0: 1000, 1: 1000}, partial.ckpt: {0: 1000}},
            [(Level.L1, new), (Level.L2, old), (Level.L2, partial)],
        ),
        Inventory(6, False, {}, {new.ckpt: {0: 1000, 1: 1000}}, [(Level.L2, new)]),
    ]
    got = candidates(invs)
    assert [c.manifest.ckpt for c in got] == [new.ckpt, old.ckpt]
    assert got[0].levels == {Level.L1, Level.L2}
    assert got[0].sources[1] == [(5, Level.L1), (6, Level.L2)]
    assert got[1].sources[0] == [(5, Level.L2)]


def test_s3_copies_are_spread_over_holders_with_s3():
    m, _ = make_checkpoint(4, nshards=4)
    invs = [Inventory(r, True, {}, {}, [(Level.L3, m)] if r == 1 else []) for r in (1, 2)]
    got = candidates(invs)[0]
    assert [got.sources[i][0][0] for i in range(4)] == [1, 2, 1, 2]
