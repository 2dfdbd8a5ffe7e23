"""Files on this machine's disk (plain paths, ``file://``, ``local://``).

The shard reader here uses positioned reads on kept descriptors, writes are a temporary file
then an atomic rename (or ``os.link`` for a create), and nothing is counted as a request.
"""

from __future__ import annotations

from typing import Any, ClassVar

from guideloom.io.backends.base import Backend

__all__ = ["LocalBackend"]


class LocalBackend(Backend):
    protocols: ClassVar[tuple[str, ...]] = ("file", "local")
    key: ClassVar[str | None] = None
    display_name: ClassVar[str] = "local disk"
    bucket_word: ClassVar[str] = "folder"
    is_local: ClassVar[bool] = True

    def endpoint(self, fs: Any, url: str, options: dict[str, Any]) -> str | None:
        return None
