"""Requests to a store: retries within one deadline, throttling slots, error translation and
the counts in `guideloom.io.stats`. A mixin of `guideloom.io.location.Location`.

The deadline: every operation (one read, one batch of ranges, one write, one listing), retries
included, ends within ``deadline_s`` seconds; on async filesystems (s3fs, HTTP, GCS) it cancels
the request in flight. Throttling answers are retried with backoff until the deadline, other
transient failures `_RETRIES` times; on remote async filesystems every request takes a slot of
its store's adaptive limit first (`guideloom.io.throttle`).
"""

from __future__ import annotations

import asyncio
import builtins
import random
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import fsspec
import fsspec.asyn

from guideloom.io import s3, stats, throttle
from guideloom.io.backends import Backend, texts_for
from guideloom.io.failures import (
    DeadlineExceeded,
    ThrottledError,
    is_deadline,
    is_throttled,
    is_transient,
    translated,
)

__all__ = ["DEFAULT_DEADLINE_S", "Requests"]

DEFAULT_DEADLINE_S = 120.0  # seconds one storage operation may take, retries included

_RETRIES = 3
# What `_call`'s methods send, for `guideloom.io.stats` (others count as their own name).
_REQUEST_KINDS = {
    "cat_file": "GET",
    "cat_ranges": "GET",
    "pipe_file": "PUT",
    "exists": "HEAD",
    "size": "HEAD",
    "info": "HEAD",
    "find": "LIST",
    "ls": "LIST",
    "rm": "DELETE",
}
_CONDITIONAL: dict[str, bool] = {}  # endpoint -> whether it honours If-None-Match: * (probed once)


