"""One part without Ray: what write_part stores, on every backend, and how it treats bad input."""

from __future__ import annotations

import numpy as np
import pytest

from guideloom import DocumentDataset, StreamDataset
from guideloom.errors import IngestError
from guideloom.workers.output import PART_METADATA_KEY, open_storage
from guideloom.workers.part import part_spec, run_name, write_part
from guideloom.workers.planning import plan_parts
from guideloom.workers.sources import expand_inputs
from guideloom.workers.tokenizer import load_tokenizer


def _plan(config):
    files = expand_inputs(config.inputs, config.input_format, config.input_storage_options)
    return plan_parts(files, part_size=config.part_size, text_per_line=config.text_per_line)


def _expected_bytes_stream(rows):
    out = []
    for r in rows:
        out += list(r["text"].encode()) + [256]
    return out


def test_stream_part_on_every_backend(write_jsonl, doc_rows, ingest_config, dataset_url):
    url, options = dataset_url
    rows = doc_rows(30)
    config = ingest_config([write_jsonl("a.jsonl", rows)], url, storage_options=options)
    plan = _plan(config)
    result = write_part(config, part_spec(plan, 0), "digest")
    assert (result["documents"], result["reused"]) == (30, False)
    storage = open_storage(config, load_tokenizer("bytes"))
    # a part is written under its job's run (the plan digest), which commit names too
    assert storage.part_complete(0, verify="checksum", run=run_name("digest"))
    assert not storage.part_complete(0, verify="checksum")  # another run has no part 0
    storage.commit(num_parts=1, run=run_name("digest"))
    expected = _expected_bytes_stream(rows)
    ds = StreamDataset(storage, sequence_length=len(expected))
    assert ds[0]["tokens"].dtype == np.uint16 and ds[0]["tokens"].tolist() == expected
    # the part's counts and plan digest are in its own completion record (no sidecar file)
    kept = storage.read_part_record(0, run=run_name("digest")).metadata[PART_METADATA_KEY]
    assert kept["plan"] == "digest"


def test_a_valid_part_is_reused_and_a_stale_one_rewritten(write_jsonl, doc_rows, ingest_config, tmp_path):
    config = ingest_config([write_jsonl("a.jsonl", doc_rows(5))], tmp_path / "ds")
    plan = _plan(config)
    write_part(config, part_spec(plan, 0), "d1")
    assert write_part(config, part_spec(plan, 0), "d1")["reused"] is True
    assert write_part(config, part_spec(plan, 0), "d2")["reused"] is False  # another job's part


def test_doc_index_and_no_eos(write_jsonl, doc_rows, ingest_config, tmp_path):
    rows = doc_rows(3)
    config = ingest_config(
        [write_jsonl("a.jsonl", rows)], tmp_path / "ds", doc_index=True, append_eos=False, part_size=10**6
    )
    write_part(config, part_spec(_plan(config), 0), "d")
    storage = open_storage(config, load_tokenizer("bytes"))
    storage.commit(num_parts=1, run=run_name("d"))
    n = sum(len(r["text"].encode()) for r in rows)
    window = StreamDataset(storage, sequence_length=n)[0]
    assert 256 not in window["tokens"].tolist()
    lengths = [len(r["text"].encode()) for r in rows]
    assert window["doc_index"].tolist() == np.repeat([0, 1, 2], lengths).tolist()


@pytest.mark.parametrize("fmt", ["json", "msgpack", "pickle"])
def test_document_layout_keeps_passthrough_fields(
    write_jsonl, doc_rows, ingest_config, tmp_path, hf_tokenizer_json, fmt
):
    rows = doc_rows(4)
    config = ingest_config(
        [write_jsonl("a.jsonl", rows)],
        tmp_path / "ds",
        layout="document",
        format=fmt,
        passthrough=["id"],
        tokenizer=f"hf:{hf_tokenizer_json}",
    )
    write_part(config, part_spec(_plan(config), 0), "d")
    tok = load_tokenizer(config.tokenizer)
    storage = open_storage(config, tok)
    storage.commit(num_parts=1, run=run_name("d"))
    docs = DocumentDataset(storage)
    assert len(docs) == 4
    assert docs[2]["id"] == 2 and tok.decode(docs[2]["tokens"]) == rows[2]["text"]


