"""Exact deduplication (`dedup="exact"`) on the session's local Ray: the first occurrence of each
text is kept, within a file, across files and across parts, with the same shards on 1 and 2
workers; appends drop what the dataset already holds, also after a rollback and an expiry; a
dataset without an index, or with a damaged one, is refused with a fix that works as written.
(The two-node case is in test_cluster.py, beside the cluster it shares.)"""

from __future__ import annotations

import datetime as dt
import re

import pytest
from typer.testing import CliRunner

from guideloom import StreamDataset, StreamNumpyFormat, StreamStorage
from guideloom.cli import app
from guideloom.errors import IngestError
from guideloom.manifest.hashindex import INDEX_KEY, HashIndex
from guideloom.workers.ingest import ingest_dataset
from guideloom.workers.results import summary

pytestmark = pytest.mark.ray

OPTS = {"part_size": 120, "shard_size": 400}  # several parts per file


def _stream(texts: list[str]) -> list[int]:
    out: list[int] = []
    for t in texts:
        out += [*t.encode(), 256]
    return out


def _read(url) -> list[int]:
    storage = StreamStorage(str(url), StreamNumpyFormat({"tokens": "uint16"}))
    total = storage.manifest.total_tokens
    return StreamDataset(storage, total)[0]["tokens"].tolist()


def _rows(texts: list[str]) -> list[dict]:
    return [{"text": t} for t in texts]


def _first_seen(texts: list[str]) -> list[str]:
    return list(dict.fromkeys(texts))


A = [f"alpha document number {i}, with some words to fill a part" for i in range(8)]
B = [f"beta document number {i}, with other words in it" for i in range(6)]


def _shard_table(result) -> list[tuple]:
    return [(s.part, s.index, s.records, s.tokens, s.files["data"].checksum) for s in result.manifest.shards]


def test_first_occurrence_kept_within_a_file_across_files_and_parts_same_on_1_and_2_workers(
    ray_local, write_jsonl, tmp_path
):
    a = [A[0], A[1], A[0], A[2], A[3], A[1], A[4], A[5], A[0], A[6]]  # within the file, across its parts
    b = [B[0], A[2], B[1], B[0], A[6], B[2], A[7]]  # across files
    inputs = [str(write_jsonl("a.jsonl", _rows(a))), str(write_jsonl("b.jsonl", _rows(b)))]
    one = ingest_dataset(inputs, str(tmp_path / "one"), dedup="exact", num_workers=1, **OPTS)
    two = ingest_dataset(inputs, str(tmp_path / "two"), dedup="exact", num_workers=2, **OPTS)
    kept = _first_seen(a + b)
    assert one.parts >= 4
    assert _read(tmp_path / "one") == _stream(kept)
    assert _shard_table(one) == _shard_table(two)  # the same shard bytes on any number of workers
    assert one.duplicates == len(a + b) - len(kept) == 6 and one.already_held == 0
    assert one.documents == len(kept)
    meta = one.manifest.metadata
    assert [v["duplicates"] for v in meta["ingest"]["dedup"]["by_input"].values()] == [3, 3]
    assert HashIndex.model_validate(meta[INDEX_KEY]).documents == len(kept)
    plain = ingest_dataset(inputs, str(tmp_path / "plain"), **OPTS)  # no dedup: every document
    assert _read(tmp_path / "plain") == _stream(a + b) and INDEX_KEY not in plain.manifest.metadata


def test_normalize_folds_case_whitespace_and_unicode_forms(ray_local, write_jsonl, tmp_path):
    texts = ["Caf\u00e9 au lait", "caf\u0065\u0301  au\tLAIT", "CAFÉ AU LAIT ", "another one"]
    path = str(write_jsonl("n.jsonl", _rows(texts)))
    exact = ingest_dataset([path], str(tmp_path / "exact"), dedup="exact")
    folded = ingest_dataset([path], str(tmp_path / "folded"), dedup="exact", dedup_normalize=True)
    assert exact.duplicates == 0
    assert folded.duplicates == 2 and _read(tmp_path / "folded") == _stream([texts[0], texts[3]])


