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
    assert "spans          20" in out.stdout and "  tokenizer: bytes" in out.stdout
    assert dataset.manifest.fingerprint in out.stdout
    summary = json.loads(run_cli("inspect", "--json", dataset.location.url).stdout)
    assert summary["tokens"] == 200 and summary["shards"] == len(dataset.manifest.shards)
    assert summary["shard_list"][0]["data"] == dataset.manifest.shards[0].files["data"].path
    manifest = json.loads(run_cli("inspect", "--manifest", dataset.location.url).stdout)
    assert manifest["total_tokens"] == 200


def _ingested_like(tmp_path, storage_cls, fmt, records, documents):
    """A dataset whose metadata is what `guideloom ingest` records (documents, inputs, options)."""
    storage = storage_cls(str(tmp_path / "ingested"), fmt)
    inputs = [{"url": f"/corpus/file-{i:03d}.jsonl", "size": 1000 + i} for i in range(40)]
    metadata = {
        "ingest": {"version": 3, "documents": documents, "inputs": inputs, "options": {"note": "n" * 300}}
    }
    with storage.writer(shard_size=4096, metadata=metadata) as w:
        for r in records:
            w.append(r)
    return storage


def test_inspect_reads_well_at_80_columns_and_counts_documents(tmp_path):
    fmt = StreamNumpyFormat({"tokens": np.uint16, "doc_index": np.uint64})
    records = [{"tokens": np.arange(50), "doc_index": np.full(50, i)} for i in range(3)]
    storage = _ingested_like(tmp_path, StreamStorage, fmt, records, documents=2471)
    out = run_cli("inspect", storage.location.url)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    # Only the dataset's own URL (long here: pytest's temporary folder) may run past 80 columns.
    too_long = [line for line in lines if len(line.replace(storage.location.url, "URL")) > 80]
    assert not too_long, too_long
    assert "documents      2,471" in lines
    assert "records        3 (one per batch written: a record holds several documents)" in lines
    assert "layout         1 shard in 1 part" in lines  # singular, not "1 shards / 1 parts"
    assert "    inputs: [40 items; --json shows them]" in lines


def test_inspect_prints_code_that_opens_the_dataset(tmp_path):
    fmt = StreamNumpyFormat({"tokens": np.uint32, "doc_index": np.uint64})
    records = [{"tokens": np.arange(50) + 70_000, "doc_index": np.full(50, i)} for i in range(3)]
    storage = _ingested_like(tmp_path, StreamStorage, fmt, records, documents=3)
    code = json.loads(run_cli("inspect", "--json", storage.location.url).stdout)["opening_code"]
    namespace: dict[str, object] = {}
    exec(code, namespace)  # the printed lines, run as a user would paste them
    assert namespace["storage"].format == fmt  # type: ignore[attr-defined]
    assert len(namespace["dataset"]) == 0  # type: ignore[arg-type]  # 150 tokens: no 2048-token window
    windows = namespace["StreamDataset"](namespace["storage"], sequence_length=16)  # type: ignore[operator]
    assert windows[0]["tokens"][:3].tolist() == [70_000, 70_001, 70_002]
    text = run_cli("inspect", storage.location.url).stdout
    assert all(f"  {line}" in text for line in code.splitlines() if line)


def test_opening_code_for_documents_and_spans(tmp_path, dataset):
    from guideloom import DocumentJsonFormat, DocumentStorage
    from guideloom.storage.opening import opening_code

    docs = _ingested_like(tmp_path, DocumentStorage, DocumentJsonFormat(), [{"tokens": [1, 2]}] * 4, 4)
    namespace: dict[str, object] = {}
    exec(opening_code(docs.location.url, docs.manifest), namespace)
    assert namespace["dataset"][3] == {"tokens": [1, 2]}  # type: ignore[index]
    summary = json.loads(run_cli("inspect", "--json", docs.location.url).stdout)
    assert summary["documents"] == 4 and summary["records"] == 4
    # A user's format class: the import names the module the manifest records.
    code = opening_code(dataset.location.url, dataset.manifest)
    assert "from storage_helpers import ConceptsFormat" in code
    assert 'ConceptsFormat(StreamNumpyFormat({"tokens": np.uint16}))' in code


