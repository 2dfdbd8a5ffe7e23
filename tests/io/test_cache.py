"""The opt-in local block cache (issue 23 item 6): ``cache_dir=`` / ``cache_bytes=``.

On the real S3 endpoint (through the counting proxy, so request counts are the store's own)
and on local files: a second epoch sends no data requests, batches are the uncached run's bit for
bit (with 0 workers, thread workers and worker processes, and across a mid-epoch resume), the
directory stays under its bound, damaged block files are never served, loaders in separate
processes share one directory, and a full disk only costs requests.
"""

from __future__ import annotations

import errno
import os
import struct
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xxhash

import guideloom.io.cache as cache_module
from guideloom import (
    DocumentJsonFormat,
    DocumentStorage,
    Mixture,
    StatefulDataLoader,
    StreamDataset,
    StreamNumpyFormat,
    StreamStorage,
)
from guideloom.io.shards import LocalShardReader, RemoteShardReader
from guideloom.io.stats import subtract_stats

FMT = StreamNumpyFormat({"tokens": np.uint16})
WINDOW = 128
BLOCK = 64 << 10  # blocks of 64 KiB in most tests: files of several blocks, and small datasets
WORKERS = [
    pytest.param({}, id="0-workers"),
    pytest.param({"parallel_method": "thread", "num_workers": 2}, id="threads"),
    pytest.param({"num_workers": 2}, id="processes"),
]


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(cache_module, "DEFAULT_BLOCK_BYTES", BLOCK)


def _write(url: str, options: dict[str, Any] | None = None, records: int = 300) -> None:
    """About 300 KiB of tokens in shards of ~150 KiB (several blocks each, a last short one)."""
    storage = StreamStorage(url, FMT, storage_options=options)
    rng = np.random.default_rng(0)
    with storage.writer(shard_size=150_000) as w:
        for n in rng.integers(100, 900, records):
            w.append({"tokens": rng.integers(0, 60000, n).astype(np.uint16)})


def _loader(url: str, options: dict[str, Any] | None = None, **kwargs: Any) -> StatefulDataLoader:
    cache = {k: kwargs.pop(k) for k in ("cache_dir", "cache_bytes") if k in kwargs}
    storage = StreamStorage(url, FMT, storage_options=options, **cache)
    return StatefulDataLoader.from_storage(
        storage, sequence_length=WINDOW, batch_size=8, shuffle=True, seed=3, **kwargs
    )


def _epoch(loader: StatefulDataLoader) -> tuple[list[np.ndarray], dict[str, Any]]:
    """One epoch's token batches and the requests it sent (`io_stats` since it began)."""
    before = loader.io_stats()
    batches = [b["tokens"].numpy().copy() for b in loader]
    return batches, subtract_stats(loader.io_stats(), before)


def _same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) > 0 and all(x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(a, b))


def _gets(counts: dict[str, Any]) -> int:
    return sum(e["requests"].get("GET", 0) for s, e in counts.items() if not s.startswith("cache "))


def _cache_entry(counts: dict[str, Any]) -> dict[str, Any]:
    found = [e for s, e in counts.items() if s.startswith("cache ")]
    assert len(found) == 1, counts
    return found[0]


def _files(cache_dir: Path) -> list[Path]:
    return [p for p in cache_dir.rglob("*") if p.is_file()]


def _blocks(cache_dir: Path) -> list[Path]:
    return sorted(p for p in cache_dir.rglob("*.blk"))


def _dir_bytes(cache_dir: Path) -> int:
    """Bytes of the files under ``cache_dir`` (a file removed while this looks is left out)."""
    total = 0
    for base, _, names in os.walk(cache_dir):
        for name in names:
            try:
                total += os.stat(os.path.join(base, name)).st_size
            except FileNotFoundError:
                pass
    return total


# -- a second epoch from the cache --------------------------------------------------------------


