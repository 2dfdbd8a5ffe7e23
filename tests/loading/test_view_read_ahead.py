"""A plain loader rebuilt from a view and its `BatchOrder` reads ahead
(`guideloom.loading.read_ahead`): each worker fetches the batches torch will send it next with one
read, and the guess never changes a batch (a wrong one costs a read)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from torchdata.stateful_dataloader import StatefulDataLoader as TorchdataLoader

from guideloom import BatchOrder
from guideloom.io.stats import io_stats
from guideloom.storage import open_view

SEQUENCE_LENGTH = 8  # tests/loading/conftest.py's window length ('from conftest import' is ambiguous)
WINDOWS, BATCH = 48, 4  # 12 batches an epoch


@pytest.fixture
def stream(tmp_path: Any, write_dataset: Callable[..., Any]) -> Any:
    return write_dataset("stream", str(tmp_path / "stream"), {}, size=WINDOWS)


def _plain(storage: Any, shuffle: Any, workers: int, read_ahead: bool = True, **kwargs: Any) -> Any:
    view: Any = open_view(storage, SEQUENCE_LENGTH)
    order = BatchOrder(view, BATCH, shuffle=shuffle, seed=3)
    if not read_ahead:
        view._ahead = order._ahead = None
    else:
        assert view._ahead is order._ahead is not None
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*set_vital.*")
        return TorchdataLoader(view, batch_sampler=order, num_workers=workers, **kwargs)


def _windows(batch: Any) -> list[int]:
    """The window numbers of a batch: the test stream's tokens count up from 0 (uint16)."""
    return (batch["tokens"][:, 0].numpy().astype(np.int64) // SEQUENCE_LENGTH).tolist()


def _order(storage: Any, shuffle: Any, epochs: int) -> list[list[int]]:
    view = open_view(storage, SEQUENCE_LENGTH)
    order = BatchOrder(view, BATCH, shuffle=shuffle, seed=3)
    return [list(b) for _ in range(epochs) for b in order]


@pytest.mark.parametrize("shuffle", [True, "block"])
@pytest.mark.parametrize("workers", [0, 2])
def test_a_plain_loader_reads_the_order_s_batches_with_read_ahead(
    stream: Any, shuffle: Any, workers: int
) -> None:
    # persistent workers keep the pass they were started with: the second epoch's guess is theirs
    options = {"persistent_workers": True} if workers else {}
    loader = _plain(stream, shuffle, workers, **options)
    got = [_windows(b) for _ in range(2) for b in loader]
    assert got == _order(stream, shuffle, 2)
    tokens = [b["tokens"] for b in _plain(stream, shuffle, workers, read_ahead=False)]
    again = [b["tokens"] for b in _plain(stream, shuffle, workers)]
    assert all(np.array_equal(a, b) for a, b in zip(tokens, again, strict=True))


def test_a_wrong_guess_costs_a_read_never_a_batch(stream: Any) -> None:
    loader = _plain(stream, True, 0)
    view = loader.dataset
    it = iter(loader)
    for _ in range(6):  # the read-ahead has found its place and read a group ahead
        next(it)
    assert view._ahead._cache
    order = _order(stream, True, 1)
    with view._ahead.off():
        want = {i: view.__getitems__(order[i]) for i in (1, 9, 7)}
    # batches it did not foresee (one already served, one out of turn), and a batch of any indexes
    for i in (1, 9, 7):
        got = view.__getitems__(order[i])
        assert all(np.array_equal(a["tokens"], b["tokens"]) for a, b in zip(got, want[i], strict=True))
    odd = view.__getitems__([5, 0, 5])
    assert [int(s["tokens"][0]) // SEQUENCE_LENGTH for s in odd] == [5, 0, 5]
    assert [_windows(b) for b in it] == order[6:]  # and the pass goes on, exactly


def test_a_resumed_plain_loader_with_read_ahead_is_exact(stream: Any) -> None:
    whole = [_windows(b) for b in _plain(stream, "block", 2)]
    first = _plain(stream, "block", 2)
    got = []
    for i, batch in enumerate(first):
        got.append(_windows(batch))
        if i == 4:
            state = first.state_dict()
            break
    resumed = _plain(stream, "block", 2)
    resumed.load_state_dict(state)
    got += [_windows(b) for b in resumed]
    assert got == whole


def test_read_ahead_sends_fewer_requests_to_object_storage(
    s3_bucket: str, s3_options: dict[str, Any], write_dataset: Callable[..., Any]
) -> None:
    storage = write_dataset("stream", f"s3://{s3_bucket}/stream", s3_options, size=WINDOWS)

    def gets(read_ahead: bool) -> tuple[int, list[list[int]]]:
        loader = _plain(storage, True, 0, read_ahead=read_ahead)
        before = io_stats()
        batches = [_windows(b) for b in loader]
        after = io_stats()
        count = sum(
            e["requests"].get("GET", 0) - before.get(store, {}).get("requests", {}).get("GET", 0)
            for store, e in after.items()
        )
        return count, batches

    ahead, ahead_batches = gets(True)
    alone, alone_batches = gets(False)
    assert ahead_batches == alone_batches == _order(storage, True, 1)
    assert ahead < alone, (ahead, alone)
