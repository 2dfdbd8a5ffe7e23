"""Fields a job reads that its inputs lack: found on the driver from the first file of each kind
(a Parquet schema, a JSON Lines file's first record) before Ray starts, with a message that names
the file, the field, the fields the file has and the option to change; and passthrough fields
that some records lack, given a value with ``--passthrough-default``."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import ray
from typer.testing import CliRunner

from guideloom import DocumentDataset, DocumentJsonFormat, DocumentStorage
from guideloom.errors import IngestError
from guideloom.workers import ingest_dataset


def _parquet(path, **columns):
    pq.write_table(pa.table(columns), path)
    return path


def test_a_parquet_text_field_it_lacks_is_named_before_ray_starts_and_the_fix_runs(ray_local, tmp_path):
    src = _parquet(tmp_path / "in.parquet", id=[1, 2, 3], body=["one", "two", "three"])
    if ray.is_initialized():
        ray.shutdown()
    with pytest.raises(IngestError) as err:
        ingest_dataset([str(src)], tmp_path / "out", tokenizer="bytes")
    message = str(err.value)
    assert message == (
        f"input {src}: no text field 'text' in its columns: id (int64), body (str); "
        "name the field that holds it: --text-field body"
    )
    assert "--on-bad-record" not in message  # skipping would drop every row
    assert not ray.is_initialized() and not (tmp_path / "out").exists()  # nothing started
    result = ingest_dataset([str(src)], tmp_path / "out", tokenizer="bytes", text_field="body")  # the fix
    assert result.documents == 3


def test_jsonl_first_record_messages_and_meta_fields(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"id": 1, "conv": [{"role": "user", "content": "hi"}]}) + "\n")
    with pytest.raises(IngestError, match=r"no text field 'text' in its first record: id \(int\), conv \(list\)"):
        ingest_dataset([str(src)], tmp_path / "a")
    with pytest.raises(IngestError) as err:
        ingest_dataset([str(src)], tmp_path / "b", input_format="chat", chat_template="chatml")
    assert str(err.value).endswith(
        "no messages field 'messages' in its first record: id (int), conv (list); "
        "name the field that holds it: --messages-field conv"
    )
    with pytest.raises(IngestError, match=r"no meta field 'lang' .*; drop it from --meta-field"):
        ingest_dataset([str(src)], tmp_path / "c", text_field="id", layout="stream-with-meta", meta_fields=["lang"])


@pytest.mark.ray
def test_with_skip_a_jsonl_file_is_not_judged_by_its_first_record(ray_local, tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"body": "no text here"}\n{"text": "one"}\n{"text": "two"}\n')
    with pytest.raises(IngestError, match="no text field 'text' in its first record"):
        ingest_dataset([str(src)], tmp_path / "fail")
    result = ingest_dataset([str(src)], tmp_path / "ok", on_bad_record="skip")
    assert result.documents == 2 and result.bad_records == {str(src): {"missing_field": 1}}


@pytest.mark.ray
def test_a_parquet_file_without_the_text_column_lists_its_fields_in_the_bad_record(ray_local, tmp_path):
    good = _parquet(tmp_path / "a.parquet", text=["x", "y"])
    bad = _parquet(tmp_path / "b.parquet", id=[1], body=["z"])
    with pytest.raises(IngestError) as err:
        ingest_dataset([str(good), str(bad)], tmp_path / "out")
    assert f"{bad} row 1: no text field 'text' (fields: body, id)" in str(err.value)


@pytest.mark.ray
def test_passthrough_default_for_records_that_lack_the_field(ray_local, tmp_path):
    from guideloom.cli import app

    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text('{"text": "one", "lang": "en", "score": 3}\n')
    b.write_text('{"text": "two", "score": 1}\n{"text": "three", "lang": "de", "score": 2}\n')
    base = ["ingest", str(a), str(b), "--layout", "document", "--passthrough", "lang", "-q"]
    run = CliRunner().invoke(app, [*base, "-o", str(tmp_path / "fail")])
    assert run.exit_code != 0
    assert f"{b} line 1: no passthrough field 'lang' (fields: score, text)" in run.output
    assert "--passthrough-default lang=VALUE, or drop it from --passthrough" in run.output
    out = tmp_path / "ok"
    args = [*base, "--passthrough", "score", "--passthrough-default", "lang=unknown", "--passthrough-default", "score=0"]
    run = CliRunner().invoke(app, [*args, "-o", str(out)])
    assert run.exit_code == 0, run.output
    docs = DocumentDataset(DocumentStorage(out, DocumentJsonFormat()))
    assert [(d["lang"], d["score"]) for d in (docs[i] for i in range(len(docs)))] == [
        ("en", 3), ("unknown", 1), ("de", 2)
    ]  # fmt: skip
    # A default for a field that is not kept is refused, with the fix.
    run = CliRunner().invoke(app, [*base[:-3], "--passthrough-default", "lang=x", "-o", str(tmp_path / "n"), "-q"])
    assert run.exit_code != 0 and "add --passthrough lang" in run.output
    run = CliRunner().invoke(app, [*base, "--passthrough-default", "lang", "-o", str(tmp_path / "m")])
    assert run.exit_code != 0 and "write NAME=VALUE, e.g. --passthrough-default lang=unknown" in run.output
