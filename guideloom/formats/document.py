"""Document formats: one record <-> one byte string.

``DocumentStorageFormat`` is the base class users subclass; three are shipped. Pickle runs
arbitrary code when it decodes, so `DocumentPickleFormat` is for data you wrote yourself
or otherwise trust. JSON and MessagePack decode only data.
"""

from __future__ import annotations

import json
import pickle
from typing import Any

import msgpack

from guideloom.formats.base import Format

__all__ = [
    "DocumentJsonFormat",
    "DocumentMsgpackFormat",
    "DocumentPickleFormat",
    "DocumentStorageFormat",
]


class DocumentStorageFormat(Format):
    """Base class for document formats.

    Subclasses implement `encode` and `decode` so that
    ``decode(encode(record))`` gives back an equal record. ``decode`` may receive a
    ``memoryview`` instead of ``bytes``; it stays valid after the call.
    If the format has parameters that change the bytes, override `config` so the manifest
    records them.
    """

    def encode(self, record: Any) -> bytes:
        """Turn one record into bytes."""
        raise NotImplementedError(f"{type(self).__qualname__} must implement encode(record) -> bytes")

    def decode(self, data: bytes | memoryview) -> Any:
        """Turn the bytes of one record back into the record."""
        raise NotImplementedError(f"{type(self).__qualname__} must implement decode(data) -> record")


class DocumentPickleFormat(DocumentStorageFormat):
    """Any picklable Python object. Read it only from trusted data: unpickling can run code."""

    def __init__(self, protocol: int = 5) -> None:
        self.protocol = protocol

    def config(self) -> dict[str, Any]:
        return {"protocol": self.protocol}

    def encode(self, record: Any) -> bytes:
        return pickle.dumps(record, protocol=self.protocol)

    def decode(self, data: bytes | memoryview) -> Any:
        return pickle.loads(data)


class DocumentJsonFormat(DocumentStorageFormat):
    """JSON values (dicts, lists, strings, numbers, booleans, None), stored as UTF-8."""

    def encode(self, record: Any) -> bytes:
        try:
            return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        except TypeError as err:
            raise TypeError(
                f"DocumentJsonFormat cannot encode this record ({err}); convert NumPy arrays with "
                ".tolist() or use DocumentMsgpackFormat / DocumentPickleFormat"
            ) from err

    def decode(self, data: bytes | memoryview) -> Any:
        return json.loads(bytes(data))


class DocumentMsgpackFormat(DocumentStorageFormat):
    """MessagePack values: like JSON plus ``bytes``; compact and fast."""

    def encode(self, record: Any) -> bytes:
        try:
            return msgpack.packb(record, use_bin_type=True)
        except TypeError as err:
            raise TypeError(
                f"DocumentMsgpackFormat cannot encode this record ({err}); convert NumPy arrays "
                "with .tolist() or .tobytes(), or use DocumentPickleFormat for trusted data"
            ) from err

    def decode(self, data: bytes | memoryview) -> Any:
        return msgpack.unpackb(data, raw=False)
