"""Requests and bytes sent to object stores, counted in each process.

Every request `guideloom.io.Location` sends to a remote store is counted here by kind (``GET``,
``HEAD``, ``LIST``, ``PUT``, ``DELETE``; a retried request counts once per attempt, as the store
bills it) with the bytes read and written, per store (its endpoint, or its protocol where the
client's default endpoint is used). Local disk is not counted: it sends no requests.

A store that throttled (`guideloom.io.throttle`) also has ``throttled`` (throttling answers
seen) and ``concurrency_min`` (the lowest limit of requests in flight the process came down to);
merging adds the first and takes the smallest of the second.

The local block cache (`guideloom.io.cache`, opt-in) has an entry of its own, ``"cache <dir>"``,
with no requests and its counters: ``cache_hits``, ``cache_misses``, ``cache_bytes_read``,
``cache_bytes_written``, ``cache_evictions``, ``cache_rejected``, ``cache_write_errors``
(`record_cache`); they add up like the bytes.

`io_stats` returns this process's counts. A forked process (a DataLoader worker) starts from
zero; `StatefulDataLoader.io_stats` adds what its worker processes report with their batches.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "IOStats",
    "io_stats",
    "merge_stats",
    "record",
    "record_cache",
    "record_throttled",
    "subtract_stats",
]

IOStats = dict[str, dict[str, Any]]
"""``{store: {"requests": {kind: n}, "bytes_read": n, "bytes_written": n, "retries": n}}``, plus
``"throttled": n`` and ``"concurrency_min": n`` for a store that throttled, and the counters of
`CACHE_KEYS` for a local block cache."""

# The counters of a local block cache (`guideloom.io.cache`), summed like the bytes.
CACHE_KEYS = (
    "cache_hits",
    "cache_misses",
    "cache_bytes_read",
    "cache_bytes_written",
    "cache_evictions",
    "cache_rejected",
    "cache_write_errors",
)

_LOCK = threading.Lock()
_COUNTS: IOStats = {}
_PID = os.getpid()


def _mine() -> IOStats:
    global _COUNTS, _PID
    if os.getpid() != _PID:  # a forked child: the parent's counts are not its own
        _COUNTS, _PID = {}, os.getpid()
    return _COUNTS


def record(store: str, kind: str, read: int = 0, written: int = 0, retry: bool = False, n: int = 1) -> None:
    """Count ``n`` requests of ``kind`` to ``store`` (retries of earlier ones if ``retry``),
    with their bytes."""
    with _LOCK:
        entry = _mine().get(store)
        if entry is None:
            entry = _mine()[store] = {"requests": {}, "bytes_read": 0, "bytes_written": 0, "retries": 0}
        requests = entry["requests"]
        requests[kind] = requests.get(kind, 0) + n
        entry["bytes_read"] += read
        entry["bytes_written"] += written
        entry["retries"] += n if retry else 0


def record_throttled(store: str, limit: int) -> None:
    """Count one throttling answer from ``store``; ``limit`` is the requests in flight allowed
    after it (the lowest is kept)."""
    with _LOCK:
        entry = _mine().get(store)
        if entry is None:
            entry = _mine()[store] = {"requests": {}, "bytes_read": 0, "bytes_written": 0, "retries": 0}
        entry["throttled"] = entry.get("throttled", 0) + 1
        entry["concurrency_min"] = min(entry.get("concurrency_min", limit), limit)


def record_cache(store: str, **counts: int) -> None:
    """Add ``counts`` (keys of `CACHE_KEYS`) to the block cache ``store``'s entry."""
    with _LOCK:
        entry = _mine().get(store)
        if entry is None:
            entry = _mine()[store] = {"requests": {}, "bytes_read": 0, "bytes_written": 0, "retries": 0}
        for key, n in counts.items():
            entry[key] = entry.get(key, 0) + n


def io_stats() -> IOStats:
    """This process's counts so far (a copy)."""
    with _LOCK:
        return {store: {**e, "requests": dict(e["requests"])} for store, e in _mine().items()}


def merge_stats(parts: Iterable[Mapping[str, Mapping[str, Any]]]) -> IOStats:
    """The sum of several `io_stats` results."""
    out: IOStats = {}
    for part in parts:
        for store, entry in part.items():
            into = out.setdefault(store, {"requests": {}, "bytes_read": 0, "bytes_written": 0, "retries": 0})
            for kind, n in entry.get("requests", {}).items():
                into["requests"][kind] = into["requests"].get(kind, 0) + n
            for key in ("bytes_read", "bytes_written", "retries"):
                into[key] += entry.get(key, 0)
            for key in CACHE_KEYS:
                if key in entry:
                    into[key] = into.get(key, 0) + entry[key]
            if entry.get("throttled"):
                into["throttled"] = into.get("throttled", 0) + entry["throttled"]
            if "concurrency_min" in entry:  # the lowest of any part, never a sum
                into["concurrency_min"] = min(
                    into.get("concurrency_min", entry["concurrency_min"]), entry["concurrency_min"]
                )
    return out


def subtract_stats(now: Mapping[str, Mapping[str, Any]], before: Mapping[str, Mapping[str, Any]]) -> IOStats:
    """``now`` minus ``before`` (counts since ``before`` was taken); stores with nothing left
    are left out. A lowest limit cannot be subtracted: ``concurrency_min`` is kept (the lowest
    of the process so far) where there was throttling since ``before``."""
    out: IOStats = {}
    for store, entry in now.items():
        old = before.get(store, {})
        requests = {k: n - old.get("requests", {}).get(k, 0) for k, n in entry["requests"].items()}
        requests = {k: n for k, n in requests.items() if n}
        delta = {key: entry[key] - old.get(key, 0) for key in ("bytes_read", "bytes_written", "retries")}
        throttled = entry.get("throttled", 0) - old.get("throttled", 0)
        cached = {key: entry[key] - old.get(key, 0) for key in CACHE_KEYS if key in entry}
        if requests or any(delta.values()) or throttled or any(cached.values()):
            out[store] = {"requests": requests, **delta}
            out[store].update({key: n for key, n in cached.items()})
            if throttled:
                out[store]["throttled"] = throttled
                out[store]["concurrency_min"] = entry["concurrency_min"]
    return out
