"""A loader rebuilt from ``loader.dataset`` + ``loader.batch_sampler`` (what accelerate, Lightning
and torchdata users do) reads GuideLoom's batches and, when stateful, resumes exactly."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader as TorchdataLoader

from guideloom import BatchOrder, StatefulDataLoader
from guideloom.errors import ResumeStateError
from guideloom.testing import batch_keys

SEQUENCE_LENGTH = 8  # tests/loading/conftest.py's window length ('from conftest import' is ambiguous here)
WINDOWS, BATCH = 48, 4  # 12 batches an epoch


@pytest.fixture
def stream(tmp_path: Any, write_dataset: Callable[..., Any]) -> Any:
    return write_dataset("stream", str(tmp_path / "stream"), {}, size=WINDOWS)


def _loader(stream: Any, **kwargs: Any) -> Any:
    kwargs = {"sequence_length": SEQUENCE_LENGTH, "batch_size": BATCH, "shuffle": True, "seed": 1, **kwargs}
    return StatefulDataLoader.from_storage(stream, **kwargs)


def _keys(batches: Any) -> list[Any]:
    return [batch_keys(b) for b in batches]


def _rebuilt(loader: Any, cls: Any = TorchdataLoader, num_workers: int = 0, **kwargs: Any) -> Any:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*set_vital.*")
        return cls(loader.dataset, batch_sampler=loader.batch_sampler, collate_fn=loader.collate_fn,
                   num_workers=num_workers, **kwargs)  # fmt: skip


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_rebuilt_loader_reads_guideloom_s_epochs(stream: Any, num_workers: int) -> None:
    own = _loader(stream)
    want = [_keys(own), _keys(own)]
    assert isinstance(own.batch_sampler, BatchOrder) and len(own) == len(own.batch_sampler) == 12
    for cls in (DataLoader, TorchdataLoader):
        rebuilt = _rebuilt(_loader(stream), cls, num_workers)
        assert [_keys(rebuilt), _keys(rebuilt)] == want
        assert len(rebuilt) == 12


@pytest.mark.parametrize("stop", [5, 12])
@pytest.mark.parametrize("num_workers", [(0, 0), (2, 2), (2, 0)])
def test_a_rebuilt_torchdata_loader_resumes_exactly(
    stream: Any, stop: int, num_workers: tuple[int, int]
) -> None:
    own = _loader(stream)
    whole = [k for _ in range(3) for k in _keys(own)]  # three epochs, uninterrupted
    first = _rebuilt(_loader(stream), num_workers=num_workers[0])
    got = []
    for i, batch in enumerate(first):
        got.append(batch_keys(batch))
        if i + 1 == stop:
            state = first.state_dict()
            break
    resumed = _rebuilt(_loader(stream), num_workers=num_workers[1])
    if num_workers[0] == num_workers[1]:
        resumed.load_state_dict(state)  # torchdata's whole state: same num_workers only (torchdata's rule)
    else:  # the order's state, which torchdata saves inside its own, resumes into any num_workers
        resumed.batch_sampler.load_state_dict(_order_state(state))
    assert len(resumed) == 12  # always the whole epoch
    passes = [_keys(resumed) for _ in range(3)]
    assert all(len(p) > 0 for p in passes)  # a state at the epoch's last batch: never an empty pass
    got += [k for p in passes for k in p]
    assert got[: len(whole)] == whole


def test_a_rebuilt_loader_with_persistent_workers_reads_and_resumes_the_same_epochs(stream: Any) -> None:
    # (the workers live across epochs: each one's read-ahead follows the order into the next)
    own = _loader(stream)
    whole = [k for _ in range(3) for k in _keys(own)]
    kept = _rebuilt(_loader(stream), num_workers=2, persistent_workers=True)
    assert [k for _ in range(3) for k in _keys(kept)] == whole
    first = _rebuilt(_loader(stream), num_workers=2, persistent_workers=True)
    got = []
    for i, batch in enumerate(first):
        got.append(batch_keys(batch))
        if i + 1 == 5:
            state = first.state_dict()
            break
    resumed = _rebuilt(_loader(stream), num_workers=2, persistent_workers=True)
    resumed.load_state_dict(state)
    got += [k for _ in range(3) for k in _keys(resumed)]
    assert got[: len(whole)] == whole


def test_len_is_the_whole_epoch_after_a_resume(stream: Any) -> None:
    loader = _loader(stream)
    it = iter(loader)
    for _ in range(5):
        next(it)
    resumed = _loader(stream)
    resumed.load_state_dict(loader.state_dict())
    assert len(resumed) == 12
    assert len(list(resumed)) == 7  # the rest of the epoch
    assert len(list(resumed)) == 12


def test_the_batch_sampler_refuses_a_state_of_another_order(stream: Any) -> None:
    other = _loader(stream, seed=2)
    with pytest.raises(ResumeStateError, match="seed"):
        _loader(stream).batch_sampler.load_state_dict(other.state_dict())


def test_set_epoch_starts_that_epoch_and_keeps_a_resumed_position(stream: Any) -> None:
    own = _loader(stream)
    epochs = [_keys(own) for _ in range(3)]
    order = _loader(stream).batch_sampler
    order.set_epoch(2)
    assert _keys(_rebuilt_from(stream, order)) == epochs[2]
    loader = _loader(stream)
    it = iter(loader)
    next(it)
    resumed = _loader(stream)
    resumed.batch_sampler.load_state_dict(loader.state_dict())
    resumed.batch_sampler.set_epoch(0)  # what Lightning calls before the resumed epoch
    assert _keys(_rebuilt(resumed)) == epochs[0][1:]


def _rebuilt_from(stream: Any, order: Any) -> Any:
    loader = _loader(stream)
    object.__setattr__(loader, "batch_sampler", order)
    return _rebuilt(loader)


def _order_state(state: dict[str, Any]) -> Any:
    """The batch sampler's state inside torchdata's state (single-process or worker processes)."""
    if "_index_sampler_state" in state:
        return state["_index_sampler_state"]
    return state["_snapshot"]["_main_snapshot"]["_index_sampler_state"]
