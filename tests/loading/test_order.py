"""Epoch orders: bijections on [0, N), computable at any position, deterministic per (seed, epoch)."""

from __future__ import annotations

import numpy as np
import pytest

from guideloom.loading.order import EpochOrder, FeistelPermutation

SIZES = [1, 2, 3, 5, 17, 64, 100, 1000, 4097]
PINNED_V1_PREFIX = [343, 980, 344, 37, 984, 341, 34, 986]  # block order of version-1 states


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


@pytest.mark.parametrize("n", [2, 5, 33, 1000, 9570, 4097, 10**10])
def test_feistel_few_positions_map_as_in_a_large_call(n: int) -> None:
    """Up to 20 positions are walked one by one with Python integers, more with NumPy arrays:
    both must be the same permutation, forwards and backwards (a resume's first batch takes
    the first way, the rest of its epoch the second)."""
    perm = FeistelPermutation(n, key=98765)
    rng = np.random.default_rng(n % 1000)
    positions = rng.integers(0, n, size=300)
    images = perm(positions)  # one array call
    assert [int(perm(positions[i : i + 1])[0]) for i in range(0, 300, 7)] == images[::7].tolist()
    for size in (1, 8, 20, 21):
        assert perm(positions[:size]).tolist() == images[:size].tolist()
        assert perm.inverse(images[:size]).tolist() == positions[:size].tolist()
    assert perm.inverse(images).tolist() == positions.tolist()
    assert perm(positions[:4].reshape(2, 2)).shape == (2, 2)


def test_feistel_rejects_positions_outside_the_domain() -> None:
    with pytest.raises(IndexError):
        FeistelPermutation(10, key=0)(np.array([10]))
    with pytest.raises(IndexError):
        FeistelPermutation(10, key=0).inverse(np.array([-1]))
    with pytest.raises(IndexError):
        FeistelPermutation(10, key=0)(np.array([3] * 40 + [10]))


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


# -- runs (block mode with run_size > 1) ------------------------------------------------------
RUN_CASES = [  # (n, block_size, buffer_blocks, run_size)
    (1, 8, 4, 8),  # fewer samples than one run
    (7, 8, 4, 8),
    (8, 8, 1, 8),  # exactly one run
    (17, 8, 2, 8),  # two runs and one leftover sample
    (100, 16, 3, 4),
    (1000, 64, 4, 8),  # partial last block, leftover samples
    (1003, 24, 2, 8),
    (4097, 64, 4, 8),
    (4096, 64, 4, 8),  # nothing partial
    (999, 9, 5, 3),
    (500, 8, 1, 8),  # one block per buffer: runs keep block order
    (530, 10, 7, 5),
]


@pytest.mark.parametrize("n,k,g,run", RUN_CASES)
@pytest.mark.parametrize("epoch", [0, 1, 5])
def test_run_order_is_a_permutation(n: int, k: int, g: int, run: int, epoch: int) -> None:
    order = EpochOrder(n, shuffle="block", seed=11, epoch=epoch, block_size=k, buffer_blocks=g, run_size=run)
    assert sorted(order(np.arange(n)).tolist()) == list(range(n))


@pytest.mark.parametrize("n,k,g,run", RUN_CASES)
def test_run_order_at_any_position_matches_the_whole(n: int, k: int, g: int, run: int) -> None:
    order = EpochOrder(n, shuffle="block", seed=2, epoch=3, block_size=k, buffer_blocks=g, run_size=run)
    whole = order(np.arange(n))
    picks = np.random.default_rng(0).integers(0, n, size=50)
    assert order(picks).tolist() == whole[picks].tolist()
    for lo in range(0, n, 13):  # batches of any size and alignment
        assert order(range(lo, min(lo + 13, n))).tolist() == whole[lo : lo + 13].tolist()


@pytest.mark.parametrize("n,k,g,run", RUN_CASES)
def test_aligned_runs_are_consecutive_samples(n: int, k: int, g: int, run: int) -> None:
    idx = EpochOrder(n, shuffle="block", seed=0, epoch=1, block_size=k, buffer_blocks=g, run_size=run)(
        np.arange(n)
    )
    whole_runs = n // run
    for start in range(0, whole_runs * run, run):
        steps = np.diff(idx[start : start + run]) % n  # consecutive, or wrapping past the end once
        assert (steps == 1).all(), (start, idx[start : start + run])
    # so a batch of 16 aligned positions is at most 16 / run stretches (+1 where one wraps)
    if run <= 16 and 16 % run == 0:
        for start in range(0, whole_runs * run - 16 + 1, 16):
            stretches = 1 + int((np.diff(idx[start : start + 16]) != 1).sum())
            assert stretches <= 16 // run + 1


def test_run_order_keeps_block_locality_and_shuffles_runs() -> None:
    n, k, g, run = 64_000, 64, 4, 8
    order = EpochOrder(n, shuffle="block", seed=0, epoch=0, block_size=k, buffer_blocks=g, run_size=run)
    idx = order(np.arange(n))
    offset = order._rotate  # sample indexes are rotated per epoch; undo it to see the blocks
    blocks_of = ((idx - offset) % n) // k
    for start in range(0, n, g * k):  # each buffer draws from exactly g blocks
        assert len(set(blocks_of[start : start + g * k].tolist())) == g
    runs = ((idx[::run] - offset) % n) // run  # the run at each aligned position
    assert sorted(runs.tolist()) == list(range(n // run))
    assert (np.diff(runs) != 1).mean() > 0.5  # runs are shuffled inside buffers, not in order


def test_run_order_moves_the_leftover_samples_every_epoch() -> None:
    n, run = 1003, 8  # 3 samples are no whole run: they take the last positions of the epoch
    tails = set()
    for epoch in range(10):
        idx = EpochOrder(
            n, shuffle="block", seed=0, epoch=epoch, block_size=16, buffer_blocks=2, run_size=run
        )(np.arange(n))
        assert sorted(idx.tolist()) == list(range(n))
        tails.add(tuple(idx[-3:].tolist()))
    assert len(tails) > 5  # drop_last does not always drop the same samples


def test_run_size_one_is_the_version_1_block_order() -> None:
    n, k, g = 1003, 10, 3
    a = EpochOrder(n, shuffle="block", seed=4, epoch=2, block_size=k, buffer_blocks=g)(np.arange(n))
    b = EpochOrder(n, shuffle="block", seed=4, epoch=2, block_size=k, buffer_blocks=g, run_size=1)(
        np.arange(n)
    )
    assert a.tolist() == b.tolist()
    # a pinned prefix: version-1 loader states must keep resuming into the same order
    assert a[:8].tolist() == PINNED_V1_PREFIX


def test_run_size_must_divide_the_block_size() -> None:
    with pytest.raises(ValueError, match="multiple of run_size"):
        EpochOrder(100, shuffle="block", seed=0, epoch=0, block_size=12, buffer_blocks=2, run_size=8)
    with pytest.raises(ValueError):
        EpochOrder(100, shuffle="block", seed=0, epoch=0, block_size=8, buffer_blocks=2, run_size=0)
