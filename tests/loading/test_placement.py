"""``device=`` and ``pin_memory=``: where batches land, and that placing them changes nothing else.

This machine has no accelerator: pinning is skipped there (the contract), and the device copy is
checked with torch's ``meta`` device, which every build has: a tensor moved there keeps its shape
and dtype and loses its data, so a batch that arrives on ``meta`` went through the copy.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from guideloom.loading import placement
from guideloom.loading.placement import Placed
from guideloom.testing import batch_keys


@pytest.fixture
def stream(tmp_path: Any, write_dataset: Callable[..., Any]) -> Any:
    return write_dataset("stream", str(tmp_path / "stream"), {}, size=40)


@pytest.mark.parametrize(
    "kind", [(0, "process"), (2, "thread"), (2, "process")], ids=["0", "thread", "process"]
)
def test_batches_land_on_the_device(
    kind: tuple[int, str], stream: Any, make_loader_for: Callable[..., Callable[..., Any]]
) -> None:
    workers, method = kind
    make = make_loader_for(stream, batch_size=4, shuffle=True)
    want = [batch_keys(b) for b in make()]
    loader = make(num_workers=workers, parallel_method=method, device="meta", pin_memory=True)
    shapes = []
    for batch in loader:
        assert {t.device.type for t in batch.values()} == {"meta"}
        shapes.append({k: (tuple(t.shape), t.dtype) for k, t in batch.items()})
    assert len(shapes) == len(want) == len(loader)
    assert shapes[0] == {"tokens": ((4, 8), torch.int32), "loss_mask": ((4, 8), torch.uint8)}
    assert loader.device == torch.device("meta")


def test_pin_memory_without_an_accelerator_changes_nothing_and_warns_nothing(
    stream: Any, make_loader_for: Callable[..., Callable[..., Any]]
) -> None:
    assert not placement.accelerator_available()  # the CPU-only contract this test checks
    make = make_loader_for(stream, batch_size=4, shuffle=True)
    want = [batch_keys(b) for b in make()]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's own pin_memory would warn "no accelerator"
        for workers, method in [(0, "process"), (2, "thread"), (2, "process")]:
            loader = make(num_workers=workers, parallel_method=method, pin_memory=True)
            assert [batch_keys(b) for b in loader] == want


def test_the_next_batch_is_copied_before_this_one_is_used(
    stream: Any, make_loader_for: Callable[..., Callable[..., Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    moved: list[int] = []
    real_move = placement.move

    def counting_move(batch: Any, device: torch.device) -> Any:
        moved.append(int(batch["tokens"][0, 0]))
        return real_move(batch, device)

    monkeypatch.setattr(placement, "move", counting_move)
    loader = make_loader_for(stream, batch_size=4)(device="cpu")
    received = 0
    for batch in loader:
        received += 1
        # batch k is in hand and batch k + 1's copy has been issued (except after the last one)
        assert len(moved) == min(received + 1, len(loader))
        assert int(batch["tokens"][0, 0]) == moved[received - 1]
        # the state counts what the loop received, not what was copied ahead
        assert loader.state_dict()["guideloom_loader"]["position"] == received * 4
    assert received == len(loader) == 10


def test_an_error_behind_a_copied_batch_waits_for_the_next_call() -> None:
    def source() -> Iterator[Any]:
        yield {"x": torch.ones(2)}
        yield {"x": torch.zeros(2)}
        raise OSError("the third batch failed")

    placed = Placed(source(), torch.device("cpu"))
    assert next(placed)["x"].tolist() == [1.0, 1.0]
    assert next(placed)["x"].tolist() == [0.0, 0.0]  # fetched before the failure surfaced
    with pytest.raises(OSError, match="third batch"):
        next(placed)
    with pytest.raises(StopIteration):
        next(placed)


def test_move_walks_dicts_lists_and_tuples_and_leaves_the_rest() -> None:
    batch = {"a": torch.ones(1), "b": [torch.ones(1), "text"], "c": (torch.ones(1), 3)}
    out = placement.move(batch, torch.device("meta"))
    assert out["a"].is_meta and out["b"][0].is_meta and out["c"][0].is_meta
    assert out["b"][1] == "text" and out["c"][1] == 3 and isinstance(out["c"], tuple)
    assert placement.pin(batch) is batch  # no accelerator: nothing to pin


def test_creating_and_iterating_a_loader_warns_nothing(
    stream: Any, make_loader_for: Callable[..., Callable[..., Any]]
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torchdata's set_vital deprecation must not reach users
        for kind in ({}, {"num_workers": 2, "parallel_method": "thread"}, {"num_workers": 1}):
            loader = make_loader_for(stream, batch_size=8)(**kind)
            assert sum(len(b["tokens"]) for b in loader) == 40
