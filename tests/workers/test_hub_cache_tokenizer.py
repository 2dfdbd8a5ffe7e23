"""#37 item 4: ``--tokenizer hf:ORG/NAME`` (a Hub model id) is read from the local Hugging Face
cache, offline, laid out as ``huggingface_hub`` lays it out (blobs, a snapshot of symlinks,
``refs/main``). main refused it ("neither a tokenizer.json nor a folder")."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from guideloom.errors import IngestError
from guideloom.workers.tokenizer import load_tokenizer


def _cache(root: Path, repo_id: str, tokenizer_json: Path, *, ref: bool = True) -> Path:
    """A hub cache holding ``repo_id``'s tokenizer.json and tokenizer_config.json."""
    repo = root / f"models--{repo_id.replace('/', '--')}"
    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    files = {
        "tokenizer.json": tokenizer_json.read_bytes(),
        "tokenizer_config.json": json.dumps(
            {"eos_token": "<|endoftext|>", "chat_template": "{{ x }}"}
        ).encode(),
    }
    for name, data in files.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        os.symlink(os.path.relpath(blob, snapshot), snapshot / name)
    if ref:
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(commit)
    return snapshot


@pytest.mark.parametrize("env", ["HF_HUB_CACHE", "HF_HOME"])
def test_a_hub_id_is_read_from_the_local_cache(tmp_path, monkeypatch, hf_tokenizer_json, env) -> None:
    repo_id = f"TestOrg/tiny-{env.lower()}"
    hub = tmp_path / "hf" / ("hub" if env == "HF_HOME" else "")
    _cache(hub, repo_id, hf_tokenizer_json)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv(env, str(tmp_path / "hf" if env == "HF_HOME" else hub))
    monkeypatch.chdir(tmp_path)  # no folder named TestOrg/... here: the id is not a local path
    tok = load_tokenizer(f"hf:{repo_id}")
    direct = load_tokenizer(f"hf:{hf_tokenizer_json}")
    text = "The quick brown fox"
    assert tok.encode_batch([text])[0].tolist() == direct.encode_batch([text])[0].tolist()
    assert tok.spec == f"hf:{repo_id}" and tok.eos_id == 0
    assert tok.chat_template == "{{ x }}"  # tokenizer_config.json beside it was read too


def test_without_refs_the_snapshot_holding_a_tokenizer_is_used(
    tmp_path, monkeypatch, hf_tokenizer_json
) -> None:
    _cache(tmp_path / "hub", "TestOrg/no-ref", hf_tokenizer_json, ref=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.chdir(tmp_path)
    assert load_tokenizer("hf:TestOrg/no-ref").vocab_size > 256


def test_a_model_missing_from_the_cache_names_the_cache_and_the_fixes(
    tmp_path, monkeypatch, hf_tokenizer_json
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(IngestError) as caught:
        load_tokenizer("hf:TestOrg/absent")
    message = str(caught.value)
    assert str(tmp_path / "empty-hub") in message
    assert "huggingface-cli download TestOrg/absent tokenizer.json tokenizer_config.json" in message
    assert "hf:FOLDER" in message
    # the offline fix, as written: a folder holding tokenizer.json
    folder = tmp_path / "TestOrg" / "absent"
    folder.mkdir(parents=True)
    (folder / "tokenizer.json").write_bytes(hf_tokenizer_json.read_bytes())
    assert load_tokenizer(f"hf:{folder}").vocab_size > 256
