"""#37 item 9: ingestion keeps, per record, the input file and line (byte offset in a part that
starts mid-file; row for Parquet) and the ``--id-field`` value, and ``guideloom trace`` names
them for each row (main kept none: trace named shards and record indexes only)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from guideloom import StatefulDataLoader, trace
from guideloom.cli import app
from guideloom.storage.origins import RecordOrigins
from guideloom.workers.ingest import run_ingest
from guideloom.workers.output import open_storage
from guideloom.workers.tokenizer import load_tokenizer

pytestmark = pytest.mark.ray


def _expected(path, rows_per_line):
    """(file, line, byte offset, id) of every good line of a JSONL file, in order."""
    out, at = [], 0
    for line_no, raw in enumerate(path.read_bytes().splitlines(keepends=True), start=1):
        row = rows_per_line[line_no - 1]
        if row is not None:
            out.append((str(path), line_no, at, str(row["id"])))
        at += len(raw)
    return out


def test_trace_names_the_file_line_and_id_of_every_document(
    ray_local, ingest_config, write_jsonl, doc_rows, tmp_path
):
    rows_a, rows_b = doc_rows(14), doc_rows(9, start=100)
    lines_a = [
        *rows_a[:5],
        '{"text": ',
        *rows_a[5:],
    ]  # line 6 is bad (skipped): later lines keep their numbers
    a, b = write_jsonl("a.jsonl", lines_a), write_jsonl("b.jsonl", rows_b)
    config = ingest_config([a, b], tmp_path / "ds", part_size=700, on_bad_record="skip", id_field="id")
    manifest = run_ingest(config)
    assert manifest.metadata["ingest"]["parts"] >= 3  # parts that start mid-file among them
    storage = open_storage(config, load_tokenizer("bytes"))
    want = _expected(a, [*rows_a[:5], None, *rows_a[5:]]) + _expected(b, rows_b)
    got = RecordOrigins(storage)(range(storage.manifest.total_records))
    assert len(got) == len(want) == 23
    for origin, (file, line, offset, ident) in zip(got, want):
        assert origin is not None and origin["file"] == file and origin["id"] == ident
        # a line number where the part read the file from its start, else the line's byte offset
        assert (origin["line"], origin["offset"]) in ((line, None), (None, offset)), (origin, line, offset)
    assert any(o["line"] is None for o in got) and any(o["line"] is not None for o in got)

    loader = StatefulDataLoader.from_storage(storage, sequence_length=32, batch_size=2)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    rows = list(trace(state, storage, steps=range(0, 3)))
    for row in rows:
        assert row["origins"] == RecordOrigins(storage)(row["records"])
    state_file = tmp_path / "state.json"
    state_file.write_text(json.dumps(state))
    result = CliRunner().invoke(app, ["trace", str(state_file), storage.url, "--steps", "0-0"])
    assert result.exit_code == 0, result.output
    first = rows[0]["origins"][0]
    assert f"from {a} line {first['line']} id={first['id']}" in result.output


def test_parquet_rows_are_kept(ray_local, ingest_config, tmp_path):
    path = tmp_path / "t.parquet"
    texts = [f"row {i} " * (3 + i % 4) for i in range(20)]
    pq.write_table(pa.table({"text": texts, "key": [f"k{i}" for i in range(20)]}), path, row_group_size=5)
    config = ingest_config([path], tmp_path / "ds", id_field="key")
    run_ingest(config)
    storage = open_storage(config, load_tokenizer("bytes"))
    got = RecordOrigins(storage)(range(20))
    assert [(o["row"], o["id"]) for o in got] == [(i + 1, f"k{i}") for i in range(20)]


def test_origins_kept_per_batch_decode_per_record():
    """The builder takes a batch at a time (files in runs, ids on some records only): each
    record's origin decodes as it was given, whatever file, id or missing field it had."""
    from guideloom.storage.origins import OriginsBuilder, decode_origins

    built = OriginsBuilder()
    built.extend(
        ["a.jsonl", "a.jsonl", "b.parquet"],
        [(1, None, None, None), (2, None, None, "x7"), (None, None, 5, 9)],
    )
    built.extend([], [])
    built.extend(["a.jsonl"], [(None, 4096, None, None)])
    built.extend(["b.parquet"], [(None, None, 6, None)])
    assert len(built) == 5
    got = [o.describe() if o else None for o in decode_origins(built.encode(), [0, 1, 2, 3, 4, 5])]
    assert got == [
        "a.jsonl line 1",
        "a.jsonl line 2 id=x7",
        "b.parquet row 5 id=9",
        "a.jsonl byte 4096",
        "b.parquet row 6",
        None,
    ]
    plain = OriginsBuilder()
    plain.extend(["c.txt"] * 3, [(k, None, None, None) for k in (1, 2, 3)])
    assert [o.id for o in decode_origins(plain.encode(), [0, 2]) if o] == [None, None]
