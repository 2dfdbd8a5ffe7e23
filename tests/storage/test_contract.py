"""What every storage backend must do: run for local disk, memory:// and a real S3 endpoint.

The `dataset_url` fixture gives a fresh location on each backend. Tampering with files (to
simulate damage) goes through raw fsspec, never through guideloom.
"""

from __future__ import annotations

import datetime
import json

import fsspec
import numpy as np
import pytest
from storage_helpers import plain_manifest, tokens_format

from guideloom import (
    DocumentDataset,
    DocumentJsonFormat,
    DocumentMsgpackFormat,
    DocumentPickleFormat,
    DocumentStorage,
    StreamDataset,
    StreamNumpyFormat,
    StreamStorage,
    StreamWithMetaDataset,
    StreamWithMetaStorage,
)
from guideloom.errors import (
    DatasetExistsError,
    DatasetNotFoundError,
    IncompletePartsError,
    ManifestError,
    RecordError,
    SchemaMismatchError,
    ShardCorruptError,
    ShardNotFoundError,
    SpanError,
)
from guideloom.storage.writer import Writer


def raw_fs(url: str, options: dict):
    fs, root = fsspec.core.url_to_fs(url, **options, skip_instance_cache=True)
    return fs, root.rstrip("/")


def data_files(url: str, options: dict) -> list[str]:
    """Full paths of each shard's data file, read from manifest.json with raw fsspec."""
    fs, root = raw_fs(url, options)
    table = plain_manifest(fs, root)["shard_table"]
    kind = table["files"]["data"]["kind"]
    return [
        f"{root}/{table['prefix'][p]}/part-{part:05d}/shard-{index:05d}.{kind}"
        for p, part, index in zip(table["prefix_id"], table["part"], table["index"])
    ]


def write_stream(url, options, records, **kw):
    storage = StreamStorage(url, tokens_format(), storage_options=options)
    with storage.writer(**kw) as w:
        for r in records:
            w.append(r)
    return storage


def seed_records():
    return [
        {"tokens": np.array([10, 11, 12]), "loss_mask": np.array([1, 1, 1])},
        {"tokens": np.array([13, 14, 15]), "loss_mask": np.array([1, 1, 0])},
    ]


def test_seed_example(dataset_url):
    url, options = dataset_url
    write_stream(url, options, seed_records())
    storage = StreamStorage(
        url, StreamNumpyFormat({"tokens": np.uint32, "loss_mask": np.uint8}), storage_options=options
    )
    windows = StreamDataset(storage, sequence_length=4)
    assert len(windows) == 1
    assert windows[0]["tokens"].tolist() == [10, 11, 12, 13]
    assert windows[0]["loss_mask"].tolist() == [1, 1, 1, 1]
    assert windows[-1]["tokens"].tolist() == [10, 11, 12, 13]
    with pytest.raises(IndexError):
        windows[1]
    with pytest.raises(IndexError):
        windows[-2]
    assert len(StreamDataset(storage, sequence_length=3)) == 2
    assert StreamDataset(storage, sequence_length=3)[1]["tokens"].tolist() == [13, 14, 15]


def test_stream_windows_cross_records_and_shards(dataset_url):
    url, options = dataset_url
    rng = np.random.default_rng(0)
    records = [
        {"tokens": rng.integers(0, 2**32, n), "loss_mask": rng.integers(0, 2, n)}
        for n in rng.integers(1, 40, 60)
    ]
    storage = write_stream(url, options, records, shard_size=64)
    assert len(storage.manifest.shards) > 5
    joined = np.concatenate([r["tokens"] for r in records])
    mask = np.concatenate([r["loss_mask"] for r in records])
    ds = StreamDataset(storage, sequence_length=7)
    assert len(ds) == len(joined) // 7
    idx = [0, len(ds) - 1, 3, 3, 17]
    batch = ds.__getitems__(idx)
    for i, sample in zip(idx, batch):
        assert sample["tokens"].tolist() == joined[i * 7 : (i + 1) * 7].tolist()
        assert sample["loss_mask"].tolist() == mask[i * 7 : (i + 1) * 7].tolist()
    windows = ds.read_windows(idx)
    assert windows["tokens"].shape == (5, 7) and windows["tokens"].dtype == np.uint32
    assert ds.__getitems__([]) == []
    # a batch of plain in-range ints is taken as it is; anything else is checked one by one
    same = [ds.__getitems__(b)[0]["tokens"].tolist() for b in ([-1, 0], [len(ds) - 1], [np.int64(-1)])]
    assert same[0] == same[1] == same[2] == joined[(len(ds) - 1) * 7 : len(ds) * 7].tolist()
    assert ds.__getitems__([True])[0]["tokens"].tolist() == joined[7:14].tolist()
    for bad in ([0, len(ds)], [-len(ds) - 1], [1.0]):
        with pytest.raises((IndexError, TypeError)):
            ds.__getitems__(bad)


