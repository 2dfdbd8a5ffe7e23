"""Reading shard files: the one place that opens them, on every backend (`guideloom.types.ShardReader`).

A reader serves one dataset: its `Location` and the manifest's file table (`FileTable`), which
says where each shard's files are and how large they must be. A call takes a batch of byte
requests ``(shard, file, start, stop)`` and is one round of I/O.

* `LocalShardReader` (local disk): positioned reads (``pread``, or ``preadv`` straight into the
  caller's buffers) on descriptors kept open, up to `MAX_OPEN_FILES` (the oldest opened is
  closed first: a hit costs one dictionary lookup, no bookkeeping). A file's size is
  checked against the table once, when it is opened (``fstat``). Descriptors belong to the
  process that opened them: a forked child, or an unpickled copy, opens its own. Nothing is
  memory-mapped by a read: mapped pages of a file stay resident in the reading process, so its
  RSS would grow with the dataset, while positioned reads keep it flat (measured against a map
  with ``MADV_RANDOM``: large page-cache folios made each fault map about a megabyte, and keeping
  the map within 64 MiB brought it to 0.55x of positioned reads). Only small index files are
  mapped, by a caller that asks (`LocalShardReader.map_file`; the record starts of a stream).
* `RemoteShardReader` (object stores and other fsspec filesystems): the requests of a call are
  merged where close and fetched concurrently (`Location.read_ranges`); where the backend says
  how large the whole object is with the bytes (S3's ``Content-Range``), that size is checked
  against the table too, without a request of its own.

Either way a read shorter than asked is a `ShardCorruptError` and a missing file a
`ShardNotFoundError`, each naming the shard and the file. `open_shard_reader` decides between
them, once per location, from the store's backend (`guideloom.io.backends`): whether files are
local is io's business alone, and views only see the reader's interface.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

from guideloom.errors import ShardCorruptError, ShardNotFoundError
from guideloom.io.cache import BlockCache, CachedShardReader
from guideloom.io.location import Location
from guideloom.types import FileTable

__all__ = ["MAX_OPEN_FILES", "LocalShardReader", "RemoteShardReader", "open_shard_reader"]

MAX_OPEN_FILES = 128  # local descriptors a reader keeps open (the oldest opened goes first)
_IOV_MAX = 1024  # buffers one preadv takes (the POSIX limit on Linux)

Request = tuple[int, str, int, int]  # (shard, file, start, stop): a guideloom.types.ByteRequest

# Forks so far in this process's line (a child's count is one more than its parent's): a reader
# compares it with its own to know whether its descriptors are its process's, without asking
# for the process id on every read.
_FORKS = [0]


def _count_fork() -> None:
    _FORKS[0] += 1


os.register_at_fork(after_in_child=_count_fork)


def open_shard_reader(
    location: Location, table: FileTable, cache: BlockCache | None = None
) -> LocalShardReader | RemoteShardReader | CachedShardReader:
    """The reader for ``location``'s files: positioned reads on local disk, range requests
    elsewhere; with a ``cache`` (`guideloom.io.cache`), that reader behind the local block cache."""
    local = location.backend.is_local
    reader = LocalShardReader(location, table) if local else RemoteShardReader(location, table)
    if cache is None:
        return reader
    return CachedShardReader(reader, cache, f"{location.url}\0{location.endpoint}")


STALE_HINT = (
    "If the dataset was overwritten or rolled back after this storage read its manifest, and its "
    "old snapshots expired (`expire` deletes the files only they use; `guideloom verify` then "
    "passes, against the current one), call `storage.refresh()` and open the dataset (view, "
    "loader) again"
)


class _Reader:
    """What both readers share: the table, and the messages that name a damaged shard."""

    def __init__(self, location: Location, table: FileTable) -> None:
        self.location = location
        self._table = table

    @property
    def table(self) -> FileTable:
        return self._table

    def close(self) -> None:
        """Nothing to release here (see `LocalShardReader.close`)."""

    def _short(self, shard: int, file: str, start: int, stop: int, got: int) -> NoReturn:
        table = self._table
        raise ShardCorruptError(
            f"{table.shard_name(shard)}: {self.location.describe(table.path(shard, file))} "
            f"ended early: bytes [{start}, {stop}) were asked for, {got} came back; the manifest "
            f"records {table.size(shard, file)} bytes. The file is truncated: restore it or "
            "rewrite the dataset"
        )

    def _resized(self, shard: int, where: str, size: int, expected: int) -> NoReturn:
        raise ShardCorruptError(
            f"{self._table.shard_name(shard)}: {where} has {size} bytes but the manifest "
            f"records {expected}; the file was truncated or replaced. Restore it or "
            "rewrite the dataset"
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.location.display_url!r}, {len(self._table)} shards)"


class LocalShardReader(_Reader):
    """Shard files on local disk, read with positioned reads on cached descriptors."""

    def __init__(self, location: Location, table: FileTable) -> None:
        super().__init__(location, table)
        self._fds: dict[tuple[int, str], int] = {}
        self._generation = _FORKS[0]

    @property
    def local(self) -> bool:
        return True

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_fds"] = {}  # descriptors stay with the process (and object) that opened them
        return state

    def __del__(self) -> None:
        self.close()

    def close(self) -> None:
        """Close the cached descriptors (later reads open them again); a forked child leaves the
        parent's alone."""
        fds = getattr(self, "_fds", None)
        if fds and getattr(self, "_generation", None) == _FORKS[0]:
            for fd in fds.values():
                os.close(fd)
        if fds is not None:
            fds.clear()

    def descriptor(self, shard: int, file: str) -> int:
        """An open descriptor of shard ``shard``'s file ``file``, size-checked when it was
        opened; it stays open until this reader opens `MAX_OPEN_FILES` others after it.

        Raises:
            ShardNotFoundError: The file is missing.
            ShardCorruptError: The file's size is not the one the table records.
        """
        if self._generation != _FORKS[0]:
            self._forked()
        fd = self._fds.get((shard, file))
        return self._open(shard, file) if fd is None else fd

    def map_file(self, shard: int, file: str) -> memoryview | None:
        """A read-only memory map of the whole file (size-checked when its descriptor was
        opened); an empty file is an empty view."""
        import mmap

        fd = self.descriptor(shard, file)
        if os.fstat(fd).st_size == 0:
            return memoryview(b"")
        return memoryview(mmap.mmap(fd, 0, access=mmap.ACCESS_READ))

    def read(self, requests: Sequence[Request]) -> list[bytes]:
        """One ``pread`` per request, in order."""
        if self._generation != _FORKS[0]:
            self._forked()
        pread, fds, open_ = os.pread, self._fds, self._open
        out = []
        for shard, file, start, stop in requests:
            fd = fds.get((shard, file))
            if fd is None:
                fd = open_(shard, file)
            data = pread(fd, stop - start, start)
            if len(data) != stop - start:
                self._short(shard, file, start, stop, len(data))
            out.append(data)
        return out

    def read_iter(self, requests: Sequence[Request]) -> Iterator[bytes]:
        """One ``pread`` per request, each when the caller takes its bytes."""
        if self._generation != _FORKS[0]:
            self._forked()
        pread, fds, open_ = os.pread, self._fds, self._open
        for shard, file, start, stop in requests:
            fd = fds.get((shard, file))
            if fd is None:
                fd = open_(shard, file)
            data = pread(fd, stop - start, start)
            if len(data) != stop - start:
                self._short(shard, file, start, stop, len(data))
            yield data

    def read_into(self, requests: Sequence[Request], buffers: Sequence[Sequence[memoryview]]) -> None:
        """One ``preadv`` per request, straight into its buffers."""
        if len(requests) != len(buffers):
            raise ValueError(f"{len(requests)} requests but {len(buffers)} lists of buffers")
        if self._generation != _FORKS[0]:
            self._forked()
        preadv, fds, open_ = os.preadv, self._fds, self._open
        for (shard, file, start, stop), bufs in zip(requests, buffers):
            fd = fds.get((shard, file))
            if fd is None:
                fd = open_(shard, file)
            try:
                got = preadv(fd, bufs, start)
            except OSError as err:  # more buffers than one call takes: a few calls
                if err.errno != errno.EINVAL or len(bufs) <= _IOV_MAX:
                    raise
                got = _preadv_all(fd, bufs, start)
            if got != stop - start:
                self._short(shard, file, start, stop, got)

    def _forked(self) -> None:
        """In a forked child: the inherited descriptors are the parent's (shared offsets, closed
        by the parent at will); forget them, without closing, and open our own."""
        self._fds = {}
        self._generation = _FORKS[0]

    def _open(self, shard: int, file: str) -> int:
        """Open a file, check its size, and keep its descriptor (the oldest kept is closed
        beyond `MAX_OPEN_FILES`: a reader's calls look each descriptor up just before use, so
        none in use is closed)."""
        table = self._table
        path = self.location.local_path(table.path(shard, file))
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise ShardNotFoundError(
                f"{table.shard_name(shard)}: {path} is missing. {STALE_HINT}; otherwise restore "
                "it or rewrite the dataset"
            ) from None
        size, expected = os.fstat(fd).st_size, table.size(shard, file)
        if size != expected:
            os.close(fd)
            self._resized(shard, path, size, expected)
        fds = self._fds
        fds[(shard, file)] = fd
        while len(fds) > MAX_OPEN_FILES:
            os.close(fds.pop(next(iter(fds))))
        return fd


