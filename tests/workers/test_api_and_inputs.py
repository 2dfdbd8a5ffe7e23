"""The Python API beside the CLI, and the ingestion rows of the robustness and scale issues: a
task's argument does not grow with the number of input files, the manifest records inputs
compactly, lone surrogates and truncated .gz files are named, credentials in input URLs never
reach the manifest or a message, progress moves while a part runs."""

from __future__ import annotations

import http.server
import json
import pickle
import threading

import pytest
from ingest_hooks import hooks_env
from typer.testing import CliRunner

from guideloom.errors import IngestError
from guideloom.io import redact_url
from guideloom.workers import IngestResult, ingest_dataset
from guideloom.workers.ingest import METADATA_KEY, task_config
from guideloom.workers.part import part_spec, write_part
from guideloom.workers.planning import plan_parts
from guideloom.workers.sources import InputFile


def _shards(manifest) -> list[tuple]:
    return [(s.part, s.index, s.records, s.size, s.files["data"].checksum) for s in manifest.shards]


@pytest.mark.ray
def test_python_api_and_cli_commit_the_same_dataset(ray_local, write_jsonl, doc_rows, tmp_path):
    from guideloom.cli import app

    path = write_jsonl("a.jsonl", doc_rows(50))
    result = ingest_dataset([str(path)], tmp_path / "api", part_size=900, shard_size=1500)
    assert isinstance(result, IngestResult)
    assert (result.documents, result.parts, result.bad_records_total) == (50, result.manifest.num_parts, 0)
    assert result.tokens == result.manifest.total_tokens and result.shards == len(result.manifest.shards)
    assert result.parts > 3 and not result.already_committed
    cli = CliRunner().invoke(
        app,
        [
            "ingest",
            str(path),
            "-o",
            str(tmp_path / "cli"),
            "--part-size",
            "900",
            "--shard-size",
            "1500",
            "-q",
        ],
    )
    assert cli.exit_code == 0, cli.output
    from guideloom.storage.checks import read_manifest

    manifest = read_manifest(str(tmp_path / "cli"), {})[1]
    assert _shards(manifest) == _shards(result.manifest)
    assert manifest.metadata == result.manifest.metadata
    # the summary prints the lines that open it; they run as printed
    code = cli.output[cli.output.index("open it with:") :].split("\n", 1)[1]
    code = "\n".join(line[2:] for line in code.splitlines() if line.startswith("  "))
    assert f"storage = StreamStorage({str(tmp_path / 'cli')!r}" in code
    scope: dict = {}
    exec(code, scope)
    assert scope["storage"].manifest.fingerprint == manifest.fingerprint
    assert result.open_code().replace(str(tmp_path / "api"), str(tmp_path / "cli")) == code
    again = ingest_dataset([str(path)], tmp_path / "api", part_size=900, shard_size=1500)
    assert again.already_committed and _shards(again.manifest) == _shards(result.manifest)


def _files(n: int) -> list[InputFile]:
    return [InputFile(f"s3://bucket/raw/file-{i:07d}.jsonl", 1000, "jsonl", None) for i in range(n)]


def test_a_tasks_argument_does_not_grow_with_the_number_of_input_files(ingest_config):
    """What the driver sends each task: the config without the input list, and the part's own
    files and segments (issue 11: the whole plan went to every task, O(n^2) overall)."""
    sizes = {}
    for n in (10, 1000, 10_000):
        plan = plan_parts(_files(n), part_size=1000, text_per_line=False)
        config = ingest_config([f.url for f in plan.files], "s3://bucket/out")
        args = (task_config(config), part_spec(plan, 5), "0" * 64)
        sizes[n] = len(pickle.dumps(args))
        assert part_spec(plan, 5).files == (plan.files[5],)
    assert sizes[10_000] == sizes[1000] == sizes[10], sizes


