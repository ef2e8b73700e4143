"""training.node.kepttable: each kept file's bytes on its owner only, and the state DeepCheck saves from it."""

from __future__ import annotations

from deepcheck.codec import Elsewhere, flatten
from training.node.keptfiles import FileCopy, Stamp
from training.node.kepttable import KeptTable


def copy(key: str, size: int, mtime_ns: int = 1) -> FileCopy:
    return FileCopy(key, Stamp(size, mtime_ns), bytearray((key * size).encode()[:size]))


def test_a_file_owned_elsewhere_keeps_its_stamp_and_not_its_bytes():
    table = KeptTable(me=1)
    table.take(copy("job/b.pt", 3), owner=0)
    table.take(copy("job/a.pt", 2), owner=1)
    table.take(copy("job/c.pt", 1), owner=0)
    assert {c.key: c.data is not None for c in table.values()} == {
        "job/a.pt": True,
        "job/b.pt": False,
        "job/c.pt": False,
    }
    tree, owners = table.state()
    assert list(tree) == ["job/b.pt", "job/c.pt", "job/a.pt"] and owners == [0, 0, 1]  # by owner, then key
    assert tree["job/b.pt"]["data"] == Elsewhere(3)  # sized as the owner's bytes
    assert tree["job/a.pt"]["data"] == copy("job/a.pt", 2).data
    # the layout is the owner's: every trainer's save agrees (DeepCheck checks the layout's fingerprint)
    owner = KeptTable(me=0)
    for c, o in [(copy("job/b.pt", 3), 0), (copy("job/a.pt", 2), 1), (copy("job/c.pt", 1), 0)]:
        owner.take(c, o)
    assert flatten(owner.state()[0]).layout_crc() == flatten(tree).layout_crc()
    table.drop("job/b.pt")
    assert len(table) == 2 and table.state()[1] == [0, 1]


def test_a_restore_puts_every_file_back_and_then_shares_them_out():
    tree = {c.key: {"size": c.stamp.size, "mtime_ns": 5, "data": c.data} for c in map(copy, "dcba", [1, 2, 3, 4])}
    table = KeptTable(me=1)
    back = table.restored(tree, trainers=2)
    assert sorted(c.key for c in back) == ["a", "b", "c", "d"] and all(c.data is not None for c in back)
    assert {c.key for c in table.values() if c.data is not None} == {"b", "d"}  # every second file, in key order
    assert table.state()[1] == [0, 0, 1, 1]