@pytest.mark.parametrize("fmt", [DocumentPickleFormat(), DocumentJsonFormat(), DocumentMsgpackFormat()])
def test_documents_round_trip(dataset_url, fmt):
    url, options = dataset_url
    docs = [{"id": i, "text": "word " * (i % 13), "tags": ["a"] * (i % 3)} for i in range(50)]
    storage = DocumentStorage(url, fmt, storage_options=options)
    with storage.writer(shard_size=200) as w:
        for d in docs:
            w.append(d)
    storage = DocumentStorage(url, type(fmt)(), storage_options=options)
    ds = DocumentDataset(storage)
    assert len(ds) == 50 and len(storage.manifest.shards) > 3
    assert ds[0] == docs[0] and ds[-1] == docs[-1]
    assert ds.__getitems__([49, 0, 17, 17]) == [docs[49], docs[0], docs[17], docs[17]]
    assert list(ds) == docs


def test_stream_with_meta_round_trip(dataset_url, concepts_format):
    url, options = dataset_url
    storage = StreamWithMetaStorage(url, concepts_format, storage_options=options)
    with storage.writer(shard_size=10) as w:
        w.append({"tokens": np.arange(6)}, spans=[(0, 3, ["cat"]), (3, 6, ["dog", "pet"])])
        w.append({"tokens": np.arange(6, 10)}, spans=[(1, 3, ["fish"])])
        w.append({"tokens": np.arange(10, 14)})
    ds = StreamWithMetaDataset(storage, sequence_length=5)
    assert len(ds) == 2
    first, second = ds.__getitems__([0, 1])
    assert first["tokens"].tolist() == [0, 1, 2, 3, 4]
    assert first["spans"] == [(0, 3, ["cat"]), (3, 5, ["dog", "pet"])]
    assert second["tokens"].tolist() == [5, 6, 7, 8, 9]
    assert second["spans"] == [(0, 1, ["dog", "pet"]), (2, 4, ["fish"])]
    assert storage.manifest.total_spans == 3


def test_parallel_parts_commit_in_part_order(dataset_url):
    url, options = dataset_url
    storage = StreamStorage(url, tokens_format(), storage_options=options)
    for k in (2, 0, 1):  # any order
        with storage.writer(part=k, shard_size=16) as w:
            for j in range(3):
                w.append({"tokens": np.full(5, 100 * k + j), "loss_mask": np.ones(5)})
    assert not storage.exists()
    manifest = storage.commit(num_parts=3, metadata={"source": "test"})
    assert manifest.num_parts == 3 and manifest.metadata == {"source": "test"}
    reopened = StreamStorage(url, tokens_format(), storage_options=options)
    ds = StreamDataset(reopened, sequence_length=5)
    firsts = [int(ds[i]["tokens"][0]) for i in range(len(ds))]
    assert firsts == [0, 1, 2, 100, 101, 102, 200, 201, 202]


def test_retried_part_replaces_its_own_output(dataset_url):
    url, options = dataset_url
    storage = StreamStorage(url, tokens_format(), storage_options=options)
    with storage.writer(part=0, shard_size=8) as w:  # first attempt: many shards
        for _ in range(6):
            w.append({"tokens": np.arange(4), "loss_mask": np.ones(4)})
    with storage.writer(part=0, shard_size=8) as w:  # retry with other content: fewer shards
        w.append({"tokens": np.arange(4), "loss_mask": np.ones(4)})
    manifest = storage.commit(num_parts=1)
    assert manifest.total_tokens == 4 and len(manifest.shards) == 1
    fs, root = raw_fs(url, options)
    files = [p for p in fs.find(root) if "/shards/" in p]
    assert sorted(f.rsplit(".", 1)[-1] for f in files) == ["starts", "tokens"]  # one shard's files:
    # the first attempt's extra shards are gone


def test_commit_names_incomplete_parts(dataset_url):
    url, options = dataset_url
    storage = StreamStorage(url, tokens_format(), storage_options=options)
    with storage.writer(part=0) as w:
        w.append({"tokens": [1], "loss_mask": [1]})
    with pytest.raises(RuntimeError):
        with storage.writer(part=2) as w:
            w.append({"tokens": [1], "loss_mask": [1]})
            raise RuntimeError("worker died")
    with pytest.raises(IncompletePartsError, match=r"2 of 3 parts.*part 1: missing.*part 2: missing"):
        storage.commit(num_parts=3)
    assert not storage.exists()
    assert storage.part_complete(0) and storage.part_complete(0, verify="checksum")
    assert not storage.part_complete(1)


