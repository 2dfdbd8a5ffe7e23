"""What a store backend is: everything GuideLoom does differently for one kind of store.

`Location`, the shard readers and the error translation ask the backend of a URL (found once,
by fsspec protocol, in `guideloom.io.backends.BACKENDS`) instead of testing the URL's prefix or
the filesystem's class. The defaults here are those of a plain fsspec filesystem that GuideLoom
knows nothing special about (any protocol without a module of its own); a store's module
overrides only what differs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

__all__ = ["Backend", "RangedGet", "WholeRead"]

# ``(fs, path, start, end) -> (bytes, the whole object's size or None)``: one ranged GET.
RangedGet = Callable[[Any, str, int, int], Awaitable[tuple[bytes, int | None]]]
# ``(fs, path) -> bytes``: a whole object, checked against what the store says it holds.
WholeRead = Callable[[Any, str], Awaitable[bytes]]


class Backend:
    """One kind of store. Subclass it in a module of its own and add it to `BACKENDS`."""

    #: fsspec protocols this backend serves (``"s3"``, ``"s3a"``, ...), without ``://``.
    protocols: ClassVar[tuple[str, ...]] = ()
    #: The store's key in messages and tables (``"s3"``, ``"gcs"``); None: no store of its own.
    key: ClassVar[str | None] = None
    #: How messages name it (``"S3"``).
    display_name: ClassVar[str] = "storage"
    #: What its top-level folder is called.
    bucket_word: ClassVar[str] = "bucket"
    #: Files on this machine's disk: positioned reads, rename/link for atomic writes.
    is_local: ClassVar[bool] = False
    #: Datasets here can be read, never written (a write is refused before any request).
    read_only: ClassVar[bool] = False
    #: The ``pip install 'guideloom[EXTRA]'`` extra and the package that bring its fsspec backend.
    extra: ClassVar[tuple[str, str] | None] = None
    #: Where the endpoint can be set (for messages), or None.
    endpoint_options: ClassVar[str | None] = None
    #: What to check when the store refuses without saying why, or None.
    generic_hint: ClassVar[str | None] = None
    #: How to get more request rate from this store, for throttling that lasts; or None.
    throttle_spread: ClassVar[str | None] = None
    #: US dollars per 1,000 GET-class requests and per GB sent out (``get_per_1000``,
    #: ``egress_per_gb``), as `PRICES_TAKEN`; None: no list price (`guideloom.loading.estimate`).
    list_prices: ClassVar[dict[str, float] | None] = None
    #: A missing object costs one more request billed as a LIST (s3fs looks for a folder).
    missing_costs_list: ClassVar[bool] = False
    #: A HEAD answered 403 may mean "missing, and you may not list" (S3's rule).
    forbidden_head_may_be_missing: ClassVar[bool] = False
    #: The store's own error codes for refused credentials or permissions, each with what to
    #: check (`guideloom.io.failures.translated` words the access errors with them).
    access_hints: ClassVar[dict[str, str]] = {}
    #: The client's errors raised before any request because the credentials cannot be used:
    #: exception class name -> (what is wrong, the fix).
    credential_problems: ClassVar[dict[str, tuple[str, str]]] = {}

    # -- the filesystem ------------------------------------------------------------------------

    def fs_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """The options handed to fsspec for the user's ``options``."""
        return dict(options)

    def prepare(self, fs: Any) -> None:
        """Adjust a new filesystem object (once per process) before its first request."""

    def endpoint(self, fs: Any, url: str, options: dict[str, Any]) -> str | None:
        """The endpoint requests for ``url`` go to (redacted), for messages; None for local
        disk. Taken from the live filesystem ``fs`` where there is one (None: not made yet),
        else from ``options`` and the environment as the backend would read them."""
        return "(the default for this protocol)"

    # -- reading -------------------------------------------------------------------------------

    def sized_ranged_get(self) -> RangedGet | None:
        """A ranged GET that also reports the object's whole size, or None (fsspec's
        ``_cat_file``, no size)."""
        return None

    def read_from(self, start: int, end: int | None) -> Callable[[Any, str], Awaitable[bytes]] | None:
        """For a read of ``[start, end)`` (``end`` None: to the end of the file), a coroutine
        ``(fs, path)`` that reads it checked against the store's own length headers, or None
        (fsspec's ``cat_file``)."""
        return None

    async def watch_throttling(self, fs: Any) -> None:
        """Make the store's client report each throttling answer (`guideloom.io.throttle`)."""

    # -- writing -------------------------------------------------------------------------------

    def refuse_write(self, where: str) -> None:
        """Raise when this store cannot be written (`read_only`)."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {'/'.join(self.protocols) or '(any other protocol)'}>"
