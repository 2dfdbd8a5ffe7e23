"""`guideloom ingest --append` (IngestConfig.append) on the session's local Ray: the stream
continues, a re-run of an append job lands once, and another layout is refused."""

from __future__ import annotations

import json

import pytest

from guideloom import StreamDataset
from guideloom.errors import SchemaMismatchError
from guideloom.workers.ingest import run_ingest
from guideloom.workers.output import open_storage
from guideloom.workers.tokenizer import load_tokenizer


def _tokens(rows):
    out: list[int] = []
    for r in rows:
        out += [*r["text"].encode(), 256]
    return out


@pytest.mark.ray
def test_append_continues_the_stream_and_a_rerun_lands_once(
    ray_local, ingest_config, write_jsonl, doc_rows, tmp_path
):
    out = tmp_path / "ds"
    first, second, third = doc_rows(6), doc_rows(5, start=100), doc_rows(4, start=200)
    opts = {"part_size": 200, "shard_size": 300}
    run_ingest(ingest_config([write_jsonl("a.jsonl", first)], out, **opts))
    b = ingest_config([write_jsonl("b.jsonl", second)], out, append=True, **opts)
    grown = run_ingest(b)
    storage = open_storage(b, load_tokenizer("bytes"))
    before = storage.snapshots()
    assert [s.operation for s in before] == ["write", "append"]
    expected = _tokens(first) + _tokens(second)
    assert grown.total_tokens == len(expected)
    assert StreamDataset(storage, len(expected))[0]["tokens"].tolist() == expected

    run_ingest(b)  # the same append job again: nothing new
    run_ingest(ingest_config([write_jsonl("c.jsonl", third)], out, append=True, **opts))
    again = run_ingest(b)  # not current any more, but already landed: still once
    history = open_storage(b, load_tokenizer("bytes")).snapshots()
    assert [s.operation for s in history] == ["write", "append", "append"]
    assert again.total_tokens == len(expected)  # the manifest of the snapshot it made
    storage.refresh()
    assert storage.manifest.total_tokens == len(expected) + len(_tokens(third))


@pytest.mark.ray
def test_append_of_another_layout_is_refused_naming_both(
    ray_local, ingest_config, write_jsonl, doc_rows, tmp_path
):
    out = tmp_path / "ds"
    run_ingest(ingest_config([write_jsonl("a.jsonl", doc_rows(3))], out))
    with pytest.raises(SchemaMismatchError) as info:
        run_ingest(ingest_config([write_jsonl("b.jsonl", doc_rows(3))], out, append=True, layout="document"))
    assert "StreamStorage" in str(info.value) and "DocumentStorage" in str(info.value)
    with pytest.raises(ValueError, match="pass one of them"):
        ingest_config([write_jsonl("c.jsonl", doc_rows(1))], out, append=True, overwrite=True)


@pytest.mark.ray
@pytest.mark.parametrize("layout", ["stream", "document"])
def test_after_an_append_the_metadata_inspect_and_token_weights_count_the_whole_dataset(
    ray_local, ingest_config, write_jsonl, doc_rows, tmp_path, layout
):
    from typer.testing import CliRunner

    from guideloom import DocumentStorage
    from guideloom.cli import app
    from guideloom.formats import DocumentJsonFormat
    from guideloom.loading.mixture import Mixture

    out = tmp_path / "ds"
    first, second = doc_rows(8), doc_rows(4, start=100)
    first[0]["text"] *= 20  # a long first document: the two jobs' means differ
    run_ingest(ingest_config([write_jsonl("a.jsonl", first)], out, layout=layout))
    grown = run_ingest(ingest_config([write_jsonl("b.jsonl", second)], out, append=True, layout=layout))
    meta = grown.metadata["ingest"]
    eos = 1 if layout == "stream" else 0  # documents are stored without the end-of-text token
    tokens = sum(len(r["text"].encode()) + eos for r in first + second)
    assert (meta["documents"], meta["tokens"]) == (12, tokens)
    assert meta["job"] == {"documents": 4, "tokens": sum(len(r["text"].encode()) + eos for r in second)}
    shown = CliRunner().invoke(app, ["inspect", str(out), "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["documents"] == 12
    if layout == "document":
        docs = DocumentStorage(str(out), DocumentJsonFormat())
        mix = Mixture([(docs, 1), (docs, 1)], weight_by="tokens")
        assert mix.mean_tokens == (tokens / 12, tokens / 12)


@pytest.mark.ray
def test_the_append_summary_keeps_the_jobs_counts_apart_from_the_datasets(
    ray_local, ingest_config, write_jsonl, doc_rows, tmp_path
):
    """#37 (5): after an append the summary says this job's shards and bytes beside its documents
    and tokens, and the dataset's totals on their own line (main printed the dataset's shards and
    bytes as 'committed' right under this job's counts)."""
    from guideloom.workers.results import summary

    out = tmp_path / "ds"
    opts = {"part_size": 200, "shard_size": 300}
    first = run_ingest(ingest_config([write_jsonl("a.jsonl", doc_rows(6))], out, **opts))
    grown = run_ingest(
        ingest_config([write_jsonl("b.jsonl", doc_rows(5, start=100))], out, append=True, **opts)
    )
    old = {sh.files["data"].checksum for sh in first.shards}
    added = [sh for sh in grown.shards if sh.files["data"].checksum not in old]
    lines = summary(grown).splitlines()
    job = grown.metadata["ingest"]["job"]
    assert lines[0] == (
        f"this job: {job['documents']:,} documents, {job['tokens']:,} tokens in "
        f"{grown.metadata['ingest']['parts']} parts: {len(added)} shards, {sum(sh.size for sh in added):,} bytes"
    )
    assert lines[1] == (
        f"the dataset now: 11 documents, {grown.total_tokens:,} tokens, {len(grown.shards)} shards, "
        f"{grown.total_bytes:,} bytes"
    )
    assert len(added) < len(grown.shards)
    assert (
        summary(first).splitlines()[1]
        == f"committed: {len(first.shards)} shards, {first.total_bytes:,} bytes"
    )
