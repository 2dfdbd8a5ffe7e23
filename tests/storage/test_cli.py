"""`guideloom inspect` and `guideloom verify`, run as a user would (a subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from storage_helpers import ConceptsFormat

from guideloom import StreamNumpyFormat, StreamStorage, StreamWithMetaStorage


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "guideloom.cli", *args], capture_output=True, text=True)


@pytest.fixture
def dataset(tmp_path):
    url = str(tmp_path / "ds")
    fmt = ConceptsFormat(StreamNumpyFormat({"tokens": np.uint16}))
    storage = StreamWithMetaStorage(url, fmt)
    with storage.writer(shard_size=64, metadata={"tokenizer": "bytes"}) as w:
        for i in range(20):
            w.append({"tokens": np.arange(10) + i}, spans=[(0, 5, ["x"])])
    return storage


def test_inspect_needs_no_format_class(dataset):
    out = run_cli("inspect", dataset.location.url)
    assert out.returncode == 0, out.stderr
    assert "StreamWithMetaStorage" in out.stdout and "ConceptsFormat" in out.stdout
    assert "records        20" in out.stdout and "tokens         200" in out.stdout
    assert "spans          20" in out.stdout and '"tokenizer": "bytes"' in out.stdout
    assert dataset.manifest.fingerprint in out.stdout
    as_json = json.loads(run_cli("inspect", "--json", dataset.location.url).stdout)
    assert as_json["total_tokens"] == 200


def test_verify_ok_then_names_each_bad_shard(dataset):
    ok = run_cli("verify", dataset.location.url)
    assert ok.returncode == 0 and ok.stdout.startswith("ok: ")
    shards = dataset.manifest.shards
    root = dataset.location.url
    with open(f"{root}/{shards[1].files['data'].path}", "r+b") as f:
        f.seek(40)
        f.write(b"\xff\xff")
    with open(f"{root}/{shards[3].files['meta'].path}", "ab") as f:
        f.write(b"extra")
    bad = run_cli("verify", root)
    assert bad.returncode == 1
    assert "part 0 shard 1" in bad.stderr and "checksum" in bad.stderr
    assert "part 0 shard 3" in bad.stderr and "bytes but the manifest records" in bad.stderr
    assert "2 of" in bad.stderr
    size_only = run_cli("verify", "--size-only", root)
    assert size_only.returncode == 1 and "shard 1" not in size_only.stderr


def test_cli_errors_for_missing_dataset_and_protocol(tmp_path):
    missing = run_cli("inspect", str(tmp_path / "nothing"))
    assert missing.returncode == 2 and "no dataset at" in missing.stderr
    proto = run_cli("verify", "nosuch://x/y")
    assert proto.returncode == 2 and "unknown protocol" in proto.stderr


def test_options_reach_fsspec(s3_options, s3_bucket):
    url = f"s3://{s3_bucket}/ds"
    storage = StreamStorage(url, StreamNumpyFormat({"tokens": np.uint16}), storage_options=s3_options)
    with storage.writer() as w:
        w.append({"tokens": [1, 2, 3]})
    out = run_cli(
        "inspect",
        url,
        "-o",
        f"key={s3_options['key']}",
        "-o",
        f"secret={s3_options['secret']}",
        "-o",
        f"client_kwargs.endpoint_url={s3_options['client_kwargs']['endpoint_url']}",
    )
    assert out.returncode == 0, out.stderr
    assert "tokens         3" in out.stdout
    assert s3_options["secret"] not in out.stdout


test_options_reach_fsspec = pytest.mark.s3(test_options_reach_fsspec)
