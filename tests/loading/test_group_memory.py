"""With ``num_workers=0`` the loader holds one group read at a time: when it reads the next group,
nothing of the previous one is alive in the loader (only what the training loop keeps).

Holding the previous group across the next read keeps two groups alive at once, so the heap
grows and shrinks by a group every time: glibc hands the top of the heap back to the system and
faults every page of the next group in again (with ``boundaries="records"`` that cost 60 % more
time per batch; `make bench` rows ``local``, ``documents`` and ``boundaries`` at ``workers=0``).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from guideloom import StatefulDataLoader
from guideloom.loading import fetch


def _owners(value: Any, found: list[np.ndarray]) -> None:
    """The arrays that own the memory of every array in ``value`` (dicts, lists, tuples)."""
    if isinstance(value, np.ndarray):
        while isinstance(value.base, np.ndarray):
            value = value.base
        found.append(value)
    elif isinstance(value, dict):
        for item in value.values():
            _owners(item, found)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _owners(item, found)
    whole = getattr(value, "whole", None)  # a column group's own arrays (`metrics.Parts`)
    if whole is not None:
        _owners(whole, found)


@pytest.mark.parametrize(
    ("layout", "settings"),
    [
        ("stream", {}),
        ("stream", {"boundaries": "records", "labels": True}),
        ("stream_with_meta", {}),
    ],  # (documents are records of Python objects, which cannot be watched by weak reference)
    ids=["stream", "stream-records", "stream_with_meta"],
)
def test_the_previous_group_is_let_go_before_the_next_is_read(
    layout: str,
    settings: dict[str, Any],
    tmp_path: Any,
    write_dataset: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    storage = write_dataset(layout, str(tmp_path / "ds"), {}, size=48)
    read_group = fetch.BatchSource.read_group
    held: list[weakref.ref[np.ndarray]] = []
    reads = 0

    def checked(self: Any, batches: list[list[int]]) -> list[Any]:
        nonlocal reads
        alive = [ref for ref in held if ref() is not None]
        assert not alive, f"{len(alive)} arrays of the previous group are alive while the next is read"
        parts = read_group(self, batches)
        owners: list[np.ndarray] = []
        _owners(parts, owners)
        held[:] = [weakref.ref(a) for a in owners]
        reads += 1
        return parts

    monkeypatch.setattr(fetch.BatchSource, "read_group", checked)
    loader = StatefulDataLoader.from_storage(
        storage, sequence_length=16, batch_size=4, shuffle=True, seed=5, read_ahead=1, **settings
    )
    batches = iter(loader)
    for _ in range(len(loader)):
        next(batches)  # the loop keeps nothing of a batch
    assert reads >= 3 and held, (reads, held)
