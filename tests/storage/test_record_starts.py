"""Record starts: every stream records where each appended record begins (`Writer.append` of one
record, or each record of `Writer.append_batch`), across shard boundaries, on every backend;
`StreamDataset.record_starts` gives the ones inside a window; `verify` checks the file."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import guideloom.layout as layout
from guideloom import (
    StreamDataset,
    StreamNumpyFormat,
    StreamStorage,
    StreamWithMetaDataset,
    StreamWithMetaStorage,
)
from guideloom.errors import RecordError, ShardCorruptError

FORMAT = StreamNumpyFormat({"tokens": np.uint16, "loss_mask": np.uint8})


def _record(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "tokens": rng.integers(0, 60_000, n).astype(np.uint16),
        "loss_mask": rng.integers(0, 2, n).astype(np.uint8),
    }


def _write(storage: StreamStorage, lengths: list[int], modes: list[int], shard_size: int) -> None:
    """Append records of ``lengths`` tokens: runs of them by ``append``, by ``append_batch`` of
    flat arrays with lengths, and by ``append_batch`` of a list of records (``modes`` cycles)."""
    with storage.writer(shard_size=shard_size) as w:
        i = 0
        k = 0
        while i < len(lengths):
            run = lengths[i : i + 1 + modes[k % len(modes)] % 4]
            mode = modes[k % len(modes)] % 3
            records = [_record(n, i + j) for j, n in enumerate(run)]
            if mode == 0:
                for r in records:
                    w.append(r)
            elif mode == 1:
                flat = {f: np.concatenate([r[f] for r in records]) for f in FORMAT.fields}
                assert w.append_batch(flat, lengths=np.array(run)) == len(run)
            else:
                assert w.append_batch(records) == len(run)
            i += len(run)
            k += 1


def _expected(lengths: list[int], window: int, length: int) -> list[int]:
    """Brute force: the distinct record starts in window ``window``, window-relative."""
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).tolist()
    g0 = window * length
    return sorted({s - g0 for s in starts if g0 <= s < g0 + length})


def _stored_starts(storage: StreamStorage) -> list[list[int]]:
    table = storage.manifest.shard_table
    location = storage.location
    out = []
    for i in range(len(table)):
        raw = location.read(table.path(i, "starts"))
        header = layout.ShardHeader.unpack(raw, "starts")
        assert header.kind == "starts" and header.count == table.records[i] and header.itemsize == 8
        out.append(np.frombuffer(raw[layout.HEADER_SIZE :], "<u8").tolist())
    return out


def test_record_starts_equal_the_appends_across_shards(dataset_url: tuple[str, dict]) -> None:
    url, options = dataset_url
    storage = StreamStorage(url, FORMAT, storage_options=options)
    lengths = [5, 0, 17, 3, 40, 1, 1, 0, 9, 22, 8, 13, 2, 30, 6]
    _write(storage, lengths, modes=[0, 1, 2, 4, 5, 3], shard_size=60)
    table = storage.manifest.shard_table
    assert len(table) > 3 and storage.manifest.version == 3
    assert sum(table.records) == len(lengths)
    # Per shard: the starts of its records, shard-relative, in append order.
    per_shard = _stored_starts(storage)
    flat, at = [], 0
    for i, starts in enumerate(per_shard):
        assert starts[0] == 0 and starts == sorted(starts) and starts[-1] <= table.tokens[i]
        flat += [at + s for s in starts]
        at += table.tokens[i]
    assert flat == np.concatenate([[0], np.cumsum(lengths)[:-1]]).tolist()
    # And through the view, window by window and as one batch (reversed order, repeats).
    for length in (1, 4, 7, 64):
        view = StreamDataset(storage, length)
        assert view.has_record_starts
        for w in range(len(view)):
            assert view.record_starts(w).tolist() == _expected(lengths, w, length)
        order = list(range(len(view)))[::-1] + [0, 0]
        positions, counts = view.record_starts_batch(order)
        assert positions.dtype == np.int64 and counts.tolist() == [
            len(_expected(lengths, w, length)) for w in order
        ]
        bounds = np.concatenate([[0], np.cumsum(counts)])
        for j, w in enumerate(order):
            assert positions[bounds[j] : bounds[j + 1]].tolist() == _expected(lengths, w, length)
    # Token data is the records joined, whatever the append form.
    view = StreamDataset(storage, sum(lengths))
    joined = np.concatenate([_record(n, i)["tokens"] for i, n in enumerate(lengths)])
    assert view[0]["tokens"].tolist() == joined.tolist()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lengths=st.lists(st.integers(0, 40), min_size=1, max_size=40),
    modes=st.lists(st.integers(0, 11), min_size=1, max_size=6),
    shard_size=st.integers(1, 200),
    length=st.integers(1, 50),
)
def test_record_starts_property(tmp_path_factory, lengths, modes, shard_size, length) -> None:
    storage = StreamStorage(tmp_path_factory.mktemp("p"), FORMAT)
    _write(storage, lengths, modes, shard_size)
    view = StreamDataset(storage, length)
    if len(view):
        positions, counts = view.record_starts_batch(np.arange(len(view)))
        bounds = np.concatenate([[0], np.cumsum(counts)])
        for w in range(len(view)):
            assert positions[bounds[w] : bounds[w + 1]].tolist() == _expected(lengths, w, length)


def test_a_batch_fills_shards_as_its_records_appended_one_by_one_do(tmp_path) -> None:
    """append_batch cuts shards where appending its records one by one would: after the record
    that brings a shard to shard_size (never inside a record), so shards stay near shard_size
    however large the batches are."""
    lengths = [30, 5, 60, 2, 11, 0, 44, 3]
    records = [_record(n, k) for k, n in enumerate(lengths)]
    flat = {f: np.concatenate([r[f] for r in records]) for f in FORMAT.fields}
    single = StreamStorage(tmp_path / "single", FORMAT)
    batched = StreamStorage(tmp_path / "batched", FORMAT)
    listed = StreamStorage(tmp_path / "listed", FORMAT)
    with single.writer(shard_size=300) as w:
        for _ in range(5):
            for r in records:
                w.append(r)
    with batched.writer(shard_size=300) as w:
        for _ in range(5):
            w.append_batch(flat, lengths=lengths)
    with listed.writer(shard_size=300) as w:
        w.append_batch(records * 5)  # one batch of every record
    a = single.manifest.shard_table
    itemsize = FORMAT.itemsize
    assert len(a) > 5
    for other in (batched, listed):
        b = other.manifest.shard_table
        assert b.records == a.records and b.tokens == a.tokens
        assert b.files["data"].checksum == a.files["data"].checksum
        assert b.files["starts"].checksum == a.files["starts"].checksum
    assert max(a.tokens) * itemsize <= 300 + max(lengths) * itemsize  # at most one record over


def test_streams_with_metadata_record_starts_too(tmp_path) -> None:
    from storage_helpers import ConceptsFormat

    storage = StreamWithMetaStorage(tmp_path / "m", ConceptsFormat(StreamNumpyFormat({"tokens": np.uint16})))
    with storage.writer(shard_size=20) as w:
        w.append({"tokens": np.arange(6)}, spans=[(1, 3, ["a"])])
        w.append_batch({"tokens": np.arange(9)}, lengths=[4, 5])
        w.append({"tokens": np.arange(7)}, spans=[(0, 7, ["b"])])
    view = StreamWithMetaDataset(storage, 11)
    assert view.has_record_starts
    assert [view.record_starts(w).tolist() for w in range(len(view))] == [[0, 6, 10], [4]]
    assert view[1]["spans"] == [(4, 11, ["b"])]


def test_a_batch_with_spans_writes_the_shards_its_records_appended_one_by_one_write(tmp_path) -> None:
    """append_batch(spans=) (how ingestion writes a stream with metadata): the same data, starts,
    span tables and annotations, cut into the same shards (annotation bytes count towards
    shard_size), as append of each record with its spans; bad spans refuse the whole batch."""
    from storage_helpers import ConceptsFormat

    from guideloom.errors import SpanError

    fmt = ConceptsFormat(StreamNumpyFormat({"tokens": np.uint16}))
    lengths = [7, 3, 12, 1, 9, 5, 4]
    spans = [[(0, 2, ["a"]), (4, 7, ["b" * 30])], [], [(1, 12, ["c"])], [(0, 1, [])], [], [(2, 5, ["d"])], []]
    flat = {"tokens": np.arange(sum(lengths), dtype=np.uint16)}
    ends = np.cumsum(lengths)
    one = StreamWithMetaStorage(tmp_path / "one", fmt)
    batch = StreamWithMetaStorage(tmp_path / "batch", fmt)
    with one.writer(shard_size=40) as w:
        for _ in range(3):
            for k, n in enumerate(lengths):
                w.append({"tokens": flat["tokens"][ends[k] - n : ends[k]]}, spans=spans[k])
    with batch.writer(shard_size=40) as w:
        for _ in range(3):
            w.append_batch(flat, lengths=lengths, spans=spans)
        with pytest.raises(
            SpanError, match=r"record 22: span 0 \[1, 12\) must satisfy 0 <= start < stop <= 11"
        ):
            w.append_batch({"tokens": np.arange(20)}, lengths=[9, 11], spans=[[], [(1, 12, ["x"])]])
        with pytest.raises(RecordError, match=r"record 22 span 1: ConceptsFormat.encode_meta failed"):
            w.append_batch(
                {"tokens": np.arange(20)}, lengths=[9, 11], spans=[[], [(0, 1, []), (2, 3, object())]]
            )
        with pytest.raises(RecordError, match="spans= holds 1 lists for 2 records"):
            w.append_batch({"tokens": np.arange(20)}, lengths=[9, 11], spans=[[]])
        assert w.records_written == 21
    a, b = one.manifest.shard_table, batch.manifest.shard_table
    assert len(a) > 3 and (b.records, b.tokens) == (a.records, a.tokens)
    for name in ("data", "starts", "meta", "spans", "span_dir"):
        assert b.files[name].checksum == a.files[name].checksum, name
    view = StreamWithMetaDataset(batch, 8)
    assert view[0]["spans"] == [(0, 2, ["a"]), (4, 7, ["b" * 30])]
    with StreamStorage(tmp_path / "plain", FORMAT).writer() as w:
        with pytest.raises(RecordError, match="spans are only stored by StreamWithMetaStorage"):
            w.append_batch([_record(2, 0)], spans=[[(0, 1, "x")]])
        w.append_batch([_record(2, 0)])


def test_bad_batches_are_refused_and_leave_the_writer_as_it_was(tmp_path) -> None:
    storage = StreamStorage(tmp_path / "s", FORMAT)
    with storage.writer() as w:
        w.append(_record(3, 0))
        flat = _record(10, 1)
        with pytest.raises(RecordError, match=r"record 1: a batch given as flat arrays needs lengths="):
            w.append_batch(flat)
        with pytest.raises(
            RecordError, match=r"record 1\.\.: lengths add up to 9 tokens but the fields hold 10"
        ):
            w.append_batch(flat, lengths=[4, 5])
        with pytest.raises(RecordError, match="lengths must be a 1-D array of non-negative ints"):
            w.append_batch(flat, lengths=[12, -2])
        with pytest.raises(RecordError, match=r"record 2: missing field\(s\) \['loss_mask'\]"):
            w.append_batch([_record(2, 2), {"tokens": np.arange(2)}])
        with pytest.raises(RecordError, match=r"record 1: field 'tokens' has shape \(2, 2\)"):
            w.append_batch([{"tokens": np.zeros((2, 2)), "loss_mask": np.zeros(4)}])
        with pytest.raises(RecordError, match="lengths= goes with a dict of flat arrays"):
            w.append_batch([_record(2, 2)], lengths=[2])
        assert w.records_written == 1
        w.append_batch([_record(2, 3)])
    assert storage.manifest.shard_table.records == [2]
    assert StreamDataset(storage, 5).record_starts(0).tolist() == [0, 3]


def test_verify_catches_a_damaged_record_start_file(tmp_path) -> None:
    storage = StreamStorage(tmp_path / "s", FORMAT)
    _write(storage, [4, 6, 3, 9], modes=[1], shard_size=1000)
    assert [err for _, err in storage.verify()] == [None]
    path = tmp_path / "s" / storage.manifest.shard_table.path(0, "starts")
    raw = bytearray(path.read_bytes())
    good = bytes(raw)
    raw[layout.HEADER_SIZE + 24 : layout.HEADER_SIZE + 32] = (12).to_bytes(8, "little")  # 13 -> 12
    path.write_bytes(bytes(raw))
    (err,) = [err for _, err in storage.verify()]
    assert isinstance(err, ShardCorruptError)
    assert "shard-00000.starts has checksum" in str(err) and "Restore it or rewrite the dataset" in str(err)
    raw[layout.HEADER_SIZE + 8 : layout.HEADER_SIZE + 16] = (99).to_bytes(8, "little")  # 4 -> 99
    path.write_bytes(bytes(raw))
    (err,) = [err for _, err in storage.verify()]
    assert isinstance(err, ShardCorruptError) and "shard-00000.starts holds record starts" in str(err)
    path.write_bytes(good[:-8])  # truncated: the size check (no checksum) catches it too
    (err,) = [err for _, err in storage.verify(checksums=False)]
    assert isinstance(err, ShardCorruptError) and "truncated or replaced" in str(err)


def test_verify_checks_the_starts_content_as_well_as_the_checksum(tmp_path) -> None:
    """A record-start file whose checksum the manifest matches (a writer's bug, not bit rot)
    but whose starts decrease or pass the shard's end is named for what is wrong."""
    storage = StreamStorage(tmp_path / "s", FORMAT)
    _write(storage, [4, 6], modes=[1], shard_size=1000)
    manifest_path = tmp_path / "s" / "manifest.json"
    path = tmp_path / "s" / storage.manifest.shard_table.path(0, "starts")
    for starts, message in (([0, 50], "past the shard's 10 tokens"), ([3, 1], "do not start at 0")):
        header = layout.ShardHeader("starts", 8, 2).pack()
        data = header + np.array(starts, "<u8").tobytes()
        path.write_bytes(data)
        import fsspec
        import xxhash
        from storage_helpers import plain_manifest

        doc = plain_manifest(fsspec.filesystem("file"), str(tmp_path / "s"))
        doc["shard_table"]["files"]["starts"]["checksum"] = [layout.checksum(xxhash.xxh3_64(data))]
        manifest_path.write_text(json.dumps(doc))
        (err,) = [err for _, err in StreamStorage(tmp_path / "s", FORMAT).verify()]
        assert isinstance(err, ShardCorruptError) and message in str(err)
        assert "the record-start file is damaged. Rewrite the dataset" in str(err)


def test_record_start_index_is_small(tmp_path) -> None:
    """8 bytes a record: for records of median ~700 uint16 tokens (the benchmark corpus) well
    under 2 % of the stream's bytes."""
    from benchmarks.corpus import document_lengths

    lengths = document_lengths(2_000_000, seed=0)
    storage = StreamStorage(tmp_path / "s", StreamNumpyFormat({"tokens": np.uint16}))
    with storage.writer(shard_size=1 << 20) as w:
        for i in range(0, len(lengths), 256):  # ingestion's batches are about this size
            part = lengths[i : i + 256]
            w.append_batch({"tokens": np.zeros(int(part.sum()), np.uint16)}, lengths=part)
    table = storage.manifest.shard_table
    data, starts = sum(table.files["data"].size), sum(table.files["starts"].size)
    assert sum(table.records) == len(lengths)
    assert starts / data < 0.02, starts / data
