"""A loader reads with the gap budget in force where it was built (`guideloom.io.ranges.gap_budget`),
whatever budget the context it is iterated in has, inline and in thread workers."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from guideloom.io.ranges import current_gap_budget, gap_budget

SETTINGS: dict[str, Any] = {"batch_size": 16, "shuffle": True, "seed": 3}
KINDS: dict[str, dict[str, Any]] = {"inline": {}, "threads": {"num_workers": 2, "parallel_method": "thread"}}


def _gets(loader: Any) -> int:
    for _ in loader:
        pass
    return sum(entry["requests"].get("GET", 0) for entry in loader.io_stats().values())


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_loader_reads_with_the_budget_it_was_built_under(
    kind: str, make_loader_for: Callable[..., Callable[..., Any]], write_dataset: Callable[..., Any]
) -> None:
    # in memory: the requests are counted (local reads are not); scattered windows of many shards
    storage = write_dataset("stream", f"memory://gap-budget-{uuid.uuid4().hex}/ds", {}, size=400)
    make = make_loader_for(storage, **SETTINGS)
    default = _gets(make(**KINDS[kind]))
    with gap_budget(None):  # every gap up to the reader's max_gap read through
        through = make(**KINDS[kind])
    with gap_budget(0.0):  # no gap read through at all
        apart = make(**KINDS[kind])
    assert current_gap_budget() is not None  # the blocks set it back
    assert _gets(through) < default < _gets(apart)
    # built under the default, iterated where another budget is in force: its own still holds
    for other in (None, 0.0):
        loader = make(**KINDS[kind])
        with gap_budget(other):
            assert _gets(loader) == default, other
