"""Reading items out of shard files: positioned reads on local disk, range requests elsewhere.

Readers ask for "items ``[a, b)`` of file kind K of shard s" and get a ``uint8`` array of exactly
those bytes. On local disk that is one ``pread`` on a cached file descriptor (or a ``preadv``
straight into the caller's output). Nothing is memory-mapped: mapped pages of a file stay
resident in the reading process (Linux maps up to 16 neighbouring cached pages on each fault),
so a reader's RSS would grow with the dataset, while positioned reads cost about half a
microsecond more per read and keep it flat. On any other filesystem the requests of one batch
are merged where adjacent and fetched together with concurrent range requests. Small per-shard
index files are fetched whole, once, and cached. Every file is checked against the manifest's
size before its bytes are used.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from guideloom.errors import ShardCorruptError, ShardNotFoundError
from guideloom.io import Location
from guideloom.manifest import Manifest
from guideloom.storage import layout

__all__ = ["ItemRequest", "ShardAccess"]

_MAX_OPEN_FILES = 128  # local file descriptors kept open
_MAX_CACHED_INDEXES = 256  # per-shard index files kept in memory


class ItemRequest(NamedTuple):
    shard: int  # row in the manifest's shard table
    file: str  # "data", "index", "meta" or "spans"
    start: int  # first item
    stop: int  # one past the last item
    itemsize: int  # bytes per item


class ShardAccess:
    """Byte access to the files of one dataset's shards. Picklable; safe to fork."""

    def __init__(self, location: Location, manifest: Manifest) -> None:
        self.location = location
        self.table = manifest.shard_table
        self._fds: OrderedDict[tuple[int, str], int] = OrderedDict()
        self._whole: OrderedDict[tuple[int, str], np.ndarray] = OrderedDict()
        self._pid = os.getpid()

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state["_fds"], state["_whole"] = OrderedDict(), OrderedDict()
        return state

    def __del__(self) -> None:
        self.close()

    def close(self) -> None:
        """Close the cached local file descriptors (reads reopen them)."""
        fds = getattr(self, "_fds", None)
        if fds and getattr(self, "_pid", None) == os.getpid():
            for fd in fds.values():
                os.close(fd)
        if fds is not None:
            fds.clear()

    @property
    def local(self) -> bool:
        return self.location.is_local

    def read(self, requests: Sequence[ItemRequest]) -> list[np.ndarray]:
        """The bytes of each request's items, as ``uint8`` arrays, in request order."""
        if self.local:
            out = []
            for r in requests:
                a, b = layout.item_range(r.start, r.stop, r.itemsize)
                data = os.pread(self.fd(r.shard, r.file), b - a, a)
                if len(data) != b - a:
                    self._short(r.shard, self._path(r.shard, r.file), a, b, len(data))
                out.append(np.frombuffer(data, dtype=np.uint8))
            return out
        rels, starts, ends = [], [], []
        for r in requests:
            a, b = layout.item_range(r.start, r.stop, r.itemsize)
            rels.append(self._path(r.shard, r.file))
            starts.append(a)
            ends.append(b)
        blobs = self._fetch(rels, starts, ends, [r.shard for r in requests])
        return [np.frombuffer(b, dtype=np.uint8) for b in blobs]

    def read_into(self, shard: int, file: str, start: int, out: np.ndarray) -> None:
        """Local disk only: fill ``out`` (contiguous ``uint8``) with the item bytes at ``start``."""
        got = os.preadv(self.fd(shard, file), [out.data], layout.HEADER_SIZE + start)
        if got != len(out):
            a = layout.HEADER_SIZE + start
            self._short(shard, self._path(shard, file), a, a + len(out), got)

    def whole(self, shards: Sequence[int], file: str) -> list[np.ndarray]:
        """The item section (after the header) of one small file per shard, cached."""
        missing = sorted({s for s in shards if (s, file) not in self._whole})
        if missing:
            if self.local:
                blobs = [os.pread(self.fd(s, file), self._size(s, file), 0) for s in missing]
            else:
                blobs = self._fetch(
                    [self._path(s, file) for s in missing],
                    [0] * len(missing),
                    [self._size(s, file) for s in missing],
                    missing,
                )
            for s, blob in zip(missing, blobs):
                self._whole[(s, file)] = np.frombuffer(blob, dtype=np.uint8)[layout.HEADER_SIZE :]
        out = []
        for s in shards:
            self._whole.move_to_end((s, file))
            out.append(self._whole[(s, file)])
        while len(self._whole) > _MAX_CACHED_INDEXES:
            self._whole.popitem(last=False)
        return out

    # -- internals ------------------------------------------------------------------------------

    def _path(self, shard: int, file: str) -> str:
        return self.table.path(shard, file)

    def _size(self, shard: int, file: str) -> int:
        return self.table.files[file].size[shard]

    def _fetch(self, rels: list[str], starts: list[int], ends: list[int], shards: list[int]) -> list[bytes]:
        try:
            blobs = self.location.read_ranges(rels, starts, ends)
        except FileNotFoundError as err:
            raise ShardNotFoundError(
                f"a shard file of {self.location.display_url} is missing ({err}); run "
                "`guideloom verify` to list the damaged shards, then restore or rewrite them"
            ) from err
        for blob, rel, a, b, s in zip(blobs, rels, starts, ends, shards):
            if len(blob) != b - a:
                self._short(s, rel, a, b, len(blob))
        return blobs

    def _short(self, shard: int, rel: str, start: int, end: int, got: int) -> None:
        size = next(self._size(shard, f) for f in self.table.files if self._path(shard, f) == rel)
        raise ShardCorruptError(
            f"{self.table.shard_name(shard)}: {self.location.describe(rel)} ended early: bytes "
            f"[{start}, {end}) were asked for, {got} came back; the manifest records "
            f"{size} bytes. The file is truncated: restore it or rewrite the dataset"
        )

    def fd(self, shard: int, file: str) -> int:
        """An open descriptor of a local shard file, size-checked against the manifest once."""
        if self._pid != os.getpid():  # forked: the parent's descriptors are shared; keep our own
            self._fds = OrderedDict()
            self._pid = os.getpid()
        key = (shard, file)
        fd = self._fds.get(key)
        if fd is not None:
            self._fds.move_to_end(key)
            return fd
        expected = self._size(shard, file)
        path = self.location.local_path(self._path(shard, file))
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise ShardNotFoundError(
                f"{self.table.shard_name(shard)}: {path} is missing; restore it or rewrite the dataset"
            ) from None
        size = os.fstat(fd).st_size
        if size != expected:
            os.close(fd)
            raise ShardCorruptError(
                f"{self.table.shard_name(shard)}: {path} has {size} bytes but the manifest "
                f"records {expected}; the file was truncated or replaced. Restore it or "
                "rewrite the dataset"
            )
        self._fds[key] = fd
        while len(self._fds) > _MAX_OPEN_FILES:
            os.close(self._fds.popitem(last=False)[1])
        return fd
