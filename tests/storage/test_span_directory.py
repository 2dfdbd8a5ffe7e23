"""The span directory: a window's span rows are found with one round of index reads, however
unevenly the spans are spread over the tokens; datasets written without one are still read."""

from __future__ import annotations

import json

import fsspec
import numpy as np
import pytest
from storage_helpers import ConceptsFormat, expected_spans, plain_manifest

from guideloom import StreamNumpyFormat, StreamWithMetaDataset, StreamWithMetaStorage, layout
from guideloom.storage.checks import read_manifest

SEQ = 97


def _uneven_records(seed: int) -> list[tuple[np.ndarray, list[tuple[int, int, list[str]]]]]:
    """Nearly every span in one tiny stretch of tokens: a 4000-token record with a 1-token span
    on almost every token, then 60 records of ~1500 tokens with at most one long span each."""
    rng = np.random.default_rng(seed)
    dense = [(t, t + 1, [f"d{t}"]) for t in range(4000) if rng.random() < 0.9]
    records = [(np.arange(4000, dtype=np.uint16), dense)]
    for r in range(60):
        length = int(rng.integers(1000, 2000))
        spans = []
        if r % 2:
            a = int(rng.integers(0, length - 1))
            spans.append((a, int(rng.integers(a + 1, length + 1)), [f"r{r}"]))
        records.append((np.full(length, r, dtype=np.uint16), spans))
    return records


def _write(storage, records, shard_size: int) -> None:
    with storage.writer(shard_size=shard_size) as w:
        for tokens, spans in records:
            w.append({"tokens": tokens}, spans=spans)


def _strip_directories(url: str, storage_options: dict | None = None) -> None:
    """Turn a dataset into what GuideLoom wrote before span directories (manifest version 1):
    through raw fsspec, delete the directory files and drop their column from the manifest."""
    fs, root = fsspec.core.url_to_fs(url, **(storage_options or {}))
    manifest = plain_manifest(fs, root)
    table = manifest["shard_table"]
    column = table["files"].pop("span_dir")
    for i in range(len(table["part"])):
        prefix = table["prefix"][table["prefix_id"][i]]
        fs.rm_file(f"{root}/{prefix}/part-{table['part'][i]:05d}/shard-{table['index'][i]:05d}.spans.dir")
    manifest["total_bytes"] -= sum(column["size"])
    manifest["version"] = 1
    fs.pipe_file(f"{root}/manifest.json", json.dumps(manifest).encode())