def test_part_with_damaged_shard_is_incomplete(dataset_url):
    url, options = dataset_url
    storage = StreamStorage(url, tokens_format(), storage_options=options)
    with storage.writer(part=0) as w:
        w.append({"tokens": np.arange(100), "loss_mask": np.ones(100)})
    fs, root = raw_fs(url, options)
    shard = f"{root}/{storage.read_part_record(0).shards[0].files['data'].path}"
    data = fs.cat_file(shard)
    fs.pipe_file(shard, data[:-1] + bytes([data[-1] ^ 1]))  # same size, other bytes
    assert storage.part_complete(0, verify="size")
    assert not storage.part_complete(0, verify="checksum")
    fs.pipe_file(shard, data[:-5])
    assert not storage.part_complete(0, verify="size")
    with pytest.raises(IncompletePartsError, match="has 5.. bytes but the manifest records"):
        storage.commit(num_parts=1)


def test_exception_inside_writer_leaves_no_dataset(dataset_url):
    url, options = dataset_url
    storage = StreamStorage(url, tokens_format(), storage_options=options)
    with pytest.raises(ValueError, match="tokenizer failed"):
        with storage.writer(shard_size=8) as w:
            for _ in range(5):
                w.append({"tokens": np.arange(4), "loss_mask": np.ones(4)})
            raise ValueError("tokenizer failed")
    assert not storage.exists()
    with pytest.raises(DatasetNotFoundError, match="manifest.json is missing"):
        StreamDataset(storage, sequence_length=2)


def test_existing_dataset_is_refused_unless_overwrite(dataset_url):
    url, options = dataset_url
    write_stream(url, options, seed_records())
    storage = StreamStorage(url, tokens_format(), storage_options=options)
    with pytest.raises(DatasetExistsError, match="overwrite=True"):
        storage.writer()
    with pytest.raises(DatasetExistsError):
        storage.writer(part=3)
    assert StreamDataset(storage, 4)[0]["tokens"].tolist() == [10, 11, 12, 13]  # untouched
    with storage.writer(overwrite=True) as w:
        w.append({"tokens": [7, 8], "loss_mask": [0, 0]})
    assert StreamDataset(storage, 2)[0]["tokens"].tolist() == [7, 8]
    assert storage.manifest.total_tokens == 2


def test_bad_records_name_the_record_and_keep_committed_data(dataset_url):
    url, options = dataset_url
    write_stream(url, options, seed_records())
    before = sorted(raw_fs(url, options)[0].find(raw_fs(url, options)[1]))
    storage = StreamStorage(url, tokens_format(), storage_options=options)
    with pytest.raises(RecordError, match=r"part 0 record 1: field 'tokens': value -3 does not fit uint32"):
        with storage.writer(overwrite=True, shard_size=4) as w:
            w.append({"tokens": [1, 2, 3], "loss_mask": [1, 1, 1]})  # a full shard is written
            w.append({"tokens": [-3], "loss_mask": [1]})
    # The failed overwrite left the committed dataset exactly as it was.
    fs, root = raw_fs(url, options)
    assert sorted(fs.find(root)) == before
    assert StreamDataset(storage, 4)[0]["tokens"].tolist() == [10, 11, 12, 13]
    small = StreamStorage(url + "-u16", StreamNumpyFormat({"tokens": np.uint16}), storage_options=options)
    with pytest.raises(RecordError, match="value 70000 does not fit uint16"):
        with small.writer() as w:
            w.append({"tokens": np.array([70_000])})
    assert not small.exists()


def test_overwrite_keeps_the_old_files_until_they_expire(dataset_url):
    """An overwrite keeps the replaced snapshot's files (rollback needs them); expire with
    keep_last=1 then removes them, leaving only the current snapshot's one shard."""
    url, options = dataset_url
    write_stream(url, options, seed_records() * 5, shard_size=8)
    storage = write_stream(url, options, seed_records()[:1], overwrite=True)
    fs, root = raw_fs(url, options)
    tokens_files = [p for p in fs.find(root) if "/shards/" in p and p.endswith(".tokens")]
    assert len(tokens_files) == 10 + 1  # each shard also has its record starts (.starts)
    storage.expire(keep_last=1, grace=datetime.timedelta(0))
    shard_files = [p for p in fs.find(root) if "/shards/" in p]
    assert sorted(f.rsplit(".", 1)[-1] for f in shard_files) == ["starts", "tokens"]  # one shard


