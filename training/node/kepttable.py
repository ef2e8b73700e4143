"""The kept files every trainer agreed on (training.node.launched), each with the one trainer that holds its bytes.

A file's bytes stay on the trainer that read it (its owner); the others know only its stamp. DeepCheck's save
then sends each file from its owner alone (DeepCheck.save's `owners`; the others pass codec.Elsewhere for it),
so keeping a file costs one copy over the link to the holders, as copying it there would, and no trainer holds
another's files in RAM. Before that, every trainer received every file (an MPI_Bcast) so that each could send
its equal share: for a 1 GiB snapshot that was a second trip over the link and a copy in every trainer's
memory (benchmarks/kept_files_bench.py). A restore gives every trainer every file, which each writes at its
place; then the files are shared out again, one owner each in turn, so that no trainer keeps them all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from deepcheck.codec import Elsewhere
from training.node.keptfiles import FileCopy, Stamp


class KeptTable:
    """One trainer's view of the agreed kept files: every file's stamp, its owner, and the bytes of its own."""

    def __init__(self, me: int) -> None:
        self.me = me  # this trainer's index
        self.copies: dict[str, FileCopy] = {}  # by key; data only where self.owners[key] == self.me
        self.owners: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.copies)

    def values(self) -> Iterable[FileCopy]:
        return self.copies.values()

    def take(self, copy: FileCopy, owner: int) -> None:
        """The agreed newest version of a file, held by trainer `owner`."""
        self.copies[copy.key] = copy if owner == self.me else FileCopy(copy.key, copy.stamp, None)
        self.owners[copy.key] = owner

    def drop(self, key: str) -> None:
        self.copies.pop(key, None)
        self.owners.pop(key, None)

    def restored(self, tree: Mapping[str, Mapping[str, object]], trainers: int) -> list[FileCopy]:
        """The files of a restored state (the tree `state` saved), every byte of them, to put back; the table
        then keeps the bytes of every `trainers`-th file only (its share, in key order)."""
        copies = []
        for key, entry in tree.items():
            size, mtime_ns, data = entry["size"], entry["mtime_ns"], entry["data"]
            assert isinstance(size, int) and isinstance(mtime_ns, int) and isinstance(data, bytearray)
            copies.append(FileCopy(key, Stamp(size, mtime_ns), data))
        self.copies, self.owners = {}, {}
        for i, copy in enumerate(sorted(copies, key=lambda c: c.key)):
            self.take(copy, i % trainers)
        return copies

    def state(self) -> tuple[dict[str, dict[str, object]], list[int]]:
        """The state tree DeepCheck saves (every file's bytes and stamp, by key; codec.Elsewhere for another
        trainer's bytes) and the owner of each of its bulk leaves, in order: the files sorted by owner."""
        order = sorted(self.copies, key=lambda key: (self.owners[key], key))
        tree: dict[str, dict[str, object]] = {}
        for key in order:
            copy = self.copies[key]
            data = Elsewhere(copy.stamp.size) if copy.data is None else copy.data
            tree[key] = {"size": copy.stamp.size, "mtime_ns": copy.stamp.mtime_ns, "data": data}
        return tree, [self.owners[key] for key in order]