def test_a_task_config_pickles_as_the_options_that_differ_from_their_defaults():
    """Ray pickles the config once per part task: the options left at their defaults are not
    sent, the config comes back equal (eval index included), and no two copies share a list."""
    from ray import cloudpickle

    from guideloom.workers.config import validate_config

    config = validate_config(
        {"inputs": ["a.jsonl"], "output": "s3://b/out", "layout": "document", "passthrough": ["id"]}
    )
    sent = task_config(config)
    sent._eval_index = {"ngrams": [1, 2, 3]}  # as guideloom.workers.decontam.attach
    data = pickle.dumps(sent)
    assert b"decontaminate_ngram" not in data and b"max_retries" not in data and b"passthrough" in data
    for back in (pickle.loads(data), cloudpickle.loads(cloudpickle.dumps(sent))):
        assert back == sent and back.layout == "documents" and back.passthrough == ["id"]
        assert back._eval_index == {"ngrams": [1, 2, 3]} and back.max_retries == 3
    one, two = pickle.loads(data), pickle.loads(data)
    assert one.meta_fields == [] and one.meta_fields is not two.meta_fields
    # a default given explicitly (True is not 1) and a value that differs are both kept
    other = validate_config({"inputs": ["a"], "output": "o", "max_retries": 0, "bos": False})
    assert pickle.loads(pickle.dumps(other)) == other
    assert len(pickle.dumps(other)) > len(pickle.dumps(validate_config({"inputs": ["a"], "output": "o"})))


def test_the_manifest_records_inputs_compactly():
    from guideloom.workers.ingest import _metadata
    from guideloom.workers.tokenizer import load_tokenizer

    tok = load_tokenizer("bytes")
    sizes = []
    for n in (10, 10_000):
        plan = plan_parts(_files(n), part_size=10**6, text_per_line=False)
        from guideloom.workers.config import IngestConfig

        config = IngestConfig(inputs=["s3://bucket/raw/*.jsonl"], output="o")
        meta = _metadata(config, plan, "d", tok, [])[METADATA_KEY]
        assert meta["inputs"]["files"] == n and meta["inputs"]["bytes"] == 1000 * n
        sizes.append(len(json.dumps(meta["inputs"])))
    assert sizes[1] == sizes[0] + 6  # only the digits of the two counts differ

    explicit = []  # an explicit list of files: the first few are kept, then only their count
    for n in (100, 10_000):
        files = _files(n)
        plan = plan_parts(files, part_size=10**6, text_per_line=False)
        config = IngestConfig(inputs=[f.url for f in files], output="o")
        meta = _metadata(config, plan, "d", tok, [])[METADATA_KEY]
        assert meta["inputs"]["patterns_given"] == n and len(meta["inputs"]["patterns"]) == 16
        explicit.append(len(json.dumps(meta["inputs"])))
    assert explicit[1] <= explicit[0] + 8, explicit


def test_a_lone_surrogate_is_a_bad_record(write_jsonl, doc_rows, ingest_config, tmp_path):
    path = write_jsonl("s.jsonl", [*doc_rows(3), '{"text": "broken \\ud800 here"}', *doc_rows(2)])
    config = ingest_config([path], tmp_path / "ds")
    plan = plan_parts(
        [InputFile(str(path), path.stat().st_size, "jsonl", None)], part_size=10**6, text_per_line=False
    )
    with pytest.raises(
        IngestError, match=rf"{path} line 4: text field 'text' holds a lone surrogate \\ud800"
    ):
        write_part(config, part_spec(plan, 0), "d")
    skip = config.model_copy(update={"on_bad_record": "skip", "output": str(tmp_path / "ds2")})
    result = write_part(skip, part_spec(plan, 0), "d")
    assert result["documents"] == 5 and result["bad_records"] == {str(path): {"lone_surrogate": 1}}