def test_bad_spans_are_refused(dataset_url, concepts_format):
    url, options = dataset_url
    storage = StreamWithMetaStorage(url, concepts_format, storage_options=options)
    with pytest.raises(SpanError, match="record 0: span 1 .* overlaps"):
        with storage.writer() as w:
            w.append({"tokens": np.arange(5)}, spans=[(0, 3, ["a"]), (2, 4, ["b"])])
    with pytest.raises(SpanError, match=r"span 0 \[2, 9\) must satisfy"):
        with storage.writer() as w:
            w.append({"tokens": np.arange(5)}, spans=[(2, 9, ["a"])])
    assert not storage.exists()


@pytest.mark.parametrize(
    "storage_cls, fmt, match",
    [
        (
            DocumentStorage,
            DocumentPickleFormat(),
            "records a StreamStorage, but it was opened as DocumentStorage",
        ),
        (StreamStorage, StreamNumpyFormat({"tokens": np.uint16, "loss_mask": np.uint8}), "config="),
        (StreamStorage, StreamNumpyFormat({"tokens": np.uint32}), "written with format StreamNumpyFormat"),
    ],
)
def test_reopen_with_another_schema_is_refused(dataset_url, storage_cls, fmt, match):
    url, options = dataset_url
    write_stream(url, options, seed_records())
    with pytest.raises(SchemaMismatchError, match=match):
        storage_cls(url, fmt, storage_options=options)


def test_reopen_meta_with_another_format_class(dataset_url, concepts_format):
    url, options = dataset_url
    write_stream(url, options, seed_records())
    with pytest.raises(SchemaMismatchError, match="StreamStorage"):
        StreamWithMetaStorage(url, concepts_format, storage_options=options)
    with pytest.raises(TypeError, match="DocumentStorage \\+ DocumentStorageFormat"):
        StreamStorage(url, DocumentPickleFormat(), storage_options=options)


def test_truncated_shard_is_named_on_read(dataset_url):
    url, options = dataset_url
    storage = write_stream(url, options, [{"tokens": np.arange(1000), "loss_mask": np.ones(1000)}])
    fs, _ = raw_fs(url, options)
    shard = data_files(url, options)[0]
    fs.pipe_file(shard, fs.cat_file(shard)[:-50])
    ds = StreamDataset(StreamStorage(url, tokens_format(), storage_options=options), sequence_length=100)
    with pytest.raises(ShardCorruptError, match=r"part 0 shard 0 .*shard-00000.tokens"):
        ds[len(ds) - 1]
    assert storage.manifest.total_tokens == 1000


def test_missing_shard_is_named_on_read(dataset_url):
    url, options = dataset_url
    write_stream(url, options, [{"tokens": np.arange(10), "loss_mask": np.ones(10)}] * 3, shard_size=50)
    fs, _ = raw_fs(url, options)
    fs.rm(data_files(url, options)[1])
    ds = StreamDataset(StreamStorage(url, tokens_format(), storage_options=options), sequence_length=10)
    assert ds[0]["tokens"].tolist() == list(range(10))
    with pytest.raises(ShardNotFoundError, match="shard-00001.tokens"):
        ds[1]


def test_manifest_of_unknown_version(dataset_url):
    url, options = dataset_url
    write_stream(url, options, seed_records())
    fs, root = raw_fs(url, options)
    manifest = json.loads(fs.cat_file(f"{root}/manifest.json"))
    manifest["version"] = 99
    fs.pipe_file(f"{root}/manifest.json", json.dumps(manifest).encode())
    with pytest.raises(ManifestError, match="version 99; this GuideLoom reads versions 1, 2, 3. Upgrade"):
        StreamStorage(url, tokens_format(), storage_options=options)
    fs.pipe_file(f"{root}/manifest.json", b"{not json")
    with pytest.raises(ManifestError, match="manifest.json is not valid JSON"):
        StreamStorage(url, tokens_format(), storage_options=options)


def test_url_with_no_dataset(dataset_url):
    url, options = dataset_url
    storage = StreamStorage(url, tokens_format(), storage_options=options)
    assert not storage.exists()
    with pytest.raises(DatasetNotFoundError, match="no dataset at"):
        _ = storage.manifest
    with pytest.raises(FileNotFoundError):  # keeps the built-in meaning
        StreamDataset(storage, 4)


