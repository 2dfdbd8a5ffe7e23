"""A manifest that contradicts its shard files is refused at open (cheap checks) or by verify
(everything); counts beyond int64 and prefixes that cannot be paths are ManifestErrors."""

from __future__ import annotations

import json
import struct

import fsspec
import numpy as np
import pytest
import xxhash
from storage_helpers import plain_manifest

from guideloom import (
    DocumentDataset,
    DocumentJsonFormat,
    DocumentStorage,
    StreamDataset,
    StreamNumpyFormat,
    StreamStorage,
    layout,
)
from guideloom.errors import ManifestError
from guideloom.manifest import parse_manifest

FMT = StreamNumpyFormat({"tokens": np.uint16})


def _write_stream(url, options):
    storage = StreamStorage(url, FMT, storage_options=options)
    with storage.writer(shard_size=4000) as w:
        for i in range(5):
            w.append({"tokens": np.arange(2000) % 100 + i})
    return storage


def _edit_manifest(url, options, edit):
    fs, root = fsspec.core.url_to_fs(url, **options)
    d = plain_manifest(fs, root)
    edit(d)
    fs.pipe_file(f"{root}/manifest.json", json.dumps(d).encode())


def _claim_tokens(d, shard, tokens):
    """Say shard ``shard`` holds ``tokens`` tokens, totals kept consistent (a careful forger)."""
    table = d["shard_table"]
    d["total_tokens"] += tokens - table["tokens"][shard]
    table["tokens"][shard] = tokens


def test_counts_that_contradict_the_files_are_refused_at_open(dataset_url):
    url, options = dataset_url
    _write_stream(url, options)
    _edit_manifest(url, options, lambda d: _claim_tokens(d, 0, 10**10 * 16))  # 1e10 windows of 16
    with pytest.raises(ManifestError, match=r"part 0 shard 0 .*records 160000000000 tokens.*bytes"):
        StreamDataset(StreamStorage(url, FMT, storage_options=options), 16)


def test_index_sizes_that_contradict_the_record_counts_are_refused(tmp_path):
    url = str(tmp_path / "docs")
    storage = DocumentStorage(url, DocumentJsonFormat())
    with storage.writer() as w:
        for i in range(10):
            w.append({"i": i})

    def more_records(d):
        d["shard_table"]["records"][0] = 10**9
        d["total_records"] = 10**9

    _edit_manifest(url, {}, more_records)
    with pytest.raises(ManifestError, match="docs.idx file has .* bytes, but .* are needed"):
        DocumentDataset(DocumentStorage(url, DocumentJsonFormat()))


@pytest.mark.parametrize("value", [2**63, 2**64 + 5])
def test_counts_beyond_int64_are_manifest_errors(tmp_path, value):
    storage = _write_stream(str(tmp_path / "ds"), {})
    d = json.loads(storage.manifest.to_json())
    _claim_tokens(d, 0, value)
    with pytest.raises(ManifestError, match="less than or equal to 9223372036854775807"):
        parse_manifest(json.dumps(d).encode(), "x/manifest.json")


@pytest.mark.parametrize(
    "prefix",
    ["a//b", "shards/./x", "shards\\x", "shards/x\x00", "sh\x1fards", "shards/x\x7f", "/abs", "s3://b/x", "../up", "x/"],
)
def test_prefixes_that_cannot_be_paths_are_manifest_errors(tmp_path, prefix):
    storage = _write_stream(str(tmp_path / "ds"), {})
    d = json.loads(storage.manifest.to_json())
    d["shard_table"]["prefix"][0] = prefix
    with pytest.raises(ManifestError, match="must be relative to the dataset root"):
        parse_manifest(json.dumps(d).encode(), "x/manifest.json")


def test_verify_checks_headers_against_the_counts(dataset_url):
    """A forger who keeps sizes and checksums consistent but changes a header's count is caught
    by verify (opening checks only what is cheap)."""
    url, options = dataset_url
    storage = _write_stream(url, options)
    fs, root = fsspec.core.url_to_fs(url, **options)
    rel = storage.manifest.shard_table.path(1, "data")
    data = bytearray(fs.cat_file(f"{root}/{rel}"))
    magic, version, kind, itemsize, count, reserved = struct.unpack_from("<8sHHIQQ", data)
    struct.pack_into("<8sHHIQQ", data, 0, magic, version, kind, itemsize, count - 1, reserved)
    fs.pipe_file(f"{root}/{rel}", bytes(data))

    def recheck(d):
        d["shard_table"]["files"]["data"]["checksum"][1] = f"xxh3_64:{xxhash.xxh3_64_hexdigest(bytes(data))}"

    _edit_manifest(url, options, recheck)
    reopened = StreamStorage(url, FMT, storage_options=options)
    StreamDataset(reopened, 16)  # sizes agree: it opens
    results = list(reopened.verify())
    bad = [err for _, err in results if err is not None]
    assert len(bad) == 1 and "header for 1999 items" in str(bad[0]) and rel in str(bad[0])
    assert [s.index for s, _ in results] == list(range(len(results)))  # manifest order


def test_verify_runs_concurrently_and_reports_progress(tmp_path):
    storage = StreamStorage(str(tmp_path / "many"), FMT)
    with storage.writer(shard_size=64) as w:
        for i in range(100):
            w.append({"tokens": np.full(32, i)})
    calls = []
    results = list(storage.verify(concurrency=8, progress=lambda done, total: calls.append((done, total))))
    assert len(results) == 100 and all(err is None for _, err in results)
    assert calls == [(i, 100) for i in range(1, 101)]
    assert [s.index for s, _ in results] == list(range(100))
    with pytest.raises(ValueError, match="concurrency"):
        list(storage.verify(concurrency=0))
    assert layout.HEADER_SIZE == 32  # the manifest package's copy of it (no I/O there) agrees