def test_help_and_version_at_80_columns():
    import os

    env = {**os.environ, "COLUMNS": "80"}
    for args in (["--help"], ["inspect", "--help"], ["verify", "--help"]):
        out = subprocess.run(
            [sys.executable, "-m", "guideloom.cli", *args], capture_output=True, text=True, env=env
        )
        assert out.returncode == 0, out.stderr
        assert all(len(line) <= 80 for line in out.stdout.splitlines()), out.stdout
        assert "<bool>" not in out.stdout and "{url}" not in out.stdout and "…" not in out.stdout
    inspect_help = subprocess.run(
        [sys.executable, "-m", "guideloom.cli", "inspect", "--help"], capture_output=True, text=True, env=env
    ).stdout
    assert "client_kwargs.endpoint_url=http://127.0.0.1:9000" in inspect_help.replace("\n", "")
    version = run_cli("--version")
    from guideloom import __version__

    assert version.returncode == 0 and version.stdout.strip() == f"guideloom {__version__}"


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


def test_inspect_code_of_a_remote_dataset_pastes_without_a_placeholder():
    """A remote URL opened without -o: the printed lines carry no `storage_options={...}` (which
    is not Python that runs) and open the dataset as printed; -o options are printed, secrets as
    `...` to fill in, named on a note line."""
    from typer.testing import CliRunner

    from guideloom.cli import app

    url = "memory://inspect-paste/ds"
    fmt = StreamNumpyFormat({"tokens": np.uint16})
    with StreamStorage(url, fmt).writer() as w:
        w.append({"tokens": np.arange(64, dtype=np.uint16)})
    out = CliRunner().invoke(app, ["inspect", "--json", url])
    assert out.exit_code == 0, out.output
    code = json.loads(out.output)["opening_code"]
    assert "storage_options" not in code
    namespace: dict[str, object] = {}
    exec(code, namespace)
    assert namespace["storage"].manifest.total_tokens == 64  # type: ignore[attr-defined]
    out = CliRunner().invoke(app, ["inspect", "--json", url, "-o", "anon=false", "-o", "secret=s3cr3t"])
    code = json.loads(out.output)["opening_code"]
    assert "s3cr3t" not in code and "'secret': ..." in code and "'anon': False" in code
    assert "# fill in secret (not printed) for the ... below" in code


def test_opening_code_of_a_custom_format_is_a_note_not_a_false_constructor(tmp_path):
    from guideloom.manifest import FormatSpecModel
    from guideloom.storage.opening import opening_code

    url = str(tmp_path / "c")
    with StreamStorage(url, StreamNumpyFormat({"tokens": np.uint16})).writer() as w:
        w.append({"tokens": np.arange(4, dtype=np.uint16)})
    manifest = StreamStorage(url, StreamNumpyFormat({"tokens": np.uint16})).manifest
    custom = manifest.model_copy(
        update={
            "format": FormatSpecModel(
                name="ConceptFormat", module="my_pkg.formats", config={"stream": {}, "concepts": 3}
            )
        }
    )
    code = opening_code(url, custom)
    assert "stream=" not in code and "concepts=" not in code  # not its constructor's keywords
    assert "# ConceptFormat is your own format class: construct it as its __init__ takes" in code
    assert "from my_pkg.formats import ConceptFormat" in code


def test_root_help_names_every_command():
    from typer.testing import CliRunner

    from guideloom.cli import app

    text = CliRunner().invoke(app, ["--help"]).output
    summary = text.split("Options")[0]
    names = [c.name or c.callback.__name__ for c in app.registered_commands]  # type: ignore[union-attr]
    assert {"inspect", "verify", "mix", "ingest"} <= set(names)
    assert all(n.replace("_", "-") in summary for n in names), summary


def test_pyproject_license_is_an_spdx_string():
    """setuptools deprecates `project.license` as a table (removal in February 2027)."""
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"
    assert any(r.startswith("setuptools>=77") for r in project["build-system"]["requires"])
