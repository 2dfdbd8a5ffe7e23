"""A dataset root on any fsspec filesystem, and byte ranges of the files under it.

`Location` is the one object that talks to fsspec. It adds what GuideLoom needs on top of it and
nothing else: atomic whole-file writes, half-open byte ranges (only fsspec builds ``Range``
headers), a few retries on transient network errors under one total deadline per operation,
translation of every backend error into `guideloom.errors` once (`guideloom.io.failures`), and
fork safety: the filesystem object is created lazily in each process, because an s3fs
instance used in a parent process does not work in a forked DataLoader worker.

`Location` itself holds the filesystem, paths and listings; its mixins hold the rest, one
concern each: `guideloom.io.requests` (retries under the deadline, throttling slots, error
translation, request counts), `guideloom.io.reads` (whole files and batches of ranges, planned
by `guideloom.io.ranges`) and `guideloom.io.writes` (atomic writes, creates, deletes). What
differs by store is asked of the location's backend (`self.backend`, `guideloom.io.backends`),
found once by protocol. Shard files are read through `guideloom.io.shards`, which checks sizes
and lengths against the manifest.

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

import builtins
import functools
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import fsspec
import fsspec.asyn

import guideloom.layout as layout
from guideloom.errors import ManifestError, UnknownProtocolError
from guideloom.io.backends import DEFAULT_BACKEND, Backend, backend_for, backend_of_fs
from guideloom.io.failures import (
    DEADLINE_ENV,
    DEADLINE_OPTION,
)
from guideloom.io.reads import Reads
from guideloom.io.requests import DEFAULT_DEADLINE_S
from guideloom.io.urls import redact_url
from guideloom.io.writes import CLAIM_LEASE_S, Writes

__all__ = [
    "CLAIM_LEASE_S",
    "DEADLINE_ENV",
    "DEADLINE_OPTION",
    "DEFAULT_DEADLINE_S",
    "Location",
    "endpoint_of",
]

_T = TypeVar("_T")
_R = TypeVar("_R")


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


@functools.lru_cache(maxsize=8192)
def _plain_relative(rel: str) -> bool:
    """Whether `guideloom.layout.check_relative_path` accepts ``rel``, remembered: a loader
    joins the same shard paths again and again (its checks cost more than the join)."""
    try:
        layout.check_relative_path(rel, "path")
    except ValueError:
        return False
    return True


class Location(Reads, Writes):
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
        """Full path of ``rel`` inside the filesystem (no protocol).

        Raises:
            ManifestError: ``rel`` is not a plain relative path (`guideloom.layout.check_relative_path`):
                nothing outside the dataset root is ever opened, whatever a file there names.
        """
        _ = self.fs
        if not rel:
            return self._root
        if type(rel) is not str or not _plain_relative(rel):
            try:
                layout.check_relative_path(rel, "path")
            except ValueError as err:
                raise ManifestError(f"refusing a path outside {self.display_url}: {err}") from None
        return f"{self._root}/{rel}"

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


def _install_hint(url: str) -> str:
    """What to install for ``url``'s protocol (the extra that brings its fsspec backend)."""
    protocol = url.partition("://")[0] if "://" in url else ""
    extra = backend_for(url).extra if protocol else None
    if extra is None:
        return "install the fsspec backend for this protocol (see fsspec's list of implementations)"
    return (
        f"for {protocol}:// install guideloom[{extra[0]}] ({extra[1]}): pip install 'guideloom[{extra[0]}]'"
    )