class Requests:
    """What every operation of a `Location` goes through (see the module docstring)."""

    # Set by `guideloom.io.location.Location`, whose mixin this is.
    url: str
    deadline_s: float
    backend: Backend
    _store: str | None

    if TYPE_CHECKING:

        @property
        def fs(self) -> Any: ...

        @property
        def endpoint(self) -> str | None: ...

        @property
        def is_local(self) -> bool: ...

        def path(self, rel: str) -> str: ...

        def describe(self, rel: str) -> str: ...

    def _translated(self, action: str, rel: str) -> AbstractContextManager[None]:
        """Backend errors of the body as `guideloom.errors` naming ``rel`` (see `translated`)."""
        return translated(action, self.describe(rel), lambda: self.endpoint, texts_for(self.backend))

    def _call(self, method: str, *args: Any, deadline: float | None = None, **kwargs: Any) -> Any:
        """``fs.<method>(*args, **kwargs)`` with retries on transient errors, all within the
        deadline (passed to async filesystems as fsspec's ``timeout``, which cancels the request).
        ``deadline`` is a ``time.monotonic()`` instant; default: ``deadline_s`` from now."""
        fs = self.fs
        attempts = [0]
        requests: list[throttle.Request] = []

        def once(remaining: float) -> Any:
            attempts[0] += 1
            result: Any = None
            try:
                coroutine = getattr(fs, f"_{method}", None) if getattr(fs, "async_impl", False) else None
                if coroutine is not None and asyncio.iscoroutinefunction(coroutine):
                    # The async implementation, under fsspec's timeout: some backends (adlfs)
                    # define sync methods of their own that take no ``timeout``. It waits for
                    # a slot of the store's adaptive limit (`guideloom.io.throttle`).
                    result = fsspec.asyn.sync(
                        fs.loop,
                        self._slotted,
                        fs,
                        lambda: coroutine(*args, **kwargs),
                        requests,
                        timeout=remaining,
                    )
                else:
                    result = getattr(fs, method)(*args, **kwargs)
                return result
            finally:
                if self._store is not None:
                    # (in a finally clause, exc_info is the exception on its way out, if any)
                    missing = sys.exc_info()[0] is FileNotFoundError or result is False or result == []
                    self._count(
                        method, args, result, attempts[0] > 1, missing and self.backend.missing_costs_list
                    )

        return self._retrying(once, deadline, requests)

    def _concurrency(self) -> throttle.Concurrency:
        """This process's adaptive limit of requests in flight to this location's store."""
        return throttle.concurrency(self._store or self.url.partition("://")[0], s3.MAX_CONCURRENT_RANGES)

    async def _slotted(
        self, fs: Any, make: Callable[[], Any], requests: builtins.list[throttle.Request] | None = None
    ) -> Any:
        """``await make()`` under a slot of the store's limit (`throttle.limited`); where the
        store's client can, it reports each throttling answer as it comes
        (`Backend.watch_throttling`)."""
        await self.backend.watch_throttling(fs)
        return await throttle.limited(self._concurrency(), make, requests)

    def _count(
        self, method: str, args: tuple[Any, ...], result: Any, retry: bool, s3_missing: bool = False
    ) -> None:
        """Count one attempt of `_call` in `guideloom.io.stats` (requests by kind, bytes).
        ``s3_missing``: S3 found nothing, after which s3fs sends one more request, billed as a
        LIST: a HEAD that finds no object lists the key as a folder prefix, and a listing that
        comes back empty lists the folder's parent."""
        kind = _REQUEST_KINDS.get(method, method.upper())
        if s3_missing and (kind == "HEAD" or method == "ls"):
            stats.record(self._store or "", "LIST", retry=retry)
        if method == "cat_ranges":  # one GET per range
            if args and args[0]:
                stats.record(self._store or "", kind, retry=retry, n=len(args[0]))
            return
        read = len(result) if kind == "GET" and isinstance(result, (bytes, bytearray, memoryview)) else 0
        written = len(args[1]) if method == "pipe_file" and len(args) > 1 else 0
        stats.record(self._store or "", kind, read=read, written=written, retry=retry)

    def _call_async(self, function: Callable[..., Any], *args: Any) -> Any:
        """``await function(fs, *args)`` on the filesystem's loop, retried like `_call` (one
        ``GET`` in `guideloom.io.stats` per attempt)."""
        fs = self.fs
        attempts = [0]
        requests: list[throttle.Request] = []

        def once(remaining: float) -> Any:
            attempts[0] += 1
            data = b""
            try:
                data = fsspec.asyn.sync(
                    fs.loop, self._slotted, fs, lambda: function(fs, *args), requests, timeout=remaining
                )
                return data
            finally:
                if self._store is not None:
                    stats.record(self._store, "GET", read=len(data), retry=attempts[0] > 1)

        return self._retrying(once, None, requests)

    def _retrying(
        self,
        once: Callable[[float], Any],
        deadline: float | None,
        requests: builtins.list[throttle.Request] | None = None,
    ) -> Any:
        """``once(seconds left)`` until it returns, retrying transient errors within the deadline:
        a few times, except throttling answers, retried with backoff until the deadline.
        ``requests`` (filled by `_slotted`) tells whether an attempt cut off by the deadline
        was being throttled."""
        if deadline is None:
            deadline = time.monotonic() + self.deadline_s
        last: BaseException | None = None
        failures = throttled = 0
        attempt = 0
        while True:
            attempt += 1
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DeadlineExceeded(self.deadline_s, attempt - 1, _throttled_last(last, requests))
            try:
                return once(remaining)
            except Exception as err:
                if is_deadline(err) or (isinstance(err, TimeoutError) and time.monotonic() >= deadline):
                    raise DeadlineExceeded(
                        self.deadline_s, attempt, _throttled_last(last, requests)
                    ) from None
                if is_throttled(err):
                    throttled += 1
                else:
                    failures += 1
                if not is_transient(err) or failures >= _RETRIES:
                    raise
                last = err
                pause = _backoff(failures, throttled if is_throttled(err) else 0)
                time.sleep(min(pause, max(0.0, deadline - time.monotonic())))


def _backoff(failures: int, throttled: int) -> float:
    """Seconds to wait before the next attempt: after a throttling answer (``throttled``-th in a
    row) a jittered, growing pause of up to 2 s (readers that throttle together do not come back
    together); after another failure 0.2 s, doubling."""
    if throttled:
        return random.uniform(0.5, 1.0) * min(2.0, 0.1 * 2 ** (throttled - 1))
    return 0.2 * 2 ** max(0, failures - 1)


def _throttled_last(
    last: BaseException | None, requests: builtins.list[throttle.Request] | None
) -> BaseException | None:
    """The error to name when the deadline cut an attempt off: ``last``, or a `ThrottledError`
    when the store was throttling the attempts (seen by `throttle`) and ``last`` says nothing
    of it."""
    if last is not None and is_throttled(last):
        return last
    slowed = [r for r in requests or () if r.throttled]
    if slowed:
        return ThrottledError(sum(r.throttled for r in slowed), slowed[-1].answer)
    return last
