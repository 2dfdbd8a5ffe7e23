"""Thread workers: batches fetched and collated by a pool of threads inside the training process.

``StatefulDataLoader.from_storage(..., num_workers=N, parallel_method="thread")`` hands each
batch (or a group of consecutive batches, which are then fetched with one read) to one of ``N``
threads. Nothing is pickled: a finished batch is the tensors the thread made, handed over by
reference. The main thread still decides the order (the same batch sampler as for process
workers and ``num_workers=0``), and batches are yielded in that order, so the samples, the batches
and the resume state are the same whatever the kind or number of workers.

Why threads can run in parallel: the reads and the copies that make a batch release the GIL
(``os.preadv`` into the output array, NumPy copies and casts of whole arrays, fsspec's range
requests, which wait on its event loop), so most of a batch's time is spent outside the
interpreter.

Each thread task uses a copy of the dataset view of its own (the same copy a process worker gets:
file-descriptor, index and span caches are per worker), taken from a small free list, so no
view state is shared between threads.

Lifetime: the pool belongs to one pass over the loader. It is shut down when the pass ends,
when a read fails (the error is re-raised in the training loop, with its own type and message),
when `ThreadBatches.close` is called, and when the pass's iterator is dropped, for example
after ``break``: threads finish the read in progress and exit, and queued reads are cancelled.
"""

from __future__ import annotations

import copy
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from guideloom.loading.order import positive_int

__all__ = ["THREAD_NAME_PREFIX", "SourceCopies", "ThreadBatches", "live_threads", "thread_settings"]

THREAD_NAME_PREFIX = "guideloom-loader"


class SourceCopies:
    """A free list of private copies of one batch source, one per concurrent task at most.

    A copy is made the way a process worker gets its source, through the source's pickling hooks
    (``__getstate__``: open files and caches are not carried over), the first time more tasks run
    at once than copies exist. It is a deep copy, not a pickle round trip, so a format class that
    cannot be imported by name (defined in a test module or a notebook) works too.
    """

    def __init__(self, source: Any) -> None:
        self._blueprint = copy.deepcopy(source)
        self._free: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self.made = 0  # copies created so far (tests and diagnostics)

    def acquire(self) -> Any:
        try:
            return self._free.get_nowait()
        except queue.Empty:
            with self._lock:
                self.made += 1
            return copy.deepcopy(self._blueprint)

    def release(self, copy: Any) -> None:
        self._free.put(copy)


class ThreadBatches:
    """An iterator over finished batches, fetched by ``threads`` threads, in the sampler's order.

    ``groups`` yields lists of consecutive batches (each a list of sample indexes);
    ``work(group)`` runs in a pool thread and returns ``(batches, extra)``: one finished batch per
    batch of the group, and what ``taken(extra)`` hears as the loop takes the group (before its
    first batch is handed out; the loader's `guideloom.loading.metrics.LoaderMeter.group`).
    At most ``depth`` groups are queued or running at any time (``threads * prefetch_factor``),
    which bounds the memory held by batches not yet received to ``depth`` groups.
    ``timeout`` (seconds, ``0`` = wait forever) bounds the wait for one group.
    """

    def __init__(
        self,
        groups: Iterator[list[list[int]]],
        work: Callable[[list[list[int]]], tuple[list[Any], Any]],
        threads: int,
        depth: int,
        timeout: float = 0,
        taken: Callable[[Any], None] | None = None,
    ) -> None:
        self._groups = groups
        self._work = work
        self._taken = taken
        self._pool: ThreadPoolExecutor | None = ThreadPoolExecutor(
            max_workers=threads, thread_name_prefix=THREAD_NAME_PREFIX
        )
        self._depth = max(1, depth)
        self._timeout = timeout or None
        self._pending: deque[Future[tuple[list[Any], Any]]] = deque()
        self._ready: deque[Any] = deque()
        self._exhausted = False
        self._fill()

    def __iter__(self) -> ThreadBatches:
        return self

    def _fill(self) -> None:
        pool = self._pool
        while pool is not None and not self._exhausted and len(self._pending) < self._depth:
            group = next(self._groups, None)
            if group is None:
                self._exhausted = True
                break
            self._pending.append(pool.submit(self._work, group))

    def __next__(self) -> Any:
        if self._ready:
            return self._ready.popleft()
        if not self._pending:
            self.close()
            raise StopIteration
        future = self._pending.popleft()
        try:
            batches, extra = future.result(timeout=self._timeout)
        except BaseException:
            self.close()
            raise
        if self._taken is not None:
            self._taken(extra)
        self._fill()  # a slot is free again: queue the next group before handing this one out
        self._ready.extend(batches)
        if not self._ready:  # an empty group (never made by the loader): go on to the next one
            return self.__next__()
        return self._ready.popleft()

    def close(self) -> None:
        """Stop: cancel queued reads; running ones finish, then their threads exit. Idempotent."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        for future in self._pending:
            future.cancel()
        self._pending.clear()
        self._ready.clear()
        pool.shutdown(wait=False, cancel_futures=True)

    def __del__(self) -> None:
        self.close()


def _ours(thread: threading.Thread) -> bool:
    return thread.name.startswith(THREAD_NAME_PREFIX)


def live_threads() -> list[threading.Thread]:
    """The loader threads alive in this process (of every loader)."""
    return [t for t in threading.enumerate() if _ours(t)]


_PROCESS_ONLY_KWARGS = ("multiprocessing_context", "worker_init_fn")


def thread_settings(method: Any, num_workers: int, kwargs: dict[str, Any]) -> tuple[int, int, float] | None:
    """``(threads, prefetch_factor, timeout)`` for thread workers, None for torchdata's workers.

    With threads, ``prefetch_factor`` and ``timeout`` are ours (torchdata accepts them only with
    worker processes) and ``persistent_workers`` has nothing to keep: they are taken out of
    ``kwargs``.
    """
    if method not in ("process", "thread"):
        raise ValueError(f"parallel_method must be 'process' or 'thread', got {method!r}")
    if method == "process" or num_workers == 0:
        return None
    for name in _PROCESS_ONLY_KWARGS:
        if kwargs.get(name) is not None:
            raise ValueError(
                f"{name}= applies to worker processes; with parallel_method='thread' the workers "
                "are threads of this process: leave it out, or use parallel_method='process'"
            )
        kwargs.pop(name, None)
    kwargs.pop("persistent_workers", None)
    prefetch = kwargs.pop("prefetch_factor", None)
    prefetch = 2 if prefetch is None else positive_int("prefetch_factor", prefetch)
    timeout = kwargs.pop("timeout", 0) or 0
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
        raise ValueError(f"timeout must be a non-negative number of seconds, got {timeout!r}")
    return num_workers, prefetch, float(timeout)