@pytest.mark.s3
@pytest.mark.parametrize("workers", WORKERS)
def test_s3_second_epoch_sends_no_data_requests(s3_bucket, s3_options, counting_s3, tmp_path, workers):
    url = f"s3://{s3_bucket}/ds"
    _write(url, s3_options)
    plain = _loader(url, counting_s3.storage_options, **workers)
    want1, _ = _epoch(plain)
    want2, _ = _epoch(plain)
    assert not _same(want1, want2)  # the epochs' orders differ: each is compared with its own

    cached = _loader(url, counting_s3.storage_options, cache_dir=tmp_path / "cache", **workers)
    counting_s3.reset()
    got1, first = _epoch(cached)
    fetched = counting_s3.requests["GET"]
    counting_s3.reset()
    got2, second = _epoch(cached)
    assert _same(got1, want1) and _same(got2, want2)
    assert fetched > 0 and _gets(first) == fetched
    assert counting_s3.requests["GET"] == 0 and counting_s3.request_count == 0, counting_s3.log
    assert _gets(second) == 0
    entry = _cache_entry(second)
    assert entry["cache_misses"] == 0 and entry["cache_hits"] > 0
    assert entry["cache_bytes_read"] >= sum(b.size for b in got2) * 2  # uint16 tokens
    assert _cache_entry(first)["cache_misses"] > 0


@pytest.mark.parametrize("workers", WORKERS)
def test_local_second_epoch_is_served_from_the_cache(tmp_path, small_blocks, workers):
    url = str(tmp_path / "ds")
    _write(url)
    plain = _loader(url, **workers)
    want = [_epoch(plain)[0] for _ in range(2)]
    cached = _loader(url, cache_dir=tmp_path / "cache", **workers)
    got1, first = _epoch(cached)
    got2, second = _epoch(cached)
    assert _same(got1, want[0]) and _same(got2, want[1])
    assert list(first) == list(second) == [f"cache {tmp_path / 'cache'}"]  # local disk: no requests
    assert _cache_entry(first)["cache_misses"] > 0
    assert _cache_entry(second)["cache_misses"] == 0 and _cache_entry(second)["cache_hits"] > 0
    data = sum(os.path.getsize(p) for p in (tmp_path / "ds").rglob("*.data"))
    assert len(_blocks(tmp_path / "cache")) >= data // BLOCK  # files of several blocks were split


@pytest.mark.s3
def test_s3_documents_and_their_index_pages_come_from_the_cache(s3_bucket, s3_options, counting_s3, tmp_path):
    """Documents read their offsets through index pages: those are cached blocks too."""
    url = f"s3://{s3_bucket}/docs"
    with DocumentStorage(url, DocumentJsonFormat(), storage_options=s3_options).writer(
        shard_size=40_000
    ) as w:
        for i in range(600):
            w.append({"id": i, "text": "x" * (i % 97)})

    def epoch(loader: StatefulDataLoader) -> tuple[list[Any], dict[str, Any]]:
        before = loader.io_stats()
        return [list(b) for b in loader], subtract_stats(loader.io_stats(), before)

    def loader(**cache: Any) -> StatefulDataLoader:
        storage = DocumentStorage(
            url, DocumentJsonFormat(), storage_options=counting_s3.storage_options, **cache
        )
        return StatefulDataLoader.from_storage(
            storage, batch_size=16, shuffle=True, seed=5, collate_fn=list, num_workers=2
        )

    plain = loader()
    want = [epoch(plain)[0] for _ in range(2)]
    cached = loader(cache_dir=tmp_path / "cache")
    assert epoch(cached)[0] == want[0]
    counting_s3.reset()
    got, counts = epoch(cached)
    assert got == want[1] and len(got) > 10
    assert counting_s3.requests["GET"] == 0 and _gets(counts) == 0
    assert _cache_entry(counts)["cache_hits"] > 0
    shards = len(DocumentStorage(url, DocumentJsonFormat(), storage_options=s3_options).manifest.shards)
    files = {p.name.rsplit("-", 1)[0] for p in _blocks(tmp_path / "cache")}
    assert len(files) == 2 * shards  # each shard's data and its offsets index


