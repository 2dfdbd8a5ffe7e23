"""A dataset root on any fsspec filesystem, and byte ranges of the files under it.

This is the only module that talks to fsspec. It adds what GuideLoom needs on top of it and
nothing else: atomic whole-file writes, half-open byte ranges (only fsspec builds ``Range``
headers), short-read detection, a few retries on transient network errors under one total
deadline per operation, translation of every backend error into `guideloom.errors` once,
and fork safety: the filesystem object is created lazily in each process, because an s3fs
instance used in a parent process does not work in a forked DataLoader worker.

The deadline: every operation (one read, one batch of ranges, one write, one listing), retries
included, ends within ``deadline_s`` seconds (default `DEFAULT_DEADLINE_S`; set it with
the ``deadline_s`` argument, the storage option ``guideloom_deadline_s``, which is not passed
on to fsspec, or the environment variable ``GUIDELOOM_IO_DEADLINE_S``). Past it the operation
fails with `guideloom.errors.StorageTimeoutError` naming the endpoint and the file.
On async filesystems (s3fs, HTTP, GCS) the deadline cancels the request in flight.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import fsspec
import fsspec.asyn
from fsspec.implementations.local import LocalFileSystem

from guideloom.errors import (
    BucketNotFoundError,
    GuideLoomError,
    StorageAccessError,
    StorageTimeoutError,
    UnknownProtocolError,
)
from guideloom.io.urls import redact_url

__all__ = ["DEADLINE_ENV", "DEADLINE_OPTION", "DEFAULT_DEADLINE_S", "Location"]

T = TypeVar("T")

DEFAULT_DEADLINE_S = 120.0  # seconds one storage operation may take, retries included
DEADLINE_ENV = "GUIDELOOM_IO_DEADLINE_S"
DEADLINE_OPTION = "guideloom_deadline_s"  # a storage option GuideLoom takes out for itself

_TRANSIENT = (ConnectionError, TimeoutError)
# Raised by aiohttp when a body ends early or the server drops the connection: worth a retry.
_TRANSIENT_NAMES = {"ClientPayloadError", "ServerDisconnectedError", "ClientOSError", "ContentLengthError"}
_UNREACHABLE = {
    "EndpointConnectionError",
    "ConnectTimeoutError",
    "ClientConnectorError",
    "ConnectionRefusedError",
}
_BACKEND_MODULES = (
    "aiohttp",
    "botocore",
    "aiobotocore",
    "s3fs",
    "fsspec",
    "urllib3",
    "requests",
    "gcsfs",
    "adlfs",
)
_RETRIES = 3
_MAX_CONCURRENT_RANGES = 64  # range requests in flight at once for one batch
# s3fs's client (aiobotocore) keeps at most 10 connections by default, which would queue most of
# the ranges above; GuideLoom asks for as many as it sends, unless the user set the option.
_S3_PROTOCOLS = ("s3://", "s3a://")
POOL_OPTION = "max_pool_connections"  # in s3fs's config_kwargs (botocore's Config)
# Merging ranges that are close, not only touching: a gap of up to DEFAULT_MAX_GAP bytes is read
# through when that saves a request, as long as all gaps read through stay within
# DEFAULT_GAP_BUDGET of the bytes asked for (read amplification <= 1 + budget).
DEFAULT_MAX_GAP = 256 * 2**10  # a few milliseconds of transfer: less than a request costs
DEFAULT_GAP_BUDGET = 0.05


class _DeadlineExceeded(Exception):
    """Internal: an operation ran out of its total time; ``last`` is the error seen before."""

    def __init__(self, seconds: float, attempts: int, last: BaseException | None) -> None:
        super().__init__(f"no answer within {seconds:g} s")
        self.seconds, self.attempts, self.last = seconds, attempts, last


def _is_transient(err: BaseException) -> bool:
    if type(err).__name__ == "FSTimeoutError":
        return False  # our own deadline, handled by the caller
    return isinstance(err, _TRANSIENT) or type(err).__name__ in _TRANSIENT_NAMES


def _is_backend_error(err: BaseException) -> bool:
    module = type(err).__module__.split(".", 1)[0]
    return isinstance(err, OSError) or module in _BACKEND_MODULES or type(err).__name__ == "TimeoutError"


def _bucket_missing(err: BaseException) -> bool:
    """Whether the backend said the bucket is missing (some servers give no message: then only
    the botocore error class in the chain tells)."""
    seen: BaseException | None = err
    for _ in range(5):
        if seen is None:
            return False
        text = str(seen)
        if (
            type(seen).__name__ == "NoSuchBucket"
            or "NoSuchBucket" in text
            or "bucket does not exist" in text.lower()
        ):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class Location:
    """A directory-like root (``s3://bucket/prefix``, ``/data/x``, ``memory://x``) on fsspec.

    Paths given to methods are relative to the root and use ``/``. Byte ranges are half-open
    ``[start, end)`` and counted from the start of the file.
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
        self._pid = -1
        self._root = ""
        _ = self.fs  # resolve the protocol now, so an unknown one fails at construction

    # -- the filesystem, per process ---------------------------------------------------------

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        if self._fs is None or self._pid != os.getpid():
            try:
                fs, root = fsspec.core.url_to_fs(self.url, **self._fs_options())
            except ImportError as err:
                raise UnknownProtocolError(
                    f"{self.display_url}: the package for this protocol is not installed ({err}); "
                    "for s3:// install guideloom[s3] (s3fs)"
                ) from err
            except ValueError as err:
                if "Protocol not known" in str(err):
                    raise UnknownProtocolError(
                        f"{self.display_url}: unknown protocol ({err}); use a local path or an "
                        "fsspec URL such as s3://bucket/prefix, gs://..., memory://..."
                    ) from err
                raise
            self._fs, self._root, self._pid = fs, root.rstrip("/"), os.getpid()
        return self._fs

    def _fs_options(self) -> dict[str, Any]:
        """The options given to fsspec: the user's, plus an S3 connection pool as large as the
        number of ranges fetched at once (where the user did not choose one)."""
        options = dict(self.storage_options)
        if self.url.startswith(_S3_PROTOCOLS):
            config = dict(options.get("config_kwargs") or {})
            config.setdefault(POOL_OPTION, _MAX_CONCURRENT_RANGES)
            options["config_kwargs"] = config
            if "session" not in options and "profile" not in options:
                options["session"] = _s3_session()
        return options

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, LocalFileSystem)

    def path(self, rel: str) -> str:
        """Full path of ``rel`` inside the filesystem (no protocol)."""
        _ = self.fs
        return f"{self._root}/{rel}" if rel else self._root

    def describe(self, rel: str) -> str:
        """``rel`` as a redacted URL, for messages."""
        return f"{self.display_url}/{rel}" if rel else self.display_url

    @property
    def endpoint(self) -> str:
        """The endpoint this location's requests go to, as tried (redacted), for messages.

        Taken from the live client where there is one (so it is right however it was given:
        ``client_kwargs.endpoint_url``, a top-level ``endpoint_url``, ``FSSPEC_S3_ENDPOINT_URL``,
        ``AWS_ENDPOINT_URL``), else from the options and environment as s3fs would read them.
        """
        fs = self._fs
        client = getattr(fs, "_s3", None)
        url = getattr(getattr(client, "meta", None), "endpoint_url", None)
        if not url:
            url = getattr(fs, "endpoint_url", None) or (getattr(fs, "client_kwargs", None) or {}).get(
                "endpoint_url"
            )
        if not url:
            opts = self.storage_options
            url = (
                opts.get("endpoint_url")
                or (opts.get("client_kwargs") or {}).get("endpoint_url")
                or os.environ.get("FSSPEC_S3_ENDPOINT_URL")
                or os.environ.get("AWS_ENDPOINT_URL_S3")
                or os.environ.get("AWS_ENDPOINT_URL")
            )
        if url:
            return redact_url(str(url))
        if self.url.startswith(("s3://", "s3a://")):
            return "the AWS default endpoint (no endpoint_url given)"
        return "(the default for this protocol)"

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_fs"], state["_pid"] = None, -1
        return state

    def __repr__(self) -> str:
        return f"Location({self.display_url!r})"

    # -- error translation and retries ----------------------------------------------------------

    @contextmanager
    def _translated(self, action: str, rel: str) -> Iterator[None]:
        where = self.describe(rel)
        try:
            yield
        except GuideLoomError:
            raise
        except _DeadlineExceeded as err:
            last = f"; last error: {type(err.last).__name__}: {_safe(err.last)}" if err.last else ""
            raise StorageTimeoutError(
                f"{action} {where}: no complete answer from the storage endpoint {self.endpoint} "
                f"within {err.seconds:g} s ({err.attempts} attempt(s){last}). Check that the "
                f"endpoint is up and reachable, or allow more time ({DEADLINE_ENV}, or the storage "
                f"option {DEADLINE_OPTION})"
            ) from err.last
        except FileNotFoundError as err:
            if _bucket_missing(err):
                raise BucketNotFoundError(
                    f"{action} {where}: the bucket does not exist at the endpoint {self.endpoint}; "
                    "create the bucket first, or check its name and the endpoint_url"
                ) from err
            if action == "writing":
                raise FileNotFoundError(
                    f"{action} {where}: the bucket or parent directory does not exist; create the "
                    "bucket first (or check its name and the endpoint_url)"
                ) from err
            raise FileNotFoundError(f"{action} {where}: not found") from err
        except PermissionError as err:
            raise StorageAccessError(
                f"{action} {where}: access denied ({type(err).__name__}: {_safe(err)}). Check the "
                "credentials (storage_options key/secret or the AWS_* environment variables), the "
                "endpoint_url, and that the bucket exists and you may use it"
            ) from err
        except Exception as err:
            if type(err).__name__ in _UNREACHABLE:  # botocore / aiohttp: nothing answered
                raise StorageAccessError(
                    f"{action} {where}: could not connect to the storage endpoint {self.endpoint} "
                    f"({type(err).__name__}). Check the endpoint_url (storage_options endpoint_url "
                    "or client_kwargs.endpoint_url, FSSPEC_S3_ENDPOINT_URL, AWS_ENDPOINT_URL) and "
                    "that the server is running"
                ) from err
            if not _is_backend_error(err):
                raise  # a bug or a bad argument, not the storage: keep it as it is
            if isinstance(err, OSError) and _looks_like_access_problem(err):
                raise StorageAccessError(
                    f"{action} {where}: the storage refused the request ({_safe(err)}). Check the "
                    "credentials, the endpoint_url and the bucket name"
                ) from err
            raise StorageAccessError(
                f"{action} {where}: the storage endpoint {self.endpoint} failed "
                f"({type(err).__name__}: {_safe(err)}) after retries. It may be overloaded or "
                "the object damaged on the server; retry later, and run `guideloom verify` if it "
                "persists"
            ) from err

    def _call(self, method: str, *args: Any, deadline: float | None = None, **kwargs: Any) -> Any:
        """``fs.<method>(*args, **kwargs)`` with retries on transient errors, all within the
        deadline (passed to async filesystems as fsspec's ``timeout``, which cancels the request).
        ``deadline`` is a ``time.monotonic()`` instant; default: ``deadline_s`` from now."""
        fs = self.fs
        if deadline is None:
            deadline = time.monotonic() + self.deadline_s
        last: BaseException | None = None
        for attempt in range(1, _RETRIES + 1):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _DeadlineExceeded(self.deadline_s, attempt - 1, last)
            try:
                if getattr(fs, "async_impl", False):
                    return getattr(fs, method)(*args, timeout=remaining, **kwargs)
                return getattr(fs, method)(*args, **kwargs)
            except Exception as err:
                if type(err).__name__ == "FSTimeoutError" or (
                    isinstance(err, TimeoutError) and time.monotonic() >= deadline
                ):
                    raise _DeadlineExceeded(self.deadline_s, attempt, last) from None
                if not _is_transient(err) or attempt == _RETRIES:
                    raise
                last = err
                time.sleep(min(0.2 * 2 ** (attempt - 1), max(0.0, deadline - time.monotonic())))
        raise AssertionError("unreachable")  # pragma: no cover

    # -- reading ---------------------------------------------------------------------------------

    def read(self, rel: str, start: int | None = None, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` of a file (the whole file when both are None)."""
        with self._translated("reading", rel):
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
        whole file where it comes for free with the bytes: local files (``fstat``) and S3 (the
        ``Content-Range`` header of the ranged GET). A file that grew past what a caller expects
        is then caught without another request; other filesystems leave it out.
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
        return [bytes(views[i][a:b]) for i, a, b in merged.slices]

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
        for attempt in range(1, _RETRIES + 1):
            with self._translated("reading", label):
                got = self._ranges_once(
                    [paths[i] for i in todo],
                    [starts[i] for i in todo],
                    [ends[i] for i in todo],
                    deadline,
                    totals,
                )
            failed = []
            for i, blob in zip(todo, got):
                if isinstance(blob, _DeadlineExceeded):
                    blob.attempts = attempt
                    with self._translated("reading", rels[i]):
                        raise blob
                if isinstance(blob, BaseException):
                    failed.append((i, blob))
                else:
                    out[i] = blob
            if not failed:
                return
            final = attempt == _RETRIES or not all(_is_transient(e) for _, e in failed)
            if final or time.monotonic() >= deadline:
                i, err = next(((i, e) for i, e in failed if not _is_transient(e)), failed[0])
                with self._translated("reading", rels[i]):
                    raise err
            todo = [i for i, _ in failed]
            time.sleep(min(0.2 * 2 ** (attempt - 1), max(0.0, deadline - time.monotonic())))

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
        a range that never completes is reported as itself (a ``_DeadlineExceeded``), and the
        others still arrive. On S3, ``totals`` gets each file's whole size from the responses."""
        fs = self.fs
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return [_DeadlineExceeded(self.deadline_s, 0, None)] * len(paths)
        if not getattr(fs, "async_impl", False):
            result: list[Any] = self._call(
                "cat_ranges", paths, starts, ends, on_error="return", deadline=deadline
            )
            return result
        limit = asyncio.Semaphore(_MAX_CONCURRENT_RANGES)
        ranged_get = _s3_ranged_get if type(fs).__name__ == "S3FileSystem" else None

        async def one(path: str, start: int, end: int) -> Any:
            async with limit:
                try:
                    if ranged_get is not None and end > start:
                        data, total = await asyncio.wait_for(ranged_get(fs, path, start, end), remaining)
                        if totals is not None and total is not None:
                            totals[path] = total
                        return data
                    # Keyword arguments: s3fs's second positional argument is a version id.
                    return await asyncio.wait_for(fs._cat_file(path, start=start, end=end), remaining)
                except asyncio.TimeoutError:
                    return _DeadlineExceeded(self.deadline_s, 1, None)
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

    def sizes_under(self, rel: str) -> dict[str, int]:
        """Every file below ``rel`` (recursively), as relative path -> size in bytes; empty if
        there is none. One listing (paginated by the backend), not one request per file."""
        with self._translated("listing", rel):
            path = self.path(rel)
            self.fs.invalidate_cache(path)
            try:
                found = self._call("find", path, detail=True)
            except FileNotFoundError:
                return {}
        base = len(self._root) + 1 if self._root else 0
        out = {}
        for full, info in found.items():
            if info.get("type", "file") == "file":
                out[full.rstrip("/")[base:]] = int(info.get("size") or 0)
        return out

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
        parts = [chunks] if isinstance(chunks, (bytes, bytearray, memoryview)) else list(chunks)
        with self._translated("writing", rel):
            path = self.path(rel)
            if self.is_local:
                directory = os.path.dirname(path)
                os.makedirs(directory, exist_ok=True)
                tmp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
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

    def delete(self, rel: str, recursive: bool = False) -> None:
        """Remove a file (or a tree with ``recursive``); missing is fine."""
        with self._translated("deleting", rel):
            try:
                self._call("rm", self.path(rel), recursive=recursive)
            except FileNotFoundError:
                pass


_BOTOCORE_LOADER: Any = None  # botocore's data loader: the JSON models it has read stay cached
_S3_SESSION: tuple[Any, Any] = (None, None)  # ((pid, AWS_* environment), aiobotocore session)


def _s3_session() -> Any:
    """One aiobotocore session per process, all sharing one botocore data loader.

    A new S3 client reads botocore's models of S3 (a few MB of JSON) before its first request,
    about 0.13 s here. DataLoader workers are forked from the training process, so a loader that
    the parent has filled is inherited already parsed: each worker's session registers it, and
    its first request skips that work. One session per process also keeps fsspec's instance
    cache sharing one filesystem between the datasets of a process, as without a session. A
    session caches the credentials it found, so a change to the ``AWS_*`` environment starts a
    new one."""
    global _BOTOCORE_LOADER, _S3_SESSION
    key = (os.getpid(), tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_"))))
    held, session = _S3_SESSION
    if held != key or session is None:
        from aiobotocore.session import AioSession

        session = AioSession()
        if _BOTOCORE_LOADER is None:
            _BOTOCORE_LOADER = session.get_component("data_loader")
        else:
            session.register_component("data_loader", _BOTOCORE_LOADER)
        _S3_SESSION = (key, session)
    return session


async def _s3_ranged_get(fs: Any, path: str, start: int, end: int) -> tuple[bytes, int | None]:
    """Bytes ``[start, end)`` of an S3 object, and the object's whole size from the response's
    ``Content-Range`` (``bytes a-b/size``; None if the server leaves it out). s3fs's own
    ``_cat_file`` returns only the body; this is the same single GET (``_call_s3`` translates
    backend errors and retries throttling, as it does for ``_cat_file``)."""
    bucket, key, version = fs.split_path(path)
    extra = {"VersionId": version} if version else {}
    resp = await fs._call_s3("get_object", Bucket=bucket, Key=key, Range=f"bytes={start}-{end - 1}", **extra)
    try:
        data = await resp["Body"].read()
    finally:
        resp["Body"].close()
    return data, _content_range_total(resp.get("ContentRange"))


def _content_range_total(header: str | None) -> int | None:
    """The size after the slash of a ``Content-Range`` header (``bytes 0-99/1234`` -> 1234)."""
    if not header or "/" not in header:
        return None
    tail = header.rsplit("/", 1)[1].strip()
    return int(tail) if tail.isdigit() else None


class _Merged:
    def __init__(self) -> None:
        self.requests: list[tuple[str, int, int]] = []  # (rel, start, end) actually fetched
        self.slices: list[tuple[int, int, int]] = []  # per asked range: (request, start, end)


def merge_ranges(
    rels: Sequence[str],
    starts: Sequence[int],
    ends: Sequence[int],
    max_gap: int,
    gap_budget: float | None = None,
) -> _Merged:
    """Plan requests: ranges of one file that touch or overlap become one request, and so do
    ranges at most ``max_gap`` bytes apart. With ``gap_budget`` (a fraction), gaps are read
    through smallest first only while their bytes add up to at most ``gap_budget`` times the
    bytes asked for, so the plan fetches at most ``1 + gap_budget`` times what was asked."""
    order = sorted(range(len(rels)), key=lambda i: (rels[i], starts[i]))
    bridged = _bridged_gaps(order, rels, starts, ends, max_gap, gap_budget)
    out = _Merged()
    out.slices = [(0, 0, 0)] * len(rels)
    current = -1
    for k, i in enumerate(order):
        rel, start, end = rels[i], int(starts[i]), int(ends[i])
        if end < start:
            raise ValueError(f"byte range [{start}, {end}) of {rel} is reversed")
        if current >= 0:
            c_rel, c_start, c_end = out.requests[current]
            if c_rel == rel and (start <= c_end or (k in bridged and start <= c_end + max_gap)):
                out.requests[current] = (rel, c_start, max(c_end, end))
                out.slices[i] = (current, start - c_start, end - c_start)
                continue
        out.requests.append((rel, start, end))
        current = len(out.requests) - 1
        out.slices[i] = (current, 0, end - start)
    return out


def _bridged_gaps(
    order: list[int],
    rels: Sequence[str],
    starts: Sequence[int],
    ends: Sequence[int],
    max_gap: int,
    gap_budget: float | None,
) -> set[int]:
    """Positions ``k`` in ``order`` whose range may be joined to the request before it across a
    gap: every gap of at most ``max_gap`` bytes without a budget, else the smallest such gaps
    while their sum stays within ``gap_budget`` of the bytes asked for."""
    if max_gap <= 0:
        return set()
    gaps: list[tuple[int, int]] = []  # (gap bytes, position in order)
    reach = -1  # end of the bytes covered so far in the current file
    asked = 0
    for k, i in enumerate(order):
        start, end = int(starts[i]), int(ends[i])
        asked += max(0, end - start)
        if k and rels[i] == rels[order[k - 1]]:
            gap = start - reach
            if 0 < gap <= max_gap:
                gaps.append((gap, k))
            reach = max(reach, end)
        else:
            reach = end
    if gap_budget is None:
        return {k for _, k in gaps}
    allowed = gap_budget * asked
    chosen: set[int] = set()
    spent = 0
    for gap, k in sorted(gaps):
        if spent + gap > allowed:
            break
        spent += gap
        chosen.add(k)
    return chosen


def _safe(err: BaseException) -> str:
    # Backend messages name buckets and keys, never secrets; cut them short anyway.
    return str(err).splitlines()[0][:300] if str(err) else type(err).__name__


def _looks_like_access_problem(err: OSError) -> bool:
    text = str(err)
    return any(
        code in text
        for code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "Forbidden", "403")
    )
