"""Items of a dataset's index files (document offsets, span tables, span directories), read
without holding the files whole.

Index files are never read whole. Where the bytes are behind range requests, `IndexFiles.gather`
and `IndexFiles.search` read fixed-size pages of them through a `PageCache` bounded in bytes
(``cache_bytes``, default 4 MiB per process), so a reader's memory does not grow with the number
of records or spans, and a batch costs at most one round of requests for the pages it lacks. On
local disk the operating system's page cache already holds them: `IndexFiles.runs` reads the
items of each run straight through the shard reader, and nothing is kept in the process. Span
tables of datasets written with a span directory (manifest version 2) are not searched at all;
an older one's search may take a few rounds where the data is far from uniform.

All bytes come through the dataset's `guideloom.types.ShardReader`; this module opens nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat

import numpy as np

import guideloom.layout as layout
from guideloom.storage.pagecache import DEFAULT_PAGE_BYTES, PageCache, cache_bytes_from_env
from guideloom.types import ShardReader

__all__ = ["IndexFiles"]

_SHARD_BITS = 40  # a (shard, page) pair packed into one int64: page < 2**40


class IndexFiles:
    """Items of the index files of one dataset's shards, through its shard reader. Picklable
    (a copy starts with an empty cache); safe to fork."""

    def __init__(
        self,
        reader: ShardReader,
        *,
        cache_bytes: int | None = None,
        page_bytes: int = DEFAULT_PAGE_BYTES,
    ) -> None:
        """``cache_bytes``: bound of the index page cache in bytes (None: ``$GUIDELOOM_INDEX_CACHE_BYTES``
        or 4 MiB); ``page_bytes``: size of one index page in bytes."""
        if isinstance(page_bytes, bool) or not isinstance(page_bytes, int) or page_bytes < 64:
            raise ValueError(f"page_bytes must be a number of bytes >= 64, got {page_bytes!r}")
        self.reader = reader
        self.page_bytes = page_bytes
        self.cache = PageCache(cache_bytes_from_env() if cache_bytes is None else cache_bytes)
        # Decided once: local files are read run by run (the OS caches them), others by pages.
        self.paged = not reader.local

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state["cache"] = PageCache(self.cache.capacity)
        return state

    def runs(
        self,
        file: str,
        shards: Sequence[int] | np.ndarray,
        firsts: Sequence[int] | np.ndarray,
        stops: Sequence[int] | np.ndarray,
        itemsize: int,
    ) -> bytes:
        """Items ``[firsts[k], stops[k])`` of file ``file`` of shard ``shards[k]`` for every run
        ``k`` (the items must exist), joined end to end in run order. On local disk one read per
        run; elsewhere the pages that hold them, through the cache (one round for those it lacks).
        Lists of Python ints (a small batch) or arrays (a larger one) are both taken as they are.
        """
        h = layout.HEADER_SIZE
        if not self.paged:
            if isinstance(firsts, np.ndarray):
                begin = (np.asarray(firsts) * itemsize + h).tolist()
                end = (np.asarray(stops) * itemsize + h).tolist()
                requests = list(zip(np.asarray(shards).tolist(), repeat(file), begin, end))
            else:
                requests = [
                    (s, file, h + a * itemsize, h + b * itemsize) for s, a, b in zip(shards, firsts, stops)
                ]
            return b"".join(self.reader.read(requests))
        first = np.asarray(firsts, dtype=np.int64)
        counts = np.asarray(stops, dtype=np.int64) - first
        ends = np.cumsum(counts)
        rows = np.arange(int(ends[-1]) if len(ends) else 0, dtype=np.int64) - np.repeat(
            ends - counts - first, counts
        )
        return self.gather(
            file, np.repeat(np.asarray(shards, dtype=np.int64), counts), rows, itemsize
        ).tobytes()

    def run_ends(
        self, file: str, shards: np.ndarray, firsts: np.ndarray, lasts: np.ndarray, itemsize: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Items ``firsts[k]`` and ``lasts[k]`` (``firsts[k] <= lasts[k]``) of file ``file`` of
        shard ``shards[k]``, as two ``(len(shards), itemsize)`` ``uint8`` arrays: the two ends of
        each run of items. On local disk one read of each whole run; elsewhere just the pages of
        the two ends, through the cache."""
        if self.paged:
            n = len(shards)
            items = self.gather(
                file, np.concatenate([shards, shards]), np.concatenate([firsts, lasts]), itemsize
            )
            return items[:n], items[n:]
        h = layout.HEADER_SIZE
        shards_l, firsts_l, lasts_l = (np.asarray(x).tolist() for x in (shards, firsts, lasts))
        blobs = self.reader.read(
            [
                (s, file, h + a * itemsize, h + (b + 1) * itemsize)
                for s, a, b in zip(shards_l, firsts_l, lasts_l)
            ]
        )
        first = b"".join([blob[:itemsize] for blob in blobs])
        last = b"".join([blob[-itemsize:] for blob in blobs])
        return (
            np.frombuffer(first, np.uint8).reshape(-1, itemsize),
            np.frombuffer(last, np.uint8).reshape(-1, itemsize),
        )

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

    def _read_pages(self, keys: list[tuple[str, int, int]], itemsize: int) -> list[bytes]:
        per_bytes = max(1, self.page_bytes // itemsize) * itemsize
        size = self.reader.table.size
        requests = []
        for file, s, p in keys:
            a = layout.HEADER_SIZE + p * per_bytes
            requests.append((s, file, a, min(a + per_bytes, size(s, file))))
        return self.reader.read(requests)
