"""The block cache's own API: what `BlockCache.put` keeps or refuses (digests, the bound,
a block already there), what `read` serves, and a cached reader's request checks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xxhash

from guideloom import StreamNumpyFormat, StreamStorage
from guideloom.io.cache import CachedShardReader, block_cache
from guideloom.io.shards import open_shard_reader

FMT = StreamNumpyFormat({"tokens": np.uint32})
PAYLOAD = bytes(range(256)) * 4


def test_a_block_whose_digest_is_not_the_manifests_is_served_but_not_kept(tmp_path: Path) -> None:
    cache = block_cache(str(tmp_path), 1 << 20)
    assert cache is not None
    right = xxhash.xxh3_64_intdigest(PAYLOAD)
    assert cache.put("ab" * 16, 0, PAYLOAD, digest=right ^ 1) is False
    assert not Path(cache.block_path("ab" * 16, 0)).exists()
    assert cache.put("ab" * 16, 0, PAYLOAD, digest=right) is True
    assert cache.put("ab" * 16, 0, PAYLOAD, digest=right) is False  # already kept: not rewritten
    # the first read checks the whole file, later ones read the range alone: both the same bytes
    assert cache.read("ab" * 16, 0, len(PAYLOAD), 10, 300, right) == PAYLOAD[10:300]
    assert cache.read("ab" * 16, 0, len(PAYLOAD), 10, 300, right) == PAYLOAD[10:300]
    assert cache.read("ab" * 16, 1, len(PAYLOAD), 0, 10, None) is None  # never kept
    assert repr(cache) == f"BlockCache({str(tmp_path)!r}, capacity={1 << 20})"


def test_a_block_larger_than_the_bound_is_not_kept(tmp_path: Path) -> None:
    cache = block_cache(str(tmp_path), len(PAYLOAD))
    assert cache is not None
    assert cache.put("cd" * 16, 0, PAYLOAD) is False
    assert cache.read("cd" * 16, 0, len(PAYLOAD), 0, 10, None) is None


def test_a_block_whose_length_is_not_the_expected_is_dropped(tmp_path: Path) -> None:
    cache = block_cache(str(tmp_path), 1 << 20)
    assert cache is not None
    assert cache.put("ef" * 16, 0, PAYLOAD)
    path = Path(cache.block_path("ef" * 16, 0))
    # asked for a block of another length (the file changed in the store): removed, not served
    assert cache.read("ef" * 16, 0, len(PAYLOAD) - 1, 0, 10, None) is None
    assert not path.exists()


def _reader(tmp_path: Path) -> tuple[StreamStorage, CachedShardReader]:
    storage = StreamStorage(str(tmp_path / "ds"), FMT)
    with storage.writer(shard_size=256) as w:
        for k in range(20):
            w.append({"tokens": np.arange(k, k + 16, dtype=np.uint32)})
    storage = StreamStorage(str(tmp_path / "ds"), FMT)
    cache = block_cache(str(tmp_path / "cache"), 1 << 20)
    assert cache is not None
    cache.block_bytes = 128  # several blocks a shard
    reader = open_shard_reader(storage.location, storage.manifest.shard_table, cache)
    assert isinstance(reader, CachedShardReader)
    return storage, reader


def test_the_cached_reader_reads_what_the_plain_one_reads(tmp_path: Path) -> None:
    storage, reader = _reader(tmp_path)
    plain = open_shard_reader(storage.location, storage.manifest.shard_table)
    size = storage.manifest.shard_table.size(0, "data")
    requests = [(0, "data", 0, size), (1, "data", 5, 200), (0, "data", 7, 7)]
    want = plain.read(requests)
    assert reader.read(requests) == want  # fetched and kept
    assert list(reader.read_iter(requests)) == want  # served from the cache
    buffers = [[memoryview(bytearray(size))], [memoryview(bytearray(95)), memoryview(bytearray(100))], []]
    reader.read_into(requests, buffers)
    assert bytes(buffers[0][0]) == want[0] and bytes(buffers[1][0]) + bytes(buffers[1][1]) == want[1]
    assert reader.map_file(0, "data") is None and reader.local is False
    assert reader.table is storage.manifest.shard_table
    assert repr(reader).startswith("CachedShardReader(") and "BlockCache(" in repr(reader)
    with pytest.raises(ValueError, match="3 requests but 2 lists of buffers"):
        reader.read_into(requests, buffers[:2])
    reader.close()


def test_a_request_past_the_file_is_named_by_the_store_reader(tmp_path: Path) -> None:
    storage, reader = _reader(tmp_path)
    size = storage.manifest.shard_table.size(0, "data")
    plain = open_shard_reader(storage.location, storage.manifest.shard_table)
    with pytest.raises(Exception) as cached_err:
        reader.read([(0, "data", 0, size + 10)])
    with pytest.raises(Exception) as plain_err:
        plain.read([(0, "data", 0, size + 10)])
    assert type(cached_err.value) is type(plain_err.value)
    assert str(cached_err.value) == str(plain_err.value)