@pytest.mark.s3
def test_s3_resume_mid_epoch_with_the_cache(s3_bucket, s3_options, counting_s3, tmp_path):
    url = f"s3://{s3_bucket}/ds"
    _write(url, s3_options)
    want = [_epoch(_loader(url, s3_options))[0]]
    plain = _loader(url, s3_options)
    _epoch(plain)
    want.append(_epoch(plain)[0])  # epoch 1

    first = _loader(url, counting_s3.storage_options, cache_dir=tmp_path / "cache")
    assert _same(_epoch(first)[0], want[0])
    it = iter(first)  # epoch 1, cut off after 5 batches
    head = [next(it)["tokens"].numpy().copy() for _ in range(5)]
    state = first.state_dict()
    del it

    resumed = _loader(url, counting_s3.storage_options, cache_dir=tmp_path / "cache", num_workers=2)
    resumed.load_state_dict(state)
    counting_s3.reset()  # opening read the manifest: the data are what must not be requested
    rest, counts = _epoch(resumed)
    assert _same(head + rest, want[1])
    assert counting_s3.requests["GET"] == 0 and _gets(counts) == 0
    assert _cache_entry(counts)["cache_misses"] == 0


def test_a_mixture_of_cached_sources_shares_one_cache_dir(tmp_path, small_blocks):
    for name in ("a", "b"):
        _write(str(tmp_path / name))

    def mixture(**cache: Any) -> StatefulDataLoader:
        sources = {n: (StreamStorage(str(tmp_path / n), FMT, **cache), w) for n, w in (("a", 2), ("b", 1))}
        return StatefulDataLoader.from_storage(
            Mixture(sources), sequence_length=WINDOW, batch_size=8, shuffle=True, seed=1, num_workers=2
        )

    plain = mixture()
    want = [_epoch(plain)[0] for _ in range(2)]
    cached = mixture(cache_dir=tmp_path / "cache")
    got1, _ = _epoch(cached)
    got2, second = _epoch(cached)
    assert _same(got1, want[0]) and _same(got2, want[1])
    entry = _cache_entry(second)
    assert entry["cache_misses"] == 0 and entry["cache_hits"] > 0


# -- bounded, least recently used -----------------------------------------------------------------


def test_eviction_keeps_the_directory_under_cache_bytes(tmp_path, small_blocks):
    url = str(tmp_path / "ds")
    _write(url, records=600)
    data = sum(os.path.getsize(p) for p in (tmp_path / "ds").rglob("*.*") if p.suffix != ".json")
    bound = data // 3
    want = _epoch(_loader(url))[0]
    cached = _loader(url, cache_dir=tmp_path / "cache", cache_bytes=bound)
    got = []
    for batch in cached:
        got.append(batch["tokens"].numpy().copy())
        assert _dir_bytes(tmp_path / "cache") <= bound
    assert _same(got, want)
    counts = cached.io_stats()[f"cache {tmp_path / 'cache'}"]
    assert counts["cache_evictions"] > 0 and counts["cache_bytes_written"] > bound
    assert bound * 0.5 < _dir_bytes(tmp_path / "cache") <= bound


