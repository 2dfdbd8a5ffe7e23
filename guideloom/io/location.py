"""A dataset root on any fsspec filesystem, and byte ranges of the files under it.

`Location` is the one object that talks to fsspec. It adds what GuideLoom needs on top of it and
nothing else: atomic whole-file writes, half-open byte ranges (only fsspec builds ``Range``
headers), a few retries on transient network errors under one total deadline per operation,
translation of every backend error into `guideloom.errors` once (`guideloom.io.failures`), and
fork safety: the filesystem object is created lazily in each process, because an s3fs
instance used in a parent process does not work in a forked DataLoader worker. Batches of
ranges are planned by `guideloom.io.ranges` and, on S3, fetched with the client pieces of
`guideloom.io.s3`. Shard files are read through `guideloom.io.shards`, which checks sizes and
lengths against the manifest.

The deadline: every operation (one read, one batch of ranges, one write, one listing), retries
included, ends within ``deadline_s`` seconds (default `DEFAULT_DEADLINE_S`; set it with
the ``deadline_s`` argument, the storage option ``guideloom_deadline_s``, which is not passed
on to fsspec, or the environment variable ``GUIDELOOM_IO_DEADLINE_S``). Past it the operation
fails with `guideloom.errors.StorageTimeoutError` naming the endpoint and the file.
On async filesystems (s3fs, HTTP, GCS) the deadline cancels the request in flight.

Throttling: on remote async filesystems every request takes a slot of its store's adaptive
limit first (`guideloom.io.throttle`: halved on a throttling answer, raised by one per round
of successes). Throttling answers are retried with backoff until the deadline, not a fixed
number of times; throttling that lasts the whole deadline fails with a message saying so.
"""

from __future__ import annotations

import asyncio
import builtins
import os
import random
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import fsspec
import fsspec.asyn

from guideloom.errors import CommitConflictError, UnknownProtocolError
from guideloom.io import s3, stats, throttle
from guideloom.io.backends import DEFAULT_BACKEND, Backend, backend_for, backend_of_fs
from guideloom.io.failures import (
    DEADLINE_ENV,
    DEADLINE_OPTION,
    DeadlineExceeded,
    ThrottledError,
    is_deadline,
    is_throttled,
    is_transient,
    translated,
)
from guideloom.io.ranges import DEFAULT_GAP_BUDGET, DEFAULT_MAX_GAP, merge_ranges
from guideloom.io.urls import redact_url

__all__ = ["DEADLINE_ENV", "DEADLINE_OPTION", "DEFAULT_DEADLINE_S", "Location", "endpoint_of"]

_T = TypeVar("_T")
_R = TypeVar("_R")
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
CLAIM_LEASE_S = 30.0  # a claim on a name older than this is a crashed writer's (`create`)


def endpoint_of(fs: Any, url: str, options: dict[str, Any]) -> str | None:
    """The endpoint requests for ``url`` go to (redacted), for messages; None on local disk.

    Taken from the live filesystem ``fs`` where there is one (so it is right however it was
    given), else from ``options`` and the environment as the backend would read them. Only an
    ``s3://`` URL looks at the ``AWS_*`` variables: a local path or another store is never
    blamed on the S3 endpoint. The store's backend (`guideloom.io.backends`) decides.
    """
    backend = backend_for(url)
    if backend is DEFAULT_BACKEND and fs is not None:
        backend = backend_of_fs(fs)
    return backend.endpoint(fs, url, options)


