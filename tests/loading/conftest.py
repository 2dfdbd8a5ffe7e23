"""Fixtures for the loader tests: small datasets of all three layouts whose samples all differ.

Written through the public writer API (the loader, not the writer, is under test here). Token ids
count up, so every window is distinct; documents carry their index.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from guideloom import (
    DocumentJsonFormat,
    DocumentStorage,
    StreamNumpyFormat,
    StreamStorage,
    StreamWithMetaStorage,
    StreamWithMetaStorageFormat,
)

SEQUENCE_LENGTH = 8
LAYOUTS = ["documents", "stream", "stream_with_meta"]


class ConceptsFormat(StreamWithMetaStorageFormat):
    """Test meta format: JSON annotations; a sample is the window plus the concepts it touches."""

    def encode_meta(self, annotation: Any) -> bytes:
        return json.dumps(annotation).encode()

    def decode_meta(self, data: bytes | memoryview) -> Any:
        return json.loads(bytes(data))

    def align(self, window: dict[str, np.ndarray], spans: list[Any]) -> Any:
        return {**window, "concepts": [a for _, _, a in spans], "num_spans": len(spans)}


def stream_format() -> StreamNumpyFormat:
    return StreamNumpyFormat({"tokens": np.uint16, "loss_mask": np.uint8})


def make_storage(layout: str, url: str, options: dict[str, Any]) -> Any:
    if layout == "documents":
        return DocumentStorage(url, DocumentJsonFormat(), storage_options=options)
    if layout == "stream":
        return StreamStorage(url, stream_format(), storage_options=options)
    return StreamWithMetaStorage(url, ConceptsFormat(stream_format()), storage_options=options)


def write_dataset(layout: str, url: str, options: dict[str, Any], size: int = 64) -> Any:
    """About ``size`` samples (windows of SEQUENCE_LENGTH tokens, or documents), several shards."""
    storage = make_storage(layout, url, options)
    rng = np.random.default_rng(0)
    with storage.writer(shard_size=600) as writer:
        if layout == "documents":
            for i in range(size):
                writer.append({"id": i, "text": "x" * int(rng.integers(1, 30))})
        else:
            start, total = 0, size * SEQUENCE_LENGTH + 3  # a trailing partial window
            while start < total:
                n = min(int(rng.integers(3, 20)), total - start)
                tokens = np.arange(start, start + n, dtype=np.uint16)
                record = {"tokens": tokens, "loss_mask": (tokens % 2).astype(np.uint8)}
                if layout == "stream":
                    writer.append(record)
                else:
                    spans = [(0, 1, {"c": start})] + ([(2, n, [start, n])] if n > 2 else [])
                    writer.append(record, spans=spans)
                start += n
    return make_storage(layout, url, options)


@pytest.fixture(name="write_dataset")
def write_dataset_fixture() -> Callable[..., Any]:
    """``write_dataset(layout, url, options, size=64)`` -> the reopened storage."""
    return write_dataset


@pytest.fixture
def make_loader_for() -> Callable[..., Callable[..., Any]]:
    """``make_loader_for(storage, **settings)`` -> ``make_loader(num_workers, rank, world_size)``."""
    from guideloom import StatefulDataLoader

    def factory(storage: Any, **settings: Any) -> Callable[..., Any]:
        if storage.layout != "documents":
            settings.setdefault("sequence_length", SEQUENCE_LENGTH)

        def make_loader(**kwargs: Any) -> Any:
            return StatefulDataLoader.from_storage(storage, **settings, **kwargs)

        return make_loader

    return factory
