"""Batches a worker process hands over by value (`guideloom.loading.handover`).

A loader rebuilt from a view and its `BatchOrder` (what accelerate and Lightning do) gets each
sample as a `Row`; the default collate keeps the type, and a `Row` batch of CPU tensors up to
`BY_VALUE_BYTES` crosses the worker's pipe by value instead of through a shared-memory segment
and a file descriptor per tensor. Its fields are `Sampled` arrays, which the default collate
stacks into the batch's own memory (in a worker process, into shared memory only when the batch
goes torch's way).
"""

from __future__ import annotations

import copy
import pickle
import warnings
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import default_collate

from guideloom import BatchOrder, StreamNumpyFormat, StreamStorage
from guideloom.loading.handover import BY_VALUE_BYTES, Row, Sampled, rows
from guideloom.storage import open_view


def _through_pipe(obj: Any) -> Any:
    """What a worker process's queue does to ``obj``: ForkingPickler out, pickle in."""
    return pickle.loads(bytes(ForkingPickler.dumps(obj)))


def test_a_small_row_of_cpu_tensors_crosses_by_value() -> None:
    row = Row(tokens=torch.arange(64, dtype=torch.int64).reshape(4, 16), mask=torch.ones(4, 16, dtype=torch.bool))
    got = _through_pipe(row)
    assert type(got) is Row and list(got) == ["tokens", "mask"]
    for key in row:
        assert torch.equal(got[key], row[key]) and got[key].dtype == row[key].dtype
        assert not got[key].is_shared()  # its own memory, not a segment shared with the worker
        got[key][0] = got[key][0]  # writable
    assert not row["tokens"].is_shared()  # the sender's tensors were not moved to shared memory


@pytest.mark.parametrize(
    "value",
    [
        torch.zeros(BY_VALUE_BYTES // 8 + 1, dtype=torch.int64),  # larger than the limit
        torch.zeros(8, dtype=torch.bfloat16),  # a dtype NumPy lacks
        torch.zeros(8, requires_grad=True),
        np.zeros(8),  # not a tensor
    ],
    ids=["large", "bfloat16", "requires-grad", "numpy"],
)
def test_anything_else_goes_the_dataloaders_usual_way(value: Any) -> None:
    got = _through_pipe(Row(x=value))
    assert type(got) is Row
    if isinstance(value, torch.Tensor):
        assert got["x"].dtype == value.dtype and torch.equal(got["x"].detach(), value.detach())
        if not value.requires_grad:
            assert got["x"].is_shared()  # torch's own reduction: a shared-memory segment
    else:
        assert np.array_equal(got["x"], value)


def test_the_default_collate_keeps_a_row_and_copies_keep_it() -> None:
    samples = [Row(tokens=np.arange(k, k + 5, dtype=np.uint16)) for k in range(3)]
    batch = default_collate(samples)
    assert type(batch) is Row and batch["tokens"].shape == (3, 5)
    assert type(copy.copy(batch)) is Row and copy.copy(batch) == batch
    assert isinstance(batch, dict) and dict(batch).keys() == {"tokens"}


def test_a_rebuilt_loader_with_workers_gets_the_same_batches_by_value(tmp_path: Any) -> None:
    from torchdata.stateful_dataloader import StatefulDataLoader as TorchdataLoader

    storage = StreamStorage(str(tmp_path / "s"), StreamNumpyFormat({"tokens": np.uint16, "loss_mask": np.uint8}))
    rng = np.random.default_rng(0)
    with storage.writer() as w:
        for _ in range(60):
            n = int(rng.integers(20, 200))
            w.append({"tokens": rng.integers(0, 60_000, n, dtype=np.uint16), "loss_mask": rng.random(n) < 0.5})

    def batches(workers: int) -> list[Any]:
        view: Any = open_view(storage, 32)
        order = BatchOrder(view, 4, shuffle="full", seed=3)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*set_vital.*")
            return list(TorchdataLoader(view, batch_sampler=order, num_workers=workers))

    inline, workers = batches(0), batches(2)
    assert len(inline) == len(workers) > 10
    for a, b in zip(inline, workers):
        assert isinstance(b, dict) and b.keys() == a.keys() == {"tokens", "loss_mask"}
        assert all(torch.equal(a[k], b[k]) for k in a)
        assert not b["tokens"].is_shared()  # by value through the pipe


class _Fields:
    """A map-style dataset whose batch is ``rows`` of one sample per index, each field ``size``
    values; the collate records, in the worker, whether each collated field is shared memory."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return 8

    def __getitems__(self, indexes: list[int]) -> Any:
        return rows([{"x": np.full(self.size, i, dtype=np.int64)} for i in indexes])


def _collate_noting_shared(batch: list[Any]) -> Any:
    out = default_collate(batch)
    out["shared"] = torch.tensor(out["x"].is_shared())
    return out


@pytest.mark.parametrize("size", [16, BY_VALUE_BYTES // 8], ids=["small", "large"])
def test_a_worker_stacks_sampled_fields_in_shared_memory_only_when_they_go_torchs_way(size: int) -> None:
    # (a batch of 4 fields of BY_VALUE_BYTES // 8 int64 values is 4x the by-value limit)
    loader = torch.utils.data.DataLoader(
        _Fields(size), batch_sampler=[[0, 1, 2, 3], [4, 5, 6, 7]], num_workers=1, collate_fn=_collate_noting_shared
    )
    got = list(loader)
    assert [b["x"][:, 0].tolist() for b in got] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert all(b["x"].shape == (4, size) and b["x"].dtype == torch.int64 for b in got)
    assert [bool(b["shared"]) for b in got] == [size > 16] * 2


def test_sampled_fields_are_arrays_and_collate_as_the_default_collate_would() -> None:
    samples = rows([{"tokens": np.arange(k, k + 5, dtype=np.uint16), "n": 3} for k in range(3)])
    assert all(type(s["tokens"]) is Sampled and isinstance(s["tokens"], np.ndarray) for s in samples)
    assert samples[1]["n"] == 3  # not an array: kept as it is
    batch = default_collate(samples)
    plain = default_collate([{"tokens": np.asarray(s["tokens"]), "n": 3} for s in samples])
    assert type(batch["tokens"]) is torch.Tensor and torch.equal(batch["tokens"], plain["tokens"])
    assert batch["tokens"].dtype == plain["tokens"].dtype == torch.uint16
    # fields of unequal shapes: torch's own rule names them
    ragged = rows([{"tokens": np.zeros(4, dtype=np.int64)}, {"tokens": np.zeros(5, dtype=np.int64)}])
    with pytest.raises(RuntimeError, match="equal size"):
        default_collate(ragged)
