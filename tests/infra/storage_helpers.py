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


def plain_manifest(fs: Any, root: str) -> dict[str, Any]:
    """Turn the dataset at ``root`` (raw fsspec) into one whose manifest.json is a whole
    manifest, as GuideLoom wrote before snapshots (the current snapshot's manifest, history
    dropped), and return that manifest as a dict: tests that damage a manifest edit this."""
    import json

    from guideloom.io import Location
    from guideloom.storage.checks import load_manifest

    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    url = root if protocol in ("file", "local") else f"{protocol}://{root}"
    manifest = load_manifest(Location(url, getattr(fs, "storage_options", None)))
    data = manifest.to_json()
    fs.pipe_file(f"{root}/manifest.json", data)
    if fs.exists(f"{root}/snapshots"):
        fs.rm(f"{root}/snapshots", recursive=True)
    return dict(json.loads(data))
