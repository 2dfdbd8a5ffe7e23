"""fsspec's in-memory filesystem (``memory://``): one process's dict of files, for tests and
examples. Nothing differs from a plain fsspec filesystem but how its endpoint is named."""

from __future__ import annotations

from typing import Any, ClassVar

from guideloom.io.backends.base import Backend

__all__ = ["MemoryBackend"]


class MemoryBackend(Backend):
    protocols: ClassVar[tuple[str, ...]] = ("memory",)
    display_name: ClassVar[str] = "in-memory filesystem"

    def endpoint(self, fs: Any, url: str, options: dict[str, Any]) -> str | None:
        return "fsspec's in-memory filesystem (this process)"
