"""Finding inputs and reading records: byte-range ownership, compression, Parquet, bad records."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from guideloom.errors import IngestError
from guideloom.workers.sources import Bad, Doc, Segment, expand_inputs, line_number, read_segment


def _read(f, seg, **kw):
    kw = {"text_field": "text", "text_per_line": False, "passthrough": [], "storage_options": {}, **kw}
    return list(read_segment(f, seg, **kw))


def test_every_line_is_read_once_whatever_the_split_points(write_jsonl, doc_rows):
    rows = doc_rows(40)
    path = write_jsonl("a.jsonl", rows)
    (f,) = expand_inputs([str(path)], "auto", {})
    size = f.size
    for step in (1, 7, 50, 97, 333, size):
        texts = []
        for start in range(0, size, step):
            texts += [d.text for d in _read(f, Segment(0, start, min(start + step, size)))]
        assert texts == [r["text"] for r in rows], step


@pytest.mark.parametrize("compression, name", [("gzip", "a.jsonl.gz"), ("zstd", "a.jsonl.zst")])
def test_compressed_jsonl_is_read_whole(write_jsonl, doc_rows, compression, name):
    rows = doc_rows(5)
    path = write_jsonl(name, rows, compression=compression)
    (f,) = expand_inputs([str(path)], "auto", {})
    assert f.compression == compression
    docs = _read(f, Segment(0, 0, f.size, whole=True), passthrough=["id"])
    assert docs == [Doc(r["text"], {"id": r["id"]}) for r in rows]


def test_parquet_row_groups_and_text_files(tmp_path: Path):
    table = pa.table({"text": [f"row {i}" for i in range(10)], "id": list(range(10))})
    pq.write_table(table, tmp_path / "a.parquet", row_group_size=3)
    (tmp_path / "b.txt").write_text("line one\nline two\n")
    f, t = expand_inputs([str(tmp_path / "*")], "auto", {})
    assert (f.kind, t.kind) == ("parquet", "text")
    assert [d.text for d in _read(f, Segment(0, 1, 3))] == [f"row {i}" for i in range(3, 9)]
    assert _read(t, Segment(1, 0, t.size, whole=True)) == [Doc("line one\nline two\n")]
    lines = _read(t, Segment(1, 0, t.size), text_per_line=True)
    assert lines == [Doc("line one"), Doc("line two")]


def test_bad_records_say_what_and_where(write_jsonl):
    path = write_jsonl(
        "bad.jsonl",
        [
            '{"text": "ok"}',
            '{"text": ',
            '{"body": "x"}',
            '{"text": 5}',
            "[1]",
            b'{"text": "\xff"}',
            "",
            '{"text": ""}',
        ],
    )
    (f,) = expand_inputs([str(path)], "auto", {})
    items = _read(f, Segment(0, 0, f.size))
    assert items[0] == Doc("ok")
    bad = items[1:6]
    assert all(isinstance(b, Bad) for b in bad)
    assert [b.reason for b in bad] == [
        "malformed_json",
        "missing_field",
        "not_string",
        "not_object",
        "invalid_utf8",
    ]
    assert [b.line for b in bad] == [2, 3, 4, 5, 6]
    assert "'text'" in bad[1].detail and "body" in bad[1].detail and "--text-field" in bad[1].detail
    assert "int" in bad[2].detail
    assert items[6:] == [Doc(""), Doc("")]  # blank line and empty text: empty documents


def test_a_control_character_in_a_string_is_named_once_with_its_column(write_jsonl):
    path = write_jsonl("ctl.jsonl", ['{"text": "a\tb"}'])  # a raw tab inside the string
    (f,) = expand_inputs([str(path)], "auto", {})
    (bad,) = _read(f, Segment(0, 0, f.size))
    assert bad.detail == "malformed JSON: Invalid control character at column 12"


def test_a_truncated_line_names_its_real_column(write_jsonl):
    """#37 (5): the column of a line cut short is where the line ends (main said column 1: the
    decoder counted from the newline the line still held)."""
    line = '{"id": 7, "text": "' + "x" * 56 + '"'  # 76 characters, the closing brace missing
    assert len(line) == 76
    path = write_jsonl("cut.jsonl", [line, '{"text": "a" "b"}'])
    (f,) = expand_inputs([str(path)], "auto", {})
    cut, inner = _read(f, Segment(0, 0, f.size))
    assert cut.detail == "malformed JSON: Expecting ',' delimiter at column 77 (the end of the line)"
    assert inner.detail == "malformed JSON: Expecting ',' delimiter at column 14"


def test_line_numbers_of_a_segment_that_starts_mid_file(write_jsonl, doc_rows):
    path = write_jsonl("m.jsonl", [json.dumps(r) for r in doc_rows(10)] + ['{"text": 1}'])
    (f,) = expand_inputs([str(path)], "auto", {})
    (bad,) = [b for b in _read(f, Segment(0, f.size // 2, f.size)) if isinstance(b, Bad)]
    assert bad.line is None
    assert line_number(f, bad.offset, {}) == 11


def test_expand_inputs_errors(tmp_path: Path):
    with pytest.raises(IngestError, match=r"glob .*nothing\*\.jsonl matches no file"):
        expand_inputs([str(tmp_path / "nothing*.jsonl")], "auto", {})
    with pytest.raises(IngestError, match=r"missing\.jsonl does not exist"):
        expand_inputs([str(tmp_path / "missing.jsonl")], "auto", {})
    (tmp_path / "data.bin").write_bytes(b"x")
    with pytest.raises(IngestError, match=r"data\.bin: cannot tell its format.*--input-format"):
        expand_inputs([str(tmp_path / "data.bin")], "auto", {})


def test_expand_inputs_sorts_and_dedups(tmp_path: Path):
    for name in ("b.jsonl", "a.jsonl", "c.txt"):
        (tmp_path / name).write_text("")
    files = expand_inputs([str(tmp_path / "*.jsonl"), str(tmp_path)], "auto", {})
    assert [Path(f.url).name for f in files] == ["a.jsonl", "b.jsonl", "c.txt"]


@pytest.mark.s3
def test_missing_bucket_is_a_clear_error(s3_options):
    with pytest.raises(IngestError, match=r"s3://no-such-bucket-gl/\*\.jsonl"):
        expand_inputs(["s3://no-such-bucket-gl/*.jsonl"], "auto", s3_options)
