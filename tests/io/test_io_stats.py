"""`loader.io_stats()` and `guideloom.io.io_stats()` count what a store bills: requests by kind
and bytes (issue 23 item 3). Checked against a counting proxy between the reader and a real S3
endpoint: the counts are the proxy's own, with 0 workers, thread workers and worker processes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from guideloom import (
    StatefulDataLoader,
    StreamDataset,
    StreamNumpyFormat,
    StreamStorage,
    StreamWithMetaStorageFormat,
)
from guideloom.io import io_stats

pytestmark = pytest.mark.s3

FMT = StreamNumpyFormat({"tokens": np.uint16})


@pytest.fixture
def stored(s3_bucket, s3_options):
    url = f"s3://{s3_bucket}/ds"
    storage = StreamStorage(url, FMT, storage_options=s3_options)
    rng = np.random.default_rng(0)
    with storage.writer(shard_size=20_000) as w:
        for n in rng.integers(100, 900, 120):
            w.append({"tokens": rng.integers(0, 60000, n).astype(np.uint16)})
    return url


@pytest.mark.parametrize("workers", [0, "thread", 2])
def test_the_loaders_counts_are_the_stores(stored, counting_s3, workers):
    storage = StreamStorage(stored, FMT, storage_options=counting_s3.storage_options)
    options = (
        {"parallel_method": "thread", "num_workers": 2} if workers == "thread" else {"num_workers": workers}
    )
    loader = StatefulDataLoader.from_storage(
        storage, sequence_length=128, batch_size=8, shuffle=True, seed=1, **options
    )
    counting_s3.reset()
    batches = sum(1 for _ in loader)
    stats = loader.io_stats()
    assert batches > 10 and list(stats) == [f"s3 {counting_s3.url}"], stats
    entry = stats[f"s3 {counting_s3.url}"]
    gets = counting_s3.requests["GET"]
    assert gets > 0 and entry["requests"].get("GET") == gets
    assert entry["bytes_read"] == counting_s3.bytes_out  # every body byte the store sent
    assert entry["bytes_written"] == 0 and entry["retries"] == 0


def test_the_process_counts_writes_and_metadata(s3_bucket, counting_s3):
    before = io_stats()
    storage = StreamStorage(f"s3://{s3_bucket}/w", FMT, storage_options=counting_s3.storage_options)
    counting_s3.reset()
    with storage.writer(shard_size=4_000) as w:
        for k in range(10):
            w.append({"tokens": np.full(700, k, dtype=np.uint16)})
    store = f"s3 {counting_s3.url}"
    after = io_stats()[store]
    old = before.get(store, {"requests": {}, "bytes_written": 0})
    puts = after["requests"].get("PUT", 0) - old["requests"].get("PUT", 0)
    assert puts == counting_s3.requests["PUT"] > 0
    shard_bytes = sum(storage.manifest.shard_table.files["data"].size)
    assert after["bytes_written"] - old["bytes_written"] > shard_bytes  # shards and metadata


def test_local_disk_is_not_counted(tmp_path):
    storage = StreamStorage(tmp_path / "ds", FMT)
    with storage.writer() as w:
        w.append({"tokens": np.arange(1000, dtype=np.uint16)})
    loader = StatefulDataLoader.from_storage(storage, sequence_length=100, batch_size=2)
    assert sum(1 for _ in loader) == 5 and loader.io_stats() == {}


@pytest.mark.parametrize("shuffle, world", [(False, 1), (True, 1), ("block", 2)])
def test_estimate_plays_the_loaders_requests_without_reading(stored, counting_s3, shuffle, world):
    """`guideloom.estimate` gives the GETs and bytes the loaders of every rank then send."""
    from guideloom import estimate

    storage = StreamStorage(stored, FMT, storage_options=counting_s3.storage_options)
    settings = dict(sequence_length=128, batch_size=8, shuffle=shuffle, seed=1, world_size=world)
    counting_s3.reset()
    planned = estimate(storage, epochs=2, **settings)
    assert counting_s3.request_count == 0  # nothing read to plan it
    gets = size = 0
    for rank in range(world):
        loader = StatefulDataLoader.from_storage(storage, rank=rank, **settings)
        for _ in range(2):
            for _ in loader:
                pass
        entry = loader.io_stats()[f"s3 {counting_s3.url}"]
        gets, size = gets + entry["requests"]["GET"], size + entry["bytes_read"]
    assert (planned.requests, planned.bytes) == (gets, size)
    windows = len(StreamDataset(storage, 128))
    per_epoch = windows - windows % world  # what the ranks share evenly (drop_last=False)
    assert planned.windows == 2 * per_epoch and [e["windows"] for e in planned.epochs] == [per_epoch] * 2
    assert planned.price("s3") == pytest.approx(gets / 1000 * 0.0004 + size / 1e9 * 0.09)


@pytest.fixture
def stored_documents(s3_bucket, s3_options):
    from guideloom import DocumentMsgpackFormat, DocumentStorage

    url = f"s3://{s3_bucket}/docs"
    storage = DocumentStorage(url, DocumentMsgpackFormat(), storage_options=s3_options)
    rng = np.random.default_rng(1)
    with storage.writer(shard_size=30_000) as w:
        for k, n in enumerate(rng.integers(20, 900, 400)):
            w.append({"id": k, "text": "x" * int(n)})
    return url


@pytest.mark.parametrize(
    "shuffle, world, workers", [(False, 1, 0), (True, 1, 0), ("block", 2, 0), (True, 1, 2), (True, 2, 2)]
)
def test_estimate_plays_the_document_loaders_requests(stored_documents, counting_s3, shuffle, world, workers):
    """Documents: the index pages the loaders read (one page cache per worker, new each epoch)
    and the documents' byte ranges; the data itself is never read to plan."""
    from guideloom import DocumentMsgpackFormat, DocumentStorage, estimate

    storage = DocumentStorage(
        stored_documents, DocumentMsgpackFormat(), storage_options=counting_s3.storage_options
    )
    options = dict(batch_size=8, shuffle=shuffle, seed=3, world_size=world, read_ahead=2)
    counting_s3.reset()
    planned = estimate(storage, epochs=2, num_workers=workers, **options)
    data_bytes = sum(storage.manifest.shard_table.files["data"].size)
    assert counting_s3.bytes_out < data_bytes / 4  # only index pages were read to plan it
    gets = size = 0
    for rank in range(world):
        loader = StatefulDataLoader.from_storage(storage, rank=rank, num_workers=workers, **options)
        for _ in range(2):
            for _ in loader:
                pass
        entry = loader.io_stats()[f"s3 {counting_s3.url}"]
        gets, size = gets + entry["requests"]["GET"], size + entry["bytes_read"]
    assert (planned.requests, planned.bytes) == (gets, size)
    assert planned.windows == 2 * (400 - 400 % world)


