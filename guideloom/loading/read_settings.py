"""`ReadSettings`: how the loader reads, in one object (read-ahead, block cache).

What a loader reads and in which order are the view's and `BatchOrder`'s; *how* it fetches the
bytes is this object's. None of it changes which samples a batch holds, so none of it is part
of the loader's state: a checkpoint taken with one setting resumes with another.

``StatefulDataLoader.from_storage(url, read=ReadSettings(read_ahead_bytes=8 << 20,
cache_dir="/nvme/cache"))`` is the same loader as ``from_storage(url, read_ahead_bytes=8 << 20,
cache_dir="/nvme/cache")``: the loose keywords are shorthands for this object's fields (giving one
both ways is refused). A loader built from a view, ``StatefulDataLoader(view, read=...)``, takes
the read-ahead fields; the cache is opened with the storage (``StreamStorage(url, fmt,
cache_dir=...)`` or `ReadSettings.open`).

No torch here: ``import guideloom`` exports it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from typing import Any

__all__ = ["ReadSettings"]


@dataclass(frozen=True)
class ReadSettings:
    """How a loader fetches bytes: read-ahead and the local block cache (never what it reads).

    Args:
        read_ahead: Batches each worker fetches together with the current one, in one round of
            concurrent range requests (a fixed group of ``read_ahead + 1`` batches); default:
            groups sized by ``read_ahead_bytes``.
        read_ahead_bytes: When ``read_ahead`` is not given: the most bytes of consecutive batches
            one read fetches (default ``$GUIDELOOM_READ_AHEAD_BYTES``, or 4 MiB).
        cache_dir: A local folder for the opt-in block cache of a storage opened from a URL
            (`open`, or ``from_storage`` given a URL); default: no cache.
        cache_bytes: With ``cache_dir``: the cache's bound in bytes (default the smaller of
            16 GiB and half the free space of ``cache_dir``).

    Raises:
        ValueError: ``read_ahead`` and ``read_ahead_bytes`` both given.
    """

    read_ahead: int | None = None
    read_ahead_bytes: int | None = None
    cache_dir: str | os.PathLike[str] | None = None
    cache_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.read_ahead is not None and self.read_ahead_bytes is not None:
            raise ValueError(
                "read_ahead (batches) and read_ahead_bytes both given: set one; read_ahead "
                "fixes the group, read_ahead_bytes sizes it by bytes"
            )

    @classmethod
    def merged(cls, read: ReadSettings | None, **loose: Any) -> ReadSettings:
        """``read`` (or the defaults) with the loose keywords given (None: not given) filled in.

        Args:
            read: The settings object a caller passed, or None.
            **loose: ``read_ahead=``, ``read_ahead_bytes=``, ``cache_dir=``, ``cache_bytes=`` as
                a caller passed them loose.

        Returns:
            One `ReadSettings`.

        Raises:
            TypeError: ``read`` is not a `ReadSettings`, or a field is given both in ``read``
                and loose (the message names it).
        """
        if read is not None and not isinstance(read, ReadSettings):
            raise TypeError(
                f"read= takes a guideloom.ReadSettings, got {type(read).__name__}: "
                "read=ReadSettings(read_ahead_bytes=..., cache_dir=...)"
            )
        base = read if read is not None else cls()
        given = {name: value for name, value in loose.items() if value is not None}
        twice = [name for name in given if getattr(base, name) is not None]
        if read is not None and twice:
            raise TypeError(
                f"{twice[0]}= is given both loose and in read=ReadSettings(...): give it once "
                f"(ReadSettings({twice[0]}=...) or {twice[0]}=..., not both)"
            )
        return replace(base, **given) if given else base

    @property
    def cache(self) -> dict[str, Any]:
        """The cache fields that are set, as a storage's constructor takes them."""
        out = {"cache_dir": self.cache_dir, "cache_bytes": self.cache_bytes}
        return {name: value for name, value in out.items() if value is not None}

    def open(self, url: str | os.PathLike[str], storage_options: dict[str, Any] | None = None) -> Any:
        """The dataset at ``url`` (`guideloom.open`), with this object's block cache.

        Args:
            url: A local path or an fsspec URL of a committed dataset.
            storage_options: fsspec options (credentials, endpoint) for ``url``.

        Returns:
            The storage its manifest records (`DocumentStorage`, `StreamStorage`, ...).

        Raises:
            DatasetNotFoundError: No dataset is committed at ``url``.
        """
        from guideloom.storage.byurl import open_url

        return open_url(url, storage_options, **self.cache)

    def __repr__(self) -> str:
        shown = [
            f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if getattr(self, f.name) is not None
        ]
        return f"ReadSettings({', '.join(shown)})"
