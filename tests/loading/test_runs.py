"""Block shuffling with runs: settings in the state, version-1 states, resume, and fewer requests."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from guideloom import StatefulDataLoader
from guideloom.errors import ResumeStateError
from guideloom.testing import assert_exact_resume, batch_keys

SEQUENCE_LENGTH = 8  # tests/loading/conftest.py writes windows of this length


@pytest.fixture
def stream(tmp_path: Any, write_dataset: Callable[..., Any]) -> Any:
    return write_dataset("stream", str(tmp_path / "stream"), {}, size=64)


def _loader(storage: Any, **kwargs: Any) -> Any:
    kwargs = {"sequence_length": SEQUENCE_LENGTH, "batch_size": 4, "shuffle": "block", **kwargs}
    return StatefulDataLoader.from_storage(storage, **kwargs)


def _keys(loader: Any) -> list[Any]:
    return [k for batch in loader for k in batch_keys(batch)]


@pytest.mark.parametrize(
    "settings,run_size",
    [
        ({}, 1),  # the byte-sized block shuffle (#34): single samples permuted in a window
        ({"shuffle_block_size": 64}, 8),  # the old block order: block size 64, runs of 8
        ({"shuffle_block_size": 12}, 4),  # the default is gcd(8, block size)
        ({"shuffle_block_size": 5}, 1),
        ({"shuffle_block_size": 16, "shuffle_run_size": 16}, 16),
        ({"shuffle": True}, None),
        ({"shuffle": False}, None),
    ],
)
def test_run_size_is_part_of_the_state(stream: Any, settings: dict[str, Any], run_size: Any) -> None:
    inner = _loader(stream, **settings).state_dict()["guideloom_loader"]
    assert inner["version"] == 3  # version 3: the end-of-epoch flag "finished"
    assert inner["shuffle_run_size"] == run_size


@pytest.mark.parametrize("run_size", [0, -8, 3, True, 2.0])
def test_bad_run_sizes_fail_at_construction(stream: Any, run_size: Any) -> None:
    with pytest.raises(ValueError, match="shuffle_run_size"):
        _loader(stream, shuffle_block_size=64, shuffle_run_size=run_size)


def test_a_state_with_another_run_size_is_refused(stream: Any) -> None:
    state = _loader(stream).state_dict()
    with pytest.raises(ResumeStateError, match="shuffle_run_size"):
        _loader(stream, shuffle_run_size=4).load_state_dict(state)


def test_a_version_1_block_state_resumes_with_run_size_1(stream: Any) -> None:
    reference = _loader(stream, shuffle_run_size=1)
    it = iter(reference)
    for _ in range(5):
        next(it)
    inner = dict(reference.state_dict()["guideloom_loader"])
    rest = [k for batch in it for k in batch_keys(batch)]
    del inner["shuffle_run_size"]  # what version 1 saved
    old = {"guideloom_loader": {**inner, "version": 1}}
    resumed = _loader(stream, shuffle_run_size=1)
    resumed.load_state_dict(json.loads(json.dumps(old)))
    assert _keys(resumed) == rest
    with pytest.raises(ResumeStateError, match="shuffle_run_size"):
        _loader(stream).load_state_dict(old)  # the default run size is another order
    full = _loader(stream, shuffle=True).state_dict()["guideloom_loader"]
    del full["shuffle_run_size"]
    _loader(stream, shuffle=True).load_state_dict({"guideloom_loader": {**full, "version": 1}})


def test_the_order_depends_on_neither_batch_size_nor_workers(stream: Any) -> None:
    settings = {"shuffle_block_size": 16, "shuffle_buffer_blocks": 2, "seed": 5}
    reference = _keys(_loader(stream, batch_size=8, **settings))
    assert sorted(reference) == sorted(_keys(_loader(stream, shuffle=False)))
    assert _keys(_loader(stream, batch_size=3, num_workers=2, **settings)) == reference
    assert _keys(_loader(stream, batch_size=5, **settings)) == reference
    assert reference != _keys(_loader(stream, shuffle=False))


def test_exact_resume_with_runs(
    tmp_path: Any, make_loader_for: Callable[..., Callable[..., Any]], write_dataset: Callable[..., Any]
) -> None:
    storage = write_dataset("stream", str(tmp_path / "ds"), {}, size=61)  # partial run and block
    settings = {"shuffle": "block", "shuffle_block_size": 8, "shuffle_buffer_blocks": 2, "batch_size": 4}
    assert_exact_resume(
        make_loader_for(storage, **settings), worker_counts=(0,), world_sizes=(1, 3), elastic=((4, 3), (2, 5))
    )


@pytest.mark.s3
def test_runs_cut_the_requests_per_batch_on_s3(
    counting_s3: Any,
    s3_bucket: str,
    make_loader_for: Callable[..., Callable[..., Any]],
    write_dataset: Callable[..., Any],
) -> None:
    storage = write_dataset("stream", f"s3://{s3_bucket}/ds", counting_s3.storage_options, size=128)
    gets = {}
    for run_size in (1, 8):
        make = make_loader_for(storage, batch_size=8, shuffle="block", shuffle_run_size=run_size)
        loader = make(num_workers=0, rank=0, world_size=1)
        counting_s3.reset()
        assert len(_keys(loader)) == 128
        gets[run_size] = counting_s3.requests["GET"]
    # a run of 8 windows is one range per shard it touches and per field file
    assert gets[8] * 3 <= gets[1], gets
