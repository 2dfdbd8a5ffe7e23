"""Document offsets and span tables are read by pages through a cache bounded in bytes, never whole."""

from __future__ import annotations

import random

import numpy as np
import pytest
from storage_helpers import ConceptsFormat, expected_spans

from guideloom import (
    DocumentDataset,
    DocumentMsgpackFormat,
    DocumentStorage,
    StreamNumpyFormat,
    StreamWithMetaDataset,
    StreamWithMetaStorage,
)
from guideloom.storage.pagecache import ENTRY_OVERHEAD, PageCache, cache_bytes_from_env

# -- the cache itself ------------------------------------------------------------------------------


def test_page_cache_fetches_each_missing_page_once_per_call_and_stays_in_its_bound():
    calls: list[list[object]] = []

    def fetch(keys):
        calls.append(list(keys))
        return [bytes([k % 256]) * 100 for k in keys]

    cache = PageCache(capacity=3 * (100 + ENTRY_OVERHEAD))
    assert cache.get([1, 2, 1, 3], fetch) == [b"\x01" * 100, b"\x02" * 100, b"\x01" * 100, b"\x03" * 100]
    assert calls == [[1, 2, 3]]  # one call, distinct keys, first-seen order
    assert cache.get([2, 3], fetch)[0] == b"\x02" * 100 and len(calls) == 1  # cached: no call
    cache.get([4], fetch)  # evicts the least recently used page (1)
    assert len(cache) == 3 and cache.nbytes <= cache.capacity
    cache.get([1], fetch)
    assert calls[-1] == [1]
    assert (cache.hits, cache.misses, cache.fetches) == (2, 5, 3)


def test_a_page_larger_than_the_cache_is_returned_but_not_kept():
    cache = PageCache(capacity=50)
    assert cache.get(["a"], lambda keys: [b"x" * 100]) == [b"x" * 100]
    assert len(cache) == 0 and cache.nbytes == 0


def test_cache_bound_from_the_environment(monkeypatch):
    monkeypatch.setenv("GUIDELOOM_INDEX_CACHE_BYTES", "65536")
    assert cache_bytes_from_env() == 65536
    monkeypatch.setenv("GUIDELOOM_INDEX_CACHE_BYTES", "lots")
    with pytest.raises(ValueError, match="GUIDELOOM_INDEX_CACHE_BYTES='lots' is not a whole number"):
        cache_bytes_from_env()
    monkeypatch.setenv("GUIDELOOM_INDEX_CACHE_BYTES", "-1")
    with pytest.raises(ValueError, match=">= 0 bytes"):
        cache_bytes_from_env()
    with pytest.raises(ValueError, match="capacity must be a number of bytes"):
        PageCache(capacity=-5)


# -- documents -------------------------------------------------------------------------------------


@pytest.mark.s3
@pytest.mark.slow
def test_random_batch_from_a_million_document_shard_fetches_a_few_kib_of_index(
    s3_bucket, s3_options, counting_s3
):
    n = 1_000_000
    url = f"s3://{s3_bucket}/million"
    storage = DocumentStorage(url, DocumentMsgpackFormat(), storage_options=s3_options)
    with storage.writer(shard_size=1 << 30) as w:
        for i in range(n):
            w.append(i)
    (shard,) = storage.manifest.shards
    index_size = shard.files["index"].size
    assert index_size > 8 * n  # an 8 MB offset table
    reader = DocumentStorage(url, DocumentMsgpackFormat(), storage_options=counting_s3.storage_options)
    ds = DocumentDataset(reader)
    rng = random.Random(0)
    for _ in range(4):
        batch = rng.sample(range(n), 8)
        counting_s3.reset()
        fetches_before = ds._access.cache.fetches
        assert ds.__getitems__(batch) == batch
        assert ds._access.cache.fetches - fetches_before <= 1  # one round for index pages
        index_gets = [r for r in counting_s3.log if r.path.endswith(".idx")]
        data_gets = [r for r in counting_s3.log if r.path.endswith(".docs")]
        assert len(index_gets) <= 16 and len(data_gets) <= 8
        index_bytes = sum(r.bytes for r in index_gets)
        assert index_bytes <= 16 * ds._access.page_bytes < index_size / 400  # KiB, not MB
        assert sum(r.bytes for r in data_gets) <= 8 * 8  # msgpack ints: a few bytes each


