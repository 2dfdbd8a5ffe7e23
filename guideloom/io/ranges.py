"""Planning range requests: the byte ranges of one batch merged into as few requests as pay.

Pure arithmetic over ``(file, start, end)`` triples; nothing here touches a file. `merge_ranges`
joins ranges of one file that touch or overlap, and ranges that lie close (a gap of at most
``max_gap`` bytes is read through), smallest gaps first while the bytes read through stay within
a budget: a request costs more than a few kilobytes of transfer, so bridging a small gap is
cheaper than a second request, but not at any price.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar, Token

__all__ = [
    "DEFAULT_GAP_BUDGET",
    "DEFAULT_MAX_GAP",
    "RangePlan",
    "current_gap_budget",
    "gap_budget",
    "merge_ranges",
    "reset_gap_budget",
    "set_gap_budget",
]

# Merging ranges that are close, not only touching: a gap of up to DEFAULT_MAX_GAP bytes is read
# through when that saves a request, as long as all gaps read through stay within
# DEFAULT_GAP_BUDGET of the bytes asked for (read amplification <= 1 + budget).
DEFAULT_MAX_GAP = 256 * 2**10  # a few milliseconds of transfer: less than a request costs
DEFAULT_GAP_BUDGET = 0.05

# The budget of reads that do not pass their own: a caller that reads a dense share of whole blocks
# (a rank's share of a block-shuffle window) lifts it for its reads (`gap_budget`).
_GAP_BUDGET: ContextVar[float | None] = ContextVar("guideloom_gap_budget", default=DEFAULT_GAP_BUDGET)


def current_gap_budget() -> float | None:
    """The gap budget of reads in this context (`DEFAULT_GAP_BUDGET` unless `gap_budget` set one)."""
    return _GAP_BUDGET.get()


def set_gap_budget(value: float | None) -> Token[float | None]:
    """Set the gap budget of this context until `reset_gap_budget` with the token returned: what
    `gap_budget` does, without a context manager's frames, for callers that run per read group.

    Args:
        value: The budget, a fraction of the bytes asked for, or None for no budget.
    """
    return _GAP_BUDGET.set(value)


def reset_gap_budget(token: Token[float | None]) -> None:
    """Restore the gap budget a `set_gap_budget` call replaced.

    Args:
        token: What that call returned.
    """
    _GAP_BUDGET.reset(token)


@contextmanager
def gap_budget(value: float | None) -> Iterator[None]:
    """Reads inside the block read through gaps within ``value`` of the bytes asked for (None:
    every gap of at most the reader's ``max_gap``).

    Args:
        value: The budget, a fraction of the bytes asked for, or None for no budget.
    """
    token = _GAP_BUDGET.set(value)
    try:
        yield
    finally:
        _GAP_BUDGET.reset(token)


class RangePlan:
    """What to fetch for a list of asked ranges, and where each asked range lies in it.

    ``requests[j]`` is ``(file, start, end)``, a range actually fetched; ``slices[i]`` is
    ``(j, a, b)``: asked range ``i`` is bytes ``[a, b)`` of what request ``j`` returns.
    """

    def __init__(self) -> None:
        self.requests: list[tuple[str, int, int]] = []
        self.slices: list[tuple[int, int, int]] = []


def merge_ranges(
    rels: Sequence[str],
    starts: Sequence[int],
    ends: Sequence[int],
    max_gap: int,
    gap_budget: float | None = None,
) -> RangePlan:
    """Plan requests: ranges of one file that touch or overlap become one request, and so do
    ranges at most ``max_gap`` bytes apart. With ``gap_budget`` (a fraction), gaps are read
    through smallest first only while their bytes add up to at most ``gap_budget`` times the
    bytes asked for, so the plan fetches at most ``1 + gap_budget`` times what was asked.

    Raises:
        ValueError: A range ends before it starts.
    """
    order = sorted(range(len(rels)), key=lambda i: (rels[i], starts[i]))
    bridged = _bridged_gaps(order, rels, starts, ends, max_gap, gap_budget)
    out = RangePlan()
    out.slices = [(0, 0, 0)] * len(rels)
    current = -1
    for k, i in enumerate(order):
        rel, start, end = rels[i], int(starts[i]), int(ends[i])
        if end < start:
            raise ValueError(f"byte range [{start}, {end}) of {rel} is reversed")
        if current >= 0:
            c_rel, c_start, c_end = out.requests[current]
            if c_rel == rel and (start <= c_end or (k in bridged and start <= c_end + max_gap)):
                out.requests[current] = (rel, c_start, max(c_end, end))
                out.slices[i] = (current, start - c_start, end - c_start)
                continue
        out.requests.append((rel, start, end))
        current = len(out.requests) - 1
        out.slices[i] = (current, 0, end - start)
    return out


def _bridged_gaps(
    order: list[int],
    rels: Sequence[str],
    starts: Sequence[int],
    ends: Sequence[int],
    max_gap: int,
    gap_budget: float | None,
) -> set[int]:
    """Positions ``k`` in ``order`` whose range may be joined to the request before it across a
    gap: every gap of at most ``max_gap`` bytes without a budget, else the smallest such gaps
    while their sum stays within ``gap_budget`` of the bytes asked for."""
    if max_gap <= 0:
        return set()
    gaps: list[tuple[int, int]] = []  # (gap bytes, position in order)
    reach = -1  # end of the bytes covered so far in the current file
    asked = 0
    for k, i in enumerate(order):
        start, end = int(starts[i]), int(ends[i])
        asked += max(0, end - start)
        if k and rels[i] == rels[order[k - 1]]:
            gap = start - reach
            if 0 < gap <= max_gap:
                gaps.append((gap, k))
            reach = max(reach, end)
        else:
            reach = end
    if gap_budget is None:
        return {k for _, k in gaps}
    allowed = gap_budget * asked
    chosen: set[int] = set()
    spent = 0
    for gap, k in sorted(gaps):
        if spent + gap > allowed:
            break
        spent += gap
        chosen.add(k)
    return chosen
