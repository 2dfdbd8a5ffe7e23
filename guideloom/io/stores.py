"""Ranged GETs that also report the object's whole size, on every object store GuideLoom tests.

A shard read is one ranged GET per merged range; the size of the whole object comes back in the
same response (``Content-Range: bytes a-b/SIZE``), so a shard that grew or shrank since the
manifest was written is caught with no request of its own. fsspec's ``_cat_file`` returns only
the body, so each store gets a small coroutine here that makes the same single GET and keeps the
size: S3 (`guideloom.io.s3.ranged_get`), GCS (gcsfs's JSON API media download) and Azure Blob
(adlfs's blob client; the SDK parses ``Content-Range`` into the downloader's properties). Each
also refuses a body shorter than its own header announces (`ShortBodyError`, retried).

And one setting: `quicken_azure_retries` shortens the Azure SDK's own waits between retries.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import os
from collections.abc import Awaitable, Callable
from typing import Any

from guideloom.io import s3
from guideloom.io.failures import ShortBodyError
from guideloom.io.s3 import check_body_length, content_range_total

__all__ = [
    "AZURE_BACKOFF",
    "azure_ranged_get",
    "quicken_azure_retries",
    "gcs_ranged_get",
    "gcs_read_whole",
    "is_gcs",
    "sized_ranged_get",
]

RangedGet = Callable[[Any, str, int, int], Awaitable[tuple[bytes, int | None]]]


def sized_ranged_get(fs: Any) -> RangedGet | None:
    """The ranged GET that reports the object's size for ``fs``'s store, or None (other
    filesystems: the caller uses fsspec's ``_cat_file`` and gets no size)."""
    if s3.is_s3(fs):
        return s3.ranged_get
    name = type(fs).__name__
    if name == "GCSFileSystem":
        return gcs_ranged_get
    if name == "AzureBlobFileSystem":
        return azure_ranged_get
    return None


async def gcs_ranged_get(fs: Any, path: str, start: int, end: int) -> tuple[bytes, int | None]:
    """Bytes ``[start, end)`` of a GCS object and its size, from one GET (gcsfs's ``_call``
    retries what gcsfs retries and translates errors as for ``_cat_file``)."""
    headers, data = await fs._call("GET", fs.url(path), headers={"Range": f"bytes={start}-{end - 1}"})
    header = _header(headers, "Content-Range")
    total = content_range_total(header)
    if total is None and header is None:  # a 200 with the whole object (a range past nothing)
        stored = _header(headers, "x-goog-stored-content-length")
        total = int(stored) if stored and stored.isdigit() else None
    check_body_length(data, header, path, total)
    return bytes(data), total


async def azure_ranged_get(fs: Any, path: str, start: int, end: int) -> tuple[bytes, int | None]:
    """Bytes ``[start, end)`` of an Azure blob and its size, from one GET (adlfs's client)."""
    from azure.core.exceptions import ResourceNotFoundError

    container, blob, version_id = fs.split_path(fs._strip_protocol(path))
    async with fs.service_client.get_blob_client(container=container, blob=blob) as client:
        try:
            stream = await client.download_blob(
                offset=start, length=end - start, version_id=version_id, max_concurrency=1
            )
        except ResourceNotFoundError as err:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path) from err
        data = await stream.readall()
    header = getattr(stream.properties, "content_range", None)
    total = content_range_total(header)
    check_body_length(data, header, path, total)
    return bytes(data), total


# The Azure SDK's own retry waits 15 s + 3**n (+-3 s) before its n-th retry (``ExponentialRetry``'s
# defaults): one 503 stalls a read for 15-21 s, which alone can pass GuideLoom's I/O deadline
# and starves a training step. GuideLoom retries transient answers itself, within the deadline,
# so the SDK's attempts are made short: 1.5**n s, +-0.5 s (3 retries, under 9 s in all).
AZURE_BACKOFF = {"initial_backoff": 0, "increment_base": 1.5, "random_jitter_range": 0.5}


def quicken_azure_retries(fs: Any) -> None:
    """Shorten the backoff of adlfs's blob client (``fs.service_client``) to `AZURE_BACKOFF`.

    adlfs builds the client without passing a retry policy through, so the policy the client
    already holds (shared by every blob client it hands out) gets the shorter waits. A client
    without one (another SDK layout) is left as it is."""
    if type(fs).__name__ != "AzureBlobFileSystem":
        return
    clients = getattr(fs, "service_client", None)
    for client in clients if isinstance(clients, list) else [clients]:
        policy = getattr(getattr(client, "_config", None), "retry_policy", None)
        if policy is not None and all(hasattr(policy, name) for name in AZURE_BACKOFF):
            for name, value in AZURE_BACKOFF.items():
                setattr(policy, name, value)


def is_gcs(fs: Any) -> bool:
    """Whether ``fs`` is gcsfs's filesystem."""
    return type(fs).__name__ == "GCSFileSystem"


async def gcs_read_whole(fs: Any, path: str) -> bytes:
    """A whole GCS object from one GET, checked against the size GCS says it stores
    (``x-goog-stored-content-length``): a body cut short on its way, with a ``Content-Length``
    that agrees, is a `ShortBodyError` (retried), never a truncated manifest or record."""
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