def _batches(n_windows: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    dense = list(range(0, 4000 // SEQ + 1))  # windows in the dense stretch
    return [dense[:8], dense[8:16], dense[30:]] + [rng.integers(0, n_windows, 8).tolist() for _ in range(12)]


def test_the_writer_records_a_directory_that_bounds_every_window(tmp_path, concepts_format):
    records = _uneven_records(0)
    storage = StreamWithMetaStorage(tmp_path / "m", concepts_format)
    _write(storage, records, shard_size=60_000)
    manifest = storage.manifest
    assert manifest.version == 3 and len(manifest.shards) > 1  # 3: record starts too
    table = manifest.shard_table
    for i in range(len(table)):
        kinds = [table.files[name].kind for name in table.files]
        assert kinds == ["tokens", "starts", "meta", "spans", "spans.dir"]
        raw = (tmp_path / "m" / table.path(i, "span_dir")).read_bytes()
        header = layout.ShardHeader.unpack(raw, "dir")
        assert header.kind == "spans.dir"
        assert header.count == layout.span_dir_entries(table.tokens[i], table.spans[i])
        spans = np.frombuffer((tmp_path / "m" / table.path(i, "spans")).read_bytes()[32:], layout.SPAN_DTYPE)
        directory = np.frombuffer(raw[32:], layout.SPAN_DIR_DTYPE)
        block = int(layout.span_block_tokens(table.tokens[i], table.spans[i]))
        for k, entry in enumerate(directory):  # each entry checked against a scan of the rows
            x = k * block
            first = next((r for r, s in enumerate(spans) if s["stop"] > x), len(spans))
            after = next((r for r, s in enumerate(spans) if s["start"] >= x), len(spans))
            assert (entry["first"], entry["after"]) == (first, after)
    from guideloom.storage.checks import verify_shards

    assert [err for _, err in verify_shards(storage.location, manifest) if err] == []  # headers, checksums
    assert int(layout.span_block_tokens(10**6, 0)) == layout.SPAN_DIR_MAX_BLOCK
    assert int(layout.span_block_tokens(1000, 1000)) == 16  # one span per token: 16 per block


@pytest.mark.parametrize("where", ["local", "memory"])
def test_windows_match_a_brute_force_lookup_with_and_without_the_directory(tmp_path, concepts_format, where):
    # Local disk takes positioned reads per window; memory:// the batched path object stores take.
    records = _uneven_records(1)
    url = str(tmp_path / "m") if where == "local" else f"memory://{tmp_path.name}/m"
    storage = StreamWithMetaStorage(url, concepts_format)
    _write(storage, records, shard_size=40_000)
    ds = StreamWithMetaDataset(storage, SEQ, index_cache_bytes=8192)
    assert ds._has_dir
    batches = _batches(len(ds), 2) + [list(range(len(ds)))]
    expected = [[expected_spans(records, SEQ, w) for w in batch] for batch in batches]
    got = [[sample["spans"] for sample in ds.__getitems__(batch)] for batch in batches]
    assert got == expected
    assert sum(len(e) for batch in expected for e in batch) > 3000

    _strip_directories(url)
    old = StreamWithMetaDataset(StreamWithMetaStorage(url, concepts_format), SEQ, index_cache_bytes=8192)
    assert not old._has_dir and old.manifest.version == 1
    assert [[sample["spans"] for sample in old.__getitems__(batch)] for batch in batches] == expected


@pytest.mark.s3
def test_uneven_spans_cost_one_round_of_index_requests_per_batch(s3_bucket, s3_options, counting_s3):
    records = _uneven_records(3)
    fmt = ConceptsFormat(StreamNumpyFormat({"tokens": np.uint16}))
    url = f"s3://{s3_bucket}/uneven"
    _write(StreamWithMetaStorage(url, fmt, storage_options=s3_options), records, shard_size=80_000)
    reader = StreamWithMetaStorage(url, fmt, storage_options=counting_s3.storage_options)
    ds = StreamWithMetaDataset(reader, SEQ)
    index_kinds = (".spans.dir",)

    def one_batch(view, batch):
        """Read ``batch`` with a cold index cache; the proxy's log of its requests."""
        view._access.cache.clear()
        counting_s3.reset()
        got = [sample["spans"] for sample in view.__getitems__(batch)]
        assert got == [expected_spans(records, SEQ, w) for w in batch]
        return list(counting_s3.log)

    for batch in _batches(len(ds), 4):
        fetches = ds._access.cache.fetches
        log = one_batch(ds, batch)
        assert ds._access.cache.fetches - fetches == 1  # one round of index reads
        index = [i for i, r in enumerate(log) if r.path.endswith(index_kinds)]
        data = [i for i, r in enumerate(log) if not r.path.endswith(index_kinds)]
        assert index and data
        # The round of directory reads ended before the data round began (the log is in
        # completion order, and the data round waits for the directory).
        assert max(index) < min(data)
        assert len(index) <= 2 * len(batch)  # at most a page at each end of each window
        assert sum(log[i].bytes for i in index) <= 2 * len(batch) * ds._access.page_bytes

    # The same dataset without directories (as written before them) needs more rounds: the
    # search probes pages of the span table round after round where spans bunch up.
    _strip_directories(url, s3_options)
    old = StreamWithMetaDataset(
        StreamWithMetaStorage(url, fmt, storage_options=counting_s3.storage_options), SEQ
    )
    rounds = []
    for batch in _batches(len(old), 4):
        fetches = old._access.cache.fetches
        one_batch(old, batch)
        rounds.append(old._access.cache.fetches - fetches)
    assert max(rounds) > 1


def test_only_datasets_with_new_files_need_a_new_manifest_version(tmp_path):
    """Documents have nothing new on disk: they stay readable by older GuideLoom. Streams gain
    record starts (version 3), streams with metadata span directories and record starts."""
    from guideloom import DocumentMsgpackFormat, DocumentStorage, StreamStorage

    stream = StreamStorage(tmp_path / "s", StreamNumpyFormat({"tokens": np.uint16}))
    with stream.writer() as w:
        w.append({"tokens": np.arange(10)})
    docs = DocumentStorage(tmp_path / "d", DocumentMsgpackFormat())
    with docs.writer(part=0) as w:
        w.append("a")
    docs.commit(num_parts=1)
    assert stream.manifest.version == 3 and docs.manifest.version == 1
    assert read_manifest(tmp_path / "s")[1].version == 3
    assert read_manifest(tmp_path / "d")[1].version == 1
    meta = StreamWithMetaStorage(tmp_path / "m", ConceptsFormat(StreamNumpyFormat({"tokens": np.uint16})))
    with meta.writer(part=0) as w:
        w.append({"tokens": np.arange(10)}, spans=[(2, 4, ["x"])])
    meta.commit(num_parts=1)
    assert meta.manifest.version == 3
    assert StreamWithMetaDataset(meta, 5)[0]["spans"] == [(2, 4, ["x"])]