def test_a_truncated_gz_names_the_file_and_the_offset(write_jsonl, doc_rows, ingest_config, tmp_path):
    path = write_jsonl("t.jsonl.gz", doc_rows(200), compression="gzip")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    size = path.stat().st_size
    config = ingest_config([path], tmp_path / "ds")
    plan = plan_parts([InputFile(str(path), size, "jsonl", "gzip")], part_size=10**6, text_per_line=False)
    with pytest.raises(IngestError) as err:
        write_part(config, part_spec(plan, 0), "d")
    message = str(err.value)
    assert message.startswith(f"{path}: gzip data ends or breaks after ")
    assert f"(compressed byte {size:,} of {size:,})" in message and "truncated or corrupt" in message
    assert not (tmp_path / "ds" / "manifest.json").exists()


@pytest.mark.parametrize(
    "url, shown",
    [
        ("https://user:secret@host/data/a.jsonl", "https://host/data/a.jsonl"),
        ("https://host/a.jsonl?X-Amz-Signature=abc&X-Amz-Credential=k", "https://host/a.jsonl"),
        (
            "https://acct.blob.core.windows.net/c/a.jsonl?sv=2024&sig=abc",
            "https://acct.blob.core.windows.net/c/a.jsonl",
        ),
        ("https://host/a.jsonl?page=2", "https://host/a.jsonl?page=2"),
        ("s3://bucket/raw/*.jsonl", "s3://bucket/raw/*.jsonl"),
        ("/local/path/a.jsonl", "/local/path/a.jsonl"),
    ],
)
def test_redact_url(url, shown):
    assert redact_url(url) == shown


@pytest.fixture
def http_dir(tmp_path):
    """A plain HTTP server on 127.0.0.1 serving tmp_path/'www' (ignores userinfo and queries)."""
    root = tmp_path / "www"
    root.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **k):
            super().__init__(*a, directory=str(root), **k)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield root, server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.ray
def test_credentials_in_input_urls_reach_neither_manifest_nor_messages(ray_local, http_dir, tmp_path):
    root, port = http_dir
    (root / "a.jsonl").write_text('{"text": "one"}\n{"no": "text"}\n{"text": "two"}\n')
    url = f"http://alice:s3cr3t@127.0.0.1:{port}/a.jsonl?X-Amz-Signature=deadbeef"
    with pytest.raises(IngestError) as err:
        ingest_dataset([url], tmp_path / "fail", input_format="jsonl")
    assert "s3cr3t" not in str(err.value) and "deadbeef" not in str(err.value)
    assert f"http://127.0.0.1:{port}/a.jsonl line 2" in str(err.value)
    result = ingest_dataset([url], tmp_path / "ok", input_format="jsonl", on_bad_record="skip")
    recorded = json.dumps(result.manifest.metadata)
    assert result.documents == 2 and "s3cr3t" not in recorded and "deadbeef" not in recorded
    assert result.bad_records == {f"http://127.0.0.1:{port}/a.jsonl": {"missing_field": 1}}


@pytest.mark.ray
def test_progress_moves_while_a_part_runs(ray_local, write_jsonl, doc_rows, tmp_path, monkeypatch, capfd):
    for name, value in hooks_env(doc_delay_s=0.02).items():  # one part of ~6 s
        monkeypatch.setenv(name, value)
    monkeypatch.setattr("guideloom.workers.progress.PlainProgress.EVERY_S", 1.0)
    path = write_jsonl("a.jsonl", doc_rows(300))
    ingest_dataset([str(path)], tmp_path / "ds", progress="plain")
    err = capfd.readouterr().err
    running = [line for line in err.splitlines() if "parts 0/1" in line]
    docs = [line.split("docs ")[1].split()[0] for line in running]
    assert len(running) >= 2 and len(set(docs)) >= 2, err  # counts from inside the running task
    assert any("parts 1/1  docs 300" in line for line in err.splitlines()), err


@pytest.mark.ray
def test_a_big_compressed_input_is_noted_as_unsplittable(ray_local, write_jsonl, doc_rows, tmp_path, capfd):
    path = write_jsonl("big.jsonl.gz", doc_rows(400), compression="gzip")
    ingest_dataset([str(path)], tmp_path / "ds", part_size=path.stat().st_size // 4, progress="plain")
    err = capfd.readouterr().err
    assert f"note: {path} (" in err and "gzip) cannot be split by byte offset" in err, err
