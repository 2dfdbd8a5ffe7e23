"""A loader dropped in the middle of an epoch ends its workers at once and cleanly.

torchdata's iterator stops its worker processes from ``__del__`` by sending each a ``None``.
When the loader is only freed by a garbage collection (it sits in a reference cycle), the
collector first closes the iterator's queues (their finalizers), so the ``None`` is never
delivered: each worker is then waited on for 5 s and killed. Frameworks drop loaders
mid-epoch all the time (validation limits, ``break``), so GuideLoom's loader must be freed by
reference counting alone.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from guideloom import Mixture, StatefulDataLoader


@pytest.fixture
def no_collector() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.parametrize(
    "settings",
    [
        {"num_workers": 0},
        {"num_workers": 2},
        {"num_workers": 2, "parallel_method": "thread"},
        {"num_workers": 2, "shuffle": "block"},
        {"num_workers": 1, "boundaries": "records"},
    ],
    ids=["inline", "processes", "threads", "block", "records"],
)
def test_a_loader_dropped_mid_epoch_is_freed_at_once_and_its_workers_exit_cleanly(
    settings: dict[str, Any], tmp_path: Any, write_dataset: Callable[..., Any], no_collector: None
) -> None:
    storage = write_dataset("stream", str(tmp_path / "ds"), {}, size=64)
    settings = {"shuffle": True, "seed": 7, **settings}
    loader = StatefulDataLoader.from_storage(storage, sequence_length=16, batch_size=4, **settings)
    batches = iter(loader)
    next(batches), next(batches)
    loader.load_state_dict(loader.state_dict())  # states and restores make no cycle either
    batches = iter(loader)
    next(batches)
    workers = _worker_processes(batches)
    assert (len(workers) > 0) == (settings["num_workers"] > 0 and "parallel_method" not in settings)
    freed = weakref.ref(loader)
    del loader, batches
    assert freed() is None, "the loader is kept alive by a reference cycle: only a collection frees it"
    for process in workers:
        process.join(timeout=30)
    # a worker that heard its stop exits with 0; one that was waited on and killed shows -15
    assert [p.exitcode for p in workers] == [0] * len(workers)


def test_a_mixture_loader_dropped_mid_epoch_is_freed_at_once(
    tmp_path: Any, write_dataset: Callable[..., Any], no_collector: None
) -> None:
    a = write_dataset("stream", str(tmp_path / "a"), {}, size=32)
    b = write_dataset("stream", str(tmp_path / "b"), {}, size=32)
    mixture = Mixture({"a": (a, 0.5), "b": (b, 0.5)})
    loader = StatefulDataLoader.from_storage(
        mixture, sequence_length=16, batch_size=4, shuffle=True, num_workers=2
    )
    batches = iter(loader)
    next(batches)
    workers = _worker_processes(batches)
    freed = weakref.ref(loader)
    del loader, batches
    assert freed() is None
    for process in workers:
        process.join(timeout=30)
    assert workers and [p.exitcode for p in workers] == [0] * len(workers)


def _worker_processes(batches: Any) -> list[Any]:
    """The worker processes behind a pass (torchdata's iterator keeps them in ``_workers``)."""
    return [w for closer in batches._closers for w in getattr(closer, "__dict__", {}).get("_workers", [])]
