"""The shard digest catches the corruption a checkpoint meets and does not depend on how it is fed."""

from __future__ import annotations

import random
import struct
import zlib

import pytest
import torch

from deepcheck import checksum, lazytorch
from deepcheck.checksum import BLOCK, SMALL, Digest, digest


@pytest.fixture(scope="module")
def shard() -> bytearray:
    rng = random.Random(7)
    return bytearray(rng.randbytes(200 * BLOCK + 123))  # more than 3 lane groups, and a partial block


def _flip(data: bytearray, *bits: int) -> bytearray:
    out = bytearray(data)
    for bit in bits:
        out[bit // 8] ^= 1 << (bit % 8)
    return out


def test_pieces_and_read_only_bytes_give_the_same_digest(shard):
    whole = digest(shard)
    pieces = Digest()
    for lo, hi in [(0, BLOCK), (BLOCK, 70 * BLOCK), (70 * BLOCK, len(shard))]:
        pieces.update(memoryview(shard)[lo:hi])
    assert pieces.value() == whole
    assert digest(bytes(shard)) == whole
    threads = torch.get_num_threads()
    try:
        for count in (1, 2):  # integer sums: the thread count cannot change the result
            torch.set_num_threads(count)
            assert digest(shard) == whole
    finally:
        torch.set_num_threads(threads)


def test_only_the_last_piece_may_end_inside_a_block(shard):
    d = Digest().update(memoryview(shard)[:100])
    with pytest.raises(ValueError, match="last piece"):
        d.update(memoryview(shard)[100:])


def test_every_single_bit_flip_is_caught(shard):
    whole = digest(shard)
    rng = random.Random(1)
    for bit in [*rng.sample(range(len(shard) * 8), 300), 0, len(shard) * 8 - 1]:
        assert digest(_flip(shard, bit)) != whole


def test_flips_that_cancel_in_a_block_sum_are_caught_by_the_lane_sums(shard):
    whole = digest(shard)
    # Same bit of two words of one block, one 0->1 and one 1->0: the block's sum is unchanged.
    for word_a, word_b in [(0, 1), (3, 511), (BLOCK // 8 * 5 + 2, BLOCK // 8 * 5 + 300)]:
        for bit in range(64):
            a, b = word_a * 64 + bit, word_b * 64 + bit
            if (shard[a // 8] >> (a % 8)) & 1 != (shard[b // 8] >> (b % 8)) & 1:
                assert digest(_flip(shard, a, b)) != whole
    # Bit 63 of two words set together: +2^63 twice wraps to 0 in the block sum.
    assert digest(_flip(shard, 63, 127)) != whole


def test_same_word_of_two_blocks_is_caught_by_the_block_sums(shard):
    whole = digest(shard)
    lane, bit = 17, 5
    a, b = (lane * 64 + bit), (BLOCK * 8 * 9 + lane * 64 + bit)
    if (shard[a // 8] >> (a % 8)) & 1 == (shard[b // 8] >> (b % 8)) & 1:
        b += BLOCK * 8  # find a pair with opposite bits, so the lane sum alone would not see it
    assert digest(_flip(shard, a, b)) != whole


def test_torn_blocks_are_caught(shard):
    whole = digest(shard)
    zeroed = bytearray(shard)
    zeroed[7 * BLOCK : 8 * BLOCK] = bytes(BLOCK)
    swapped = bytearray(shard)
    swapped[0:BLOCK], swapped[BLOCK : 2 * BLOCK] = shard[BLOCK : 2 * BLOCK], shard[0:BLOCK]
    stale = bytearray(shard)
    stale[9 * BLOCK : 10 * BLOCK] = shard[40 * BLOCK : 41 * BLOCK]
    for bad in (zeroed, swapped, stale, shard[:-1], shard + b"\0"):
        assert digest(bad) != whole


def _reference(data: bytes) -> int:
    """The digest as the docstring defines it, in plain Python."""
    padded = data + bytes(-len(data) % BLOCK)
    words = struct.unpack(f"<{len(padded) // 8}q", padded)
    rows = [sum(words[i : i + BLOCK // 8]) % 2**64 for i in range(0, len(words), BLOCK // 8)]
    lanes = [sum(words[lane :: BLOCK // 8]) % 2**64 for lane in range(BLOCK // 8)]
    crc = zlib.crc32(b"".join(v.to_bytes(8, "little") for v in rows))
    crc = zlib.crc32(b"".join(v.to_bytes(8, "little") for v in lanes), crc)
    return zlib.crc32(len(data).to_bytes(8, "little"), crc)


def test_digest_matches_its_definition(shard):
    # Digests are compared across machines and versions: the torch code must compute exactly this.
    for data in (b"", b"\0", bytes(shard[: 3 * BLOCK]), bytes(shard)):
        assert digest(data) == _reference(data)


def test_without_torch_small_pieces_are_summed_in_python_to_the_same_digest(shard, monkeypatch):
    # A holder or a byte-only job never imports torch for small shards; the digests must not differ.
    big = bytearray(random.Random(3).randbytes(SMALL + 5 * BLOCK))
    with_torch = [digest(shard), digest(big)]
    folds = []
    monkeypatch.setattr(lazytorch, "loaded", lambda: None)  # as in a process that never imported torch
    real_fold = checksum.Digest._fold_torch

    def counted_fold(self, torch, rows):
        folds.append(len(rows))
        real_fold(self, torch, rows)

    monkeypatch.setattr(checksum.Digest, "_fold_torch", counted_fold)
    assert digest(shard) == with_torch[0] == _reference(bytes(shard))
    assert folds == []  # no torch for a piece of 820 KB
    mixed = Digest().update(memoryview(big)[: 2 * BLOCK]).update(memoryview(big)[2 * BLOCK :])
    assert mixed.value() == with_torch[1]  # a small piece in Python, then a big one with torch
    assert folds == [(len(big) - 2 * BLOCK) // BLOCK]