def test_reading_random_documents_keeps_the_index_cache_within_its_bound(tmp_path):
    # memory:// reads by range requests as object stores do (local files skip the page cache:
    # their offsets come with one positioned read per run of documents).
    n = 200_000
    storage = DocumentStorage(f"memory://{tmp_path.name}/docs", DocumentMsgpackFormat())
    with storage.writer(shard_size=400_000) as w:
        for i in range(n):
            w.append([i, "x" * (i % 7)])
    assert len(storage.manifest.shards) > 3
    bound = 32 * 1024
    ds = DocumentDataset(storage, index_cache_bytes=bound)
    rng = np.random.default_rng(1)
    largest = 0
    for _ in range(300):
        batch = rng.integers(-n, n, 16).tolist()
        got = ds.__getitems__(batch)
        assert got == [[i % n, "x" * ((i % n) % 7)] for i in batch]
        largest = max(largest, ds._access.cache.nbytes)
    cache = ds._access.cache
    assert largest <= bound
    assert cache.misses > bound // ds._access.page_bytes  # far more pages passed through than fit
    assert len(cache) <= bound // ds._access.page_bytes


def test_local_documents_read_offsets_per_run_without_the_page_cache(tmp_path):
    storage = DocumentStorage(tmp_path / "docs", DocumentMsgpackFormat())
    with storage.writer(shard_size=20_000) as w:
        for i in range(5000):
            w.append([i, "y" * (i % 13)])
    n = len(storage.manifest.shards)
    assert n > 2
    ds = DocumentDataset(storage)
    rng = np.random.default_rng(2)
    batches = [list(range(0, 64)), list(range(4990, 5000)) + list(range(0, 3))]
    batches += [rng.integers(-5000, 5000, 16).tolist() for _ in range(20)]
    for batch in batches:  # runs crossing shards, repeats, negative indexes
        assert ds.__getitems__(batch) == [[i % 5000, "y" * ((i % 5000) % 13)] for i in batch]
    assert ds._access.cache.misses == 0 and len(ds._access.cache) == 0


def test_the_index_cache_knob_reaches_a_document_view_through_the_environment(tmp_path, monkeypatch):
    storage = DocumentStorage(tmp_path / "d", DocumentMsgpackFormat())
    with storage.writer() as w:
        w.append("a")
    monkeypatch.setenv("GUIDELOOM_INDEX_CACHE_BYTES", "12345")
    assert DocumentDataset(storage)._access.cache.capacity == 12345
    assert DocumentDataset(storage, index_cache_bytes=999)._access.cache.capacity == 999


# -- spans -----------------------------------------------------------------------------------------


def _skewed_records(seed: int, count: int) -> list[tuple[np.ndarray, list[tuple[int, int, list[str]]]]]:
    """Records whose span density varies a lot: early records have many short spans, later ones
    few long ones or none, so a uniform guess of where a span lies is often wrong."""
    rng = np.random.default_rng(seed)
    out = []
    for r in range(count):
        length = int(rng.integers(1, 300))
        spans: list[tuple[int, int, list[str]]] = []
        if r < count // 3:
            pos = 0
            while pos < length:
                stop = min(length, pos + int(rng.integers(1, 4)))
                spans.append((pos, stop, [f"r{r}s{pos}"]))
                pos = stop + int(rng.integers(0, 2))
        elif r % 3:
            a = int(rng.integers(0, length))
            spans.append((a, length, [f"r{r}"]))
        out.append((np.full(length, r % 60_000, dtype=np.uint16), spans))
    return out


