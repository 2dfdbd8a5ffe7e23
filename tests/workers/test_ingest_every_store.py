"""Ingestion through a real local Ray to and from GCS and Azure Blob (their emulators on
127.0.0.1), as to and from S3: the same shards as a local-disk run of the same job, readable,
verified and inspected through the CLI; inputs read from a bucket give the same dataset too.

S3 has its own tests in `test_ingest.py`; the `remote_store` fixture here is GCS and Azure.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest
from typer.testing import CliRunner

from guideloom import StreamDataset
from guideloom.cli import app
from guideloom.workers.ingest import METADATA_KEY, run_ingest
from guideloom.workers.output import open_storage
from guideloom.workers.tokenizer import load_tokenizer

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(
    params=[pytest.param("gs", marks=pytest.mark.gcs), pytest.param("az", marks=pytest.mark.azure)]
)
def remote_store(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """``(root URL of a fresh bucket, storage_options)`` on GCS, then on Azure."""
    if request.param == "gs":
        endpoint = request.getfixturevalue("gcs_endpoint")
        return f"gs://{request.getfixturevalue('gs_bucket')}", endpoint.storage_options()
    endpoint = request.getfixturevalue("azure_endpoint")
    return f"az://{request.getfixturevalue('az_container')}", endpoint.storage_options()


def _rows(n: int) -> list[dict[str, Any]]:
    return [{"id": i, "text": f"document {i} " + "ünïcode words " * (i % 5 + 1)} for i in range(n)]


def _write_inputs(tmp_path: Path, rows: list[dict[str, Any]]) -> list[Path]:
    paths = []
    for k in range(3):
        path = tmp_path / "in" / f"part-{k}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows[k::3]))
        paths.append(path)
    return paths


def _shards(manifest: Any) -> list[tuple]:
    return [
        (s.part, s.index, s.records, s.tokens, sorted((n, f.size, f.checksum) for n, f in s.files.items()))
        for s in manifest.shards
    ]


def _cli_options(options: dict[str, Any]) -> list[str]:
    """`-o KEY=VALUE` flags for the options (nested ones as JSON), as a user passes them."""
    flags = []
    for key, value in options.items():
        flags += ["-o", f"{key}={json.dumps(value) if isinstance(value, dict) else value}"]
    return flags


OPTIONS = {"part_size": 500, "shard_size": 600, "progress": "none", "num_workers": 2}


def test_ingest_to_gcs_and_azure_gives_the_local_runs_shards(ray_local, remote_store, tmp_path):
    root, options = remote_store
    rows = _rows(60)
    inputs = [str(p) for p in _write_inputs(tmp_path, rows)]
    local = run_ingest({"inputs": inputs, "output": str(tmp_path / "local"), **OPTIONS})
    url = f"{root}/ds"
    config = {"inputs": inputs, "output": url, "storage_options": options, **OPTIONS}
    remote = run_ingest(config)
    assert _shards(remote) == _shards(local) and len(remote.shards) > 2
    assert remote.metadata[METADATA_KEY]["documents"] == 60
    # read back through the loader's view: the tokens decode to the documents in order
    tok = load_tokenizer("bytes")
    from guideloom.workers.config import IngestConfig

    storage = open_storage(IngestConfig(**config), tok)
    ds = StreamDataset(storage, 16)
    tokens = ds.read_windows(list(range(len(ds))))["tokens"].reshape(-1)
    in_file_order = [r for k in range(3) for r in rows[k::3]]
    expected = [t for r in in_file_order for t in [*r["text"].encode(), tok.eos_id]]
    assert np.array_equal(tokens, np.asarray(expected[: tokens.size]))
    runner = CliRunner()
    result = runner.invoke(app, ["verify", url, *_cli_options(options)])
    assert result.exit_code == 0, result.output
    assert f"ok: {len(remote.shards)} shards of {url}" in result.output
    result = runner.invoke(app, ["inspect", url, "--json", *_cli_options(options)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["tokens"] == remote.total_tokens == local.total_tokens


def test_inputs_read_from_gcs_and_azure_give_the_same_dataset(ray_local, remote_store, tmp_path):
    root, options = remote_store
    rows = _rows(45)
    paths = _write_inputs(tmp_path, rows)
    fs, base = fsspec.core.url_to_fs(root, **options)
    for p in paths:
        fs.pipe_file(f"{base.rstrip('/')}/in/{p.name}", p.read_bytes())
    local = run_ingest({"inputs": [str(p) for p in paths], "output": str(tmp_path / "a"), **OPTIONS})
    from_bucket = run_ingest(
        {
            "inputs": [f"{root}/in/*.jsonl"],
            "input_storage_options": options,
            "output": str(tmp_path / "b"),
            **OPTIONS,
        }
    )
    assert _shards(from_bucket) == _shards(local)
    assert from_bucket.metadata[METADATA_KEY]["inputs"]["files"] == 3
