"""The shard reader (guideloom.io.shards): one interface, the same bytes on every backend; short
reads, resized and missing files named by shard; descriptors that belong to their process."""

from __future__ import annotations

import copy
import multiprocessing
import os
import pickle
from typing import Any

import fsspec
import numpy as np
import pytest

from guideloom import DocumentMsgpackFormat, DocumentStorage, StreamNumpyFormat, StreamStorage
from guideloom.errors import ShardCorruptError, ShardNotFoundError
from guideloom.io.shards import LocalShardReader, RemoteShardReader, open_shard_reader
from guideloom.layout import HEADER_SIZE
from guideloom.types import ByteRequest, ShardReader

FMT = StreamNumpyFormat({"tokens": np.uint16})
TOKENS = 3000  # in shards of about 1,000 tokens


def _write(url: str, options: dict[str, Any] | None = None) -> StreamStorage:
    storage = StreamStorage(url, FMT, storage_options=options)
    with storage.writer(shard_size=2000) as w:
        for start in range(0, TOKENS, 700):
            w.append({"tokens": np.arange(start, min(TOKENS, start + 700), dtype=np.uint16)})
    return StreamStorage(url, FMT, storage_options=options)


def _reader(storage: StreamStorage) -> Any:
    return open_shard_reader(storage.location, storage.manifest.shard_table)


def _requests(storage: StreamStorage) -> list[tuple[int, str, int, int]]:
    """Requests across every shard: whole files, touching and overlapping ranges, empty ones."""
    table = storage.manifest.shard_table
    out: list[tuple[int, str, int, int]] = []
    for s in range(len(table)):
        size = table.size(s, "data")
        out += [(s, "data", 0, size), (s, "data", HEADER_SIZE, HEADER_SIZE + 10)]
        out += [(s, "data", HEADER_SIZE + 10, HEADER_SIZE + 30), (s, "data", HEADER_SIZE + 20, size)]
        out.append((s, "data", size, size))
    return out


@pytest.fixture
def local_and_memory(tmp_path: Any) -> tuple[StreamStorage, StreamStorage]:
    return _write(str(tmp_path / "ds")), _write(f"memory://{tmp_path.name}/shards")


def test_local_and_remote_readers_give_the_same_bytes(local_and_memory: Any) -> None:
    local, remote = local_and_memory
    a, b = _reader(local), _reader(remote)
    assert isinstance(a, LocalShardReader) and a.local and isinstance(a, ShardReader)
    assert isinstance(b, RemoteShardReader) and not b.local and isinstance(b, ShardReader)
    requests = _requests(local)
    assert len(local.manifest.shards) == 3
    assert a.read(requests) == b.read(requests) == list(a.read_iter(requests)) == list(b.read_iter(requests))
    data = a.read([ByteRequest(1, "data", HEADER_SIZE, HEADER_SIZE + 8)])[0]  # named tuples too
    first = local.manifest.shard_table.tokens[0]  # shard 1's first token
    assert np.frombuffer(data, np.uint16).tolist() == list(range(first, first + 4))
    # read_into: the same bytes, through one buffer or several, on both backends
    for reader in (a, b):
        out = np.zeros((2, 50), np.uint8)
        flat = out.reshape(-1).data
        reader.read_into(
            [(0, "data", HEADER_SIZE, HEADER_SIZE + 100), (2, "data", HEADER_SIZE, HEADER_SIZE + 0)],
            [[flat[0:30], flat[30:100]], []],
        )
        assert np.frombuffer(out.tobytes(), np.uint16).tolist() == list(range(50))


def test_one_preadv_takes_more_buffers_than_the_system_allows(tmp_path: Any) -> None:
    storage = _write(str(tmp_path / "ds"))
    reader = _reader(storage)
    tokens = storage.manifest.shard_table.tokens[0]
    assert tokens > 1100
    out = np.zeros(tokens, np.uint16)
    flat = out.view(np.uint8).data
    buffers = [flat[2 * k : 2 * k + 2] for k in range(1100)] + [flat[2200:]]  # 1,101 buffers
    reader.read_into([(0, "data", HEADER_SIZE, HEADER_SIZE + 2 * tokens)], [buffers])
    assert out.tolist() == list(range(tokens))


@pytest.mark.parametrize("where", ["local", "memory"])
def test_short_reads_resized_and_missing_files_name_the_shard(tmp_path: Any, where: str) -> None:
    url = str(tmp_path / "ds") if where == "local" else f"memory://{tmp_path.name}/damaged"
    storage = _write(url)
    table = storage.manifest.shard_table
    fs, root = fsspec.core.url_to_fs(url)
    reader = _reader(storage)
    size = table.size(1, "data")
    assert reader.read([(1, "data", 0, size)])[0][:8] == b"GLMSHARD"  # opened (and checked) on local disk
    path = f"{root}/{table.path(1, 'data')}"
    fs.pipe_file(path, fs.cat_file(path)[:-10])  # truncated after it was opened
    with pytest.raises(ShardCorruptError, match=r"part 0 shard 1 .*ended early: bytes \[0, \d+\) were asked"):
        reader.read([(0, "data", 0, 10), (1, "data", 0, size)])
    with pytest.raises(ShardCorruptError, match="part 0 shard 1 .*ended early"):
        out = np.zeros(size, np.uint8)
        reader.read_into([(1, "data", 0, size)], [[out.data]])
    if where == "local":  # a fresh reader checks the size when it opens the file
        with pytest.raises(
            ShardCorruptError, match=r"part 0 shard 1 .* has \d+ bytes but the manifest records"
        ):
            _reader(storage).read([(1, "data", 0, 10)])
    fs.rm(f"{root}/{table.path(2, 'data')}")
    with pytest.raises(ShardNotFoundError, match="part 0 shard 2 .*is missing") as info:
        _reader(storage).read([(0, "data", 0, 10), (2, "data", 0, 10)])
    assert table.path(2, "data") in str(info.value) and table.path(0, "data") not in str(info.value)


