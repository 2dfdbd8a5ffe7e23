"""run_ingest end to end: determinism, restart after a dead worker or driver, bad inputs.

Tests marked `ray` use the session's local Ray (2 CPUs). A job's identity is compared through
the manifest's shard checksums and metadata (the shard bytes are what must not change).
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from ingest_hooks import hooks_env

from guideloom import StreamDataset
from guideloom.errors import DatasetExistsError, IngestError
from guideloom.workers.ingest import METADATA_KEY, run_ingest
from guideloom.workers.output import open_storage
from guideloom.workers.tokenizer import load_tokenizer

REPO = Path(__file__).resolve().parents[2]


def _inputs(tmp_path: Path, rows) -> list[Path]:
    """A big plain JSONL (split into several parts), a gzip JSONL and a Parquet file."""
    d = tmp_path / "in"
    d.mkdir(exist_ok=True)
    (d / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:60]))
    (d / "b.jsonl.gz").write_bytes(
        gzip.compress("".join(json.dumps(r) + "\n" for r in rows[60:80]).encode(), mtime=0)
    )
    pq.write_table(pa.table({"text": [r["text"] for r in rows[80:]]}), d / "c.parquet")
    return [d / "a.jsonl", d / "b.jsonl.gz", d / "c.parquet"]


def _shards(manifest) -> list[tuple]:
    return [
        (
            s.part,
            s.index,
            s.records,
            s.tokens,
            sorted((name, f.size, f.checksum) for name, f in s.files.items()),
        )
        for s in manifest.shards
    ]


def _expected_tokens(rows) -> list[int]:
    out: list[int] = []
    for r in rows:
        out += [*r["text"].encode(), 256]
    return out


# -- no Ray needed: checks that happen before any task starts ---------------------------------


def test_glob_that_matches_nothing(ingest_config, tmp_path):
    with pytest.raises(IngestError, match=r"glob .*none-\*\.jsonl matches no file"):
        run_ingest(ingest_config([tmp_path / "none-*.jsonl"], tmp_path / "ds"))


def test_missing_tokenizer_path(ingest_config, write_jsonl, doc_rows, tmp_path):
    path = write_jsonl("a.jsonl", doc_rows(2))
    with pytest.raises(IngestError, match=r"tokenizer file .*/missing/tokenizer\.json does not"):
        run_ingest(ingest_config([path], tmp_path / "ds", tokenizer=f"hf:{tmp_path}/missing/tokenizer.json"))


def test_output_holding_a_different_dataset(ingest_config, write_jsonl, doc_rows, tmp_path):
    import guideloom

    out = tmp_path / "ds"
    other = guideloom.StreamStorage(out, guideloom.StreamNumpyFormat({"tokens": np.uint32}))
    with other.writer() as w:
        w.append({"tokens": np.arange(5)})
    path = write_jsonl("a.jsonl", doc_rows(2))
    with pytest.raises(DatasetExistsError, match=r"already holds a different dataset.*--overwrite"):
        run_ingest(ingest_config([path], out))
    # the same class and format, but written by another job: refused as well
    other.delete()
    mine = open_storage(ingest_config([path], out), load_tokenizer("bytes"))
    with mine.writer() as w:
        w.append({"tokens": np.arange(5)})
    with pytest.raises(DatasetExistsError, match=r"this job did not write.*--overwrite"):
        run_ingest(ingest_config([path], out))
    assert mine.refresh().total_tokens == 5  # nothing committed was touched


@pytest.mark.s3
def test_missing_output_bucket(ingest_config, write_jsonl, doc_rows, s3_options):
    path = write_jsonl("a.jsonl", doc_rows(2))
    with pytest.raises(IngestError, match=r"cannot write to the output s3://no-such-bucket-gl/ds"):
        run_ingest(ingest_config([path], "s3://no-such-bucket-gl/ds", storage_options=s3_options))


# -- with Ray ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reference(ray_local, tmp_path_factory):
    """An uninterrupted run (num_workers=2) that the other Ray tests compare with."""
    tmp = tmp_path_factory.mktemp("reference")
    rows = [{"text": f"doc {i} " + "abcdefgh" * (i % 7 + 1) + " é"} for i in range(100)]
    inputs = _inputs(tmp, rows)
    options = {"part_size": 600, "shard_size": 700, "progress": "none"}
    config = {"inputs": [str(p) for p in inputs], "output": str(tmp / "ds"), **options}
    return rows, inputs, options, run_ingest({**config, "num_workers": 2})


@pytest.mark.ray
def test_reads_back_and_records_metadata(reference):
    rows, inputs, _, manifest = reference
    meta = manifest.metadata[METADATA_KEY]
    assert meta["documents"] == 100 and meta["parts"] > 4
    assert meta["tokenizer"]["spec"] == "bytes" and meta["tokenizer"]["eos_id"] == 256
    # the inputs compactly: the patterns given, a count, total bytes and a digest of the list
    assert meta["inputs"]["patterns"] == [str(p) for p in inputs]
    assert meta["inputs"]["files"] == 3
    assert meta["inputs"]["bytes"] == sum(p.stat().st_size for p in inputs)
    assert len(meta["inputs"]["sha256"]) == 64
    expected = _expected_tokens(rows)
    assert manifest.total_tokens == len(expected) == meta["tokens"]
    storage = open_storage(_config_for(reference, "ds"), load_tokenizer("bytes"))
    ds = StreamDataset(storage, sequence_length=len(expected))
    assert ds[0]["tokens"].tolist() == expected
    assert not (Path(storage.url) / "_ingest").exists()  # sidecars are gone after the commit


def _config_for(reference, out):
    rows, inputs, options, manifest = reference
    base = Path(inputs[0]).parents[1]
    from guideloom.workers.config import IngestConfig

    return IngestConfig(inputs=[str(p) for p in inputs], output=str(base / out), **options)


@pytest.mark.ray
def test_same_shards_with_one_worker_and_rerun_is_a_no_op(reference, tmp_path):
    rows, inputs, options, manifest = reference
    config = {"inputs": [str(p) for p in inputs], "output": str(tmp_path / "one"), **options}
    one = run_ingest({**config, "num_workers": 1})
    assert _shards(one) == _shards(manifest)
    assert one.metadata == manifest.metadata
    again = run_ingest({**config, "num_workers": 1})
    assert _shards(again) == _shards(one)


@pytest.mark.ray
def test_worker_killed_mid_task_is_retried_with_identical_output(reference, tmp_path, monkeypatch):
    rows, inputs, options, manifest = reference
    marker = tmp_path / "crashed"
    for name, value in hooks_env(crash_once={"part": 1, "marker": str(marker)}).items():
        monkeypatch.setenv(name, value)
    config = {"inputs": [str(p) for p in inputs], "output": str(tmp_path / "ds"), **options}
    retried = run_ingest({**config, "runner": "ray"})  # Ray retries the killed worker's part
    assert marker.exists()  # the first attempt of part 1 died with os._exit(1)
    assert _shards(retried) == _shards(manifest)


@pytest.mark.ray
def test_interrupted_driver_rerun_redoes_only_missing_parts(reference, tmp_path):
    import ray

    rows, inputs, options, manifest = reference
    out = tmp_path / "ds"
    config = {
        "inputs": [str(p) for p in inputs],
        "output": str(out),
        **options,
        "num_workers": 1,
        "ray_address": ray.get_runtime_context().gcs_address,
    }
    env = {**os.environ, **hooks_env(part_delay_s=0.5)}
    log = tmp_path / "driver.log"
    with log.open("wb") as log_file:
        driver = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import json, sys; from guideloom.workers.ingest import run_ingest; "
                "run_ingest(json.loads(sys.argv[1]))",
                json.dumps(config),
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log_file,
        )
    try:
        deadline = time.monotonic() + 60
        while not list((out / "parts").glob("r-*/part-00001.json")):  # under the job's run
            assert driver.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, "no part completed within 60 s"
            time.sleep(0.05)
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    assert not (out / "manifest.json").exists()
    (record,) = (out / "parts").glob("r-*/part-00000.json")
    first = record.read_bytes()
    resumed = run_ingest(config | {"ray_address": None})
    assert record.read_bytes() == first  # reused, not rewritten
    assert _shards(resumed) == _shards(manifest)
    assert resumed.metadata == manifest.metadata


@pytest.mark.ray
def test_hf_tokenizer_to_s3_document_layout(
    ray_local, s3_bucket, s3_options, write_jsonl, doc_rows, hf_tokenizer_json, ingest_config
):
    from guideloom import DocumentDataset

    rows = doc_rows(12)
    config = ingest_config(
        [write_jsonl("a.jsonl", rows)],
        f"s3://{s3_bucket}/docs",
        storage_options=s3_options,
        tokenizer=f"hf:{hf_tokenizer_json}",
        layout="document",
        format="msgpack",
        passthrough=["id"],
        part_size=400,
    )
    manifest = run_ingest(config)
    tok = load_tokenizer(config.tokenizer)
    assert manifest.metadata[METADATA_KEY]["tokenizer"]["files_sha256"] == tok.files_hash
    docs = DocumentDataset(open_storage(config, tok))
    assert [d["id"] for d in docs.__getitems__(list(range(12)))] == list(range(12))
    assert tok.decode(docs[5]["tokens"]) == rows[5]["text"]


@pytest.mark.ray
def test_bad_record_stops_the_job_and_commits_nothing(
    ray_local, write_jsonl, doc_rows, ingest_config, tmp_path
):
    path = write_jsonl("bad.jsonl", [*doc_rows(30), '{"text": "fine"', *doc_rows(5)])
    config = ingest_config([path], tmp_path / "ds", part_size=500)
    with pytest.raises(IngestError, match=rf"{path} line 31: malformed JSON"):
        run_ingest(config)
    assert not (tmp_path / "ds" / "manifest.json").exists()
    skipped = run_ingest(config.model_copy(update={"on_bad_record": "skip"}))
    meta = skipped.metadata[METADATA_KEY]
    assert meta["bad_records"] == {str(path): {"malformed_json": 1}} and meta["documents"] == 35


@pytest.mark.ray
def test_only_empty_inputs_is_an_error(ray_local, tmp_path, ingest_config, write_jsonl):
    empty = tmp_path / "in" / "empty.jsonl"
    write_jsonl("blank.jsonl", ['{"text": ""}'])
    empty.write_bytes(b"")
    with pytest.raises(IngestError, match="hold no documents.*nothing committed"):
        run_ingest(ingest_config([tmp_path / "in"], tmp_path / "ds"))


@pytest.mark.ray
def test_overwrite_replaces_a_dataset_of_another_format(
    ray_local, ingest_config, write_jsonl, doc_rows, tmp_path
):
    import guideloom

    out = tmp_path / "ds"
    other = guideloom.StreamStorage(out, guideloom.StreamNumpyFormat({"tokens": np.uint32}))
    with other.writer() as w:
        w.append({"tokens": np.arange(5)})
    rows = doc_rows(3)
    manifest = run_ingest(ingest_config([write_jsonl("a.jsonl", rows)], out, overwrite=True))
    assert manifest.total_tokens == len(_expected_tokens(rows))
    assert manifest.format.config["fields"] == [["tokens", "<u2"]]  # the job's format, not uint32
    assert not list(out.glob(".guideloom-ingest-probe-*"))  # the write probe is gone