def test_bad_record_fails_naming_file_and_line(write_jsonl, doc_rows, ingest_config, tmp_path):
    lines = [*doc_rows(20), '{"text": 1}']
    path = write_jsonl("bad.jsonl", lines)
    config = ingest_config([path], tmp_path / "ds", part_size=300)
    plan = _plan(config)
    assert len(plan.parts) > 2
    with pytest.raises(IngestError, match=rf"{path} line 21: text field 'text' is int.*skip"):
        for k in range(len(plan.parts)):
            write_part(config, part_spec(plan, k), "d")
    storage = open_storage(config, load_tokenizer("bytes"))
    assert not storage.part_complete(len(plan.parts) - 1, run=run_name("d"))


def test_skip_counts_bad_and_empty_records(write_jsonl, ingest_config, tmp_path):
    path = write_jsonl("bad.jsonl", ['{"text": "a"}', "{oops", '{"x": 1}', '{"text": ""}', ""])
    config = ingest_config([path], tmp_path / "ds", on_bad_record="skip")
    result = write_part(config, part_spec(_plan(config), 0), "d")
    assert result["documents"] == 1
    assert result["bad_records"] == {str(path): {"malformed_json": 1, "missing_field": 1}}
    assert result["empty_documents"] == {str(path): 2}


def test_a_part_whose_shard_was_altered_is_rewritten(write_jsonl, doc_rows, ingest_config, tmp_path):
    # reuse needs the same plan digest in the part's own record AND shards that pass the checksum
    config = ingest_config([write_jsonl("a.jsonl", doc_rows(5))], tmp_path / "ds")
    plan = _plan(config)
    write_part(config, part_spec(plan, 0), "d1")
    storage = open_storage(config, load_tokenizer("bytes"))
    (shard,) = storage.read_part_record(0, run=run_name("d1")).shards
    data = tmp_path / "ds" / shard.files["data"].path
    raw = bytearray(data.read_bytes())
    raw[-1] ^= 0xFF  # same size, other bytes
    data.write_bytes(bytes(raw))
    assert write_part(config, part_spec(plan, 0), "d1")["reused"] is False
    assert write_part(config, part_spec(plan, 0), "d1")["reused"] is True


def test_each_document_is_a_record_with_its_start(
    write_jsonl, doc_rows, ingest_config, dataset_url, monkeypatch
):
    """Ingestion appends every document as its own record: the stream's record starts are the
    documents' starts (across shards, on every backend), and the token bytes are the documents
    joined, as before."""
    import guideloom.workers.part as part_module

    monkeypatch.setattr(part_module, "BATCH_DOCS", 3)  # several batches, several shards
    url, options = dataset_url
    rows = doc_rows(40)
    config = ingest_config([write_jsonl("a.jsonl", rows)], url, storage_options=options, shard_size=300)
    write_part(config, part_spec(_plan(config), 0), "d")
    storage = open_storage(config, load_tokenizer("bytes"))
    storage.commit(num_parts=1, run=run_name("d"))
    table = storage.manifest.shard_table
    assert len(table) > 2 and sum(table.records) == 40 and storage.manifest.version == 3
    lengths = [len(r["text"].encode()) + 1 for r in rows]  # + the end-of-document token
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    expected = _expected_bytes_stream(rows)
    ds = StreamDataset(storage, sequence_length=64)
    assert ds.has_record_starts
    positions, counts = ds.record_starts_batch(range(len(ds)))
    bounds = np.concatenate([[0], np.cumsum(counts)])
    for w in range(len(ds)):
        inside = starts[(starts >= w * 64) & (starts < (w + 1) * 64)] - w * 64
        assert positions[bounds[w] : bounds[w + 1]].tolist() == inside.tolist()
        # every start but the first follows an end-of-document token
        assert all(expected[w * 64 + p - 1] == 256 for p in inside.tolist() if w * 64 + p > 0)
    assert StreamDataset(storage, len(expected))[0]["tokens"].tolist() == expected
