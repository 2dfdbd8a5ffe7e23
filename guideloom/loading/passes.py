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

__all__ = ["Pass", "Progress", "TimedPass"]


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
    never what was prefetched or already copied to the device. `TimedPass` also times the loop's
    waits.
    """

    def __init__(
        self,
        start: Callable[[], tuple[Iterator[Any], list[Any]]],
        progress: Progress,
        length: int,
    ) -> None:
        """``start()`` -> ``(batches, closers)``, called at the first ``next``: a framework may
        call ``set_epoch`` between ``iter(loader)`` and the first batch (Lightning does), and the
        pass reads the epoch it set."""
        self._start: Callable[[], tuple[Iterator[Any], list[Any]]] | None = start
        self._batches: Iterator[Any] = iter(())
        self._progress = progress
        self._closers: list[Any] = []  # objects whose close/_shutdown_workers ends the pass's workers
        self._length = length

    def __iter__(self) -> Pass:
        return self

    def _begin(self) -> None:
        start, self._start = self._start, None
        if start is not None:
            self._batches, self._closers = start()

    def __next__(self) -> Any:
        if self._start is not None:
            self._begin()
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


class TimedPass(Pass):
    """A `Pass` that adds the seconds each ``next`` took (a batch, the pass's end or an error:
    the loop waited) to its progress's ``wait_s``, which `guideloom.loading.metrics.LoaderMeter`
    reads. The body is `Pass.__next__`'s with the two clock reads: it runs once per batch, so it
    makes no further call."""

    def __next__(self, _clock: Callable[[], float] = perf_counter) -> Any:
        began = _clock()
        if self._start is not None:
            self._begin()
        progress = self._progress
        try:
            batch = next(self._batches)
        except StopIteration:
            progress.ended = True
            progress.wait_s += _clock() - began
            raise
        except BaseException:
            progress.wait_s += _clock() - began
            raise
        progress.received += 1
        progress.wait_s += _clock() - began
        return batch
