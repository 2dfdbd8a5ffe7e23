"""Formats shared by the storage tests (a module, not conftest, so tests can import it)."""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np

from guideloom import StreamNumpyFormat, StreamWithMetaStorageFormat


class ConceptsFormat(StreamWithMetaStorageFormat):
    """Annotations are lists of concept strings, stored as MessagePack."""

    def encode_meta(self, annotation: Any) -> bytes:
        return msgpack.packb(annotation)

    def decode_meta(self, data: bytes | memoryview) -> Any:
        return msgpack.unpackb(data)


def tokens_format() -> StreamNumpyFormat:
    return StreamNumpyFormat({"tokens": np.uint32, "loss_mask": np.uint8})
