"""from_storage is three pieces a user can put together: the view (its own transforms), the order
(`BatchOrder`) and how it reads (`ReadSettings`). Built either way, the loader gives the same
batches, and its states move between the two."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from guideloom import BatchOrder, ReadSettings, StatefulDataLoader
from guideloom.loading.boundaries import BoundaryView
from guideloom.storage import open_view
from guideloom.testing import batch_keys

SEQUENCE_LENGTH = 8  # tests/loading/conftest.py's window length ('from conftest import' is ambiguous here)


@pytest.fixture
def stream(tmp_path: Any, write_dataset: Callable[..., Any]) -> Any:
    return write_dataset("stream", str(tmp_path / "stream"), {}, size=60)


def _keys(loader: Any, n: int | None = None) -> list[Any]:
    out = []
    for batch in loader:  # with boundaries a batch also holds cu_seqlens (1-D): compare the rows
        out.append(batch_keys({k: batch[k] for k in ("tokens", "loss_mask", "labels") if k in batch}))
        if n is not None and len(out) == n:
            break
    return out


def test_a_composed_loader_is_from_storage_s(stream: Any) -> None:
    options = {"skip": 4, "take": 40, "boundaries": "records", "labels": True}
    made = StatefulDataLoader.from_storage(
        stream, sequence_length=SEQUENCE_LENGTH, batch_size=4, shuffle=True, seed=3, read_ahead=1, **options
    )
    view = BoundaryView(open_view(stream, SEQUENCE_LENGTH).skip(4).take(40), "records", labels=True)
    order = BatchOrder(view, 4, shuffle=True, seed=3)
    composed = StatefulDataLoader(view, batch_sampler=order, read=ReadSettings(read_ahead=1), num_workers=2)
    assert composed.batch_sampler is order and len(composed) == len(made) == 10
    assert _keys(composed) == _keys(made)  # epoch 0
    # mid-epoch 1: a state of one resumes in the other, both ways
    first = _keys(made, 3)
    state = made.state_dict()
    composed.load_state_dict(state)
    rest = _keys(composed)
    assert len(first) + len(rest) == 10
    again = StatefulDataLoader.from_storage(
        stream, sequence_length=SEQUENCE_LENGTH, batch_size=4, shuffle=True, seed=3, **options
    )
    again.load_state_dict(state)
    assert _keys(again) == rest
    # the same position (the "metrics" part holds each loader's own counters: wait times differ)
    assert composed.state_dict()["guideloom_loader"] == again.state_dict()["guideloom_loader"]
    assert composed.state_dict()["guideloom_loader"]["epoch"] == 1


def test_read_settings_are_the_loose_keywords(stream: Any, tmp_path: Any) -> None:
    common = {"sequence_length": SEQUENCE_LENGTH, "batch_size": 4, "shuffle": "block", "seed": 2}
    loose = StatefulDataLoader.from_storage(
        stream.url, read_ahead_bytes=1024, cache_dir=str(tmp_path / "c"), **common
    )
    read = ReadSettings(read_ahead_bytes=1024, cache_dir=str(tmp_path / "c"))
    packed = StatefulDataLoader.from_storage(stream.url, read=read, **common)
    assert loose._grouping == packed._grouping and _keys(loose) == _keys(packed)
    assert any(store.startswith("cache ") for store in packed.io_stats())  # the cache is on
    assert repr(read).startswith("ReadSettings(read_ahead_bytes=1024, cache_dir=")
    reopened = open_view(read.open(stream.url), SEQUENCE_LENGTH)
    assert reopened.fingerprint == open_view(stream, SEQUENCE_LENGTH).fingerprint


def test_pieces_refuse_what_they_do_not_take(stream: Any, tmp_path: Any) -> None:
    common = {"sequence_length": SEQUENCE_LENGTH, "batch_size": 4}
    with pytest.raises(TypeError, match=r"read_ahead= is given both loose and in read=ReadSettings"):
        StatefulDataLoader.from_storage(stream, read=ReadSettings(read_ahead=1), read_ahead=2, **common)
    with pytest.raises(TypeError, match=r"read= takes a guideloom.ReadSettings, got dict"):
        StatefulDataLoader.from_storage(stream, read={"read_ahead": 1}, **common)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"read_ahead \(batches\) and read_ahead_bytes both given"):
        ReadSettings(read_ahead=1, read_ahead_bytes=10)
    with pytest.raises(TypeError, match=r"cache_dir= and cache_bytes= are for a storage given as a URL"):
        StatefulDataLoader.from_storage(stream, read=ReadSettings(cache_dir=str(tmp_path)), **common)
    view = open_view(stream, SEQUENCE_LENGTH)
    with pytest.raises(TypeError, match=r"a view reads through the cache its storage was opened with"):
        StatefulDataLoader(view, read=ReadSettings(cache_dir=str(tmp_path)))
    order = BatchOrder(view, 4, shuffle="block")  # the block shuffle's default sizes
    with pytest.raises(TypeError, match=r"^batch_size=, seed= given with batch_sampler=BatchOrder"):
        StatefulDataLoader(view, batch_size=4, batch_sampler=order, seed=1)
    # a BatchOrder of another view is a batch sampler like any other: torchdata's loader
    other = StatefulDataLoader(open_view(stream, SEQUENCE_LENGTH), batch_sampler=order)
    assert not other._guideloom
    with pytest.raises(ValueError, match=r"world_size=10000 is larger than the \d+ windows"):
        BatchOrder(view, 1, world_size=10_000, rank=0)
