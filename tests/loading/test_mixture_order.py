"""The mixture's arithmetic (no torch, no data): interleave, epoch length and per-source orders."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guideloom.errors import MixtureError
from guideloom.loading.interleave import QUOTA_MAX_PERIOD, Interleave, integer_weights
from guideloom.loading.mixture import MixtureOrder, MixturePlan
from guideloom.loading.order import EpochOrder, derive_key

weights_st = st.lists(
    st.one_of(st.integers(1, 1000), st.floats(1e-6, 1.0, allow_nan=False)), min_size=1, max_size=8
)


def _prefix_counts(il: Interleave, start: int, stop: int) -> np.ndarray:
    """Counts of every source after each prefix [0, p), p = start .. stop (from sources())."""
    src, _ = il.sources(start, stop)
    steps = np.zeros((stop - start, il.num_sources), dtype=np.int64)
    steps[np.arange(stop - start), src] = 1
    return np.vstack([il.counts(start), np.cumsum(steps, axis=0) + il.counts(start)])


@settings(max_examples=150, deadline=None)
@given(weights=weights_st, start=st.integers(0, 10**12), length=st.integers(1, 3000))
def test_every_prefix_is_within_the_bound_of_its_weight(
    weights: list[float], start: int, length: int
) -> None:
    il = Interleave(integer_weights(weights))
    counts = _prefix_counts(il, start, start + length)
    # the closed form at the end agrees with stepping through the range
    assert counts[-1].tolist() == il.counts(start + length)
    # |count - p * w / W| in exact integers (p reaches 10**12: float64 would lose the digits)
    total = sum(il.weights)
    prefixes = np.arange(start, start + length + 1, dtype=np.int64).astype(object)
    scaled = np.abs(counts.astype(object) * total - np.outer(prefixes, np.array(il.weights, dtype=object)))
    deviation = max(scaled.ravel().tolist()) / total
    assert deviation <= il.max_deviation + 1e-9
    if len(weights) <= 4 or sum(il.weights) <= QUOTA_MAX_PERIOD:
        # every prefix within one sample of weight * p: the tree's proof for up to 4 sources,
        # else (for a tree bound of 1 or more) the quota period
        assert il.max_deviation < 1
        assert deviation < 1
    if il.schedule == "quota":
        assert il.max_deviation <= 1 - 1 / (2 * len(weights) - 2) + 1e-12
    # the bound docs/mixing.md states per number of sources: 1/2 for two, below
    # ceil(log2 S) / 2 from three on (the least-depth tree is one of the candidates)
    if len(weights) == 2:
        assert il.max_deviation == 0.5
    elif len(weights) >= 3:
        assert il.max_deviation < math.ceil(math.log2(len(weights))) / 2


@settings(max_examples=60, deadline=None)
@given(
    weights=st.lists(st.integers(1, 400), min_size=2, max_size=16).filter(lambda w: sum(w) <= 4000),
    start=st.integers(0, 10**15),
    length=st.integers(1, 2000),
)
def test_the_quota_schedule_meets_tijdemans_bound_on_every_prefix(
    weights: list[int], start: int, length: int
) -> None:
    """Over one whole period (so over every prefix of every epoch, as the schedule repeats), each
    source is within 1 - 1/(2S - 2) of its share; counts and draw indexes agree with stepping."""
    il = Interleave(integer_weights(weights), "quota")
    period = sum(il.weights)
    src, draw = il.sources(0, period)
    running = np.vstack(
        [np.zeros(il.num_sources, np.int64), np.cumsum(np.eye(il.num_sources, dtype=np.int64)[src], 0)]
    )
    exact = np.abs(running * period - np.outer(np.arange(period + 1), il.weights)).max() / period
    bound = 1 - 1 / (2 * len(weights) - 2) if len(weights) > 2 else 0.5
    assert exact <= bound + 1e-12
    assert exact == pytest.approx(il.max_deviation)
    assert running[-1].tolist() == list(il.weights)  # a period deals each source its weight
    for i in range(il.num_sources):  # draw indexes count each source up from 0
        assert draw[src == i].tolist() == list(range(il.weights[i]))
    # far into the run: the closed form at both ends agrees with the range in between
    counts = _prefix_counts(il, start, start + length)
    assert counts[-1].tolist() == il.counts(start + length)
    laps, r = divmod(start, period)
    assert il.counts(start) == [laps * w + int(c) for w, c in zip(il.weights, running[r])]


def test_auto_keeps_the_tree_where_it_is_within_one_and_deals_by_quota_elsewhere() -> None:
    for weights in ([7, 3], [5, 3, 2], [1000000, 1, 3, 50], [4, 2, 1, 1, 1]):
        il = Interleave(weights)
        assert il.schedule == "tree" and il.max_deviation < 1
        tree = Interleave(weights, "tree")
        assert np.array_equal(il.sources(10**9, 10**9 + 500)[0], tree.sources(10**9, 10**9 + 500)[0])
    weights = [2, 2, 2, 1, 3]  # the tree proves only 1.0 here
    assert Interleave(weights, "tree").max_deviation >= 1
    il = Interleave(weights)
    assert il.schedule == "quota" and il.max_deviation < 1
    # weights whose period is too long to tabulate stay on the tree, with its bound
    big = Interleave(integer_weights([1e-6, 1, 1, 1, 1]))
    assert big.schedule == "tree" and sum(big.weights) > QUOTA_MAX_PERIOD
    with pytest.raises(ValueError, match="quota schedule tabulates one period of sum.weights. = 4,000,001"):
        Interleave(big.weights, "quota")
    with pytest.raises(ValueError, match="schedule must be 'auto'"):
        Interleave([1, 2], "random")


@settings(max_examples=100, deadline=None)
@given(weights=weights_st, start=st.integers(0, 10**9), length=st.integers(1, 500))
def test_draw_indexes_count_each_source_up(weights: list[float], start: int, length: int) -> None:
    il = Interleave(integer_weights(weights))
    src, draw = il.sources(start, start + length)
    before = il.counts(start)
    for i in range(il.num_sources):
        mine = draw[src == i]
        assert mine.tolist() == list(range(before[i], before[i] + len(mine)))


def test_extreme_weights_and_integer_conversion() -> None:
    assert integer_weights([0.7, 0.3]) == (7, 3)
    assert integer_weights([1e-6, 1]) == (1, 1_000_000)
    assert integer_weights([6, 2, 4]) == (3, 1, 2)
    il = Interleave(integer_weights([1e-6, 1.0]))
    # the rare source's first draw comes near half a period (the Sturmian split is centred)
    assert il.counts(499_999)[0] == 0 and il.counts(500_001)[0] == 1
    assert il.counts(10**13)[0] == round(10**13 / 1_000_001)
    with pytest.raises(ValueError, match="weight 0"):
        integer_weights([1e-15, 1.0])


def _plan(sizes: list[int], weights: list[float], strategy: str = "all_exhausted") -> MixturePlan:
    names = tuple(f"s{i}" for i in range(len(sizes)))
    return MixturePlan(names, tuple(sizes), integer_weights(weights), strategy)


@settings(max_examples=60, deadline=None)
@given(
    data=st.lists(st.tuples(st.integers(1, 60), st.floats(0.01, 1.0)), min_size=1, max_size=5),
    strategy=st.sampled_from(["all_exhausted", "first_exhausted"]),
)
def test_epoch_length_follows_the_stopping_strategy(data: list[tuple[int, float]], strategy: str) -> None:
    sizes, weights = [d[0] for d in data], [d[1] for d in data]
    plan = _plan(sizes, weights, strategy)
    L = plan.epoch_length
    before = plan.interleave.counts(L - 1)
    if strategy == "all_exhausted":
        assert all(d >= n for d, n in zip(plan.draws, sizes))
        assert any(b < n for b, n in zip(before, sizes))  # L is the first such position
        assert max(plan.repeats) <= max(n / w for n, w in zip(sizes, plan.shares)) * max(plan.shares) + 2
    else:
        assert any(d == n for d, n in zip(plan.draws, sizes))
        assert all(d <= n for d, n in zip(plan.draws, sizes))  # nothing repeats in an epoch
        assert all(b < n for b, n in zip(before, sizes))
    assert sum(plan.draws) == L


@settings(max_examples=40, deadline=None)
@given(
    data=st.lists(st.tuples(st.integers(1, 40), st.floats(0.05, 1.0)), min_size=1, max_size=4),
    shuffle=st.sampled_from(["none", "full", "block"]),
    seed=st.integers(0, 2**32),
)
def test_each_source_follows_its_own_order_without_repeats(
    data: list[tuple[int, float]], shuffle: str, seed: int
) -> None:
    sizes, weights = [d[0] for d in data], [d[1] for d in data]
    plan = _plan(sizes, weights)
    block = {"block_size": 4, "buffer_blocks": 2, "run_size": 2} if shuffle == "block" else {}
    per_source: list[list[int]] = [[] for _ in sizes]
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    for epoch in range(3):
        order = MixtureOrder(plan, shuffle=shuffle, seed=seed, epoch=epoch, **block)  # type: ignore[arg-type]
        # evaluated in scattered pieces, as ranks and resumed loaders ask for it
        positions = np.random.default_rng(epoch).permutation(plan.epoch_length)
        got = order(positions)
        idx = np.empty(plan.epoch_length, dtype=np.int64)
        idx[positions] = got
        src = np.searchsorted(offsets, idx, side="right") - 1
        for i in range(len(sizes)):
            per_source[i].extend((idx[src == i] - offsets[i]).tolist())
    for i, n in enumerate(sizes):
        seq = per_source[i]
        for e in range(len(seq) // n):  # every complete source epoch is that epoch's own order
            want = EpochOrder(n, shuffle=shuffle, seed=derive_key(seed, 5, i), epoch=e, **block)  # type: ignore[arg-type]
            assert seq[e * n : (e + 1) * n] == want(np.arange(n)).tolist()
        tail = seq[(len(seq) // n) * n :]
        assert len(set(tail)) == len(tail)


def test_one_sample_source_and_extreme_weights() -> None:
    plan = _plan([1, 50], [1e-6, 1.0], "all_exhausted")
    assert plan.draws[0] == 1 and plan.epoch_length == 500_001
    order = MixtureOrder(plan, shuffle="full", seed=0, epoch=0)
    src_of_all = order(np.arange(0, plan.epoch_length, 997))
    assert np.isin(src_of_all, np.arange(51)).all()
    assert order([plan.epoch_length // 2 - 1, plan.epoch_length // 2]).tolist().count(0) <= 1
    plan = _plan([1, 50], [1.0, 1.0], "all_exhausted")  # the one sample is repeated every other draw
    assert plan.draws == (50, 50) and plan.repeats[0] == 50
    got = MixtureOrder(plan, shuffle="full", seed=3, epoch=0)(np.arange(plan.epoch_length))
    assert sorted(got[got >= 1].tolist()) == list(range(1, 51)) and (got == 0).sum() == 50
    first = _plan([5, 10**6], [1e-6, 1.0], "first_exhausted")
    assert first.draws[1] == 10**6 and first.draws[0] == 1


@pytest.mark.parametrize("strategy", ["nope", "last_exhausted"])
def test_unknown_stopping_strategy(strategy: str) -> None:
    with pytest.raises(MixtureError, match="stopping_strategy"):
        _plan([3], [1.0], strategy)


def test_plan_lines_show_shares_and_repeats() -> None:
    plan = _plan([100, 10, 40], [0.5, 0.25, 0.25])
    text = "\n".join(plan.lines())
    assert "mixture epoch  200 samples" in text
    assert "5.000x" in text and "25.0000%" in text
    assert math.isclose(sum(plan.shares), 1.0)
