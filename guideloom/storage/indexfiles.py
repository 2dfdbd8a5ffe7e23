"""Reading items out of shard files: positioned reads on local disk, range requests elsewhere.

Readers ask for "items ``[a, b)`` of file kind K of shard s" and get a ``uint8`` array of exactly
those bytes. On local disk that is one ``pread`` on a cached file descriptor (or a ``preadv``
straight into the caller's output). Nothing is memory-mapped: mapped pages of a file stay
resident in the reading process, so a reader's RSS would grow with the dataset, while
positioned reads keep it flat. Measured against a read-only map with ``MADV_RANDOM`` (shuffled
4 KiB windows, one process): the map copies at 0.95-0.99x of a raw memmap gather and ``preadv``
at 0.87x, but on a filesystem with large page-cache folios (ext4 on Linux 6.18 here) each fault
maps about a megabyte, 16 MB of file pages after one batch of 16 windows; dropping them often
enough to stay within 64 MiB (``MADV_DONTNEED``) brought the map down to 0.55x. On any other
filesystem the requests of one batch are merged where adjacent and fetched together with
concurrent range requests. Every file is checked against the manifest's size before its bytes
are used.

Index files (document offsets, span tables) are never read whole: `ShardAccess.gather`
and `ShardAccess.search` read fixed-size pages of them through a `PageCache`
bounded in bytes (``cache_bytes``, default 4 MiB per process), so a reader's memory does not
grow with the number of records or spans, and a batch costs at most one round of requests for
the pages it lacks. Span tables of datasets written with a span directory (manifest version 2)
are not searched at all; an older one's search may take a few rounds where the data is far
from uniform.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Sequence
from functools import cached_property
from typing import NamedTuple

import numpy as np

import guideloom.layout as layout
from guideloom.errors import ShardCorruptError, ShardNotFoundError
from guideloom.io import Location
from guideloom.manifest import Manifest
from guideloom.storage.pagecache import DEFAULT_PAGE_BYTES, PageCache, cache_bytes_from_env

__all__ = ["ItemRequest", "ShardAccess"]

_MAX_OPEN_FILES = 128  # local file descriptors kept open
_SHARD_BITS = 40  # a (shard, page) pair packed into one int64: page < 2**40


class ItemRequest(NamedTuple):
    shard: int  # row in the manifest's shard table
    file: str  # "data", "index", "meta" or "spans"
    start: int  # first item
    stop: int  # one past the last item
    itemsize: int  # bytes per item


class ShardAccess:
    """Byte access to the files of one dataset's shards. Picklable; safe to fork."""

    def __init__(
        self,
        location: Location,
        manifest: Manifest,
        *,
        cache_bytes: int | None = None,
        page_bytes: int = DEFAULT_PAGE_BYTES,
    ) -> None:
        """``cache_bytes``: bound of the index page cache in bytes (None: ``$GUIDELOOM_INDEX_CACHE_BYTES``
        or 4 MiB); ``page_bytes``: size of one index page in bytes."""
        if isinstance(page_bytes, bool) or not isinstance(page_bytes, int) or page_bytes < 64:
            raise ValueError(f"page_bytes must be a number of bytes >= 64, got {page_bytes!r}")
        self.location = location
        self.table = manifest.shard_table
        self.page_bytes = page_bytes
        self.cache = PageCache(cache_bytes_from_env() if cache_bytes is None else cache_bytes)
        self._fds: OrderedDict[tuple[int, str], int] = OrderedDict()
        self._pid = os.getpid()

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state["_fds"] = OrderedDict()
        state["cache"] = PageCache(self.cache.capacity)
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

    @cached_property
    def local(self) -> bool:
        """Whether the shards are on local disk (positioned reads) rather than behind range
        requests; asked once per batch, so it is worked out once."""
        return self.location.is_local

    def read(self, requests: Sequence[ItemRequest]) -> list[np.ndarray]:
        """The bytes of each request's items, as ``uint8`` arrays, in request order."""
        if self.local:
            out = []
            for r in requests:
                a, b = layout.item_range(r.start, r.stop, r.itemsize)
                data = os.pread(self.fd(r.shard, r.file), b - a, a)
                if len(data) != b - a:
                    self._short(r.shard, r.file, a, b, len(data))
                out.append(np.frombuffer(data, dtype=np.uint8))
            return out
        starts, ends = [], []
        for r in requests:
            a, b = layout.item_range(r.start, r.stop, r.itemsize)
            starts.append(a)
            ends.append(b)
        blobs = self._fetch([(r.shard, r.file) for r in requests], starts, ends)
        return [np.frombuffer(b, dtype=np.uint8) for b in blobs]

    def read_into(self, shard: int, file: str, start: int, out: np.ndarray) -> None:
        """Local disk only: fill ``out`` (contiguous ``uint8``) with the item bytes at ``start``."""
        got = os.preadv(self.fd(shard, file), [out.data], layout.HEADER_SIZE + start)
        if got != len(out):
            a = layout.HEADER_SIZE + start
            self._short(shard, file, a, a + len(out), got)

    def gather(self, file: str, shards: np.ndarray, rows: np.ndarray, itemsize: int) -> np.ndarray:
        """Item ``rows[k]`` of file ``file`` of shard ``shards[k]``, for every ``k``, as one
        ``(len(rows), itemsize)`` ``uint8`` array; rows must exist. The pages that hold them come
        from the page cache, the missing ones in one round of reads."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty((len(rows), itemsize), np.uint8)
        if not len(rows):
            return out
        per = max(1, self.page_bytes // itemsize)
        page = rows // per
        packed = np.asarray(shards, dtype=np.int64) << _SHARD_BITS | page
        unique, inverse = np.unique(packed, return_inverse=True)
        shard_of = (unique >> _SHARD_BITS).tolist()
        page_of = (unique & ((1 << _SHARD_BITS) - 1)).tolist()
        blobs = self.pages(file, shard_of, page_of, itemsize)
        if len(blobs) == 1:
            items = np.frombuffer(blobs[0], np.uint8).reshape(-1, itemsize)
            out[:] = items[rows - page_of[0] * per]
            return out
        items = np.frombuffer(b"".join(blobs), np.uint8).reshape(-1, itemsize)
        base = np.cumsum([0] + [len(b) // itemsize for b in blobs[:-1]])
        out[:] = items[base[inverse] + rows - page * per]
        return out

    def pages(self, file: str, shards: Sequence[int], pages: Sequence[int], itemsize: int) -> list[bytes]:
        """Page ``pages[k]`` of file ``file`` of shard ``shards[k]`` (items
        ``[p * per, (p + 1) * per)`` with ``per = page_bytes // itemsize``; the last page of a
        file is shorter), through the cache; the missing pages are read in one round."""
        keys = [(file, s, p) for s, p in zip(shards, pages)]
        return self.cache.get(keys, lambda missing: self._read_pages(missing, itemsize))  # type: ignore[arg-type]

    def search(
        self,
        file: str,
        shards: np.ndarray,
        keys: np.ndarray,
        *,
        words: Sequence[int],
        sides: Sequence[str],
        itemsize: int,
        counts: np.ndarray,
        guesses: np.ndarray,
        prefetch: Sequence[tuple[int, int]] | None = None,
    ) -> np.ndarray:
        """``np.searchsorted`` in a sorted column of an index file, reading only pages it probes.

        For each query ``k``: where ``keys[k]`` would be inserted (``sides[k]``, "left" or
        "right") into the little-endian ``uint64`` at word ``words[k]`` of every item of file
        ``file`` of shard ``shards[k]``, a file of ``counts[k]`` items sorted by that word. ``guesses[k]`` is the
        item to probe first (an interpolation, say). Each round probes one page per unresolved
        query, all fetched together; later rounds interpolate between what the earlier ones saw,
        alternating with bisection, so a query takes a few rounds at most (one where the guess
        is within half a page of the answer). ``prefetch``: ``(shard, page)`` pairs read in the
        first round too (the pages a caller will gather next).
        """
        n = len(keys)
        lo = np.zeros(n, np.int64)  # the answer is in [lo, hi]
        hi_all = np.asarray(counts, dtype=np.int64)
        hi = hi_all.copy()
        v_lo = np.zeros(n, np.float64)  # the column's value just below lo (0 when lo == 0)
        v_hi = np.full(n, np.inf)  # the column's value at hi (inf when hi == count)
        probe = np.clip(np.asarray(guesses, dtype=np.int64), 0, np.maximum(hi - 1, 0))
        per = max(1, self.page_bytes // itemsize)
        width = itemsize // 8
        keys_l = [int(k) for k in keys]
        rounds = 0
        while True:
            active = np.flatnonzero(lo < hi)
            if not len(active):
                return lo
            rounds += 1
            # Probe two neighbouring pages around each probe: an answer near a page edge is
            # then settled in the same round instead of the next one.
            count = hi_all[active]
            last_page = np.maximum(count - 1, 0) // per
            first_page = np.minimum(
                np.maximum(probe[active] - per // 2, 0) // per, np.maximum(last_page - 1, 0)
            )
            two = first_page < last_page
            shard_l = np.asarray(shards)[active].tolist()
            keys_shards = shard_l + [sh for sh, t in zip(shard_l, two.tolist()) if t]
            keys_pages = first_page.tolist() + (first_page[two] + 1).tolist()
            if rounds == 1 and prefetch is not None:
                keys_shards += [sh for sh, _ in prefetch]
                keys_pages += [pg for _, pg in prefetch]
            blobs = self.pages(file, keys_shards, keys_pages, itemsize)
            second = iter(blobs[len(active) :])
            for q, p, both, blob in zip(active.tolist(), first_page.tolist(), two.tolist(), blobs):
                if both:
                    blob = blob + next(second)
                col = np.frombuffer(blob, "<u8").reshape(-1, width)[:, words[q]]
                r0 = p * per
                r1 = r0 + len(col)
                j = int(col.searchsorted(keys_l[q], side=sides[q]))  # type: ignore[call-overload]
                if j == 0 and r0 > lo[q]:
                    hi[q], v_hi[q] = r0, float(col[0])
                elif j == len(col) and r1 < hi[q]:
                    lo[q], v_lo[q] = r1, float(col[-1])
                else:
                    lo[q] = hi[q] = r0 + j
                    continue
                a, b = int(lo[q]), int(hi[q])
                if rounds % 2 == 0 or not np.isfinite(v_hi[q]) or v_hi[q] <= v_lo[q]:
                    probe[q] = (a + b) // 2
                else:
                    frac = (keys_l[q] - v_lo[q]) / (v_hi[q] - v_lo[q])
                    probe[q] = min(b - 1, max(a, a + int(frac * (b - a))))

    # -- internals ------------------------------------------------------------------------------

    def _path(self, shard: int, file: str) -> str:
        return self.table.path(shard, file)

    def _size(self, shard: int, file: str) -> int:
        return self.table.files[file].size[shard]

    def _read_pages(self, keys: list[tuple[str, int, int]], itemsize: int) -> list[bytes]:
        per_bytes = max(1, self.page_bytes // itemsize) * itemsize
        starts, ends = [], []
        for file, s, p in keys:
            a = layout.HEADER_SIZE + p * per_bytes
            starts.append(a)
            ends.append(min(a + per_bytes, self._size(s, file)))
        if self.local:
            out = []
            for (file, s, _), a, b in zip(keys, starts, ends):
                data = os.pread(self.fd(s, file), b - a, a)
                if len(data) != b - a:
                    self._short(s, file, a, b, len(data))
                out.append(data)
            return out
        return self._fetch([(s, f) for f, s, _ in keys], starts, ends)

    def _fetch(self, files: list[tuple[int, str]], starts: list[int], ends: list[int]) -> list[bytes]:
        """Bytes ``[starts[k], ends[k])`` of file kind ``files[k][1]`` of shard ``files[k][0]``,
        each checked against the manifest: its length, and the whole file's size where the
        storage reports it with the bytes."""
        rels = [self._path(s, f) for s, f in files]
        totals: dict[str, int] = {}
        try:
            blobs = self.location.read_ranges(rels, starts, ends, totals=totals)
        except FileNotFoundError as err:
            raise ShardNotFoundError(
                f"a shard file of {self.location.display_url} is missing ({err}); run "
                "`guideloom verify` to list the damaged shards, then restore or rewrite them"
            ) from err
        for blob, rel, (s, f), a, b in zip(blobs, rels, files, starts, ends):
            if len(blob) != b - a:
                self._short(s, f, a, b, len(blob))
            # The server said how big the whole object is (S3's Content-Range): a file that grew
            # or was replaced is caught here, without a request of its own.
            total = totals.get(rel)
            if total is not None and total != self._size(s, f):
                self._resized(s, self.location.describe(rel), total, self._size(s, f))
        return blobs

    def _resized(self, shard: int, where: str, size: int, expected: int) -> None:
        raise ShardCorruptError(
            f"{self.table.shard_name(shard)}: {where} has {size} bytes but the manifest "
            f"records {expected}; the file was truncated or replaced. Restore it or "
            "rewrite the dataset"
        )

    def _short(self, shard: int, file: str, start: int, end: int, got: int) -> None:
        raise ShardCorruptError(
            f"{self.table.shard_name(shard)}: {self.location.describe(self._path(shard, file))} "
            f"ended early: bytes [{start}, {end}) were asked for, {got} came back; the manifest "
            f"records {self._size(shard, file)} bytes. The file is truncated: restore it or "
            "rewrite the dataset"
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
            self._resized(shard, path, size, expected)
        self._fds[key] = fd
        while len(self._fds) > _MAX_OPEN_FILES:
            os.close(self._fds.popitem(last=False)[1])
        return fd
