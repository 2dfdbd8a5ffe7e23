"""The store backends: one object per kind of store, found once by fsspec protocol.

Everything GuideLoom does differently for one store (its endpoint in messages, fsspec options,
ranged GETs that report the object's size, whole-object checks, throttling hooks, error hints,
whether it is local disk or read-only) is a method or attribute of its `Backend`. Adding a store
is one module in this package and one line in `BACKENDS` (see CONTRIBUTING.md, "Adding a store");
a protocol without a line gets `Backend`'s defaults (a plain fsspec filesystem).
"""

from __future__ import annotations

from typing import Any

from guideloom.io.backends.azure import AzureBackend
from guideloom.io.backends.base import Backend
from guideloom.io.backends.gcs import GCSBackend
from guideloom.io.backends.http import HTTPBackend
from guideloom.io.backends.local import LocalBackend
from guideloom.io.backends.memory import MemoryBackend
from guideloom.io.backends.s3 import S3Backend

__all__ = [
    "BACKENDS",
    "PRICES_TAKEN",
    "DEFAULT_BACKEND",
    "Backend",
    "backend_for",
    "backend_of_fs",
    "protocol_of",
    "texts_for",
]

PRICES_TAKEN = "2026-12"
"""When the backends' `list_prices` were written down (check your provider's current ones)."""

# The registry: one line per store.
BACKENDS: tuple[Backend, ...] = (
    LocalBackend(),
    MemoryBackend(),
    S3Backend(),
    GCSBackend(),
    AzureBackend(),
    HTTPBackend(),
)
DEFAULT_BACKEND = Backend()  # any other fsspec protocol

_BY_PROTOCOL: dict[str, Backend] = {p: b for b in BACKENDS for p in b.protocols}
# Whose texts word the errors of a store with none of its own (`texts_for`): found once, not per
# request (every read of a local file asks, before it knows whether it fails).
_DEFAULT_TEXTS: Backend = next(b for b in BACKENDS if b.key == "s3")


def protocol_of(url: str) -> str:
    """The fsspec protocol of ``url`` (``"file"`` for a plain path)."""
    return url.partition("://")[0].lower() if "://" in url else "file"


def backend_for(url: str) -> Backend:
    """The backend of ``url`` (a local path or an fsspec URL), by its protocol."""
    return _BY_PROTOCOL.get(protocol_of(url), DEFAULT_BACKEND)


def backend_of_fs(fs: Any) -> Backend:
    """The backend of an fsspec filesystem object, by its (first) protocol."""
    protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    for protocol in protocols:
        if protocol in _BY_PROTOCOL:
            return _BY_PROTOCOL[protocol]
    return DEFAULT_BACKEND


def texts_for(backend: Backend) -> Backend:
    """The backend whose texts word ``backend``'s errors: its own, or, for a store with none of
    its own (memory://, another fsspec protocol), S3's (GuideLoom's default wording)."""
    return backend if backend.generic_hint is not None else _DEFAULT_TEXTS