def test_processes_evicting_at_once_stay_under_cache_bytes(tmp_path, small_blocks):
    url = str(tmp_path / "ds")
    _write(url, records=600)
    bound = 5 * BLOCK
    want = _epoch(_loader(url))[0]
    cache_dir = tmp_path / "cache"
    a = _loader(url, cache_dir=cache_dir, cache_bytes=bound, num_workers=2)
    b = _loader(url, cache_dir=cache_dir, cache_bytes=bound, num_workers=2)
    got_a, got_b, seen = [], [], []
    looker = cache_module.BlockCache(str(cache_dir), bound, BLOCK)
    for x, y in zip(a, b):  # four processes reserve, write and evict in one directory
        got_a.append(x["tokens"].numpy().copy())
        got_b.append(y["tokens"].numpy().copy())
        with looker._locked():  # blocks take their names and leave under the lock
            seen.append(_dir_bytes(cache_dir))
    assert _same(got_a, want) and _same(got_b, want)
    assert max(seen) <= bound and min(seen[len(seen) // 2 :]) > 0
    evicted = sum(e.get("cache_evictions", 0) for e in (a.io_stats(), b.io_stats()) for e in e.values())
    assert evicted > 0


def test_the_least_recently_used_blocks_go_first(tmp_path):
    cache = cache_module.BlockCache(str(tmp_path), capacity=4500, block_bytes=1000)
    os.makedirs(cache.root + "/tmp", exist_ok=True)
    for i in range(4):
        assert cache.put("ab" + "0" * 30, i, bytes([i]) * 1000)
        time.sleep(0.01)
    assert cache.read("ab" + "0" * 30, 0, 1000, 0, 10, None) == b"\0" * 10  # block 0 used last
    assert cache.put("ab" + "0" * 30, 4, b"\4" * 1000)  # past the low-water mark: evicts
    left = sorted(int(p.stem.rsplit("-", 1)[1]) for p in _blocks(tmp_path))
    assert 0 in left and 1 not in left and 4 in left, left
    assert cache.used_bytes() <= cache.capacity


# -- never wrong bytes ----------------------------------------------------------------------------


def _damage(blocks: list[Path]) -> None:
    """A flipped payload byte (same size), a truncated file (as a crash without a flush can
    leave under the final name), a header of another length, and a whole-file block whose
    payload and header digest were both rewritten (only the manifest's checksum tells)."""
    time.sleep(0.05)  # later than any read of them: modification times move on
    header = struct.Struct("<8sQQ")
    by_size = sorted(blocks, key=lambda p: p.stat().st_size)
    flipped, truncated, resized = by_size[-1], by_size[-2], by_size[-3]
    whole = next(  # a file smaller than a block: its block 0 is the whole file
        p for p in blocks if p.name.endswith("-0.blk") and p.stat().st_size < BLOCK + header.size
    )
    assert len({flipped, truncated, resized, whole}) == 4
    raw = bytearray(flipped.read_bytes())
    raw[header.size + 100] ^= 0xFF
    flipped.write_bytes(bytes(raw))
    with open(truncated, "r+b") as f:
        f.truncate(truncated.stat().st_size // 2)
    raw = bytearray(resized.read_bytes())
    magic, n, digest = header.unpack_from(raw)
    resized.write_bytes(header.pack(magic, n - 1, digest) + raw[header.size : -1])
    raw = bytearray(whole.read_bytes())
    raw[-1] ^= 0x01
    payload = bytes(raw[header.size :])
    magic, n, _ = header.unpack_from(raw)
    whole.write_bytes(header.pack(magic, n, xxhash.xxh3_64_intdigest(payload)) + payload)


@pytest.mark.s3
def test_s3_damaged_blocks_are_refetched_never_served(
    s3_bucket, s3_options, counting_s3, tmp_path, monkeypatch
):
    monkeypatch.setattr(cache_module, "DEFAULT_BLOCK_BYTES", BLOCK)
    url = f"s3://{s3_bucket}/ds"
    _write(url, s3_options)
    plain = _loader(url, s3_options)
    want = [_epoch(plain)[0] for _ in range(2)]
    cached = _loader(url, counting_s3.storage_options, cache_dir=tmp_path / "cache")
    assert _same(_epoch(cached)[0], want[0])
    _damage(_blocks(tmp_path / "cache"))
    counting_s3.reset()
    got, counts = _epoch(cached)
    assert _same(got, want[1])
    entry = _cache_entry(counts)
    assert entry["cache_rejected"] == 4 and entry["cache_misses"] == 4
    assert 0 < counting_s3.requests["GET"] <= 4  # only the damaged blocks (merged where adjacent)
    counting_s3.reset()
    assert _same(_epoch(cached)[0], _epoch(plain)[0])  # refetched blocks were kept again
    assert counting_s3.requests["GET"] == 0


@pytest.mark.parametrize("workers", [0, 2])
def test_local_damaged_blocks_are_refetched_never_served(tmp_path, small_blocks, workers):
    url = str(tmp_path / "ds")
    _write(url)
    plain = _loader(url)
    want = [_epoch(plain)[0] for _ in range(2)]
    cached = _loader(url, cache_dir=tmp_path / "cache", num_workers=workers)
    assert _same(_epoch(cached)[0], want[0])
    _damage(_blocks(tmp_path / "cache"))
    got, counts = _epoch(cached)
    assert _same(got, want[1])
    entry = _cache_entry(counts)
    if workers:  # two processes may both find a block damaged before one replaces it
        assert 4 <= entry["cache_rejected"] <= 8 and entry["cache_misses"] >= 4
    else:
        assert entry["cache_rejected"] == entry["cache_misses"] == 4


class _Crash(BaseException):
    """A process killed mid-write (nothing after the write runs)."""


def test_a_crash_mid_write_never_serves_the_half_block(tmp_path, small_blocks, monkeypatch):
    url = str(tmp_path / "ds")
    _write(url)
    want = _epoch(_loader(url))[0]
    real_write = os.write
    cache_dir = tmp_path / "cache"

    def crashing(fd: int, data: Any) -> int:
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(cache_dir)) and len(data) > 1000:
            real_write(fd, bytes(data[: len(data) // 2]))
            raise _Crash()
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", crashing)
    with pytest.raises(_Crash):
        _epoch(_loader(url, cache_dir=cache_dir))
    monkeypatch.setattr(os, "write", real_write)
    assert _blocks(cache_dir) == []  # the half-written block never took its name
    temps = list((cache_dir / "guideloom-blocks" / "tmp").iterdir())
    assert len(temps) == 1
    got, counts = _epoch(_loader(url, cache_dir=cache_dir))
    assert _same(got, want) and _cache_entry(counts)["cache_misses"] > 0
    # The crashed writer's file counts against the bound until an eviction finds it stale.
    old = time.time() - 3600
    os.utime(temps[0], (old, old))
    cache_module.BlockCache(str(cache_dir), 1 << 30, BLOCK)._evict(0)
    assert not temps[0].exists()


# -- shared by the node's processes ---------------------------------------------------------------


@pytest.mark.s3
def test_s3_two_loaders_with_worker_processes_share_one_cache_dir(
    s3_bucket, s3_options, counting_s3, tmp_path
):
    url = f"s3://{s3_bucket}/ds"
    _write(url, s3_options)
    want = _epoch(_loader(url, s3_options))[0]
    shared = tmp_path / "cache"
    a = _loader(url, counting_s3.storage_options, cache_dir=shared, num_workers=2)
    b = _loader(url, counting_s3.storage_options, cache_dir=shared, num_workers=2)
    counting_s3.reset()
    got_a, got_b = [], []
    for x, y in zip(a, b):  # both at once: four worker processes fill one directory
        got_a.append(x["tokens"].numpy().copy())
        got_b.append(y["tokens"].numpy().copy())
    assert _same(got_a, want) and _same(got_b, want)
    both = counting_s3.requests["GET"]
    c = _loader(url, counting_s3.storage_options, cache_dir=shared, num_workers=2)
    counting_s3.reset()  # opening read the manifest: the data are what must not be requested
    got_c, counts = _epoch(c)
    assert _same(got_c, want)
    assert counting_s3.requests["GET"] == 0 and _gets(counts) == 0 and both > 0
    names = [p.name for p in _blocks(shared)]
    assert len(names) == len(set(names)) > 0
    usage = int((shared / "guideloom-blocks" / ".lock").read_text())
    assert usage >= _dir_bytes(shared) - 21  # the recorded usage never undercounts the files


# -- a full disk ----------------------------------------------------------------------------------


def test_a_cache_smaller_than_a_block_keeps_nothing_and_reads_exactly(tmp_path):
    url = str(tmp_path / "ds")
    _write(url)
    plain = _loader(url)
    want = [_epoch(plain)[0] for _ in range(2)]
    cached = _loader(url, cache_dir=tmp_path / "cache", cache_bytes=1000)
    assert _same(_epoch(cached)[0], want[0]) and _same(_epoch(cached)[0], want[1])
    assert _blocks(tmp_path / "cache") == [] and _dir_bytes(tmp_path / "cache") <= 1000


@pytest.mark.s3
def test_s3_enospc_on_the_block_write_still_gives_exact_batches(
    s3_bucket, s3_options, counting_s3, tmp_path, monkeypatch
):
    monkeypatch.setattr(cache_module, "DEFAULT_BLOCK_BYTES", BLOCK)
    url = f"s3://{s3_bucket}/ds"
    _write(url, s3_options)
    plain = _loader(url, s3_options)
    want = [_epoch(plain)[0] for _ in range(2)]
    cache_dir = tmp_path / "cache"
    real_write = os.write
    failed = []

    def full_disk(fd: int, data: Any) -> int:
        """The cache's block files hit a full disk after their first half; nothing else does."""
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(cache_dir)) and len(data) > 1000:
            failed.append(fd)
            real_write(fd, bytes(data[: len(data) // 2]))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full_disk)
    cached = _loader(url, counting_s3.storage_options, cache_dir=cache_dir)
    got1, first = _epoch(cached)
    assert failed and _cache_entry(first)["cache_write_errors"] == len(failed)
    got2, second = _epoch(cached)
    assert _same(got1, want[0]) and _same(got2, want[1])
    assert _blocks(cache_dir) == [] and list((cache_dir / "guideloom-blocks" / "tmp").iterdir()) == []
    assert int((cache_dir / "guideloom-blocks" / ".lock").read_text()) == 0  # reservations released
    assert _gets(second) > 0  # nothing kept: the store serves the second epoch too
    monkeypatch.setattr(os, "write", real_write)
    counting_s3.reset()
    assert _same(_epoch(cached)[0], _epoch(plain)[0])  # room again: the cache fills
    assert _blocks(cache_dir)


# -- off by default, and bad input ----------------------------------------------------------------


def test_off_by_default_nothing_on_disk_and_the_plain_readers(tmp_path, monkeypatch):
    url = str(tmp_path / "ds")
    _write(url)
    monkeypatch.chdir(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    storage = StreamStorage(url, FMT)
    assert storage.block_cache is None
    loader = StatefulDataLoader.from_storage(storage, sequence_length=WINDOW, batch_size=8)
    assert sum(1 for _ in loader) > 0 and loader.io_stats() == {}
    assert type(StreamDataset(storage, WINDOW).reader) is LocalShardReader
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.s3
def test_from_storage_takes_the_cache_with_a_url(s3_bucket, s3_options, tmp_path):
    url = f"s3://{s3_bucket}/ds"
    _write(url, s3_options)
    assert (
        type(StreamDataset(StreamStorage(url, FMT, storage_options=s3_options), WINDOW).reader)
        is RemoteShardReader
    )
    loader = StatefulDataLoader.from_storage(
        url, sequence_length=WINDOW, batch_size=8, storage_options=s3_options, cache_dir=tmp_path / "c"
    )
    _epoch(loader)
    _, counts = _epoch(loader)
    assert _gets(counts) == 0 and _cache_entry(counts)["cache_hits"] > 0
    with pytest.raises(
        TypeError, match=r"cache_dir= and cache_bytes= are for a storage given as a URL.*open it with them"
    ):
        StatefulDataLoader.from_storage(
            StreamStorage(url, FMT, storage_options=s3_options), sequence_length=WINDOW, cache_dir=tmp_path
        )


def test_bad_cache_options_are_named_with_the_fix(tmp_path):
    url = str(tmp_path / "ds")
    _write(url, records=20)
    with pytest.raises(
        ValueError, match=r"cache_bytes=1000000 bounds the local block cache.*pass cache_dir="
    ):
        StreamStorage(url, FMT, cache_bytes=1_000_000)
    with pytest.raises(ValueError, match=r"cache_bytes must be a non-negative number of bytes.*got -1"):
        StreamStorage(url, FMT, cache_dir=tmp_path / "c", cache_bytes=-1)
    with pytest.raises(ValueError, match=r"cache_bytes must be .*got 1.5"):
        StreamStorage(url, FMT, cache_dir=tmp_path / "c", cache_bytes=1.5)  # type: ignore[arg-type]
    a_file = tmp_path / "not-a-folder"
    a_file.write_text("x")
    with pytest.raises(ValueError, match=r"cache_dir=.*not-a-folder' is a file, not a folder: pass a folder"):
        StreamStorage(url, FMT, cache_dir=a_file)
    with pytest.raises(ValueError, match=r"cannot be used for the block cache.*pass a folder on local disk"):
        StreamStorage(url, FMT, cache_dir=a_file / "below")
    with pytest.raises(ValueError, match="pass cache_dir= too"):
        StatefulDataLoader.from_storage(url, sequence_length=WINDOW, cache_bytes=10)
