"""Thread workers (``parallel_method="thread"``): the same batches and states as processes and
``num_workers=0``, errors that read the same, and no thread left behind."""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from guideloom import StatefulDataLoader
from guideloom.errors import ShardCorruptError
from guideloom.loading.threads import THREAD_NAME_PREFIX, live_threads
from guideloom.testing import assert_exact_resume, batch_keys

LAYOUTS = ["documents", "stream", "stream_with_meta"]
SHUFFLES: dict[str, dict[str, Any]] = {
    "sequential": {"shuffle": False},
    "full": {"shuffle": True, "seed": 5},
    "block": {"shuffle": "block", "shuffle_block_size": 4, "shuffle_buffer_blocks": 2, "seed": 2},
}
# assert_exact_resume passes num_workers=N; these codes stand for (workers, kind), so that its
# neighbour pairs (0, 1), (1, 2), (2, 0) save and load across 0 / thread / process workers.
KINDS = {0: (0, "process"), 1: (2, "thread"), 2: (2, "process")}


def wait_for_no_loader_threads(seconds: float = 10.0) -> list[threading.Thread]:
    """The loader threads still alive after waiting up to ``seconds`` for them to exit."""
    deadline = time.monotonic() + seconds
    while live_threads() and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.02)
    return live_threads()


def all_keys(loader: Any) -> list[list[Any]]:
    return [batch_keys(batch) for batch in loader]


@pytest.fixture(autouse=True)
def no_threads_left_over() -> Any:
    yield
    assert wait_for_no_loader_threads() == [], "a test left loader threads running"


@pytest.mark.parametrize("shuffle", list(SHUFFLES))
@pytest.mark.parametrize("layout", LAYOUTS)
def test_threads_give_the_batches_of_processes_and_of_no_workers(
    layout: str,
    shuffle: str,
    tmp_path: Any,
    make_loader_for: Callable[..., Callable[..., Any]],
    write_dataset: Callable[..., Any],
) -> None:
    storage = write_dataset(layout, str(tmp_path / "ds"), {}, size=40)
    make = make_loader_for(storage, batch_size=3, **SHUFFLES[shuffle])
    inline = all_keys(make(num_workers=0))
    assert len(inline) == 14
    threads = make(num_workers=3, parallel_method="thread")
    assert threads.num_workers == 3 and threads.parallel_method == "thread"
    assert all_keys(threads) == inline
    assert all_keys(threads) != inline or SHUFFLES[shuffle]["shuffle"] is False  # the next epoch
    assert all_keys(make(num_workers=2, parallel_method="process")) == inline


def test_thread_groups_and_prefetch_change_nothing(
    tmp_path: Any, make_loader_for: Callable[..., Callable[..., Any]], write_dataset: Callable[..., Any]
) -> None:
    storage = write_dataset("stream", str(tmp_path / "ds"), {}, size=50)
    make = make_loader_for(storage, batch_size=4, shuffle=True)
    want = all_keys(make())
    for settings in ({"read_ahead": 3}, {"read_ahead": 1, "prefetch_factor": 1}, {"prefetch_factor": 8}):
        got = all_keys(make(num_workers=2, parallel_method="thread", **settings))
        assert got == want, settings


def test_batches_are_made_in_the_pool_threads(
    tmp_path: Any, make_loader_for: Callable[..., Callable[..., Any]], write_dataset: Callable[..., Any]
) -> None:
    storage = write_dataset("documents", str(tmp_path / "ds"), {}, size=24)
    where: set[str] = set()

    def collate(records: list[Any]) -> list[int]:
        where.add(threading.current_thread().name)
        return [r["id"] for r in records]

    loader = make_loader_for(storage, batch_size=4, collate_fn=collate)(
        num_workers=2, parallel_method="thread"
    )
    assert [i for batch in loader for i in batch] == list(range(24))
    assert where and all(name.startswith(THREAD_NAME_PREFIX) for name in where)
    assert threading.current_thread().name not in where


@pytest.mark.parametrize("layout", LAYOUTS)
def test_exact_resume_across_thread_process_and_no_workers(
    layout: str,
    tmp_path: Any,
    make_loader_for: Callable[..., Callable[..., Any]],
    write_dataset: Callable[..., Any],
) -> None:
    storage = write_dataset(layout, str(tmp_path / "ds"), {}, size=48)
    make = make_loader_for(storage, batch_size=4, shuffle="block", shuffle_block_size=4, seed=11)

    def make_loader(num_workers: int, **kwargs: Any) -> Any:
        workers, kind = KINDS[num_workers]
        return make(num_workers=workers, parallel_method=kind, **kwargs)

    assert_exact_resume(make_loader, worker_counts=(0, 1, 2), world_sizes=(1, 2), elastic=((4, 2),))


