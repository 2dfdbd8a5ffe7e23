"""Formats and expectations shared by the storage tests (a module, not conftest, so tests can
import it)."""

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


def expected_spans(records: Any, sequence_length: int, window: int) -> list[tuple[int, int, Any]]:
    """The spans of ``window``, worked out by hand: every span of every ``(tokens, spans)``
    record, clipped to the window, in window coordinates."""
    g0, g1 = window * sequence_length, (window + 1) * sequence_length
    out, pos = [], 0
    for tokens, spans in records:
        for a, b, annotation in spans:
            lo, hi = max(a + pos, g0), min(b + pos, g1)
            if lo < hi:
                out.append((lo - g0, hi - g0, annotation))
        pos += len(tokens)
    return out
