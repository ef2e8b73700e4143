from __future__ import annotations

import itertools
import math
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deepcheck import ConfigError
from deepcheck.sharding import MAX_SHARDS, even_split, overlaps, plan_shards, trainer_range


@given(total=st.integers(0, 10**9), n=st.integers(1, 70), m=st.integers(1, 70))
def test_plan_covers_stream_and_balances(total, n, m):
    shards = plan_shards(total, n, m)
    assert shards[0].offset == 0 and shards[-1].end == total
    assert all(a.end == b.offset for a, b in itertools.pairwise(shards))
    assert max(s.length for s in shards) - min(s.length for s in shards) <= 1
    # every trainer sends one contiguous range, and equal shard counts
    per_trainer = Counter(s.trainer for s in shards)
    assert set(per_trainer) == set(range(n)) and len(set(per_trainer.values())) == 1
    for t in range(n):
        lo, hi = trainer_range(shards, t)
        assert sum(s.length for s in shards if s.trainer == t) == hi - lo
    # holders: exact balance when lcm(n, m) is small enough, within one shard otherwise
    per_holder = Counter(s.holder for s in shards)
    if len(shards) == math.lcm(n, m):
        assert set(per_holder) == set(range(m)) and len(set(per_holder.values())) == 1
    assert len(shards) <= max(MAX_SHARDS, n * m)


def test_three_trainers_one_holder():
    shards = plan_shards(300, 3, 1)
    assert [(s.trainer, s.holder, s.offset, s.length) for s in shards] == [
        (0, 0, 0, 100),
        (1, 0, 100, 100),
        (2, 0, 200, 100),
    ]


def test_one_trainer_spreads_over_all_holders():
    assert {s.holder for s in plan_shards(10, 1, 3)} == {0, 1, 2}


def test_overlaps():
    shards = plan_shards(100, 4, 1)
    assert [(s.index, a, b) for s, a, b in overlaps(shards, 10, 60)] == [
        (0, 10, 25),
        (1, 25, 50),
        (2, 50, 60),
    ]


@pytest.mark.parametrize(("args", "message"), [((10, 0, 1), "at least one trainer"), ((-1, 1, 1), "negative")])
def test_bad_input(args, message):
    with pytest.raises(ConfigError, match=message):
        plan_shards(*args)


def test_even_split_rejects_zero_parts():
    with pytest.raises(ConfigError, match="at least 1"):
        even_split(5, 0)


@given(
    cuts=st.lists(st.integers(0, 10**6), min_size=1, max_size=8),
    total=st.integers(0, 10**6),
    m=st.integers(1, 9),
)
def test_a_split_gives_each_trainer_exactly_its_range(cuts, total, m):
    """plan_shards' `split` (DeepCheck.save's owners): trainer t sends [split[t], split[t+1]) and nothing else,
    with as many shards to the same holders as an even plan has."""
    split = (0, *sorted(min(c, total) for c in cuts), total)
    n = len(split) - 1
    shards = plan_shards(total, n, m, split)
    assert [(s.index, s.trainer, s.holder) for s in shards] == [
        (s.index, s.trainer, s.holder) for s in plan_shards(total, n, m)
    ]
    assert shards[0].offset == 0 and shards[-1].end == total
    assert all(a.end == b.offset for a, b in itertools.pairwise(shards))
    for t in range(n):
        lo, hi = trainer_range(shards, t)
        assert (lo, hi) == (split[t], split[t + 1])


def test_a_split_that_does_not_rise_from_zero_to_the_total_is_refused():
    for split in [(0, 5), (1, 5, 10), (0, 6, 5, 10), (0, 5, 9)]:
        with pytest.raises(ConfigError, match="must rise from 0"):
            plan_shards(10, 3 if len(split) == 4 else 2, 1, split)
