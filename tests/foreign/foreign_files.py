"""Small token files of other projects' layouts, written by the layouts' own rules (the tests
import these; `conftest.py` beside it makes fixtures of them).

Megatron pairs are written by `guideloom.storage.foreign.export.write_megatron` (checked against
megatron-core's own builder and reader in test_foreign_peers.py where megatron-core imports);
datatrove, nanoGPT and llm.c files by the few lines of NumPy their layouts take.
"""

from __future__ import annotations

import gzip
from typing import Any

import fsspec
import numpy as np

from guideloom.storage.foreign.export import write_megatron

__all__ = [
    "documents",
    "masks_of",
    "write_datatrove",
    "write_llmc",
    "write_megatron",
    "write_nanogpt",
    "write_olmo",
]


def documents(n: int = 60, seed: int = 0, vocab: int = 50_000, longest: int = 150) -> list[np.ndarray]:
    """``n`` documents of 1 .. ``longest`` token ids below ``vocab`` (a few thousand tokens)."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, size=int(rng.integers(1, longest))).astype(np.int64) for _ in range(n)]


def masks_of(docs: list[np.ndarray], seed: int = 7) -> list[np.ndarray]:
    """A boolean loss mask per document: a prompt (no loss) then an answer (loss), as SFT data."""
    rng = np.random.default_rng(seed)
    out = []
    for d in docs:
        m = np.ones(len(d), dtype=bool)
        m[: int(rng.integers(0, len(d)))] = False
        out.append(m)
    return out


def write_datatrove(
    path: str,
    docs: list[np.ndarray],
    dtype: Any = np.uint16,
    masks: list[np.ndarray] | None = None,
    **options: Any,
) -> None:
    """``path`` (``NAME.ds``) and ``NAME.ds.index``: the tokens, and each document's end; with
    ``masks``, ``NAME.ds.loss`` too (one bool byte a token, as datatrove's tokenizer writes it)."""
    flat = np.concatenate(docs).astype(dtype)
    ends = np.cumsum([len(d) for d in docs]).astype("<u8")
    with fsspec.open(path, "wb", **options) as f:
        f.write(flat.tobytes())
    with fsspec.open(path + ".index", "wb", **options) as f:
        f.write(ends.tobytes())
    if masks is not None:
        with fsspec.open(path + ".loss", "wb", **options) as f:
            f.write(np.concatenate(masks).astype(np.bool_).tobytes())


def write_olmo(
    path: str,
    docs: list[np.ndarray],
    dtype: Any = np.uint32,
    eos: int = 0,
    sidecar: bool = True,
    masks: list[np.ndarray] | None = None,
    mask_path: str | None = None,
    **options: Any,
) -> None:
    """An OLMo / Dolma token array ``path`` (``NAME.npy``: raw ``dtype`` tokens, no header, each
    document ending with ``eos``); with ``sidecar``, ``NAME.csv.gz`` (rows ``start,end,path,id``,
    as Dolma's tokenizer writes); with ``masks``, a bool label-mask array at ``mask_path``."""
    ended = [np.append(d, eos) for d in docs]
    with fsspec.open(path, "wb", **options) as f:
        f.write(np.concatenate(ended).astype(dtype).tobytes())
    if sidecar:
        ends = np.cumsum([len(d) for d in ended])
        rows = [
            f"{e - len(d)},{e},s3://raw/docs.jsonl.gz,doc-{k}" for k, (d, e) in enumerate(zip(ended, ends))
        ]
        with fsspec.open(path[: -len(".npy")] + ".csv.gz", "wb", **options) as f:
            f.write(gzip.compress(("\n".join(rows) + "\n").encode()))
    if masks is not None:
        assert mask_path is not None
        with fsspec.open(mask_path, "wb", **options) as f:
            f.write(np.concatenate([np.append(m, True) for m in masks]).astype(np.bool_).tobytes())


def write_nanogpt(path: str, docs: list[np.ndarray], eos: int = 50256, **options: Any) -> None:
    """A headerless uint16 ``.bin``: each document followed by the end-of-text id."""
    flat = np.concatenate([np.append(d, eos) for d in docs]).astype(np.uint16)
    with fsspec.open(path, "wb", **options) as f:
        f.write(flat.tobytes())


def write_llmc(path: str, docs: list[np.ndarray], eos: int = 50256, **options: Any) -> None:
    """An llm.c shard: 256 int32 (magic 20240520, version 1, tokens), then uint16 tokens, each
    document preceded by the end-of-text id (llm.c's convention)."""
    flat = np.concatenate([np.insert(d, 0, eos) for d in docs]).astype(np.uint16)
    header = np.zeros(256, "<i4")
    header[:3] = (20240520, 1, len(flat))
    with fsspec.open(path, "wb", **options) as f:
        f.write(header.tobytes() + flat.tobytes())
