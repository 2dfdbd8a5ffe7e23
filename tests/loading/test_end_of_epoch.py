"""The end of an epoch is torchdata's rule, and the torchdata training loop trains each epoch once.

A state saved inside the loop at an epoch's last batch resumes into an empty pass, then the
next epoch; a state saved after the loop ended resumes into the next epoch. States of version
1 and 2 (saved under the old rule, where both started the next epoch at once) keep their rule.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torchdata.stateful_dataloader import StatefulDataLoader as TorchdataLoader

from guideloom import StatefulDataLoader
from guideloom.errors import ResumeStateError
from guideloom.testing import assert_exact_resume, batch_keys

SEQUENCE_LENGTH = 8  # tests/loading/conftest.py writes windows of this length
WINDOWS = 24
BATCH = 4  # 6 batches an epoch
EPOCHS = 3
WORKERS = {  # num_workers 0, thread workers and process workers
    "inline": {"num_workers": 0},
    "threads": {"num_workers": 2, "parallel_method": "thread"},
    "processes": {"num_workers": 2},
}


@pytest.fixture
def stream(tmp_path: Any, write_dataset: Callable[..., Any]) -> Any:
    return write_dataset("stream", str(tmp_path / "stream"), {}, size=WINDOWS)


def _loader(stream: Any, **kwargs: Any) -> Any:
    kwargs = {"sequence_length": SEQUENCE_LENGTH, "batch_size": BATCH, "shuffle": True, "seed": 1, **kwargs}
    return StatefulDataLoader.from_storage(stream, **kwargs)


def _keys(batches: Any) -> list[Any]:
    return [k for batch in batches for k in batch_keys(batch)]


def _train(make_loader: Callable[[], Any], checkpoint: dict[str, Any] | None, save_at: tuple[int, int] | None,
           after_loop: bool = False) -> tuple[list[list[Any]], dict[str, Any] | None]:  # fmt: skip
    """The torchdata training loop: ``for epoch in range(start_epoch, EPOCHS): for batch in
    loader``. Saves ``{"epoch", "loader"}`` inside the loop after batch ``save_at[1]`` of epoch
    ``save_at[0]`` (or, with ``after_loop``, after that epoch's loop ended, with the next epoch
    number, as a training script does), then stops as if preempted. Returns the batches seen per
    loop iteration and the checkpoint."""
    loader = make_loader()
    start_epoch = 0
    if checkpoint is not None:
        loader.load_state_dict(json.loads(json.dumps(checkpoint["loader"])))
        start_epoch = checkpoint["epoch"]
    seen: list[list[Any]] = []
    for epoch in range(start_epoch, EPOCHS):
        seen.append([])
        for step, batch in enumerate(loader):
            seen[-1].append(batch)
            if not after_loop and save_at == (epoch, step):
                return seen, {"epoch": epoch, "loader": loader.state_dict()}
        if after_loop and save_at is not None and save_at[0] == epoch:
            return seen, {"epoch": epoch + 1, "loader": loader.state_dict()}
    return seen, None


@pytest.mark.parametrize("kind", list(WORKERS))
def test_the_torchdata_loop_trains_every_epoch_exactly_once(stream: Any, kind: str) -> None:
    """Checkpoint at the last batch of epoch 1 of 3, resume in a new loader with the usual
    loop: exactly three epochs of samples, each epoch's samples those of an uninterrupted run
    (the old rule gave a whole extra epoch: 24 batches instead of 18)."""
    make = lambda: _loader(stream, **WORKERS[kind])  # noqa: E731
    reference, _ = _train(make, None, None)
    per_epoch = len(reference[0])
    assert [len(e) for e in reference] == [WINDOWS // BATCH] * EPOCHS
    before, checkpoint = _train(make, None, (1, per_epoch - 1))
    assert checkpoint is not None and checkpoint["loader"]["guideloom_loader"]["finished"] is False
    after, _ = _train(make, checkpoint, None)
    assert [len(e) for e in after] == [0, per_epoch]  # the rest of epoch 1 is empty, then epoch 2
    batches = [b for e in before + after for b in e]
    assert len(batches) == EPOCHS * per_epoch
    assert _keys(batches) == _keys(b for e in reference for b in e)


@pytest.mark.parametrize("kind", list(WORKERS))
def test_a_checkpoint_after_the_loop_ended_resumes_into_the_next_epoch(stream: Any, kind: str) -> None:
    make = lambda: _loader(stream, **WORKERS[kind])  # noqa: E731
    reference, _ = _train(make, None, None)
    before, checkpoint = _train(make, None, (1, 0), after_loop=True)
    assert checkpoint is not None and checkpoint["loader"]["guideloom_loader"]["finished"] is True
    after, _ = _train(make, checkpoint, None)
    assert [len(e) for e in before] == [6, 6] and [len(e) for e in after] == [6]
    assert _keys(b for e in before + after for b in e) == _keys(b for e in reference for b in e)


def test_torchdata_s_own_loader_counts_the_same(stream: Any) -> None:
    """The same loop over torchdata's class and a plain dataset of as many samples: the same
    batch counts per loop iteration, for both kinds of checkpoint."""

    def torchdata_loader() -> Any:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*set_vital.*is deprecated", category=UserWarning)
            return TorchdataLoader(torch.arange(WINDOWS), batch_size=BATCH)

    for make in (torchdata_loader, lambda: _loader(stream)):
        for after_loop in (False, True):
            before, checkpoint = _train(make, None, (1, 5), after_loop=after_loop)
            after, _ = _train(make, checkpoint, None)
            counts = [len(e) for e in before + after]
            assert counts == ([6, 6, 0, 6] if not after_loop else [6, 6, 6]), (make, after_loop)


@pytest.mark.parametrize("method", ["process", "thread"])
def test_exact_resume_with_inline_thread_and_process_workers(
    method: str, stream: Any, make_loader_for: Callable[..., Callable[..., Any]]
) -> None:
    """assert_exact_resume checks the end-of-epoch rule for num_workers 0 and 2 (threads or
    processes), saving with one and loading with the other."""
    make_loader = make_loader_for(stream, batch_size=BATCH, shuffle=True, seed=3, parallel_method=method)
    assert_exact_resume(make_loader, worker_counts=(0, 2), world_sizes=(1, 2), elastic=((2, 3),))


def test_a_state_at_the_last_batch_gives_an_empty_pass(stream: Any) -> None:
    loader = _loader(stream)
    epoch0 = list(loader)
    it = iter(loader)
    epoch1 = [next(it) for _ in range(len(epoch0))]  # the last batch received, the loop not ended
    state = loader.state_dict()["guideloom_loader"]
    assert (state["epoch"], state["position"], state["finished"]) == (1, WINDOWS, False)
    resumed = _loader(stream)
    resumed.load_state_dict(loader.state_dict())
    assert (resumed.epoch, len(resumed)) == (1, len(epoch0))  # len() is always a whole epoch
    assert list(resumed) == []
    assert resumed.state_dict()["guideloom_loader"]["finished"] is True  # that pass has ended
    assert resumed.epoch == 1
    epoch2 = list(resumed)
    assert resumed.epoch == 2 and len(epoch2) == len(epoch0)
    reference = _loader(stream)
    assert [_keys(list(reference)) for _ in range(3)] == [_keys(e) for e in (epoch0, epoch1, epoch2)]


@pytest.mark.parametrize("version", [1, 2])
def test_old_states_at_the_end_of_an_epoch_keep_starting_the_next_epoch(stream: Any, version: int) -> None:
    """Under the rule of versions 1 and 2, a state with nothing of its epoch left started the
    next epoch at once, whether saved at the last batch or after the loop: so they still do."""
    loader = _loader(stream)
    epoch0 = list(loader)
    inner = dict(loader.state_dict()["guideloom_loader"])
    assert inner["position"] == WINDOWS
    del inner["finished"]  # what versions 1 and 2 saved
    if version == 1:
        del inner["shuffle_run_size"]  # None: shuffle=True has no runs
    old = {"guideloom_loader": {**inner, "version": version}}
    resumed = _loader(stream)
    resumed.load_state_dict(old)
    assert (resumed.epoch, len(resumed)) == (1, len(epoch0))
    assert _keys(resumed) == _keys(_second_epoch(stream))


def test_old_states_with_only_the_remainder_left_start_the_next_epoch(stream: Any) -> None:
    """Elastic: a version-2 state saved mid-epoch whose rest is only the remainder the new ranks
    leave out (23 of 24 windows handed out; 2 ranks share nothing of 1) starts the next epoch, as
    it did; a version-3 one gives an empty pass first."""
    inner = dict(_loader(stream).state_dict()["guideloom_loader"])
    inner.update(position=WINDOWS - 1, batch_size=1)
    v3 = {"guideloom_loader": dict(inner)}
    del inner["finished"]
    v2 = {"guideloom_loader": {**inner, "version": 2}}
    for state, first_pass in ((v2, 6), (v3, 0)):
        ranks = [_loader(stream, rank=r, world_size=2, batch_size=2) for r in range(2)]
        for loader in ranks:
            loader.load_state_dict(state)
        assert [len(list(loader)) for loader in ranks] == [first_pass, first_pass]


def _second_epoch(stream: Any) -> list[Any]:
    reference = _loader(stream)
    list(reference)
    return list(reference)


@pytest.mark.parametrize("finished", [None, "yes", 1])
def test_a_state_with_a_bad_finished_flag_is_refused(stream: Any, finished: Any) -> None:
    inner = {**_loader(stream).state_dict()["guideloom_loader"], "finished": finished}
    with pytest.raises(ResumeStateError, match="finished"):
        _loader(stream).load_state_dict({"guideloom_loader": inner})
    del inner["finished"]
    with pytest.raises(ResumeStateError, match="truncated loader state: missing finished"):
        _loader(stream).load_state_dict({"guideloom_loader": inner})
