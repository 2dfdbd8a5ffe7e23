"""The S3 client pieces GuideLoom adds to s3fs: one session per process, a connection pool as
large as the ranges fetched at once, and ranged GETs that also report the object's size.

The S3 backend (`guideloom.io.backends.s3`) says when to use these pieces. The checks of a
ranged answer (`range_header`, `sized_body`, `check_body_length`) are HTTP's, not S3's: the
GCS and Azure backends' ranged GETs return through `sized_body` too, so every store's answer is
checked and sized one way.
"""

from __future__ import annotations

import errno
import os
from typing import Any

from guideloom.io.failures import THROTTLE_CODES, THROTTLE_STATUSES, ShortBodyError
from guideloom.io.throttle import note_throttled

__all__ = [
    "MAX_CONCURRENT_RANGES",
    "POOL_OPTION",
    "check_body_length",
    "content_range_span",
    "content_range_total",
    "range_header",
    "ranged_get",
    "read_from",
    "s3_options",
    "sized_body",
    "watch_throttling",
]

MAX_CONCURRENT_RANGES = 64  # range requests in flight at once for one batch
# s3fs's client (aiobotocore) keeps at most 10 connections by default, which would queue most of
# the concurrent ranges; GuideLoom asks for as many as it sends, unless the user set the option.
POOL_OPTION = "max_pool_connections"  # in s3fs's config_kwargs (botocore's Config)

_BOTOCORE_LOADER: Any = None  # botocore's data loader: the JSON models it has read stay cached
_S3_SESSION: tuple[Any, Any] = (None, None)  # ((pid, AWS_* environment), aiobotocore session)


def s3_options(options: dict[str, Any]) -> dict[str, Any]:
    """s3fs's options for ``options`` (the user's): a connection pool of `MAX_CONCURRENT_RANGES`
    where the user chose none, and the process's shared session where the user gave no session
    or profile."""
    out = dict(options)
    config = dict(out.get("config_kwargs") or {})
    config.setdefault(POOL_OPTION, MAX_CONCURRENT_RANGES)
    out["config_kwargs"] = config
    if "session" not in out and "profile" not in out:
        out["session"] = _s3_session()
    return out