class Notes(StreamWithMetaStorageFormat):
    """JSON annotations (module level: worker processes unpickle the view's format)."""

    def encode_meta(self, annotation):
        return json.dumps(annotation).encode()

    def decode_meta(self, data):
        return json.loads(bytes(data))


@pytest.mark.parametrize("shuffle, world, workers", [(True, 1, 0), ("block", 2, 2)])
def test_estimate_plays_the_annotated_loaders_requests(
    s3_bucket, s3_options, counting_s3, shuffle, world, workers
):
    """#37 (5): streams with metadata are estimated (main refused them): token windows as for a
    stream, plus the span rows and annotation bytes each batch reads; only the span directory is
    read to plan."""
    from guideloom import StreamWithMetaStorage, estimate

    url = f"s3://{s3_bucket}/annotated"
    writing = StreamWithMetaStorage(url, Notes(FMT), storage_options=s3_options)
    rng = np.random.default_rng(2)
    with writing.writer(shard_size=20_000) as w:
        for k, n in enumerate(rng.integers(50, 600, 120).tolist()):
            tokens = rng.integers(0, 60000, n).astype(np.uint16)
            w.append({"tokens": tokens}, spans=[(0, n // 2, {"doc": k}), (n // 2 + 1, n, ["tail", k])])
    storage = StreamWithMetaStorage(url, Notes(FMT), storage_options=counting_s3.storage_options)
    options = dict(sequence_length=128, batch_size=8, shuffle=shuffle, seed=3, world_size=world, read_ahead=2)
    counting_s3.reset()
    planned = estimate(storage, epochs=2, num_workers=workers, **options)
    data_bytes = sum(storage.manifest.shard_table.files["data"].size)
    assert counting_s3.bytes_out < data_bytes / 4  # the span directory only
    gets = size = 0
    for rank in range(world):
        loader = StatefulDataLoader.from_storage(storage, rank=rank, num_workers=workers, **options)
        for _ in range(2):
            for _ in loader:
                pass
        entry = loader.io_stats()[f"s3 {counting_s3.url}"]
        gets, size = gets + entry["requests"]["GET"], size + entry["bytes_read"]
    assert (planned.requests, planned.bytes) == (gets, size)
