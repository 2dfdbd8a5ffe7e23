"""Datasets served over HTTP(S) (``http://``, ``https://``): read-only, through fsspec's
HTTPFileSystem (aiohttp).

Any static file server that answers ``Range`` requests and ``HEAD`` with ``Content-Length``
serves a dataset: copy the dataset's folder under the server's root and open its URL. Reads are
ranged GETs, like an object store's; writing, committing and deleting are refused before any
request is sent (HTTP has no PUT that every server honours, nor a conditional create).
"""

from __future__ import annotations

from typing import Any, ClassVar
from urllib.parse import urlsplit

from guideloom.errors import StorageAccessError
from guideloom.io.backends.base import Backend
from guideloom.io.urls import redact_url

__all__ = ["HTTPBackend"]


class HTTPBackend(Backend):
    protocols: ClassVar[tuple[str, ...]] = ("http", "https")
    key: ClassVar[str | None] = "http"
    display_name: ClassVar[str] = "HTTP"
    bucket_word: ClassVar[str] = "site"
    read_only: ClassVar[bool] = True
    extra: ClassVar[tuple[str, str] | None] = ("http", "aiohttp")
    endpoint_options: ClassVar[str | None] = "the URL's host and port"
    generic_hint: ClassVar[str | None] = (
        "Check that the server is up, that the URL names the dataset's folder (the one that holds "
        "manifest.json), and that the server answers Range requests and HEAD with Content-Length"
    )
    throttle_spread: ClassVar[str | None] = "serve the dataset from more servers behind one name"

    def endpoint(self, fs: Any, url: str, options: dict[str, Any]) -> str | None:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
        return redact_url(f"{parts.scheme}://{parts.hostname or ''}{port}")

    def refuse_write(self, where: str) -> None:
        raise StorageAccessError(
            f"writing {where}: http(s):// datasets are read-only (GuideLoom reads them with "
            "range requests and never writes over HTTP). Write the dataset to a local path or an "
            "object store (s3://, gs://, az://) and serve that folder over HTTP to read it from there"
        )
