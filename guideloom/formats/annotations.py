"""Shipped formats of streams with metadata: annotations (dicts) as JSON or MessagePack.

Both wrap a `StreamNumpyFormat` (the per-token fields) and keep the default `align`, which
returns a window's fields plus ``"spans"``: ``(start, stop, annotation)`` triples in window
coordinates, each annotation a dict. Ingestion (``layout: stream-with-meta``,
``meta_format: json | msgpack``) writes with them, and a manifest that names them reopens with
the lines ``guideloom inspect`` prints.
"""

from __future__ import annotations

import json
from typing import Any

from guideloom.formats.meta import StreamWithMetaStorageFormat

__all__ = ["StreamWithMetaJsonFormat", "StreamWithMetaMsgpackFormat"]

# One encoder for every call: json.dumps with options builds a new one each time.
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


class StreamWithMetaJsonFormat(StreamWithMetaStorageFormat):
    """Annotations as compact UTF-8 JSON (objects with string keys; any JSON value)."""

    def encode_meta(self, annotation: Any) -> bytes:
        """The annotation as compact UTF-8 JSON (keys kept in their order).

        Args:
            annotation: A JSON value (a dict of strings, numbers, lists, ...); NaN is refused.

        Returns:
            The JSON bytes.
        """
        return _JSON.encode(annotation).encode()

    def decode_meta(self, data: bytes | memoryview) -> Any:
        """The annotation the JSON bytes hold.

        Args:
            data: Bytes `encode_meta` returned.

        Returns:
            The annotation (a dict for what ingestion writes).
        """
        return json.loads(bytes(data))


class StreamWithMetaMsgpackFormat(StreamWithMetaStorageFormat):
    """Annotations as MessagePack (smaller and faster than JSON; needs ``msgpack``)."""

    def encode_meta(self, annotation: Any) -> bytes:
        """The annotation as MessagePack bytes.

        Args:
            annotation: Plain data MessagePack can hold (dicts, lists, strings, numbers, bytes).

        Returns:
            The MessagePack bytes.
        """
        import msgpack

        return bytes(msgpack.packb(annotation, use_bin_type=True))

    def decode_meta(self, data: bytes | memoryview) -> Any:
        """The annotation the MessagePack bytes hold (lists come back as lists).

        Args:
            data: Bytes `encode_meta` returned.

        Returns:
            The annotation (a dict for what ingestion writes).
        """
        import msgpack

        return msgpack.unpackb(bytes(data), raw=False, strict_map_key=False)