class Location:
    """A directory-like root (``s3://bucket/prefix``, ``/data/x``, ``memory://x``) on fsspec.

    Paths given to methods are relative to the root and use ``/``. Byte ranges are half-open
    ``[start, end)`` and counted from the start of the file. Every request runs under a total
    I/O deadline, retries transient failures and raises GuideLoom's errors, naming the URL and
    the endpoint.

    Args:
        url: The root: a local path or an fsspec URL.
        storage_options: fsspec options of the filesystem (endpoint, credentials, ...).
        deadline_s: Seconds each operation may take in all, retries included (default: the
            ``GUIDELOOM_IO_DEADLINE_S`` environment variable, else the built-in default).
    """

    def __init__(
        self,
        url: str | os.PathLike[str],
        storage_options: dict[str, Any] | None = None,
        *,
        deadline_s: float | None = None,
    ):
        self.url = os.fspath(url)
        if "://" not in self.url:
            self.url = os.path.abspath(self.url)
        self.display_url = redact_url(self.url).rstrip("/")
        self.storage_options = dict(storage_options or {})
        option = self.storage_options.pop(DEADLINE_OPTION, None)
        chosen = deadline_s if deadline_s is not None else option
        if chosen is None:
            chosen = os.environ.get(DEADLINE_ENV) or DEFAULT_DEADLINE_S
        try:
            self.deadline_s = float(chosen)
        except (TypeError, ValueError):
            raise ValueError(f"the storage deadline must be a number of seconds, got {chosen!r}") from None
        if not self.deadline_s > 0:
            raise ValueError(f"the storage deadline must be positive seconds, got {self.deadline_s}")
        self._fs: fsspec.AbstractFileSystem | None = None
        # What differs by store, looked up once by protocol (`guideloom.io.backends`).
        self.backend: Backend = backend_for(self.url)
        self._pid = -1
        self._root = ""
        fs = self.fs  # resolve the protocol now, so an unknown one fails at construction
        if self.backend is DEFAULT_BACKEND:  # a URL fsspec resolved to a store we know
            self.backend = backend_of_fs(fs)
        # Where `guideloom.io.stats` counts this location's requests (None: local disk, uncounted).
        protocol = self.url.partition("://")[0] if "://" in self.url else "file"
        self._store: str | None = None if self.is_local else " ".join(filter(None, (protocol, self.endpoint)))

    # -- the filesystem, per process ---------------------------------------------------------

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        if self._fs is None or self._pid != os.getpid():
            try:
                fs, root = fsspec.core.url_to_fs(self.url, **self._fs_options())
            except ImportError as err:
                raise UnknownProtocolError(
                    f"{self.display_url}: the package for this protocol is not installed ({err}); "
                    f"{_install_hint(self.url)}"
                ) from err
            except ValueError as err:
                if "Protocol not known" in str(err):
                    raise UnknownProtocolError(
                        f"{self.display_url}: unknown protocol ({err}); use a local path or an "
                        "fsspec URL such as s3://bucket/prefix, gs://..., memory://..."
                    ) from err
                raise
            self.backend.prepare(fs)
            self._fs, self._root, self._pid = fs, root.rstrip("/"), os.getpid()
        return self._fs

    def _fs_options(self) -> dict[str, Any]:
        """The options given to fsspec: the user's, plus on S3 a connection pool as large as the
        number of ranges fetched at once (where the user did not choose one)."""
        return self.backend.fs_options(self.storage_options)

    @property
    def is_local(self) -> bool:
        return self.backend.is_local

    def path(self, rel: str) -> str:
        """Full path of ``rel`` inside the filesystem (no protocol)."""
        _ = self.fs
        return f"{self._root}/{rel}" if rel else self._root

    def describe(self, rel: str) -> str:
        """``rel`` as a redacted URL, for messages."""
        return f"{self.display_url}/{rel}" if rel else self.display_url

    @property
    def endpoint(self) -> str | None:
        """The endpoint this location's requests go to, as tried (redacted), for messages; None
        for local disk (no endpoint: an error there is never blamed on one). See `endpoint_of`."""
        return self.backend.endpoint(self._fs, self.url, self.storage_options)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_fs"], state["_pid"] = None, -1
        return state

    def __repr__(self) -> str:
        return f"Location({self.display_url!r})"

    # -- error translation and retries ----------------------------------------------------------

    def _translated(self, action: str, rel: str) -> AbstractContextManager[None]:
        """Backend errors of the body as `guideloom.errors` naming ``rel`` (see `translated`)."""
        return translated(action, self.describe(rel), lambda: self.endpoint)

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

    # -- reading ---------------------------------------------------------------------------------

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
        gap_budget: float = DEFAULT_GAP_BUDGET,
        *,
        totals: dict[str, int] | None = None,
    ) -> list[bytes]:
        """Many byte ranges at once, each ``[start, end)`` of file ``rel``.

        Ranges of one file that touch or overlap are merged into one request; so are ranges at
        most ``max_gap`` bytes apart (default: `DEFAULT_MAX_GAP` on remote filesystems, 0 on
        local disk), smallest gaps first, while the gap bytes read through stay within
        ``gap_budget`` of the bytes asked for. Remote filesystems fetch the requests
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
        merged = merge_ranges(rels, starts, ends, max_gap, gap_budget)
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

    # Other processes write these files: never answer from fsspec's listings cache.

    def exists(self, rel: str) -> bool:
        with self._translated("checking", rel):
            self.fs.invalidate_cache(self.path(rel))
            return bool(self._call("exists", self.path(rel)))

    def size(self, rel: str) -> int:
        with self._translated("checking the size of", rel):
            self.fs.invalidate_cache(self.path(rel))
            return int(self._call("size", self.path(rel)))

    def list(self, rel: str) -> list[str]:
        """Names (not paths) directly under ``rel``; empty if it does not exist."""
        with self._translated("listing", rel):
            try:
                self.fs.invalidate_cache(self.path(rel))
                entries = self._call("ls", self.path(rel), detail=False)
            except FileNotFoundError:
                return []
        return sorted(e.rstrip("/").rsplit("/", 1)[-1] for e in entries)

    def _files_under(self, rel: str) -> dict[str, dict[str, Any]]:
        """Every file below ``rel`` (recursively) as relative path -> the backend's details, from
        one listing (paginated by the backend); empty if there is none."""
        with self._translated("listing", rel):
            path = self.path(rel)
            self.fs.invalidate_cache(path)
            try:
                found = self._call("find", path, detail=True)
            except FileNotFoundError:
                return {}
        base = len(self._root) + 1 if self._root else 0
        return {
            full.rstrip("/")[base:]: info
            for full, info in found.items()
            if info.get("type", "file") == "file"
        }

    def sizes_under(self, rel: str) -> dict[str, int]:
        """Every file below ``rel`` (recursively), as relative path -> size in bytes; empty if
        there is none. One listing (paginated by the backend), not one request per file."""
        return {name: int(info.get("size") or 0) for name, info in self._files_under(rel).items()}

    def modified_under(self, rel: str) -> dict[str, float]:
        """Every file below ``rel`` as relative path -> last-modified time (seconds since the
        epoch; 0.0 where the store does not say). One listing, like `sizes_under`."""
        out: dict[str, float] = {}
        for name, info in self._files_under(rel).items():
            when: Any = info.get("mtime", info.get("LastModified", info.get("last_modified")))
            if hasattr(when, "timestamp"):
                when = when.timestamp()
            out[name] = float(when or 0.0)
        return out

    def each(self, read: Callable[[_T], _R], items: Sequence[_T], threads: int = 8) -> builtins.list[_R]:
        """``[read(item) for item in items]``, in order: on up to ``threads`` threads where each
        read waits on a request (remote stores), one after another on local disk (no request
        latency to overlap) or for a single item."""
        if len(items) <= 1 or self.is_local:
            return [read(item) for item in items]
        with ThreadPoolExecutor(max_workers=min(threads, len(items))) as pool:
            return list(pool.map(read, items))

    def local_path(self, rel: str) -> str:
        """The OS path of a file on a local filesystem (for positioned reads)."""
        if not self.is_local:
            raise ValueError(f"{self.describe(rel)} is not on a local filesystem")
        return self.path(rel)

    # -- writing ---------------------------------------------------------------------------------

    def write(self, rel: str, chunks: bytes | Sequence[bytes | memoryview]) -> None:
        """Write a whole file so that readers see the old file or the new one, never a mix.

        Local disk: a temporary file in the same directory, then an atomic rename. Object
        stores: one PUT (a multipart upload also appears at once, when it completes).
        """
        self.backend.refuse_write(self.describe(rel))
        parts = [chunks] if isinstance(chunks, (bytes, bytearray, memoryview)) else list(chunks)
        with self._translated("writing", rel):
            path = self.path(rel)
            if self.is_local:
                tmp = _temp_beside(path)
                try:
                    with open(tmp, "wb") as f:
                        for part in parts:
                            f.write(part)
                    os.replace(tmp, path)
                except BaseException:
                    if os.path.exists(tmp):
                        os.unlink(tmp)
                    raise
            else:
                data = parts[0] if len(parts) == 1 else b"".join(parts)
                self._call("pipe_file", path, bytes(data))

    def create(self, rel: str, data: bytes, claims: str | None = None) -> bool:
        """Write a new file only if none is at ``rel``: True if this call created it, False if
        a file was already there (then nothing is written).

        Local disk: a temporary file, then ``os.link`` to the name (atomic; fails if the name
        exists). Object stores: a conditional PUT (``If-None-Match: *``) where the endpoint
        honours it (`conditional_writes`). Elsewhere, with ``claims`` (a folder for this one
        name), writers claim the name first (`_create_by_claim`); without it, a check then a
        PUT, which two writers racing within one request's time can both pass.
        """
        self.backend.refuse_write(self.describe(rel))
        with self._translated("creating", rel):
            path = self.path(rel)
            if self.is_local:
                tmp = _temp_beside(path)
                with open(tmp, "wb") as f:
                    f.write(data)
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    return False
                finally:
                    os.unlink(tmp)
                return True
            if self.conditional_writes():
                try:
                    self._call("pipe_file", path, bytes(data), mode="create")
                except FileExistsError:
                    return False
                return True
        if claims is not None:
            return self._create_by_claim(rel, data, claims)
        with self._translated("creating", rel):
            if self._exists_now(path):
                return False
            self._call("pipe_file", path, bytes(data))
            return True

    def _exists_now(self, path: str) -> bool:
        self.fs.invalidate_cache(path)
        return bool(self._call("exists", path))

    def _create_by_claim(self, rel: str, data: bytes, claims: str) -> bool:
        """`create` on a store that ignores ``If-None-Match``, safe for any number of writers
        on a store whose listings show every finished write (S3, GCS and Azure are strongly
        consistent; so is Ceph RGW within one zone).

        A writer PUTs a claim of its own (a new, unique name) into ``claims``, then lists the
        folder, and creates ``rel`` only if its claim is the only live one there. Of two claims,
        the one written second is listed beside the first, so two writers never both see
        themselves alone; when each sees the other, both withdraw and try again after a random
        pause. A claim older than `CLAIM_LEASE_S` (by the store's clock, against this writer's
        own claim) is a crashed writer's and does not count. What is left unsafe: a writer that
        pauses for longer than the lease between its listing and its PUT of ``rel``.
        """
        path = self.path(rel)
        mine = f"{claims}/{time.time_ns():020d}-{uuid.uuid4().hex}"
        give_up = time.monotonic() + 2 * CLAIM_LEASE_S  # a crashed writer's claim goes stale first
        round_ = 0
        while True:
            with self._translated("creating", rel):
                if self._exists_now(path):
                    return False
            self.write(mine, b"")
            try:
                live = self._live_claims(claims, mine)
                if live == [mine]:
                    with self._translated("creating", rel):
                        if self._exists_now(path):  # taken while this writer claimed
                            return False
                        self._call("pipe_file", path, bytes(data))
                    return True
            finally:
                self.delete(mine)
            if time.monotonic() >= give_up:
                break
            time.sleep(random.uniform(0.02, 0.1) * 2 ** min(round_, 4))
            round_ += 1
        raise CommitConflictError(
            f"creating {self.describe(rel)}: other writers kept claiming the same name for "
            f"{2 * CLAIM_LEASE_S:g} s; this store ignores conditional writes (If-None-Match), so "
            "writers take turns by claims. Try again, or commit from fewer writers at once"
        )

    def _live_claims(self, claims: str, mine: str) -> builtins.list[str]:
        """The claims under ``claims`` that are not stale (`CLAIM_LEASE_S`), as relative paths;
        stale ones are removed on the way."""
        listed = self.modified_under(claims)
        own = listed.get(mine)
        live = []
        for name, when in listed.items():
            if own and when and when < own - CLAIM_LEASE_S:
                self.delete(name)  # a crashed writer's claim
                continue
            live.append(name)
        return sorted(live)

    def conditional_writes(self) -> bool:
        """Whether the store refuses a second create of one name (``If-None-Match: *``):
        detected once per endpoint and process, by creating a probe object twice."""
        key = self.endpoint or self.url.partition("://")[0]  # no endpoint: one answer per protocol
        known = _CONDITIONAL.get(key)
        if known is not None:
            return known
        if self.is_local:
            _CONDITIONAL[key] = True
            return True
        probe = self.path(f".guideloom-probe-{uuid.uuid4().hex}")
        supported = False
        try:
            self._call("pipe_file", probe, b"1", mode="create")
            self._call("pipe_file", probe, b"2", mode="create")
        except FileExistsError:
            supported = True  # the second create was refused
        except (OSError, ValueError, TypeError):
            supported = False  # the filesystem has no conditional create
        finally:
            try:
                self._call("rm", probe)
            except (OSError, FileNotFoundError):
                pass
        _CONDITIONAL[key] = supported
        return supported

    def delete(self, rel: str, recursive: bool = False) -> None:
        """Remove a file (or a tree with ``recursive``); missing is fine."""
        self.backend.refuse_write(self.describe(rel))
        with self._translated("deleting", rel):
            try:
                self._call("rm", self.path(rel), recursive=recursive)
            except FileNotFoundError:
                pass


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


def _temp_beside(path: str) -> str:
    """A fresh temporary name in ``path``'s folder (made if missing), for a file that then
    takes ``path`` in one atomic step (rename or link)."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    return os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")


def _install_hint(url: str) -> str:
    """What to install for ``url``'s protocol (the extra that brings its fsspec backend)."""
    protocol = url.partition("://")[0] if "://" in url else ""
    extra = backend_for(url).extra if protocol else None
    if extra is None:
        return "install the fsspec backend for this protocol (see fsspec's list of implementations)"
    return (
        f"for {protocol}:// install guideloom[{extra[0]}] ({extra[1]}): pip install 'guideloom[{extra[0]}]'"
    )
