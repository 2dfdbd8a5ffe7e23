"""The synthetic, seeded corpora the benchmarks read, written through GuideLoom's public API.

Documents have variable lengths (log-normal, median about 700 tokens, clipped to 16..16,384), token
ids are uniform below 50,257 and stored as ``uint16`` (as in the design's reference corpus). The
same documents give:

* a :class:`~guideloom.StreamStorage` (field ``tokens``) and, for the baselines, the same stream as
  one flat raw ``uint16`` file (``ndarray.tofile``);
* a :class:`~guideloom.StreamWithMetaStorage` with one span per document whose annotation is the
  document number (8 bytes);
* a :class:`~guideloom.DocumentStorage` of ``{"id", "text"}`` records (msgpack) and, for the
  baseline, the same encoded records back to back in one raw file plus an offsets array.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from guideloom import (
    DocumentMsgpackFormat,
    DocumentStorage,
    StreamNumpyFormat,
    StreamStorage,
    StreamWithMetaStorage,
    StreamWithMetaStorageFormat,
)

__all__ = [
    "DocIdMetaFormat",
    "RawDocuments",
    "document_lengths",
    "stream_format",
    "write_documents",
    "write_meta_stream",
    "write_stream",
]

VOCAB = 50_257
DTYPE = np.dtype(np.uint16)
_DOC_ID = struct.Struct("<q")


def stream_format() -> StreamNumpyFormat:
    return StreamNumpyFormat({"tokens": np.uint16})


class DocIdMetaFormat(StreamWithMetaStorageFormat):
    """Annotation = the document number (an int, 8 bytes); ``align`` keeps the default:
    the window's fields plus its clipped spans."""

    def __init__(self) -> None:
        super().__init__(stream_format())

    def encode_meta(self, annotation: Any) -> bytes:
        return _DOC_ID.pack(int(annotation))

    def decode_meta(self, data: bytes | memoryview) -> Any:
        return _DOC_ID.unpack(data)[0]


def document_lengths(total_tokens: int, seed: int) -> np.ndarray:
    """Lengths of the documents that make up exactly ``total_tokens`` tokens."""
    rng = np.random.default_rng(seed)
    lengths: list[np.ndarray] = []
    have = 0
    while have < total_tokens:
        chunk = np.clip(rng.lognormal(mean=6.5, sigma=1.0, size=4096), 16, 16_384).astype(np.int64)
        lengths.append(chunk)
        have += int(chunk.sum())
    out = np.concatenate(lengths)
    ends = np.cumsum(out)
    n = int(np.searchsorted(ends, total_tokens)) + 1
    out = out[:n].copy()
    out[-1] -= int(out.sum()) - total_tokens
    return out[out > 0]


def _documents(total_tokens: int, seed: int) -> Iterator[np.ndarray]:
    rng = np.random.default_rng(seed + 1)
    for length in document_lengths(total_tokens, seed):
        yield rng.integers(0, VOCAB, size=int(length), dtype=DTYPE)


def write_stream(
    url: str,
    total_tokens: int,
    seed: int,
    shard_size: int,
    storage_options: dict[str, Any] | None = None,
    raw_path: str | Path | None = None,
) -> StreamStorage:
    """A stream dataset of ``total_tokens`` tokens; with ``raw_path``, the same stream raw."""
    storage = StreamStorage(url, stream_format(), storage_options=storage_options)
    raw = open(raw_path, "wb") if raw_path is not None else None
    try:
        with storage.writer(overwrite=True, shard_size=shard_size) as writer:
            for tokens in _documents(total_tokens, seed):
                writer.append({"tokens": tokens})
                if raw is not None:
                    tokens.tofile(raw)
    finally:
        if raw is not None:
            raw.close()
    return StreamStorage(url, stream_format(), storage_options=storage_options)


def write_meta_stream(
    url: str, total_tokens: int, seed: int, shard_size: int, storage_options: dict[str, Any] | None = None
) -> StreamWithMetaStorage:
    """The same stream as :func:`write_stream`, each document one annotated span."""
    fmt = DocIdMetaFormat()
    storage = StreamWithMetaStorage(url, fmt, storage_options=storage_options)
    with storage.writer(overwrite=True, shard_size=shard_size) as writer:
        for doc_id, tokens in enumerate(_documents(total_tokens, seed)):
            writer.append({"tokens": tokens}, spans=[(0, len(tokens), doc_id)])
    return StreamWithMetaStorage(url, fmt, storage_options=storage_options)


@dataclass
class RawDocuments:
    """The baseline's copy of the document corpus: encoded records back to back, and offsets."""

    data_path: Path
    offsets: np.ndarray  # int64 [count + 1]


def write_documents(
    url: str, raw_dir: Path, count: int, seed: int, shard_size: int
) -> tuple[DocumentStorage, RawDocuments]:
    """``count`` msgpack documents ``{"id": i, "text": ...}`` (64..4,096 ASCII characters)."""
    rng = np.random.default_rng(seed + 2)
    alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz     .,", dtype=np.uint8)
    pool = alphabet[rng.integers(0, len(alphabet), size=1 << 20)].tobytes().decode("ascii")
    fmt = DocumentMsgpackFormat()
    storage = DocumentStorage(url, fmt)
    raw_dir.mkdir(parents=True, exist_ok=True)
    data_path = raw_dir / "documents.bin"
    offsets = [0]
    with storage.writer(overwrite=True, shard_size=shard_size) as writer, open(data_path, "wb") as raw:
        for i in range(count):
            length = int(rng.integers(64, 4096))
            start = int(rng.integers(0, len(pool) - length))
            record = {"id": i, "text": pool[start : start + length]}
            writer.append(record)
            encoded = fmt.encode(record)
            raw.write(encoded)
            offsets.append(offsets[-1] + len(encoded))
    return DocumentStorage(url, fmt), RawDocuments(data_path, np.asarray(offsets, dtype=np.int64))
