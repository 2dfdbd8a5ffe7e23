"""Reading from S3 moves about the bytes asked for, never whole shards (counted at a proxy)."""

from __future__ import annotations

import numpy as np
import pytest
from storage_helpers import ConceptsFormat

from guideloom import (
    DocumentDataset,
    DocumentMsgpackFormat,
    DocumentStorage,
    StreamDataset,
    StreamNumpyFormat,
    StreamStorage,
    StreamWithMetaDataset,
    StreamWithMetaStorage,
)

pytestmark = pytest.mark.s3

WINDOW = 2048
TOKENS = 2 * 2**20  # 4 MiB of uint16 tokens in one shard


@pytest.fixture
def big_stream(s3_bucket, s3_options):
    url = f"s3://{s3_bucket}/big"
    storage = StreamStorage(url, StreamNumpyFormat({"tokens": np.uint16}), storage_options=s3_options)
    with storage.writer() as w:
        w.append({"tokens": np.arange(TOKENS, dtype=np.uint64) % 65_521})
    assert len(storage.manifest.shards) == 1 and storage.manifest.total_bytes > 4 * 2**20
    return url


def test_one_window_moves_about_a_window(big_stream, counting_s3):
    storage = StreamStorage(
        big_stream, StreamNumpyFormat({"tokens": np.uint16}), storage_options=counting_s3.storage_options
    )
    ds = StreamDataset(storage, sequence_length=WINDOW)
    counting_s3.reset()
    sample = ds[700]
    expected = (np.arange(700 * WINDOW, 701 * WINDOW) % 65_521).astype(np.uint16)
    np.testing.assert_array_equal(sample["tokens"], expected)
    gets = [r for r in counting_s3.log if r.method == "GET"]
    assert len(gets) == 1, counting_s3.log
    window_bytes = WINDOW * 2
    assert counting_s3.bytes_out <= 1.1 * window_bytes, counting_s3.bytes_out


def test_batch_is_one_round_of_merged_range_requests(big_stream, counting_s3):
    storage = StreamStorage(
        big_stream, StreamNumpyFormat({"tokens": np.uint16}), storage_options=counting_s3.storage_options
    )
    ds = StreamDataset(storage, sequence_length=WINDOW)
    counting_s3.reset()
    indexes = [10, 11, 12, 13, 500, 501, 900]  # three runs of adjacent windows
    batch = ds.read_windows(indexes)
    for row, i in enumerate(indexes):
        assert batch["tokens"][row, 0] == (i * WINDOW) % 65_521
    gets = [r for r in counting_s3.log if r.method == "GET"]
    assert len(gets) == 3  # adjacent windows merged into one request each
    assert counting_s3.bytes_out == len(indexes) * WINDOW * 2


def test_one_document_moves_its_bytes_plus_one_index_page(s3_bucket, s3_options, counting_s3):
    url = f"s3://{s3_bucket}/docs"
    storage = DocumentStorage(url, DocumentMsgpackFormat(), storage_options=s3_options)
    with storage.writer() as w:
        for i in range(20_000):
            w.append({"id": i, "text": "lorem ipsum " * 20})
    data_size = storage.manifest.shards[0].files["data"].size
    assert data_size > 4 * 2**20
    reader = DocumentStorage(url, DocumentMsgpackFormat(), storage_options=counting_s3.storage_options)
    ds = DocumentDataset(reader)
    counting_s3.reset()
    assert ds[12_345]["id"] == 12_345
    page = ds._access.page_bytes
    assert [r.method for r in counting_s3.log] == ["GET", "GET"]  # one index page, one document
    assert counting_s3.bytes_out < page + 300
    counting_s3.reset()
    assert ds[12_346]["id"] == 12_346  # its offsets are in the cached page: the document only
    assert [r.method for r in counting_s3.log] == ["GET"]
    assert counting_s3.bytes_out < 300


def test_meta_window_reads_tokens_and_only_its_annotations(s3_bucket, s3_options, counting_s3):
    url = f"s3://{s3_bucket}/meta"
    fmt = ConceptsFormat(StreamNumpyFormat({"tokens": np.uint16}))
    storage = StreamWithMetaStorage(url, fmt, storage_options=s3_options)
    with storage.writer() as w:
        for i in range(2000):
            w.append(
                {"tokens": np.full(512, i % 60_000)}, spans=[(0, 256, [f"c{i}"] * 10), (256, 512, ["x"])]
            )
    ds = StreamWithMetaDataset(
        StreamWithMetaStorage(url, fmt, storage_options=counting_s3.storage_options), 1024
    )
    ds[99]  # reads the span-table page that window 100's spans are on
    counting_s3.reset()
    sample = ds[100]
    assert [s[2][0] for s in sample["spans"]] == ["c200", "x", "c201", "x"]
    # One token range, then (the span directory's page is cached) one range of span rows and
    # one of their annotations: the rows of the directory blocks the window touches (two blocks
    # of 4,096 tokens here: 32 spans, 8 of them overlapping the window), fetched with the tokens.
    assert counting_s3.request_count == 3
    assert counting_s3.bytes_out < 1024 * 2 + 32 * 32 + 32 * 64  # tokens, 32 rows, their annotations
