"""A true subclass: given what torchdata's StatefulDataLoader takes, GuideLoom's loader is torchdata's.

(torchdata's own test file runs against it in tests/loading/torchdata.) GuideLoom's own path is
from_storage and views; its own arguments with a plain torch dataset are a TypeError naming them.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch.utils.data import Dataset, IterableDataset, SequentialSampler
from torchdata.stateful_dataloader import StatefulDataLoader as TorchdataLoader

from guideloom import Mixture, StatefulDataLoader, StreamDataset
from guideloom.testing import batch_keys

SEQUENCE_LENGTH = 8  # tests/loading/conftest.py writes windows of this length


class Squares(Dataset):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return 10

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor([i, i * i])


class Counting(IterableDataset):  # type: ignore[type-arg]
    """An iterable dataset with its own state (torchdata saves it through state_dict)."""

    def __init__(self) -> None:
        self.i = 0

    def __iter__(self) -> Iterator[int]:
        while self.i < 12:
            self.i += 1
            yield self.i - 1

    def state_dict(self) -> dict[str, int]:
        return {"i": self.i}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.i = state["i"]


@pytest.fixture
def stream(tmp_path: Any, write_dataset: Callable[..., Any]) -> Any:
    return write_dataset("stream", str(tmp_path / "stream"), {}, size=32)


def _torchdata(*args: Any, **kwargs: Any) -> Any:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*set_vital.*is deprecated", category=UserWarning)
        return TorchdataLoader(*args, **kwargs)


def _run(loader: Any, steps: int) -> tuple[list[Any], dict[str, Any]]:
    """The first ``steps`` batches of a pass, and the state after them."""
    it = iter(loader)
    head = [next(it) for _ in range(steps)]
    return head, loader.state_dict()


def _same_batches(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_map_dataset_behaves_as_torchdata(workers: int) -> None:
    def make(cls: Any) -> Any:
        if cls is StatefulDataLoader:
            return cls(Squares(), 3, True, num_workers=workers, generator=torch.Generator().manual_seed(4))
        return _torchdata(Squares(), 3, True, num_workers=workers, generator=torch.Generator().manual_seed(4))

    ours, theirs = make(StatefulDataLoader), make(TorchdataLoader)
    assert type(ours) is StatefulDataLoader and isinstance(ours, TorchdataLoader)
    assert len(ours) == len(theirs) == 4 and ours.batch_size == 3 and ours.num_workers == workers
    (head_a, state_a), (head_b, state_b) = _run(ours, 2), _run(theirs, 2)
    assert _same_batches(head_a, head_b)
    assert state_a.keys() == state_b.keys()
    resumed_a, resumed_b = make(StatefulDataLoader), make(TorchdataLoader)
    resumed_a.load_state_dict(state_a)
    resumed_b.load_state_dict(state_b)
    rest_a, rest_b = list(resumed_a), list(resumed_b)
    assert len(rest_a) == 2 and _same_batches(rest_a, rest_b)
    assert _same_batches(list(resumed_a), list(resumed_b))  # and the next epoch


def test_an_iterable_dataset_with_state_behaves_as_torchdata() -> None:
    ours = StatefulDataLoader(Counting(), batch_size=5)
    theirs = _torchdata(Counting(), batch_size=5)
    (head_a, state_a), (head_b, state_b) = _run(ours, 1), _run(theirs, 1)
    assert _same_batches(head_a, head_b) and state_a == state_b
    resumed = StatefulDataLoader(Counting(), batch_size=5)
    resumed.load_state_dict(state_a)
    assert [b.tolist() for b in resumed] == [[5, 6, 7, 8, 9], [10, 11]]


def test_positional_arguments_take_torchdata_s_positions(stream: Any) -> None:
    # dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, pin_memory, drop_last
    ours = StatefulDataLoader(list(range(10)), 4, False, None, None, 0, None, False, True)
    assert [b.tolist() for b in ours] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert ours.drop_last is True and ours.batch_size == 4
    view = StreamDataset(stream, sequence_length=SEQUENCE_LENGTH)
    guideloom = StatefulDataLoader(view, 8)  # a view: GuideLoom's loader, batch_size 8
    assert len(guideloom) == 4 and guideloom.state_dict()["guideloom_loader"]["batch_size"] == 8


def test_a_view_with_a_sampler_or_in_order_false_is_torchdata_s_loader(stream: Any) -> None:
    view = StreamDataset(stream, sequence_length=SEQUENCE_LENGTH)
    with_sampler = StatefulDataLoader(view, batch_size=4, sampler=SequentialSampler(range(32)))
    reference = _torchdata(view, batch_size=4, sampler=SequentialSampler(range(32)))
    assert "guideloom_loader" not in with_sampler.state_dict()
    got = [batch_keys(b) for b in with_sampler]
    assert got == [batch_keys(b) for b in reference] and len(got) == 8
    unordered = StatefulDataLoader(view, batch_size=4, in_order=False)
    assert "guideloom_loader" not in unordered.state_dict() and len(list(unordered)) == 8
    mixture = Mixture({"a": (stream, 1.0)}).dataset(SEQUENCE_LENGTH)  # a mixture's view, too
    sampled = StatefulDataLoader(mixture, batch_size=4, sampler=SequentialSampler(range(32)))
    assert "guideloom_loader" not in sampled.state_dict() and len(list(sampled)) == 8


@pytest.mark.parametrize(
    "kwargs,named",
    [
        ({"seed": 3}, "seed="),
        ({"rank": 0, "world_size": 2}, "rank=, world_size="),
        ({"shuffle_block_size": 16, "read_ahead": 2}, "shuffle_block_size=, read_ahead="),
        ({"parallel_method": "thread", "device": "cpu"}, "parallel_method=, device="),
        ({"shuffle": "block"}, "shuffle='block'"),
    ],
)
def test_guideloom_arguments_with_a_torch_dataset_are_a_type_error(kwargs: dict[str, Any], named: str) -> None:
    with pytest.raises(TypeError, match=f"^{named} apply to GuideLoom dataset views") as err:
        StatefulDataLoader(Squares(), **kwargs)
    assert "Squares is not a GuideLoom view" in str(err.value)


def test_guideloom_arguments_with_a_sampler_are_a_type_error(stream: Any) -> None:
    view = StreamDataset(stream, sequence_length=SEQUENCE_LENGTH)
    with pytest.raises(TypeError, match="seed= apply to GuideLoom.*with sampler the order is torchdata's"):
        StatefulDataLoader(view, sampler=SequentialSampler(range(32)), seed=1)


def test_a_storage_or_mixture_given_for_a_view_points_at_from_storage(stream: Any) -> None:
    for wrong in (stream, Mixture({"a": (stream, 1.0)})):
        with pytest.raises(TypeError, match="from_storage"):
            StatefulDataLoader(wrong, batch_size=4)
