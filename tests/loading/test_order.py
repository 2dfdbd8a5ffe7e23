"""Epoch orders: bijections on [0, N), computable at any position, deterministic per (seed, epoch)."""

from __future__ import annotations

import numpy as np
import pytest

from guideloom.loading.order import EpochOrder, FeistelPermutation

SIZES = [1, 2, 3, 5, 17, 64, 100, 1000, 4097]


@pytest.mark.parametrize("n", SIZES)
def test_feistel_is_a_permutation_and_inverts(n: int) -> None:
    perm = FeistelPermutation(n, key=12345)
    image = perm(np.arange(n))
    assert sorted(image.tolist()) == list(range(n))
    assert perm.inverse(image).tolist() == list(range(n))


def test_feistel_key_changes_the_permutation() -> None:
    a = FeistelPermutation(1000, key=1)(np.arange(1000))
    b = FeistelPermutation(1000, key=2)(np.arange(1000))
    assert (a != b).mean() > 0.9


def test_feistel_handles_huge_domains_at_any_position() -> None:
    n = 10**10
    perm = FeistelPermutation(n, key=7)
    positions = np.array([0, 1, n // 2, n - 2, n - 1])
    values = perm(positions)
    assert ((values >= 0) & (values < n)).all()
    assert perm.inverse(values).tolist() == positions.tolist()


def test_feistel_rejects_positions_outside_the_domain() -> None:
    with pytest.raises(IndexError):
        FeistelPermutation(10, key=0)(np.array([10]))


@pytest.mark.parametrize("mode", ["none", "full", "block"])
@pytest.mark.parametrize("n", SIZES)
def test_every_order_is_a_permutation(mode: str, n: int) -> None:
    order = EpochOrder(n, shuffle=mode, seed=3, epoch=1, block_size=7, buffer_blocks=3)  # type: ignore[arg-type]
    assert sorted(order(np.arange(n)).tolist()) == list(range(n))


@pytest.mark.parametrize("mode", ["full", "block"])
def test_order_at_any_position_matches_the_whole(mode: str) -> None:
    n = 999
    order = EpochOrder(n, shuffle=mode, seed=5, epoch=2, block_size=16, buffer_blocks=4)  # type: ignore[arg-type]
    whole = order(np.arange(n))
    rng = np.random.default_rng(0)
    picks = rng.integers(0, n, size=50)
    assert order(picks).tolist() == whole[picks].tolist()
    assert order(range(400, 420)).tolist() == whole[400:420].tolist()


def test_sequential_order() -> None:
    assert EpochOrder(10, shuffle="none", seed=1, epoch=4)(range(10)).tolist() == list(range(10))


def test_orders_depend_on_seed_and_epoch_only() -> None:
    def whole(seed: int, epoch: int) -> list[int]:
        return EpochOrder(500, shuffle="full", seed=seed, epoch=epoch)(np.arange(500)).tolist()

    assert whole(0, 0) == whole(0, 0)
    assert whole(0, 0) != whole(0, 1)
    assert whole(0, 0) != whole(1, 0)
    assert whole(0, 0) != list(range(500))


def test_block_order_keeps_locality() -> None:
    n, k, g = 10_000, 100, 2
    order = EpochOrder(n, shuffle="block", seed=0, epoch=0, block_size=k, buffer_blocks=g)
    idx = order(np.arange(n))
    # each buffer of g*k positions draws from exactly g blocks (the partial block aside)
    for start in range(0, n, g * k):
        blocks = set((idx[start : start + g * k] // k).tolist())
        assert len(blocks) == g
    # blocks come in a random order, not sequentially
    first_blocks = [int(idx[s] // k) for s in range(0, n, g * k)]
    assert first_blocks != sorted(first_blocks)


def test_block_order_with_partial_last_block_moves_it() -> None:
    n, k = 1003, 10  # a 3-sample last block
    seen_slots = set()
    for epoch in range(20):
        idx = EpochOrder(n, shuffle="block", seed=0, epoch=epoch, block_size=k, buffer_blocks=2)(np.arange(n))
        assert sorted(idx.tolist()) == list(range(n))
        seen_slots.add(int(np.flatnonzero(idx >= 1000)[0]) // (2 * k))
    assert len(seen_slots) > 1  # the tail block is not always at the same place


def test_order_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        EpochOrder(0, shuffle="full", seed=0, epoch=0)
    with pytest.raises(ValueError):
        EpochOrder(10, shuffle="sometimes", seed=0, epoch=0)  # type: ignore[arg-type]
    with pytest.raises(IndexError):
        EpochOrder(10, shuffle="none", seed=0, epoch=0)([10])