@pytest.mark.s3
def test_exact_resume_with_threads_on_s3(
    s3_bucket: str,
    s3_options: dict[str, Any],
    make_loader_for: Callable[..., Callable[..., Any]],
    write_dataset: Callable[..., Any],
) -> None:
    storage = write_dataset("stream", f"s3://{s3_bucket}/ds", s3_options, size=32)
    make = make_loader_for(storage, batch_size=4, shuffle=True, seed=3)

    def make_loader(num_workers: int, **kwargs: Any) -> Any:
        return make(num_workers=num_workers, parallel_method="thread", **kwargs)

    # remote: read_ahead groups 4 batches per thread task
    assert_exact_resume(make_loader, worker_counts=(0, 2), world_sizes=(1,), elastic=((4, 2),))


def drain(loader: Any) -> None:
    """Read a whole pass; stop its workers however it ends (a dropped, failed torch iterator
    otherwise waits for its worker processes when the garbage collector gets to it)."""
    batches = iter(loader)
    try:
        for _ in batches:
            pass
    finally:
        batches.close()


def _truncate_a_shard(storage: Any) -> str:
    rel = storage.manifest.shard_table.path(1, "data")
    path = storage.location.local_path(rel)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 5)
    return os.path.basename(path)


def test_a_failing_read_in_a_thread_reads_as_in_a_process(
    tmp_path: Any, make_loader_for: Callable[..., Callable[..., Any]], write_dataset: Callable[..., Any]
) -> None:
    storage = write_dataset("stream", str(tmp_path / "ds"), {}, size=64)
    make = make_loader_for(storage, batch_size=4)
    name = _truncate_a_shard(storage)
    with pytest.raises(ShardCorruptError) as in_thread:
        drain(make(num_workers=2, parallel_method="thread"))
    with pytest.raises(ShardCorruptError) as in_process:
        drain(make(num_workers=2, parallel_method="process"))
    with pytest.raises(ShardCorruptError) as inline:
        drain(make(num_workers=0))
    message = str(in_thread.value)
    assert name in message and "manifest records" in message
    assert message == str(inline.value)
    assert message in str(in_process.value)  # torch prefixes the worker and its traceback
    assert wait_for_no_loader_threads() == []


def test_threads_stop_after_break(
    tmp_path: Any, make_loader_for: Callable[..., Callable[..., Any]], write_dataset: Callable[..., Any]
) -> None:
    storage = write_dataset("stream", str(tmp_path / "ds"), {}, size=64)
    loader = make_loader_for(storage, batch_size=2, shuffle=True)(
        num_workers=3, parallel_method="thread", prefetch_factor=4
    )
    for k, _ in enumerate(loader):
        assert live_threads(), "the pool should be running mid-epoch"
        if k == 2:
            break
    assert wait_for_no_loader_threads() == []
    assert loader.state_dict()["guideloom_loader"]["position"] == 3 * 2
    # the loader still works, and the next pass starts the next epoch
    assert len(all_keys(loader)) == len(loader)
    assert wait_for_no_loader_threads() == []


def test_a_new_pass_or_close_stops_an_abandoned_pass(
    tmp_path: Any, make_loader_for: Callable[..., Callable[..., Any]], write_dataset: Callable[..., Any]
) -> None:
    storage = write_dataset("stream", str(tmp_path / "ds"), {}, size=64)
    loader = make_loader_for(storage, batch_size=2)(num_workers=2, parallel_method="thread")
    kept = iter(loader)  # still referenced: only an explicit close or a new pass ends it
    next(kept)
    first = live_threads()
    assert first
    again = iter(loader)
    for thread in first:
        thread.join(10)
        assert not thread.is_alive()
    next(again)
    again.close()
    assert wait_for_no_loader_threads() == []
    with pytest.raises(StopIteration):
        next(again)
    del kept


def test_thread_settings_are_checked(
    tmp_path: Any, make_loader_for: Callable[..., Callable[..., Any]], write_dataset: Callable[..., Any]
) -> None:
    storage = write_dataset("stream", str(tmp_path / "ds"), {}, size=16)
    make = make_loader_for(storage, batch_size=2)
    with pytest.raises(ValueError, match="parallel_method must be 'process' or 'thread'"):
        make(num_workers=2, parallel_method="threads")
    with pytest.raises(ValueError, match="multiprocessing_context= applies to worker processes"):
        make(num_workers=2, parallel_method="thread", multiprocessing_context="spawn")
    with pytest.raises(ValueError, match="prefetch_factor must be a positive integer"):
        make(num_workers=2, parallel_method="thread", prefetch_factor=0)
    # persistent_workers has nothing to keep with threads: accepted, same batches
    assert all_keys(make(num_workers=2, parallel_method="thread", persistent_workers=True)) == all_keys(
        make()
    )


def test_thread_views_are_private_copies(
    tmp_path: Any, make_loader_for: Callable[..., Callable[..., Any]], write_dataset: Callable[..., Any]
) -> None:
    storage = write_dataset("stream", str(tmp_path / "ds"), {}, size=64)
    loader: StatefulDataLoader = make_loader_for(storage, batch_size=2)(
        num_workers=2, parallel_method="thread"
    )
    all_keys(loader)
    all_keys(loader)
    copies = loader._copies
    assert copies is not None and 1 <= copies.made <= 2  # reused across passes, one per thread at most
