"""One pass over the loader as the training loop sees it: batches counted on delivery (no torch).

What `guideloom.loading.loader.StatefulDataLoader.state_dict` describes is what the loop has
*received* of the current pass (`Progress`), never what workers prefetched or what was already
copied to the device; and whether the pass ended, which decides where a state saved at an
epoch's end resumes (torchdata's rule, see `guideloom.loading.state`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from time import perf_counter
from typing import Any

__all__ = ["Pass", "Progress"]


class Progress:
    """What the training loop has seen of the current pass (what ``state_dict`` counts):
    batches received, and whether the pass ended (it raised ``StopIteration``)."""

    def __init__(self) -> None:
        self.received = 0
        self.ended = False
        self.wait_s = 0.0  # seconds the loop spent in ``next()`` (a timed pass only)


class Pass:
    """One pass as the training loop sees it: the batches of any worker kind, counted on delivery.

    ``batches`` is torchdata's iterator (worker processes), the inline generator
    (``num_workers=0``) or a `guideloom.loading.threads.ThreadBatches`, optionally behind the
    device stage (`guideloom.loading.placement.Placed`). Only what the loop has received counts,
    never what was prefetched or already copied to the device.
    """

    def __init__(
        self,
        start: Callable[[], tuple[Iterator[Any], list[Any]]],
        progress: Progress,
        length: int,
        timed: bool = False,
    ) -> None:
        """``start()`` -> ``(batches, closers)``, called at the first ``next``: a framework may
        call ``set_epoch`` between ``iter(loader)`` and the first batch (Lightning does), and the
        pass reads the epoch it set. ``timed``: add the seconds each ``next`` took to the
        progress's ``wait_s`` (`guideloom.loading.metrics.LoaderMeter` reads it)."""
        self._start: Callable[[], tuple[Iterator[Any], list[Any]]] | None = start
        self._batches: Iterator[Any] = iter(())
        self._progress = progress
        self._closers: list[Any] = []  # objects whose close/_shutdown_workers ends the pass's workers
        self._length = length
        self._timed = timed

    def __iter__(self) -> Pass:
        return self

    def __next__(self) -> Any:
        if not self._timed:
            return self._next()
        progress = self._progress
        began = perf_counter()
        try:
            batch = self._next()
        finally:  # a batch, the pass's end (StopIteration) or an error: the loop waited
            progress.wait_s += perf_counter() - began
        return batch

    def _next(self) -> Any:
        if self._start is not None:
            start, self._start = self._start, None
            self._batches, self._closers = start()
        try:
            batch = next(self._batches)
        except StopIteration:
            self._progress.ended = True
            raise
        self._progress.received += 1
        return batch

    def __len__(self) -> int:
        return self._length

    def close(self) -> None:
        """End the pass now: stop its worker threads or processes."""
        self._start = None
        for c in self._closers:
            stop = getattr(c, "close", None) or getattr(c, "_shutdown_workers", None)
            if stop is not None:
                stop()

    _shutdown_workers = close  # the name torch's iterators use
