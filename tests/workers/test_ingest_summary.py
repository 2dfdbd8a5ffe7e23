"""What an ingestion says about itself: the requests it sent per store (the driver's and every
task's, equal to what a proxy in front of the store saw), and, on a re-run, the parts an earlier
run finished counted as reused from the first progress line."""

from __future__ import annotations

import json
import shutil

import fsspec
import pytest

from guideloom.workers import ingest_dataset

pytestmark = pytest.mark.ray


def test_the_requests_line_is_what_the_store_saw(
    ray_local, counting_s3, s3_bucket, write_jsonl, doc_rows, capfd
):
    src = write_jsonl("in.jsonl", doc_rows(400))
    url = f"s3://{s3_bucket}/counted"
    counting_s3.reset()
    result = ingest_dataset(
        [str(src)], url, storage_options=counting_s3.storage_options, part_size=8_000, shard_size=6_000,
        progress="plain",
    )  # fmt: skip
    counts = result.io_stats[f"s3 {counting_s3.url}"]
    seen = dict(counting_s3.requests)
    kinds = counts["requests"]
    assert result.parts >= 3 and kinds["PUT"] >= result.shards
    # On the wire a LIST is a GET of the bucket, and s3fs deletes with a POST (DeleteObjects).
    wire = {"GET": kinds.get("GET", 0) + kinds.get("LIST", 0), "HEAD": kinds["HEAD"], "PUT": kinds["PUT"]}
    assert {**wire, "POST": kinds["DELETE"]} == seen
    data = [r for r in counting_s3.log if r.method == "GET" and "list-type" not in r.path and r.status < 300]
    assert counts["bytes_read"] == sum(r.bytes for r in data)  # objects' bytes (not listings, errors)
    # Every byte written is in an object of the output, but for the probes, deleted since: the
    # writable check's is empty, the conditional-write probe's two creates send one byte each.
    fs = fsspec.filesystem("s3", **counting_s3.storage_options)
    stored = sum(info["size"] for info in fs.find(url, detail=True).values())
    probes = [r for r in counting_s3.log if r.method == "PUT" and "/.guideloom-probe-" in r.path]
    assert counts["bytes_written"] == stored + len(probes) and len(probes) in (0, 2)
    err = capfd.readouterr().err
    line = [ln for ln in err.splitlines() if ln.startswith(f"requests s3 {counting_s3.url}:")]
    assert line and f"PUT {kinds['PUT']:,}" in line[0], err
    assert f"{counts['bytes_read']:,} bytes read, {counts['bytes_written']:,} written" in line[0]


def test_a_rerun_counts_the_parts_it_reuses_from_the_first_line(
    ray_local, write_jsonl, doc_rows, tmp_path, capfd
):
    src = write_jsonl("in.jsonl", doc_rows(300))
    out = tmp_path / "ds"
    first = ingest_dataset([str(src)], out, part_size=6_000)
    assert first.parts >= 4
    # As if the first run had been killed before its commit, with one part not finished.
    (out / "manifest.json").unlink()
    shutil.rmtree(out / "snapshots", ignore_errors=True)
    (record,) = [p for p in (out / "parts").rglob("part-00001.json")]
    record.unlink()
    capfd.readouterr()
    again = ingest_dataset([str(src)], out, part_size=6_000, progress="plain")
    err = [ln for ln in capfd.readouterr().err.splitlines() if "parts " in ln and "docs" in ln]
    reused = first.parts - 1
    assert f"parts 0/{first.parts} (0 reused, {reused} more to check)" in err[0], err
    assert f"parts {first.parts}/{first.parts} ({reused} reused)" in err[-1], err

    def content(result):  # a part written again lands in a new attempt folder: same bytes
        return [
            (s.part, s.records, {k: (f.size, f.checksum) for k, f in s.files.items()})
            for s in result.manifest.shards
        ]

    assert again.documents == first.documents and content(again) == content(first)
    assert json.loads(record.read_text())["part"] == 1  # written again
