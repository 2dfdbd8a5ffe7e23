"""Reading items out of shard files: memory maps on local disk, range requests elsewhere.

Readers ask for "items ``[a, b)`` of file kind K of shard s" and get a ``uint8`` array of exactly
those bytes. On local disk it is a slice of a memory map (no copy, nothing read ahead). On any
other filesystem the requests of one batch are merged where adjacent and fetched together with
concurrent range requests. Small per-shard index files are fetched whole, once, and cached.
Every file is checked against the manifest's size before its bytes are used.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from guideloom.errors import ShardCorruptError, ShardNotFoundError
from guideloom.io import Location
from guideloom.manifest import Manifest, ShardInfo
from guideloom.storage import layout

__all__ = ["ItemRequest", "ShardAccess"]

_MAX_OPEN_MAPS = 128  # memory maps kept open (each holds a file descriptor)
_MAX_CACHED_INDEXES = 256  # per-shard index files kept in memory


class ItemRequest(NamedTuple):
    shard: int  # position in manifest.shards
    file: str  # "data", "index", "meta" or "spans"
    start: int  # first item
    stop: int  # one past the last item
    itemsize: int  # bytes per item


class ShardAccess:
    """Byte access to the files of one dataset's shards. Picklable; safe to fork."""

    def __init__(self, location: Location, manifest: Manifest) -> None:
        self.location = location
        self.shards: tuple[ShardInfo, ...] = manifest.shards
        self._maps: OrderedDict[tuple[int, str], np.ndarray] = OrderedDict()
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
            return [
                self._mapped(r.shard, r.file)[
                    layout.HEADER_SIZE + r.start * r.itemsize : layout.HEADER_SIZE + r.stop * r.itemsize
                ]
                for r in requests
            ]
        rels, starts, ends = [], [], []
        for r in requests:
            a, b = layout.item_range(r.start, r.stop, r.itemsize)
            rels.append(self._info(r.shard, r.file).path)
            starts.append(a)
            ends.append(b)
        blobs = self._fetch(rels, starts, ends, [r.shard for r in requests])
        return [np.frombuffer(b, dtype=np.uint8) for b in blobs]

    def whole(self, shards: Sequence[int], file: str) -> list[np.ndarray]:
        """The item section (after the header) of one small file per shard, cached."""
        if self.local:
            return [self._mapped(s, file)[layout.HEADER_SIZE :] for s in shards]
        missing = sorted({s for s in shards if (s, file) not in self._whole})
        if missing:
            infos = [self._info(s, file) for s in missing]
            blobs = self._fetch(
                [i.path for i in infos], [0] * len(infos), [i.size for i in infos], missing
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

    def _info(self, shard: int, file: str):  # type: ignore[no-untyped-def]
        return self.shards[shard].files[file]

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
                info = next(f for f in self.shards[s].files.values() if f.path == rel)
                raise ShardCorruptError(
                    f"{self.shards[s].name}: {self.location.describe(rel)} ended early: bytes "
                    f"[{a}, {b}) were asked for, {len(blob)} came back; the manifest records "
                    f"{info.size} bytes. The file is truncated: restore it or rewrite the dataset"
                )
        return blobs

    def _mapped(self, shard: int, file: str) -> np.ndarray:
        key = (shard, file)
        if self._pid != os.getpid():  # forked: maps are shared, but drop them to keep fds own
            self._maps.clear()
            self._pid = os.getpid()
        found = self._maps.get(key)
        if found is not None:
            self._maps.move_to_end(key)
            return found
        info = self._info(shard, file)
        path = self.location.local_path(info.path)
        try:
            size = os.path.getsize(path)
        except FileNotFoundError:
            raise ShardNotFoundError(
                f"{self.shards[shard].name}: {path} is missing; restore it or rewrite the dataset"
            ) from None
        if size != info.size:
            raise ShardCorruptError(
                f"{self.shards[shard].name}: {path} has {size} bytes but the manifest records "
                f"{info.size}; the file was truncated or replaced. Restore it or rewrite the dataset"
            )
        # A plain ndarray over the map: slicing an np.memmap subclass costs a Python-level
        # __array_finalize__ per slice, several times the cost of a 4 KiB window copy.
        mapped = np.memmap(path, dtype=np.uint8, mode="r").view(np.ndarray) if size else np.empty(0, np.uint8)
        self._maps[key] = mapped
        while len(self._maps) > _MAX_OPEN_MAPS:
            self._maps.popitem(last=False)
        return mapped