class RemoteShardReader(_Reader):
    """Shard files behind range requests: one call is one round of merged, concurrent requests."""

    @property
    def local(self) -> bool:
        return False

    def map_file(self, shard: int, file: str) -> memoryview | None:
        return None  # behind requests: nothing to map

    def read(self, requests: Sequence[Request]) -> list[bytes]:
        """The requests merged where close and fetched concurrently, each checked for length and,
        where the backend reports it, the whole file's size."""
        if not requests:
            return []
        table = self._table
        rels = [table.path(shard, file) for shard, file, _, _ in requests]
        totals: dict[str, int] = {}
        try:
            blobs = self.location.read_ranges(
                rels, [r[2] for r in requests], [r[3] for r in requests], totals=totals
            )
        except FileNotFoundError as err:
            raise ShardNotFoundError(self._missing(requests, rels, err)) from err
        for blob, rel, (shard, file, start, stop) in zip(blobs, rels, requests):
            if len(blob) != stop - start:
                self._short(shard, file, start, stop, len(blob))
            # The server said how big the whole object is (S3's Content-Range): a file that grew
            # or was replaced is caught here, without a request of its own.
            total = totals.get(rel)
            if total is not None and total != table.size(shard, file):
                self._resized(shard, self.location.describe(rel), total, table.size(shard, file))
        return blobs

    def read_iter(self, requests: Sequence[Request]) -> Iterator[bytes]:
        """`read` (the whole round first), handed out one request at a time."""
        return iter(self.read(requests))

    def read_into(self, requests: Sequence[Request], buffers: Sequence[Sequence[memoryview]]) -> None:
        """`read`, then each request's bytes copied into its buffers in order."""
        if len(requests) != len(buffers):
            raise ValueError(f"{len(requests)} requests but {len(buffers)} lists of buffers")
        for blob, bufs in zip(self.read(requests), buffers):
            if len(bufs) == 1:
                bufs[0][:] = blob
                continue
            view, pos = memoryview(blob), 0
            for buf in bufs:
                end = pos + buf.nbytes
                buf[:] = view[pos:end]
                pos = end

    def _missing(self, requests: Sequence[Request], rels: list[str], err: FileNotFoundError) -> str:
        """The message for a missing file: the shard whose file the backend's error names."""
        text = str(err)
        for (shard, _, _, _), rel in zip(requests, rels):
            if rel in text:
                return (
                    f"{self._table.shard_name(shard)}: {self.location.describe(rel)} is missing. "
                    f"{STALE_HINT}; otherwise run `guideloom verify` to list the damaged shards, "
                    "then restore or rewrite them"
                )
        return (
            f"a shard file of {self.location.display_url} is missing ({err}). {STALE_HINT}; "
            "otherwise run `guideloom verify` to list the damaged shards, then restore or rewrite them"
        )


def _preadv_all(fd: int, buffers: Sequence[memoryview], offset: int) -> int:
    """``preadv`` of more buffers than one call takes, `_IOV_MAX` at a time; bytes read in all
    (it stops at the first short call, as the end of the file is reached there)."""
    got = 0
    for k in range(0, len(buffers), _IOV_MAX):
        chunk = buffers[k : k + _IOV_MAX]
        n = os.preadv(fd, chunk, offset + got)
        got += n
        if n != sum(b.nbytes for b in chunk):
            break
    return got
