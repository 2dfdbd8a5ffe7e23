"""Requests in flight per store, adapted to throttling (additive increase, multiplicative decrease).

Object stores answer "slow down" when a prefix gets more requests than it can serve (S3 503
``SlowDown``, GCS 429, Azure 503 ``ServerBusy``). Readers that keep sending at the same rate
make it worse, so every request `guideloom.io.location.Location` sends to a remote store takes a
slot of its store's `Concurrency` first (one per store and process, shared by every reader,
writer and thread of the process; DataLoader worker processes each have their own):

* the limit starts at the store's fixed maximum (`guideloom.io.s3.MAX_CONCURRENT_RANGES`);
* a throttling answer halves it (floor 1), at most once per round trip: only an answer to a
  request sent after the last cut cuts again, so one burst of answers to requests already in
  flight is one halving, not a collapse to 1;
* each window of successes as large as the limit (one round of it) raises it by 1, up to the
  maximum.

On S3 each answer is seen as it arrives, also those botocore and s3fs retry themselves
(`guideloom.io.s3.watch_throttling`); on GCS and Azure, when the client library raises it.
The counts go to `guideloom.io.stats` (``throttled``, ``concurrency_min``).
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TypeVar

from guideloom.io import stats
from guideloom.io.failures import throttle_answer

__all__ = ["Concurrency", "Request", "concurrency", "limited", "note_throttled"]

T = TypeVar("T")


class _Waiter:
    __slots__ = ("future", "granted", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop, future: asyncio.Future[None]) -> None:
        self.loop, self.future, self.granted = loop, future, False


class Concurrency:
    """The adaptive limit of requests in flight to one store (see the module's text).

    Thread-safe, and usable from any event loop (the waiters are woken on their own loop)."""

    def __init__(self, store: str, maximum: int) -> None:
        self.store = store
        self.maximum = max(1, int(maximum))
        self.limit = self.maximum
        self.lowest = self.maximum
        self.throttled = 0
        self._in_flight = 0
        self._epoch = 0  # rises at each cut; a request remembers the epoch it was sent in
        self._successes = 0
        self._lock = threading.Lock()
        self._waiters: deque[_Waiter] = deque()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def acquire(self) -> int:
        """Wait for a slot; returns the epoch the request is sent in (for `throttle`)."""
        with self._lock:
            if self._in_flight < self.limit and not self._waiters:
                self._in_flight += 1
                return self._epoch
            loop = asyncio.get_running_loop()
            waiter = _Waiter(loop, loop.create_future())
            self._waiters.append(waiter)
        try:
            await waiter.future
        except BaseException:
            with self._lock:
                if waiter.granted:  # woken, then cancelled: hand the slot on
                    self._in_flight -= 1
                    self._wake()
                else:
                    self._waiters.remove(waiter)
            raise
        with self._lock:
            return self._epoch

    def release(self) -> None:
        with self._lock:
            self._in_flight -= 1
            self._wake()

    def _wake(self) -> None:  # under the lock
        while self._waiters and self._in_flight < self.limit:
            waiter = self._waiters.popleft()
            waiter.granted = True
            self._in_flight += 1
            waiter.loop.call_soon_threadsafe(_resolve, waiter.future)

    def throttle(self, epoch: int) -> bool:
        """A throttling answer to a request sent in ``epoch``: halve the limit if it was sent
        since the last cut (True when it cut). Counted in `guideloom.io.stats`."""
        with self._lock:
            self.throttled += 1
            cut = epoch == self._epoch
            if cut:
                self.limit = max(1, self.limit // 2)
                self.lowest = min(self.lowest, self.limit)
                self._epoch += 1
                self._successes = 0
            limit = self.limit
        stats.record_throttled(self.store, limit)
        return cut

    def success(self, epoch: int) -> None:
        """An answer (not throttled) to a request sent in ``epoch``: one more of the window."""
        if self.limit >= self.maximum:  # the common case: nothing to do, no lock
            return
        with self._lock:
            if epoch != self._epoch or self.limit >= self.maximum:
                return
            self._successes += 1
            if self._successes >= self.limit:
                self.limit += 1
                self._successes = 0
                self._wake()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


_LOCK = threading.Lock()
_CONTROLS: dict[str, Concurrency] = {}
_PID = os.getpid()


def concurrency(store: str, maximum: int) -> Concurrency:
    """This process's `Concurrency` for ``store`` (made on first use; a forked process starts
    afresh, with its own limit)."""
    global _CONTROLS, _PID
    with _LOCK:
        if os.getpid() != _PID:
            _CONTROLS, _PID = {}, os.getpid()
        found = _CONTROLS.get(store)
        if found is None:
            found = _CONTROLS[store] = Concurrency(store, maximum)
        return found


class Request:
    """One request under a slot: its epoch, and the throttling answers seen for it."""

    __slots__ = ("answer", "control", "epoch", "throttled")

    def __init__(self, control: Concurrency, epoch: int) -> None:
        self.control, self.epoch, self.throttled, self.answer = control, epoch, 0, ""


_CURRENT: contextvars.ContextVar[Request | None] = contextvars.ContextVar("guideloom_request", default=None)


def note_throttled(answer: str) -> None:
    """A throttling answer to the request the running task sends (called from the S3 client's
    answer hook, also for the answers botocore and s3fs retry themselves); nothing outside
    `limited`."""
    request = _CURRENT.get()
    if request is not None:
        request.throttled += 1
        request.answer = answer
        request.control.throttle(request.epoch)


async def limited(
    control: Concurrency, make: Callable[[], Awaitable[T]], request: list[Request] | None = None
) -> T:
    """``await make()`` under a slot of ``control``; throttling answers lower the limit, others
    count toward raising it. ``request``, when given, gets the `Request` (its ``throttled``
    count tells a caller whose request ran out of time that it was throttled)."""
    epoch = await control.acquire()
    current = Request(control, epoch)
    if request is not None:
        request.append(current)
    token = _CURRENT.set(current)
    try:
        result = await make()
    except BaseException as err:
        answer = throttle_answer(err) if current.throttled == 0 and isinstance(err, Exception) else None
        if answer is not None:  # raised by the client (GCS, Azure): not seen by a hook
            current.throttled += 1
            current.answer = answer
            control.throttle(epoch)
        raise
    finally:
        _CURRENT.reset(token)
        control.release()
    if current.throttled == 0:
        control.success(epoch)
    return result
