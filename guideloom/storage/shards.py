"""Reading items out of shard files: memory maps on local disk, range requests elsewhere.

Readers ask for "items ``[a, b)`` of file kind K of shard s" and get a ``uint8`` array of exactly
those bytes. On local disk it is a slice of a memory map (no copy, nothing read ahead beyond
the kernel's). Mapped pages would otherwise stay resident and make a reader's RSS grow with the
dataset, so after every ``RELEASE_BYTES`` read through the maps they are released with
``madvise(MADV_DONTNEED)`` (the page cache keeps them; a later read just maps them again). On any
other filesystem the requests of one batch are merged where adjacent and fetched together with
concurrent range requests. Small per-shard index files are fetched whole, once, and cached.
Every file is checked against the manifest's size before its bytes are used.
"""

from __future__ import annotations

import mmap
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

_MAX_OPEN_MAPS = 128  # local memory maps kept open
RELEASE_BYTES = 64 * 2**20  # bytes read through the maps between two releases of their pages
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
        self._maps: OrderedDict[tuple[int, str], tuple[mmap.mmap | None, np.ndarray]] = OrderedDict()
        self._mapped_reads = 0
        self._whole: OrderedDict[tuple[int, str], np.ndarray] = OrderedDict()
        self._pid = os.getpid()

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state["_maps"], state["_whole"] = OrderedDict(), OrderedDict()
        return state

    @property
    def local(self) -> bool:
        return self.location.is_local

    def read(self, requests: Sequence[ItemRequest]) -> list[np.ndarray]:
        """The bytes of each request's items, as ``uint8`` arrays, in request order."""
        if self.local:
            out = []
            for r in requests:
                a, b = layout.item_range(r.start, r.stop, r.itemsize)
                out.append(self.mapped(r.shard, r.file)[a:b])
                self._mapped_reads += b - a
            self._maybe_release()
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
        a = layout.HEADER_SIZE + start
        out[:] = self.mapped(shard, file)[a : a + len(out)]
        self._mapped_reads += len(out)
        if self._mapped_reads > RELEASE_BYTES:
            self._maybe_release()

    def count_mapped_reads(self, nbytes: int) -> None:
        """Account for bytes a caller copied out of :meth:`mapped` arrays itself."""
        self._mapped_reads += nbytes
        self._maybe_release()

    def _maybe_release(self) -> None:
        if self._mapped_reads > RELEASE_BYTES:
            for mapping, _ in self._maps.values():
                if mapping is not None:
                    mapping.madvise(mmap.MADV_DONTNEED)
            self._mapped_reads = 0

    def whole(self, shards: Sequence[int], file: str) -> list[np.ndarray]:
        """The item section (after the header) of one small file per shard, cached."""
        missing = sorted({s for s in shards if (s, file) not in self._whole})
        if missing:
            if self.local:
                blobs = [self.mapped(s, file).copy() for s in missing]
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

    def mapped(self, shard: int, file: str) -> np.ndarray:
        """A local shard file as a read-only ``uint8`` array, size-checked against the manifest."""
        key = (shard, file)
        if self._pid != os.getpid():  # forked: drop the parent's maps rather than share them
            self._maps = OrderedDict()
            self._pid = os.getpid()
        found = self._maps.get(key)
        if found is not None:
            self._maps.move_to_end(key)
            return found[1]
        expected = self._size(shard, file)
        path = self.location.local_path(self._path(shard, file))
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size != expected:
                    raise ShardCorruptError(
                        f"{self.table.shard_name(shard)}: {path} has {size} bytes but the manifest "
                        f"records {expected}; the file was truncated or replaced. Restore it or "
                        "rewrite the dataset"
                    )
                mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        except FileNotFoundError:
            raise ShardNotFoundError(
                f"{self.table.shard_name(shard)}: {path} is missing; restore it or rewrite the dataset"
            ) from None
        # A plain ndarray over the map: slicing it costs far less than slicing an np.memmap.
        array = np.frombuffer(mapping, dtype=np.uint8) if mapping is not None else np.empty(0, np.uint8)
        self._maps[key] = (mapping, array)
        while len(self._maps) > _MAX_OPEN_MAPS:
            self._maps.popitem(last=False)  # unmapped once no returned slice refers to it
        return array