def test_an_append_adds_exactly_the_new_documents_also_after_a_rollback_and_an_expiry(
    ray_local, write_jsonl, tmp_path
):
    out = str(tmp_path / "ds")
    ingest_dataset([str(write_jsonl("a.jsonl", _rows(A[:5])))], out, dedup="exact", **OPTS)
    mixed = [A[1], B[0], A[3], B[1], B[0]]  # held, new, held, new, a duplicate of a new one
    grown = ingest_dataset(
        [str(write_jsonl("b.jsonl", _rows(mixed)))], out, dedup="exact", append=True, **OPTS
    )
    assert (grown.already_held, grown.duplicates) == (2, 1)
    assert _read(out) == _stream(A[:5] + [B[0], B[1]])
    assert "1 of an earlier document of this job, 2 already in the dataset" in summary(grown.manifest)
    storage = grown.storage
    storage.rollback(storage.snapshots()[0].id)  # the index follows the content it restores
    again = ingest_dataset(
        [str(write_jsonl("c.jsonl", _rows([*mixed, B[2]])))], out, dedup="exact", append=True, **OPTS
    )
    assert (again.already_held, again.duplicates) == (2, 1)
    assert _read(out) == _stream(A[:5] + [B[0], B[1], B[2]])
    storage.refresh()
    storage.expire(keep_last=1, grace=dt.timedelta(0))  # unused index pieces go, used ones stay
    last = ingest_dataset(
        [str(write_jsonl("d.jsonl", _rows([B[2], A[0], B[3]])))], out, dedup="exact", append=True, **OPTS
    )
    assert (last.already_held, last.documents - again.documents) == (2, 1)
    assert _read(out) == _stream(A[:5] + [B[0], B[1], B[2], B[3]])


def test_dedup_append_without_an_index_names_the_command_that_builds_one(ray_local, write_jsonl, tmp_path):
    out = str(tmp_path / "ds")
    ingest_dataset([str(write_jsonl("a.jsonl", _rows(A[:4])))], out, **OPTS)  # no hashes
    more = str(write_jsonl("b.jsonl", _rows([A[0], B[0]])))
    with pytest.raises(IngestError, match=re.escape(f"guideloom index-hashes {out}`")) as info:
        ingest_dataset([more], out, dedup="exact", append=True, **OPTS)
    assert "nothing was committed" in str(info.value)
    assert len(StreamStorage(out, StreamNumpyFormat({"tokens": "uint16"})).snapshots()) == 1
    built = CliRunner().invoke(app, ["index-hashes", out])  # the fix, as the message writes it
    assert built.exit_code == 0, built.output
    assert "4 distinct documents" in built.output
    grown = ingest_dataset([more], out, dedup="exact", append=True, **OPTS)
    assert grown.already_held == 1 and _read(out) == _stream([*A[:4], B[0]])


def test_a_damaged_index_is_named_and_rebuilt(ray_local, write_jsonl, tmp_path):
    out = tmp_path / "ds"
    done = ingest_dataset([str(write_jsonl("a.jsonl", _rows(A[:6])))], str(out), dedup="exact", **OPTS)
    index = HashIndex.model_validate(done.manifest.metadata[INDEX_KEY])
    piece = out / index.pieces[0].path
    piece.write_bytes(piece.read_bytes()[:-3])
    more = str(write_jsonl("b.jsonl", _rows([A[5], B[0]])))
    with pytest.raises(IngestError, match="is damaged") as info:
        ingest_dataset([more], str(out), dedup="exact", append=True, **OPTS)
    assert index.pieces[0].path in str(info.value)
    fix = f"guideloom index-hashes {out} --rebuild"
    assert fix in str(info.value)
    rebuilt = CliRunner().invoke(app, fix.split()[1:])
    assert rebuilt.exit_code == 0, rebuilt.output
    grown = ingest_dataset([more], str(out), dedup="exact", append=True, **OPTS)
    assert grown.already_held == 1 and _read(out) == _stream([*A[:6], B[0]])


def test_an_index_of_the_other_normalisation_is_refused_naming_the_flag(ray_local, write_jsonl, tmp_path):
    out = str(tmp_path / "ds")
    ingest_dataset([str(write_jsonl("a.jsonl", _rows(A[:3])))], out, dedup="exact")
    with pytest.raises(IngestError, match="drop --dedup-normalize"):
        ingest_dataset(
            [str(write_jsonl("b.jsonl", _rows(B[:2])))], out, dedup="exact", dedup_normalize=True, append=True
        )


def test_the_command_line_flags(ray_local, write_jsonl, tmp_path, hf_tokenizer_json):
    out = str(tmp_path / "ds")
    path = str(write_jsonl("a.jsonl", _rows(["One  page", "one page", "Two"])))
    run = CliRunner().invoke(
        app, ["ingest", path, "--output", out, "--dedup", "exact", "--dedup-normalize", "-q"]
    )
    assert run.exit_code == 0, run.output
    assert "exact duplicates dropped: 1 of an earlier document of this job" in run.output
    assert _read(out) == _stream(["One  page", "Two"])
    other = ["ingest", path, "--output", out, "--append", "--tokenizer", f"hf:{hf_tokenizer_json}", "-q"]
    refused = CliRunner().invoke(app, other)
    assert refused.exit_code != 0 and "--allow-other-tokenizer" in refused.output
    allowed = CliRunner().invoke(app, [*other, "--allow-other-tokenizer"])
    assert allowed.exit_code == 0, allowed.output
