"""``guideloom index-hashes`` on a stream with metadata (`layout="stream-with-meta"`): the index
it builds lets a deduplicated append drop exactly the documents the dataset already holds."""

from __future__ import annotations

import json

from guideloom.workers.hashes_cli import build_hash_index
from guideloom.workers.ingest import ingest_dataset


def _jsonl(path, texts):
    path.write_text("".join(json.dumps({"text": t, "lang": "en"}) + "\n" for t in texts))
    return str(path)


def test_an_annotated_stream_gets_an_index_and_a_dedup_append_drops_what_it_holds(tmp_path) -> None:
    out = str(tmp_path / "ds")
    opts = {"layout": "stream-with-meta", "meta_fields": ["lang"], "runner": "inline", "progress": "none"}
    held = ["first page", "second page", "first page", "third page"]
    ingest_dataset([_jsonl(tmp_path / "a.jsonl", held)], out, **opts)  # no dedup: no index
    index = build_hash_index(out)
    assert index.documents == 3  # distinct texts
    mixed = ["second page", "a new page", "third page", "another new one", "a new page"]
    grown = ingest_dataset([_jsonl(tmp_path / "b.jsonl", mixed)], out, append=True, dedup="exact", **opts)
    assert (grown.already_held, grown.duplicates) == (2, 1)
    assert grown.documents == len(held) + 2