def _child_reads(reader: LocalShardReader, parent_fds: dict[Any, int], queue: Any) -> None:
    data = reader.read([(0, "data", HEADER_SIZE, HEADER_SIZE + 4)])[0]
    own = dict(reader._fds)
    reader.close()  # closes the child's descriptors only
    queue.put((data, own, {fd: _is_open(fd) for fd in parent_fds.values()}))


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_a_forked_child_opens_its_own_descriptors_and_leaves_the_parents(tmp_path: Any) -> None:
    storage = _write(str(tmp_path / "ds"))
    reader = _reader(storage)
    assert reader.read([(0, "data", HEADER_SIZE, HEADER_SIZE + 4)])[0] == bytes([0, 0, 1, 0])
    parent_fds = dict(reader._fds)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_reads, args=(reader, parent_fds, queue))
    child.start()
    data, child_fds, inherited_open = queue.get(timeout=60)
    child.join(60)
    assert data == bytes([0, 0, 1, 0])
    assert child_fds and set(child_fds.values()).isdisjoint(parent_fds.values())  # its own
    assert all(inherited_open.values())  # the parent's descriptors were left alone
    assert reader._fds == parent_fds and all(_is_open(fd) for fd in parent_fds.values())
    assert reader.read([(0, "data", HEADER_SIZE + 2, HEADER_SIZE + 4)])[0] == bytes([1, 0])


def test_copies_and_pickles_open_their_own_descriptors(tmp_path: Any) -> None:
    storage = _write(str(tmp_path / "ds"))
    reader = _reader(storage)
    reader.read([(s, "data", 0, 8) for s in range(3)])
    for other in (copy.deepcopy(reader), pickle.loads(pickle.dumps(reader))):
        assert other._fds == {}
        first = sum(storage.manifest.shard_table.tokens[:2])
        assert other.read([(2, "data", HEADER_SIZE, HEADER_SIZE + 2)])[0] == first.to_bytes(2, "little")
        assert set(other._fds.values()).isdisjoint(reader._fds.values())
        other.close()
    assert all(_is_open(fd) for fd in reader._fds.values())


def test_descriptors_stay_within_the_bound(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import guideloom.io.shards as shards

    monkeypatch.setattr(shards, "MAX_OPEN_FILES", 2)
    storage = DocumentStorage(tmp_path / "d", DocumentMsgpackFormat())
    with storage.writer(shard_size=60) as w:
        for i in range(40):
            w.append({"i": i, "pad": "x" * 20})
    reader = open_shard_reader(storage.location, storage.manifest.shard_table)
    n = len(storage.manifest.shards)
    assert n > 4
    blobs = reader.read([(s, f, 0, 8) for s in range(n) for f in ("data", "index")] * 2)
    assert blobs == [b"GLMSHARD"] * (4 * n) and len(reader._fds) == 2


@pytest.mark.s3
def test_the_s3_reader_gives_the_bytes_of_local_disk(tmp_path: Any, s3_bucket: str, s3_options: Any) -> None:
    local = _write(str(tmp_path / "ds"))
    remote = _write(f"s3://{s3_bucket}/shards", s3_options)
    a, b = _reader(local), _reader(remote)
    assert isinstance(b, RemoteShardReader)
    requests = [r for r in _requests(local) if r[3] > r[2]]
    assert a.read(requests) == b.read(requests)


@pytest.mark.parametrize("where", ["local", "memory"])
def test_a_reader_of_an_expired_snapshot_is_told_to_refresh(tmp_path: Any, where: str) -> None:
    """Overwritten and expired under an open storage: the missing shard's message names
    storage.refresh() (and says verify would pass), and the refresh it names reads the new data."""
    import datetime as dt

    url = str(tmp_path / "ds") if where == "local" else f"memory://{tmp_path.name}/grown"
    old = _write(url)
    reader = _reader(old)
    newer = StreamStorage(url, FMT)
    with newer.writer(overwrite=True) as w:
        w.append({"tokens": np.arange(50, dtype=np.uint16)})
    newer.expire(keep_last=1, grace=dt.timedelta(0))  # deletes the files only the old snapshot used
    with pytest.raises(ShardNotFoundError) as info:
        reader.read([(0, "data", 0, 10)])
    message = str(info.value)
    assert "is missing" in message and "storage.refresh()" in message and "overwritten" in message
    old.refresh()  # the fix the message names
    assert old.manifest.total_tokens == 50
    assert [err for _, err in old.verify()] == [None]  # verify checks the current snapshot: passes
    data = _reader(old).read([(0, "data", HEADER_SIZE, HEADER_SIZE + 2 * 50)])[0]
    assert np.frombuffer(data, np.uint16).tolist() == list(range(50))
