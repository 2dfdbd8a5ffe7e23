"""Chat, streams with metadata and transforms from the command line and job files (the same
datasets as ``ingest_dataset`` commits), hf: tokenizer folders over fsspec, and --bos."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import fsspec
import numpy as np
import pytest
from typer.testing import CliRunner

from guideloom import StreamDataset
from guideloom.errors import IngestError
from guideloom.storage.checks import read_manifest
from guideloom.workers.ingest import ingest_dataset
from guideloom.workers.tokenizer import load_tokenizer


def _shards(manifest) -> list[tuple]:
    return [
        (s.part, s.index, s.records, s.size, sorted((n, f.checksum) for n, f in s.files.items()))
        for s in manifest.shards
    ]


def _cli(*args: str) -> str:
    from guideloom.cli import app

    run = CliRunner().invoke(app, ["ingest", *args, "-q"])
    assert run.exit_code == 0, run.output
    return run.output


CHATS = [
    {
        "messages": [
            {"role": "user", "content": f"question {i}?"},
            {"role": "assistant", "content": f"answer {i}."},
        ]
    }
    for i in range(30)
]


def test_chat_from_the_cli_and_a_job_file_is_the_dataset_ingest_dataset_commits(ray_local, tmp_path):
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in CHATS))
    api = ingest_dataset(
        [str(path)],
        str(tmp_path / "api"),
        input_format="chat",
        chat_template="chatml",
        train_on="last",
        part_size=700,
        shard_size=1000,
    )
    assert api.parts > 1
    out = _cli(
        str(path),
        "-o",
        str(tmp_path / "cli"),
        "--input-format",
        "chat",
        "--chat-template",
        "chatml",
        "--train-on",
        "last",
        "--part-size",
        "700",
        "--shard-size",
        "1000",
    )
    cli = read_manifest(str(tmp_path / "cli"), {})[1]
    assert _shards(cli) == _shards(api.manifest) and cli.metadata == api.manifest.metadata
    assert 'StreamNumpyFormat({"tokens": np.uint16, "loss_mask": np.uint8})' in out
    job = tmp_path / "job.yaml"
    job.write_text(
        f"inputs: [{path}]\noutput: {tmp_path / 'job'}\ninput_format: chat\nchat_template: chatml\n"
        "train_on: last\npart_size: 700\nshard_size: 1000\n"
    )
    _cli("--config", str(job))
    assert _shards(read_manifest(str(tmp_path / "job"), {})[1]) == _shards(api.manifest)


def test_stream_with_meta_and_a_transform_from_the_cli(ray_local, tmp_path):
    path = tmp_path / "a.jsonl"
    rows = [
        {"text": f"row {i} in Köln", "src": f"s{i % 2}", "spans": [{"start": 0, "end": 3, "tag": "w"}]}
        for i in range(6)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    api = ingest_dataset(
        [str(path)],
        str(tmp_path / "api"),
        layout="stream-with-meta",
        meta_fields=["src"],
        spans_field="spans",
        meta_format="msgpack",
        transform="tests.workers.transforms_for_tests:keep_even_rows",
        transform_id="even-v1",
    )
    _cli(
        str(path),
        "-o",
        str(tmp_path / "cli"),
        "--layout",
        "stream-with-meta",
        "--meta-field",
        "src",
        "--spans-field",
        "spans",
        "--meta-format",
        "msgpack",
        "--transform",
        "tests.workers.transforms_for_tests:keep_even_rows",
        "--transform-id",
        "even-v1",
    )
    cli = read_manifest(str(tmp_path / "cli"), {})[1]
    assert _shards(cli) == _shards(api.manifest)
    assert cli.format.name == "StreamWithMetaMsgpackFormat" and api.documents == 3
    assert api.filtered == {str(path): 3}


def test_hf_tokenizer_folder_over_fsspec_and_its_config(tmp_path, hf_tokenizer_json):
    root = "memory://gl-ing-tokenizers/m1"
    fs = fsspec.filesystem("memory")
    fs.pipe(f"{root}/tokenizer.json", Path(hf_tokenizer_json).read_bytes())
    fs.pipe(
        f"{root}/tokenizer_config.json",
        json.dumps({"eos_token": "<|endoftext|>", "chat_template": "{{ messages[0]['content'] }}"}).encode(),
    )
    tok = load_tokenizer(f"hf:{root}")
    assert tok.chat_template == "{{ messages[0]['content'] }}" and tok.eos_id == 0
    plain = load_tokenizer(f"hf:{hf_tokenizer_json}")
    assert plain.chat_template is None and tok.files_hash != plain.files_hash  # the config counts
    with pytest.raises(
        IngestError,
        match=r"neither a tokenizer\.json nor a folder: give hf:PATH/tokenizer\.json or hf:FOLDER",
    ):
        load_tokenizer(f"hf:{tmp_path}/missing-folder")


def test_bos_starts_every_document_once(ray_local, tmp_path, hf_tokenizer_json, write_jsonl, doc_rows):
    folder = tmp_path / "tok"
    folder.mkdir()
    shutil.copy(hf_tokenizer_json, folder / "tokenizer.json")
    (folder / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<|endoftext|>"}))
    with pytest.raises(
        IngestError,
        match=r"has no beginning-of-sequence token, so --bos cannot add one: give an hf: tokenizer whose tokenizer_config.json names bos_token",
    ):
        ingest_dataset(
            [str(write_jsonl("x.jsonl", doc_rows(2)))],
            str(tmp_path / "nobos"),
            tokenizer=f"hf:{hf_tokenizer_json}",
            bos=True,
        )
    # bos and eos are the same token here: each document is <bos> ... <eos>
    result = ingest_dataset(
        [str(write_jsonl("a.jsonl", doc_rows(4)))], str(tmp_path / "ds"), tokenizer=f"hf:{folder}", bos=True
    )
    tokens = StreamDataset(result.storage, sequence_length=result.tokens)[0]["tokens"]
    marks = np.flatnonzero(tokens == 0)
    assert tokens[0] == 0 and len(marks) == 8 and tokens[-1] == 0
    tok = load_tokenizer(f"hf:{folder}")
    texts = [tok.decode(tokens[a + 1 : b].tolist()) for a, b in zip(marks[0::2], marks[1::2])]
    assert texts == [r["text"] for r in doc_rows(4)]
    assert result.manifest.metadata["ingest"]["options"]["bos"] is True