def test_spans_of_random_windows_are_exact_with_a_small_bounded_cache(tmp_path, concepts_format):
    records = _skewed_records(3, 900)
    # memory:// reads by range requests, through the page cache, as object stores do.
    storage = StreamWithMetaStorage(f"memory://{tmp_path.name}/m", concepts_format)
    with storage.writer(shard_size=60_000) as w:
        for tokens, spans in records:
            w.append({"tokens": tokens}, spans=spans)
    assert len(storage.manifest.shards) > 2
    bound = 16 * 1024
    ds = StreamWithMetaDataset(storage, 97, index_cache_bytes=bound)
    rng = np.random.default_rng(4)
    windows = list(range(0, len(ds), 9)) + rng.integers(0, len(ds), 120).tolist()
    for start in range(0, len(windows), 8):
        batch = windows[start : start + 8]
        for w_i, sample in zip(batch, ds.__getitems__(batch)):
            assert sample["spans"] == expected_spans(records, 97, w_i), w_i
        assert ds._access.cache.nbytes <= bound
    spans_bytes = sum(s.files["spans"].size for s in storage.manifest.shards)
    assert spans_bytes > 4 * bound  # the span tables never fit in the cache
    assert ds._access.cache.misses > bound // ds._access.page_bytes


@pytest.mark.s3
def test_a_meta_window_fetches_a_few_span_pages_not_the_span_table(s3_bucket, s3_options, counting_s3):
    url = f"s3://{s3_bucket}/spans"
    fmt = ConceptsFormat(StreamNumpyFormat({"tokens": np.uint16}))
    storage = StreamWithMetaStorage(url, fmt, storage_options=s3_options)
    with storage.writer() as w:
        for i in range(4000):
            w.append(
                {"tokens": np.full(64, i % 60_000)},
                spans=[(j, j + 2, [f"{i}.{j}"]) for j in range(0, 64, 4)],  # 16 spans per record
            )
    spans_size = storage.manifest.shards[0].files["spans"].size
    assert spans_size > 2_000_000
    ds = StreamWithMetaDataset(
        StreamWithMetaStorage(url, fmt, storage_options=counting_s3.storage_options), 256
    )
    counting_s3.reset()
    sample = ds[500]  # records 2000-2003: 64 spans
    assert sample["spans"][0] == (0, 2, ["2000.0"]) and len(sample["spans"]) == 64
    span_bytes = sum(r.bytes for r in counting_s3.log if r.path.endswith(".spans"))
    assert 64 * 32 <= span_bytes <= 64 * 32 + 4 * ds._access.page_bytes
    assert span_bytes < spans_size / 300
    assert ds._access.cache.fetches == 1  # uniform spans: one round of span-table pages


def test_align_batch_default_calls_align_per_window_and_an_override_is_used(tmp_path):
    class Counting(ConceptsFormat):
        calls = 0

        def align(self, window, spans):
            Counting.calls += 1
            return len(spans)

    class Batched(ConceptsFormat):
        def align_batch(self, windows, spans):
            return [(windows["tokens"].shape, len(s)) for s in spans]

    fmt = Counting(StreamNumpyFormat({"tokens": np.uint16}))
    storage = StreamWithMetaStorage(tmp_path / "a", fmt)
    with storage.writer() as w:
        w.append({"tokens": np.arange(40)}, spans=[(0, 5, ["a"]), (10, 30, ["b"])])
    assert StreamWithMetaDataset(storage, 10).__getitems__([0, 1, 2, 3]) == [1, 1, 1, 0]
    assert Counting.calls == 4
    batched = Batched(StreamNumpyFormat({"tokens": np.uint16}))
    storage = StreamWithMetaStorage(tmp_path / "b", batched)
    with storage.writer() as w:
        w.append({"tokens": np.arange(40)}, spans=[(0, 5, ["a"]), (10, 30, ["b"])])
    ds = StreamWithMetaDataset(storage, 10)
    assert ds.__getitems__([0, 3]) == [((2, 10), 1), ((2, 10), 0)]
