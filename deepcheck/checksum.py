"""Shard checksums: a 32-bit digest over 64-bit block and lane sums, computed with torch at memory speed.

Every shard is summed by the trainer that owns it, while holders pull the same bytes, and verified
again whenever it is handed back. zlib's CRC-32 runs at ~2.3 GB/s on one core here, about half the
speed of the transfer it rides along with, so with trainers and holders sharing cores the checksum, not
the copy, set the pace of L1. This digest costs two vectorized integer reductions (~5 GB/s on one
core, more with torch's intra-op threads) and keeps the guarantees a checkpoint needs:

The shard, zero-padded to whole 4 KiB blocks, is read as a matrix of little-endian int64 words, one
block per row. The digest is the CRC-32 of every row's sum, then every column's ("lane") sum, then the
length, all sums mod 2^64. A flipped bit changes its row sum and its lane sum; errors cancel in both
only if they do in a row and in a column at once, which takes at least four flipped bits in a rectangle
(so every error of up to three bits is caught, like CRC-32 on short messages). A zeroed, stale or
misplaced block changes its row sum, and the CRC over the row sums in order catches swapped blocks. The
length makes padding visible. As with any 32-bit check, other corruption passes with probability ~2^-32.

Integer sums are associative, so the digest does not depend on how many threads torch uses or on how
the shard is split into chunks (every chunk but the last must be whole blocks; 8 MiB chunks are).
The same associativity lets small shards be summed in plain Python (~60 MB/s): a process that has not
imported torch (a holder, a job saving small byte states) does not import it (~2 s of CPU) for a
shard it can sum in a few milliseconds; a shard bigger than SMALL, in any size of pieces, is summed
with torch from there on. Both ways give the same digest; the tests hold them to it.
"""

from __future__ import annotations

import struct
import sys
import zlib
from typing import TYPE_CHECKING, Any

from . import lazytorch

if TYPE_CHECKING:
    import torch

BLOCK = 4096  # bytes per row
WORDS = BLOCK // 8  # int64 words per row (= lanes)
GROUP = 64  # rows summed per lane partial: a 3-D reduction is ~2x faster than summing the column at once
SMALL = 1 << 20  # without torch loaded, a shard's first MiB is summed in Python (<= ~15 ms), the rest with torch
MASK = (1 << 64) - 1

if sys.byteorder != "little":  # digests are compared across machines: keep one byte order
    raise ImportError("deepcheck checksums assume a little-endian host")


def _pack(sums: list[int]) -> bytes:
    """Sums mod 2^64 as little-endian 64-bit words (the bytes torch's wrapping int64 sums have)."""
    return struct.pack(f"<{len(sums)}Q", *(x & MASK for x in sums))


class Digest:
    """Incremental shard digest: `update()` with consecutive pieces of the shard, then `value()` once."""

    def __init__(self) -> None:
        self.crc = 0  # running CRC-32 over the row sums
        self.lanes = [0] * WORDS  # lane sums, reduced mod 2^64 in value()
        self.length = 0
        self.tail = b""  # a last partial block, padded in value()

    def update(self, data: Any) -> Digest:
        if self.tail:
            raise ValueError("only the last piece of a shard may end inside a 4 KiB block")
        view = memoryview(data).cast("B")
        self.length += len(view)
        whole = len(view) - len(view) % BLOCK
        if whole:
            self._fold(view[:whole])
        self.tail = bytes(view[whole:])
        return self

    def _fold(self, blocks: memoryview) -> None:
        torch = lazytorch.loaded()
        if torch is None and self.length <= SMALL:  # self.length counts this piece already
            self._fold_python(blocks.cast("q"))
            return
        if torch is None:
            import torch
        if blocks.readonly:  # torch wraps only writable buffers; DeepCheck's own are (this copy is for callers')
            blocks = memoryview(bytearray(blocks))
        self._fold_torch(torch, torch.frombuffer(blocks, dtype=torch.int64).view(-1, WORDS))

    def _fold_python(self, words: memoryview) -> None:
        rows = range(0, len(words), WORDS)
        self.crc = zlib.crc32(_pack([sum(words[r : r + WORDS]) for r in rows]), self.crc)
        self.lanes = [acc + sum(words[lane::WORDS]) for lane, acc in enumerate(self.lanes)]

    def _fold_torch(self, torch: Any, rows: torch.Tensor) -> None:
        row_sums = bytearray(len(rows) * 8)  # torch without numpy has no direct bytes view
        torch.frombuffer(row_sums, dtype=torch.int64).copy_(rows.sum(1))
        self.crc = zlib.crc32(row_sums, self.crc)
        grouped = len(rows) - len(rows) % GROUP
        lanes = rows[grouped:].sum(0)
        if grouped:
            lanes += rows[:grouped].view(-1, GROUP, WORDS).sum(1).sum(0)
        self.lanes = [acc + part for acc, part in zip(self.lanes, lanes.tolist(), strict=True)]

    def value(self) -> int:
        """The digest (an unsigned 32-bit int). Call once, after the last update()."""
        if self.tail:
            block = bytearray(BLOCK)
            block[: len(self.tail)] = self.tail
            self._fold(memoryview(block))
            self.tail = b""
        return zlib.crc32(self.length.to_bytes(8, "little"), zlib.crc32(_pack(self.lanes), self.crc))


def digest(data: Any) -> int:
    """The digest of a whole shard."""
    return Digest().update(data).value()