def _s3_session() -> Any:
    """One aiobotocore session per process, all sharing one botocore data loader.

    A new S3 client reads botocore's models of S3 (a few MB of JSON) before its first request,
    about 0.13 s here. DataLoader workers are forked from the training process, so a loader that
    the parent has filled is inherited already parsed: each worker's session registers it, and
    its first request skips that work. One session per process also keeps fsspec's instance
    cache sharing one filesystem between the datasets of a process, as without a session. A
    session caches the credentials it found, so a change to the ``AWS_*`` environment starts a
    new one."""
    global _BOTOCORE_LOADER, _S3_SESSION
    key = (os.getpid(), tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_"))))
    held, session = _S3_SESSION
    if held != key or session is None:
        from aiobotocore.session import AioSession

        session = AioSession()
        if _BOTOCORE_LOADER is None:
            _BOTOCORE_LOADER = session.get_component("data_loader")
        else:
            session.register_component("data_loader", _BOTOCORE_LOADER)
        _S3_SESSION = (key, session)
    return session


async def ranged_get(fs: Any, path: str, start: int, end: int) -> tuple[bytes, int | None]:
    """Bytes ``[start, end)`` of an S3 object, and the object's whole size from the response's
    ``Content-Range`` (``bytes a-b/size``; None if the server leaves it out). s3fs's own
    ``_cat_file`` returns only the body; this is the same single GET (``_call_s3`` translates
    backend errors and retries throttling, as it does for ``_cat_file``)."""
    return await _checked_get(fs, path, range_header(start, end))


async def _checked_get(fs: Any, path: str, byte_range: str) -> tuple[bytes, int | None]:
    """One GET of ``byte_range`` (a Range header), its body checked against its own
    Content-Range (`check_body_length`); with the object's size from that header."""
    bucket, key, version = fs.split_path(path)
    extra = {"VersionId": version} if version else {}
    resp = await fs._call_s3("get_object", Bucket=bucket, Key=key, Range=byte_range, **extra)
    try:
        data = await resp["Body"].read()
    finally:
        resp["Body"].close()
    return sized_body(data, resp.get("ContentRange"), path)


async def read_from(fs: Any, path: str, start: int) -> bytes:
    """Bytes ``start`` to the end of an S3 object, from one open-ended ranged GET
    (``bytes=start-``). The answer's own ``Content-Range`` then says how many bytes it should
    carry, so a body cut short on its way, with a length header that agrees, is a
    `ShortBodyError` (retried) and never a truncated file; a plain GET has nothing to check it
    against where the store sends no checksum (Ceph RGW). An empty object has no byte to range
    over (416): it is read with a plain GET."""
    try:
        data, _ = await _checked_get(fs, path, f"bytes={start}-")
    except OSError as err:
        if err.errno != errno.EINVAL or start != 0:  # s3fs maps InvalidRange (416) to EINVAL
            raise
        return bytes(await fs._cat_file(path))
    return bytes(data)


def range_header(start: int, end: int) -> str:
    """The HTTP ``Range`` value of the half-open byte range ``[start, end)`` (``end > start``):
    the one place a ranged GET's header is spelled (S3 and GCS send it themselves)."""
    return f"bytes={start}-{end - 1}"


def sized_body(
    data: bytes, content_range: str | None, path: str, stored: int | None = None
) -> tuple[bytes, int | None]:
    """A ranged GET's answer as every backend's `RangedGet` returns it: its body, checked
    against its own ``Content-Range`` (`check_body_length`), and the object's whole size from
    that header, else ``stored`` (a size the store sent otherwise), else None.

    Args:
        data: The body.
        content_range: The answer's ``Content-Range`` header (None: the store sent none).
        path: The object, for the message.
        stored: The object's size from another header, used when ``Content-Range`` has none.

    Returns:
        ``(bytes, size or None)``.

    Raises:
        ShortBodyError: The body is shorter than its header announces (cut on its way).
    """
    total = content_range_total(content_range)
    if total is None and content_range is None:
        total = stored
    check_body_length(data, content_range, path, total)
    return bytes(data), total


def check_body_length(data: bytes, header: str | None, path: str, total: int | None = None) -> None:
    """Raise `ShortBodyError` (transient) when a ranged body is shorter than the span its own
    ``Content-Range`` (``bytes a-b/size``) announces, within the object's ``total`` size where
    known: the answer was cut on its way, not the file."""
    span = content_range_span(header)
    if span is None:
        return
    expected = (min(span[1], total) if total is not None else span[1]) - span[0]
    if len(data) < expected:
        raise ShortBodyError(
            f"{path}: the answer carried {len(data)} bytes of the {expected} its "
            f"Content-Range ({header}) announces"
        )


def content_range_span(header: str | None) -> tuple[int, int] | None:
    """The half-open span of a ``Content-Range`` header (``bytes 0-99/1234`` -> (0, 100))."""
    if not header:
        return None
    head = header.strip().split(" ", 1)[-1].split("/", 1)[0]
    first, _, last = head.partition("-")
    if not (first.strip().isdigit() and last.strip().isdigit()):
        return None
    return int(first), int(last) + 1


def content_range_total(header: str | None) -> int | None:
    """The size after the slash of a ``Content-Range`` header (``bytes 0-99/1234`` -> 1234)."""
    if not header or "/" not in header:
        return None
    tail = header.rsplit("/", 1)[1].strip()
    return int(tail) if tail.isdigit() else None


_HOOK_ID = "guideloom-throttling"


def _on_answer(response: Any = None, **_: Any) -> None:
    """botocore's ``needs-retry`` hook: called after every attempt, also those botocore and
    s3fs then retry themselves, so each throttling answer lowers the requests in flight at
    once (`guideloom.io.throttle.note_throttled`); it never changes the retry decision."""
    if not response:
        return
    http, parsed = response
    status = getattr(http, "status_code", None)
    code = (parsed.get("Error") or {}).get("Code") if isinstance(parsed, dict) else None
    if status in THROTTLE_STATUSES or code in THROTTLE_CODES:
        note_throttled(f"{status} {code}" if code else str(status))


async def watch_throttling(fs: Any) -> None:
    """Make sure ``fs``'s S3 client reports its throttling answers (once per client)."""
    client = await fs.set_session()
    if client is not None and not getattr(client, "_guideloom_watched", False):
        client.meta.events.register("needs-retry.s3", _on_answer, unique_id=_HOOK_ID)
        try:
            client._guideloom_watched = True
        except AttributeError:  # pragma: no cover - unique_id keeps it registered once anyway
            pass
