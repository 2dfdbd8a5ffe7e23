"""Reading files of a `guideloom.io.location.Location`: whole files, and many byte ranges at
once (planned by `guideloom.io.ranges`, fetched concurrently on remote stores, with each file's
whole size where the store's backend reports it). A mixin of `Location`.
"""

from __future__ import annotations

import asyncio
import builtins
import os
import time
from collections.abc import Sequence
from typing import Any

import fsspec
import fsspec.asyn

from guideloom.io import stats, throttle
from guideloom.io.failures import DeadlineExceeded, is_throttled, is_transient
from guideloom.io.ranges import DEFAULT_MAX_GAP, current_gap_budget, merge_ranges
from guideloom.io.requests import _RETRIES, Requests, _backoff, _throttled_last

__all__ = ["Reads"]

_CURRENT: Any = object()  # read_ranges' default gap budget: the context's (`gap_budget`)


class Reads(Requests):
    """`read` and `read_ranges` (see the module docstring)."""

    def read(self, rel: str, start: int | None = None, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` of a file (the whole file when both are None)."""
        with self._translated("reading", rel):
            checked = self.backend.read_from(start or 0, end)  # against the store's own headers
            if checked is not None:
                return bytes(self._call_async(checked, self.path(rel)))
            # Keyword arguments: s3fs's second positional argument is a version id.
            data = self._call("cat_file", self.path(rel), start=start, end=end)
        return bytes(data)

    def read_ranges(
        self,
        rels: Sequence[str],
        starts: Sequence[int],
        ends: Sequence[int],
        max_gap: int | None = None,
        gap_budget: Any = _CURRENT,
        *,
        totals: dict[str, int] | None = None,
    ) -> list[bytes]:
        """Many byte ranges at once, each ``[start, end)`` of file ``rel``.

        Ranges of one file that touch or overlap are merged into one request; so are ranges at
        most ``max_gap`` bytes apart (default: `DEFAULT_MAX_GAP` on remote filesystems, 0 on
        local disk), smallest gaps first, while the gap bytes read through stay within
        ``gap_budget`` of the bytes asked for (default: `guideloom.io.ranges.current_gap_budget`,
        `DEFAULT_GAP_BUDGET` unless a caller set another). Remote filesystems fetch the requests
        concurrently. A result shorter than asked means the file is shorter than expected;
        callers check lengths. ``totals``, when given, is filled with ``rel`` -> the size of the
        whole file where it comes for free with the bytes: local files (``fstat``), S3, GCS and
        Azure (the ``Content-Range`` of the ranged GET). A file that grew past what a caller
        expects is then caught without another request; other filesystems leave it out.
        """
        if not rels:
            return []
        if max_gap is None:
            max_gap = 0 if self.is_local else DEFAULT_MAX_GAP
        budget = current_gap_budget() if gap_budget is _CURRENT else gap_budget
        merged = merge_ranges(rels, starts, ends, max_gap, budget)
        paths = [self.path(r) for r, _, _ in merged.requests]
        req_starts = [s for _, s, _ in merged.requests]
        req_ends = [e for _, _, e in merged.requests]
        rel_of = [r for r, _, _ in merged.requests]
        blobs: list[Any] = [None] * len(paths)
        sizes: dict[str, int] | None = None if totals is None else {}
        if self.is_local:
            for i, (p, a, b) in enumerate(zip(paths, req_starts, req_ends)):
                with self._translated("reading", rel_of[i]):
                    blobs[i] = self._read_local(p, a, b, sizes)
        else:
            self._fetch_ranges(rel_of, paths, req_starts, req_ends, blobs, sizes)
        if totals is not None and sizes:
            totals.update({rel: sizes[p] for rel, p in zip(rel_of, paths) if p in sizes})
        views = [memoryview(b) for b in blobs]
        # A range that is a whole request (nothing merged into it) is handed over as fetched.
        return [
            blobs[i] if a == 0 and b == len(views[i]) and type(blobs[i]) is bytes else bytes(views[i][a:b])
            for i, a, b in merged.slices
        ]

    def _fetch_ranges(
        self,
        rels: list[str],
        paths: list[str],
        starts: list[int],
        ends: list[int],
        out: list[Any],
        totals: dict[str, int] | None = None,
    ) -> None:
        """Fill ``out`` with the ranges, fetched concurrently; ranges that fail transiently are
        fetched again (all within one deadline), and a range that keeps failing raises an error
        that names its own file."""
        deadline = time.monotonic() + self.deadline_s
        todo = list(range(len(paths)))
        files = sorted(set(rels))
        label = files[0] if len(files) == 1 else f"{files[0]} (and {len(files) - 1} more files)"
        failures = throttled = 0
        seen: dict[int, BaseException] = {}  # each range's last failure
        attempt = 0
        while True:
            attempt += 1
            with self._translated("reading", label):
                got = self._ranges_once(
                    [paths[i] for i in todo],
                    [starts[i] for i in todo],
                    [ends[i] for i in todo],
                    deadline,
                    totals,
                )
            if self._store is not None and getattr(self.fs, "async_impl", False):
                sent = [b for b in got if not (isinstance(b, DeadlineExceeded) and b.attempts == 0)]
                read = sum(len(b) for b in sent if isinstance(b, (bytes, bytearray, memoryview)))
                stats.record(self._store, "GET", read=read, retry=attempt > 1, n=len(sent))
            failed = []
            for i, blob in zip(todo, got):
                if isinstance(blob, DeadlineExceeded):
                    blob.attempts = attempt
                    if blob.last is None and i in seen:
                        blob.last = seen[i]
                    with self._translated("reading", rels[i]):
                        raise blob
                if isinstance(blob, BaseException):
                    failed.append((i, blob))
                    seen[i] = blob
                else:
                    out[i] = blob
            if not failed:
                return
            # Throttling answers are retried until the deadline; other failures a few times.
            slowed = all(is_throttled(e) for _, e in failed)
            if slowed:
                throttled += 1
            else:
                failures += 1
            final = failures >= _RETRIES or not all(is_transient(e) for _, e in failed)
            if final or time.monotonic() >= deadline:
                i, err = next(((i, e) for i, e in failed if not is_transient(e)), failed[0])
                if time.monotonic() >= deadline and is_throttled(err):
                    err = DeadlineExceeded(self.deadline_s, attempt, err)
                with self._translated("reading", rels[i]):
                    raise err
            todo = [i for i, _ in failed]
            pause = _backoff(failures, throttled if slowed else 0)
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))

    def _ranges_once(
        self,
        paths: list[str],
        starts: list[int],
        ends: list[int],
        deadline: float,
        totals: dict[str, int] | None = None,
    ) -> list[Any]:
        """One concurrent round of range requests; a failed range comes back as its exception.

        On async filesystems each range has its own timeout (the time left to ``deadline``), so
        a range that never completes is reported as itself (a ``DeadlineExceeded``), and the
        others still arrive. On S3, GCS and Azure, ``totals`` gets each file's whole size from the
        responses (`guideloom.io.stores`)."""
        fs = self.fs
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return [DeadlineExceeded(self.deadline_s, 0, None)] * len(paths)
        if not getattr(fs, "async_impl", False):
            result: list[Any] = self._call(
                "cat_ranges", paths, starts, ends, on_error="return", deadline=deadline
            )
            return result
        ranged_get = self.backend.sized_ranged_get()

        async def get(path: str, start: int, end: int) -> Any:
            if ranged_get is not None and end > start:
                data, total = await ranged_get(fs, path, start, end)
                if totals is not None and total is not None:
                    totals[path] = total
                return data
            # Keyword arguments: s3fs's second positional argument is a version id.
            return await fs._cat_file(path, start=start, end=end)

        async def one(path: str, start: int, end: int) -> Any:
            # Each range waits for a slot of the store's adaptive limit (`guideloom.io.throttle`).
            requests: builtins.list[throttle.Request] = []
            try:
                return await asyncio.wait_for(
                    self._slotted(fs, lambda: get(path, start, end), requests), remaining
                )
            except asyncio.TimeoutError:
                return DeadlineExceeded(self.deadline_s, 1, _throttled_last(None, requests))
            except Exception as err:  # returned, not raised: the caller names its file
                return err

        async def gather() -> list[Any]:
            return list(await asyncio.gather(*(one(p, a, b) for p, a, b in zip(paths, starts, ends))))

        results: list[Any] = fsspec.asyn.sync(fs.loop, gather)
        return results

    @staticmethod
    def _read_local(path: str, start: int, end: int, totals: dict[str, int] | None = None) -> bytes:
        with open(path, "rb") as f:
            if totals is not None:
                totals[path] = os.fstat(f.fileno()).st_size
            return os.pread(f.fileno(), end - start, start)