def test_verify_finds_damage(dataset_url):
    url, options = dataset_url
    storage = write_stream(
        url, options, [{"tokens": np.arange(50), "loss_mask": np.ones(50)}] * 4, shard_size=300
    )
    assert all(err is None for _, err in storage.verify())
    fs, _ = raw_fs(url, options)
    shard = data_files(url, options)[1]
    data = bytearray(fs.cat_file(shard))
    data[40] ^= 0xFF
    fs.pipe_file(shard, bytes(data))
    bad = [(s.index, str(e)) for s, e in storage.verify() if e is not None]
    assert len(bad) == 1 and bad[0][0] == 1 and "checksum" in bad[0][1]


def test_fingerprint_ignores_url(tmp_path):
    a = write_stream(str(tmp_path / "a"), {}, seed_records())
    b = write_stream(f"memory://fp-{tmp_path.name}", {}, seed_records())
    c = write_stream(str(tmp_path / "c"), {}, seed_records()[:1])
    assert a.manifest.fingerprint == b.manifest.fingerprint
    assert a.manifest.fingerprint != c.manifest.fingerprint


def test_format_encode_failures_name_the_record(dataset_url, concepts_format):
    url, options = dataset_url
    docs = DocumentStorage(url, DocumentJsonFormat(), storage_options=options)
    with pytest.raises(RecordError, match=r"part 0 record 1: DocumentJsonFormat.encode failed: .*tolist"):
        with docs.writer() as w:
            w.append({"ok": 1})
            w.append({"ids": np.arange(3)})
    assert not docs.exists()


def test_a_failed_annotation_leaves_the_shard_consistent(dataset_url, concepts_format):
    url, options = dataset_url
    storage = StreamWithMetaStorage(url, concepts_format, storage_options=options)
    with storage.writer() as w:
        w.append({"tokens": np.arange(4)}, spans=[(0, 2, ["a"])])
        with pytest.raises(RecordError, match=r"record 1 span 1: ConceptsFormat.encode_meta failed"):
            w.append({"tokens": np.arange(4)}, spans=[(0, 2, ["b"]), (2, 4, {object()})])
        w.append({"tokens": np.arange(4, 8)}, spans=[(1, 3, ["c"])])  # the writer goes on
    ds = StreamWithMetaDataset(storage, sequence_length=8)
    assert ds[0]["tokens"].tolist() == list(range(8))
    assert ds[0]["spans"] == [(0, 2, ["a"]), (5, 7, ["c"])]


def test_verify_names_a_file_that_is_not_a_shard(dataset_url):
    url, options = dataset_url
    storage = write_stream(url, options, seed_records())
    fs, _ = raw_fs(url, options)
    shard = data_files(url, options)[0]
    data = fs.cat_file(shard)
    fs.pipe_file(shard, b"NOTASHARD" + data[9:])  # same size, header destroyed
    [(_, err)] = list(storage.verify())
    assert isinstance(err, ShardCorruptError) and "not a GuideLoom shard file (bad magic" in str(err)


def test_a_writer_hands_its_finished_part_to_its_completion(tmp_path):
    """The writer knows nothing of commits: what its finished part becomes (a part record, a
    manifest) is the completion it is given. One that only keeps the record publishes nothing."""
    storage = StreamStorage(str(tmp_path / "ds"), tokens_format())
    finished = []

    def keep(record):
        finished.append(record)
        return record

    writer = Writer(
        storage, 4, shard_size=16, metadata={"k": 1}, shard_prefix="shards/mine", on_complete=keep
    )
    with writer as w:
        for j in range(3):
            w.append({"tokens": np.full(3, j), "loss_mask": np.ones(3)})
    (record,) = finished
    assert record.part == 4 and record.metadata == {"k": 1} and len(record.shards) == 2
    assert record.shards[1].files["data"].path == "shards/mine/part-00004/shard-00001.tokens"
    assert (tmp_path / "ds" / record.shards[1].files["data"].path).is_file()
    assert not storage.exists() and not (tmp_path / "ds" / "parts").exists()
    # The storage's own completions: a part writer's record keeps its metadata, a single
    # writer's goes to the manifest.
    with storage.writer(part=0, metadata={"m": 2}) as w:
        w.append({"tokens": [1], "loss_mask": [1]})
    assert storage.read_part_record(0).metadata == {"m": 2}
    single = storage.writer(metadata={"m": 3})
    single.append({"tokens": [1], "loss_mask": [1]})
    assert single.close().metadata == {} and storage.manifest.metadata == {"m": 3}
