"""Google Cloud Storage (``gs://``, ``gcs://``) through gcsfs.

Ranged GETs report the object's size (JSON API media download: ``Content-Range``), and a whole
object is checked against the size and md5 GCS says it stores, so a body cut short on its way
is a `ShortBodyError` (retried), never a truncated manifest or record.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from guideloom.io.backends.base import Backend, RangedGet
from guideloom.io.failures import ShortBodyError
from guideloom.io.s3 import range_header, sized_body
from guideloom.io.urls import redact_url

__all__ = ["GCSBackend", "gcs_ranged_get", "gcs_read_whole"]


class GCSBackend(Backend):
    protocols: ClassVar[tuple[str, ...]] = ("gs", "gcs")
    key: ClassVar[str | None] = "gcs"
    display_name: ClassVar[str] = "GCS"
    extra: ClassVar[tuple[str, str] | None] = ("gcs", "gcsfs")
    endpoint_options: ClassVar[str | None] = "storage_options endpoint_url, STORAGE_EMULATOR_HOST"
    generic_hint: ClassVar[str | None] = (
        "Check the credentials (storage_options token: a service-account JSON file, "
        "'google_default' or 'anon'; or GOOGLE_APPLICATION_CREDENTIALS), and that the bucket "
        "exists and you may use it"
    )
    throttle_spread: ClassVar[str | None] = (
        "GCS raises a bucket's rate gradually: ramp the readers up over minutes, or spread "
        "the objects over more names"
    )

    # Standard storage, class B operations
    list_prices: ClassVar[dict[str, float] | None] = {"get_per_1000": 0.0004, "egress_per_gb": 0.12}

    def endpoint(self, fs: Any, url: str, options: dict[str, Any]) -> str | None:
        found = getattr(fs, "_location", None) if fs is not None else None
        found = found or options.get("endpoint_url") or os.environ.get("STORAGE_EMULATOR_HOST")
        return redact_url(str(found)) if found else "https://storage.googleapis.com (the GCS default)"

    def sized_ranged_get(self) -> RangedGet | None:
        return gcs_ranged_get

    def read_from(self, start: int, end: int | None) -> Callable[[Any, str], Awaitable[bytes]] | None:
        return gcs_read_whole if end is None and not start else None


async def gcs_ranged_get(fs: Any, path: str, start: int, end: int) -> tuple[bytes, int | None]:
    """Bytes ``[start, end)`` of a GCS object and its size, from one GET (gcsfs's ``_call``
    retries what gcsfs retries and translates errors as for ``_cat_file``)."""
    headers, data = await fs._call("GET", fs.url(path), headers={"Range": range_header(start, end)})
    stored = _header(headers, "x-goog-stored-content-length")  # a 200 with the whole object
    return sized_body(
        data, _header(headers, "Content-Range"), path, int(stored) if stored and stored.isdigit() else None
    )


async def gcs_read_whole(fs: Any, path: str) -> bytes:
    """A whole GCS object from one GET, checked against the size GCS says it stores
    (``x-goog-stored-content-length``) and the md5 it sends (``X-Goog-Hash``)."""
    headers, data = await fs._call("GET", fs.url(path))
    stored = _header(headers, "x-goog-stored-content-length")
    encoded = _header(headers, "x-goog-stored-content-encoding") not in (None, "identity")
    if encoded:
        return bytes(data)  # decompressed on the way: neither the size nor the hash is the body's
    if stored and stored.isdigit() and len(data) < int(stored):
        raise ShortBodyError(f"{path}: the answer carried {len(data)} bytes of the {stored} GCS stores")
    md5 = _goog_hash(headers, "md5")  # whole-object answers carry the object's hashes
    if md5 is not None and base64.b64encode(hashlib.md5(data).digest()).decode() != md5:
        raise ShortBodyError(
            f"{path}: the answer's {len(data)} bytes do not match the md5 GCS sent with them "
            "(X-Goog-Hash): cut short or damaged on their way"
        )
    return bytes(data)


def _goog_hash(headers: Any, kind: str) -> str | None:
    """The ``kind`` (md5, crc32c) value of an ``X-Goog-Hash`` header, base64, or None."""
    value = _header(headers, "X-Goog-Hash")
    for part in (value or "").split(","):
        name, _, digest = part.strip().partition("=")
        if name == kind and digest:
            return digest
    return None


def _header(headers: Any, name: str) -> str | None:
    value = headers.get(name) if headers is not None else None
    if value is None and headers is not None:
        value = headers.get(name.lower())
    return str(value) if value is not None else None
