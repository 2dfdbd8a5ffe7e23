"""A least-recently-used cache of fixed-size file pages, bounded in bytes.

The cache knows keys and bytes, never files or URLs: a reader hands it a batched fetcher,
``fetch(keys) -> [bytes, ...]``, that turns the pages it lacks into bytes (one round of
concurrent range requests, or positioned reads on local disk). `PageCache.get` asks the
fetcher once per call for every page of the batch that is not cached, so a batch costs at most
one round of requests, and none when its pages are cached.

The bound counts each page's bytes plus a fixed per-entry overhead (the Python objects that hold
it), so the cache's resident size stays within ``capacity`` bytes however many pages pass
through it. Pages of the current call are returned even when they are evicted at once (a batch
larger than the cache still works; it just is not cached).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "DEFAULT_PAGE_BYTES",
    "ENTRY_OVERHEAD",
    "PageCache",
    "cache_bytes_from_env",
]

DEFAULT_CACHE_BYTES = 4 * 2**20  # per reading process (each DataLoader worker has its own)
DEFAULT_PAGE_BYTES = 1024  # 128 document offsets or 32 spans per page
ENTRY_OVERHEAD = 160  # bytes charged per cached page for its key, bytes object and LRU link
ENV_CACHE_BYTES = "GUIDELOOM_INDEX_CACHE_BYTES"


def cache_bytes_from_env(default: int = DEFAULT_CACHE_BYTES) -> int:
    """The index cache bound in bytes: ``$GUIDELOOM_INDEX_CACHE_BYTES`` if set, else ``default``."""
    raw = os.environ.get(ENV_CACHE_BYTES)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(
            f"{ENV_CACHE_BYTES}={raw!r} is not a whole number of bytes; set it to e.g. 4194304 (4 MiB)"
        ) from None
    if value < 0:
        raise ValueError(f"{ENV_CACHE_BYTES}={raw!r} must be >= 0 bytes (0 caches nothing)")
    return value


class PageCache:
    """Pages by key, least recently used evicted first, at most ``capacity`` bytes in all."""

    def __init__(self, capacity: int = DEFAULT_CACHE_BYTES) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
            raise ValueError(f"the page cache capacity must be a number of bytes >= 0, got {capacity!r}")
        self.capacity = capacity
        self._pages: OrderedDict[Hashable, bytes] = OrderedDict()
        self._bytes = 0
        self.hits = 0  # pages served from the cache
        self.misses = 0  # pages fetched
        self.fetches = 0  # calls to a fetcher (rounds of requests)

    @property
    def nbytes(self) -> int:
        """Bytes the cache accounts for now (page bytes plus per-entry overhead); <= capacity."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._pages)

    def clear(self) -> None:
        self._pages.clear()
        self._bytes = 0

    def get(
        self, keys: Sequence[Hashable], fetch: Callable[[list[Hashable]], Sequence[bytes]]
    ) -> list[bytes]:
        """The page of each key, in key order; the missing ones come from one ``fetch`` call.

        ``fetch`` receives the distinct missing keys and returns their bytes in that order.
        """
        pages = self._pages
        found: dict[Hashable, bytes] = {}
        missing: list[Hashable] = []
        wanted: set[Hashable] = set()
        for key in keys:
            if key in found or key in wanted:
                continue
            page = pages.get(key)
            if page is None:
                missing.append(key)
                wanted.add(key)
                continue
            pages.move_to_end(key)
            found[key] = page
            self.hits += 1
        if missing:
            self.fetches += 1
            self.misses += len(missing)
            blobs = fetch(missing)
            for key, blob in zip(missing, blobs):
                found[key] = blob
                self._put(key, blob)
        return [found[key] for key in keys]

    def _put(self, key: Hashable, blob: bytes) -> None:
        cost = len(blob) + ENTRY_OVERHEAD
        if cost > self.capacity:
            return
        old = self._pages.pop(key, None)
        if old is not None:
            self._bytes -= len(old) + ENTRY_OVERHEAD
        self._pages[key] = blob
        self._bytes += cost
        while self._bytes > self.capacity:
            _, evicted = self._pages.popitem(last=False)
            self._bytes -= len(evicted) + ENTRY_OVERHEAD
