"""``loader.skip_steps(range(A, B))``: after a resume the loader yields step A-1's batch, then
step B's, never reading those between; the skip is in the state (later resumes, another world
size, another number of workers) and ``guideloom trace`` leaves the same steps out."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from guideloom import BatchOrder, StatefulDataLoader, StreamNumpyFormat, StreamStorage

SEQ, BATCH, WINDOWS, EPOCHS = 8, 4, 48, 2  # 12 steps an epoch


@pytest.fixture(scope="module")
def storage(tmp_path_factory: Any) -> Any:
    url = str(tmp_path_factory.mktemp("skip") / "data")
    with StreamStorage(url, StreamNumpyFormat({"tokens": np.uint16})).writer() as writer:
        writer.append({"tokens": np.arange(WINDOWS * SEQ + 3, dtype=np.uint16)})
    return StreamStorage(url, StreamNumpyFormat({"tokens": np.uint16}))


def _loader(storage: Any, **kwargs: Any) -> Any:
    settings = dict(sequence_length=SEQ, batch_size=BATCH, shuffle=True, seed=3)
    return StatefulDataLoader.from_storage(storage, **{**settings, **kwargs})


def _samples(batch: Any) -> list[int]:
    return [int(t) // SEQ for t in batch["tokens"][:, 0]]


@pytest.fixture(scope="module")
def whole(storage: Any) -> list[list[int]]:
    loader = _loader(storage)
    return [_samples(b) for _ in range(EPOCHS) for b in loader]


def _resumed_at(storage: Any, step: int, **kwargs: Any) -> Any:
    """A loader resumed from the state saved after ``step`` steps of an uninterrupted run."""
    first = _loader(storage)
    batches = iter(first)
    for _ in range(step):
        next(batches)
    loader = _loader(storage, **kwargs)
    loader.load_state_dict(first.state_dict())
    return loader


@pytest.mark.parametrize("workers", [0, 2])
def test_skip_leaves_out_those_steps_and_nothing_else(storage: Any, whole: Any, workers: int) -> None:
    loader = _resumed_at(storage, 3, num_workers=workers)
    loader.skip_steps(range(5, 8))
    got = [_samples(b) for _ in range(EPOCHS) for b in loader]
    assert got == whole[3:5] + whole[8:]
    assert loader.state_dict()["guideloom_loader"]["skipped"] == [[0, 5 * BATCH, 8 * BATCH]]


def test_the_order_never_hands_out_the_skipped_batches(storage: Any, whole: Any) -> None:
    resumed = _resumed_at(storage, 2)
    order = resumed.batch_sampler
    assert isinstance(order, BatchOrder)
    order.skip_steps(range(4, 12))  # to the epoch's end: the next pass is epoch 1
    assert list(order) == whole[2:4]
    assert list(order) == whole[12:24]


def test_a_resume_after_the_skip_keeps_it_in_any_world_size(storage: Any, whole: Any) -> None:
    loader = _resumed_at(storage, 3)
    loader.skip_steps(range(5, 8))
    batches = iter(loader)
    next(batches)  # step 3; the state is at step 4, before the skip
    state = json.loads(json.dumps(loader.state_dict()))
    again = _loader(storage)
    again.load_state_dict(state)
    assert [_samples(b) for b in again] == whole[4:5] + whole[8:12]
    ranks = [_loader(storage, batch_size=BATCH // 2, rank=r, world_size=2) for r in (0, 1)]
    for rank in ranks:
        rank.load_state_dict(state)
    steps = zip(*[[_samples(b) for b in rank] for rank in ranks])
    assert [a + b for a, b in steps] == whole[4:5] + whole[8:12]
    more = json.loads(json.dumps(again.state_dict()))  # a state of the next resumed run keeps it
    assert more["guideloom_loader"]["skipped"] == state["guideloom_loader"]["skipped"]


def test_trace_leaves_the_skipped_steps_out(storage: Any, whole: Any, tmp_path: Any) -> None:
    from typer.testing import CliRunner

    from guideloom import trace
    from guideloom.cli import app

    loader = _resumed_at(storage, 3)
    loader.skip_steps(range(5, 8))
    trained = {3: None, 4: None, **{s: None for s in range(8, 12)}}
    for step, batch in zip(trained, loader):
        trained[step] = _samples(batch)
    state = loader.state_dict()
    rows = list(trace(state, storage, range(3, 12)))
    assert sorted({r["step"] for r in rows}) == sorted(trained)
    for step, samples in trained.items():
        assert [r["sample_index"] for r in rows if r["step"] == step] == samples == whole[step]
    state_file = tmp_path / "state.json"
    state_file.write_text(json.dumps(state))
    result = CliRunner().invoke(app, ["trace", str(state_file), storage.url, "--steps", "3-11", "--json"])
    assert result.exit_code == 0, result.output
    assert sorted({json.loads(line)["step"] for line in result.output.splitlines()}) == sorted(trained)


def test_skip_steps_refuses_what_it_cannot_do(storage: Any) -> None:
    loader = _resumed_at(storage, 3)
    with pytest.raises(ValueError, match=r"runs steps 3\.\.11"):
        loader.skip_steps(range(1, 5))  # before the resume point
    with pytest.raises(ValueError, match=r"runs steps 3\.\.11"):
        loader.skip_steps(range(12, 14))  # starting in a later epoch
    with pytest.raises(ValueError, match="non-empty range"):
        loader.skip_steps(range(5, 5))
    batches = iter(loader)
    next(batches)
    with pytest.raises(ValueError, match="before iterating"):
        loader.skip_steps(range(6, 8))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_skip_across_the_epoch_boundary_resumes_anywhere(storage: Any, whole: Any, workers: int) -> None:
    """Steps 10..13 (the last two of epoch 0, the first two of epoch 1): one entry per epoch, kept
    in the state, applied when the order gets to epoch 1, also after a resume in between (at
    another world size) and by trace."""
    loader = _resumed_at(storage, 3, num_workers=workers)
    loader.skip_steps(range(10, 14))
    epoch0 = [_samples(b) for b in loader]
    assert epoch0 == whole[3:10]
    state = loader.state_dict()
    inner = state["guideloom_loader"]
    assert inner["skipped"] == [[0, 10 * BATCH, WINDOWS], [1, 0, 2 * BATCH]] and inner["version"] == 4
    # the same run goes on; another run resumes from the state at the boundary on 2 ranks
    assert [_samples(b) for b in loader] == whole[14:]
    ranks = [_loader(storage, batch_size=BATCH // 2, rank=r, world_size=2) for r in range(2)]
    for r in ranks:
        r.load_state_dict(state)
    parts = [[_samples(b) for b in r] for r in ranks]  # saved after the loop: epoch 1 next
    assert [a + b for a, b in zip(*parts)] == whole[14:]
    from guideloom import trace

    rows = list(trace(loader.state_dict(), storage, range(3, 24)))
    assert sorted({r["step"] for r in rows}) == [*range(3, 10), *range(14, 24)]
