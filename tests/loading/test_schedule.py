"""Epoch schedules: equal batch counts per rank, disjoint ranks, bounded remainder, elastic rest."""

from __future__ import annotations

import itertools

import pytest

from guideloom.loading.schedule import EpochSchedule


def taken(s: EpochSchedule) -> list[list[int]]:
    """Positions per rank, in order."""
    return [
        [p for step in range(s.num_steps) for p in range(*s.batch_range(step, r))]
        for r in range(s.world_size)
    ]


@pytest.mark.parametrize(
    "n,b,w,drop_last",
    list(itertools.product([1, 7, 16, 33, 100], [1, 3, 4], [1, 2, 3, 8], [False, True])),
)
def test_ranks_are_equal_disjoint_and_cover_all_but_a_bounded_rest(
    n: int, b: int, w: int, drop_last: bool
) -> None:
    s = EpochSchedule(n, b, w, drop_last)
    per_rank = taken(s)
    assert len({len(x) for x in per_rank}) == 1  # every rank the same number of samples
    flat = sorted(p for x in per_rank for p in x)
    assert flat == list(range(len(flat)))  # disjoint, and a prefix of the epoch
    assert len(flat) == s.consumed
    rest = n - len(flat)
    assert rest < (w * b if drop_last else w)
    assert s.position_after(s.num_steps) == n


def test_positions_are_step_major_rank_minor() -> None:
    s = EpochSchedule(20, 2, 3, drop_last=False)
    assert [s.batch_range(0, r) for r in range(3)] == [(0, 2), (2, 4), (4, 6)]
    assert s.num_steps == 3  # 2 of the 20 positions remain for 3 ranks: left out
    s = EpochSchedule(22, 2, 3, drop_last=False)
    assert s.num_steps == 4 and [s.batch_range(3, r) for r in range(3)] == [(18, 19), (19, 20), (20, 21)]


@pytest.mark.parametrize("w_old,w_new", [(4, 2), (4, 8), (2, 3), (1, 5)])
def test_elastic_rest_covers_every_remaining_position_once(w_old: int, w_new: int) -> None:
    n, b = 203, 3
    old = EpochSchedule(n, b, w_old, drop_last=False)
    for steps in range(old.num_steps + 1):
        position = old.position_after(steps)
        new = EpochSchedule(n, b, w_new, drop_last=False, start=position)
        flat = sorted(p for x in taken(new) for p in x)
        assert flat == list(range(position, position + len(flat)))
        assert n - position - len(flat) < w_new


def test_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        EpochSchedule(10, 0, 1, False)
    with pytest.raises(ValueError):
        EpochSchedule(10, 1, 1, False, start=11)
