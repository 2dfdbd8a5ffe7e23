"""The token-file layouts of other projects, as GuideLoom reads them in place.

Each reader here turns the files of one dataset of another project into `TokenFile` rows: where
the tokens are in a file (a header to skip, how many), and where its sorted document index is
(a column of the index file, in tokens or in bytes), read from the files' headers and sizes
only. Nothing is read whole: a Megatron ``.idx`` of 10^9 sequences stays where it is, and
`guideloom.storage.foreign.storage` reads its pointer column in pages as windows need it.

- ``megatron``: megatron-core's ``IndexedDataset`` pair ``PREFIX.bin`` / ``PREFIX.idx`` (also
  written by NeMo and datatrove's Megatron writer). ``.idx``: the 9-byte magic
  ``MMIDIDX\\x00\\x00``, ``<Q`` version 1, ``<B`` dtype code, ``<Q`` sequences N, ``<Q``
  documents D, then ``int32[N]`` sequence lengths, ``int64[N]`` byte pointers into ``.bin``,
  ``int64[D]`` document indices and, optionally, ``int8[N]`` modes. ``.bin``: the tokens.
- ``datatrove``: ``NAME.ds`` (tokens, uint16 or uint32) with ``NAME.ds.index`` (``uint64``
  document end positions, in tokens).
- ``nanogpt``: a headerless ``uint16`` ``.bin`` (documents end at an end-of-text id).
- ``llmc``: llm.c / modded-nanogpt shards: a 256 x ``int32`` header (magic 20240520, version,
  token count), then ``uint16`` tokens.
- ``olmo``: OLMo-core / Dolma token arrays: headerless ``.npy``-named arrays whose dtype is set by
  the training configuration, not recorded in the file; document bounds from a Dolma
  ``NAME.csv.gz`` sidecar (rows ``start,end,path,id``, token positions) or by an end-of-text
  scan; per-token boolean label masks (OLMo-core's ``label_mask_paths``) in files of their own.

Per-token loss masks (datatrove's ``NAME.ds.loss``, OLMo's label masks) are one byte per token
(0: no loss on that token), read beside the tokens as the stream's ``loss_mask`` field.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from guideloom.errors import GuideLoomError

__all__ = [
    "FORMATS",
    "LLMC_MAGIC",
    "MEGATRON_DTYPES",
    "MEGATRON_MAGIC",
    "ForeignFormatError",
    "IndexColumn",
    "TokenFile",
]

FORMATS = ("megatron", "datatrove", "nanogpt", "llmc", "olmo")

MEGATRON_MAGIC = b"MMIDIDX\x00\x00"
MEGATRON_HEADER = struct.Struct("<9sQBQQ")  # magic, version, dtype code, sequences, documents
MEGATRON_DTYPES: dict[int, np.dtype] = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.int8),
    3: np.dtype(np.int16),
    4: np.dtype(np.int32),
    5: np.dtype(np.int64),
    6: np.dtype(np.float64),
    7: np.dtype(np.float32),
    8: np.dtype(np.uint16),
}
"""megatron-core's ``DType`` codes (``megatron/core/datasets/indexed_dataset.py``)."""

LLMC_MAGIC = 20240520
LLMC_HEADER_BYTES = 256 * 4
LLMC_DTYPES = {1: np.dtype(np.uint16)}  # llm.c's GPT-2 shards; other versions need dtype=


class ForeignFormatError(GuideLoomError, ValueError):
    """A token file of another project's layout that cannot be read as that layout: wrong magic,
    truncated, an unknown dtype code, an index that disagrees with the data, a missing file."""


@dataclass(frozen=True)
class IndexColumn:
    """A sorted ``uint64``/``int64`` column of a file: where each document (record) of a token
    file starts.

    ``rel``: the file; ``offset``: the byte where the column begins; ``count``: its items;
    ``scale``: what one token is in the column's unit (the item size where the column holds byte
    pointers, 1 where it holds token positions); ``lead_zero``: the column holds document *ends*,
    so the starts are 0 followed by every end but the last (``count`` counts those starts).
    """

    rel: str
    offset: int
    count: int
    scale: int = 1
    lead_zero: bool = False


@dataclass(frozen=True)
class TokenFile:
    """One token file of a foreign dataset: a shard of the stream GuideLoom reads.

    ``rel``: its path below the dataset's root; ``size``: its bytes; ``offset``: header bytes
    before the tokens; ``tokens``: tokens it holds; ``identity``: what identifies this version of
    the file (size and ETag or modification time, of it, its index and its mask); ``starts``:
    its document starts, when the layout has an index; ``start_values``: those starts as
    ``<u8`` bytes held in memory, where the index cannot be read by range (a gzipped Dolma
    sidecar); ``mask_rel`` / ``mask_size``: its per-token loss-mask file (one byte a token).
    """

    rel: str
    size: int
    offset: int
    tokens: int
    identity: str
    starts: IndexColumn | None = None
    index_rel: str | None = None
    index_size: int = 0
    start_values: bytes | None = None
    mask_rel: str | None = None
    mask_size: int = 0


def megatron_header(data: bytes, where: str) -> tuple[np.dtype, int, int]:
    """``(dtype, sequences, documents)`` of a Megatron ``.idx`` from its first bytes."""
    if len(data) < MEGATRON_HEADER.size:
        raise ForeignFormatError(
            f"{where} has {len(data)} bytes, fewer than the {MEGATRON_HEADER.size}-byte header of a "
            "Megatron .idx: the file is truncated; copy it again from its source"
        )
    magic, version, code, sequences, documents = MEGATRON_HEADER.unpack(data[: MEGATRON_HEADER.size])
    if magic != MEGATRON_MAGIC:
        raise ForeignFormatError(
            f"{where} does not start with the Megatron index magic {MEGATRON_MAGIC!r} (it starts with "
            f"{magic!r}): it is not a megatron-core IndexedDataset .idx; pass the right file, or "
            "another format= (datatrove, nanogpt, llmc)"
        )
    if version != 1:
        raise ForeignFormatError(
            f"{where} is a Megatron index of version {version}; GuideLoom reads version 1 (what "
            "megatron-core's IndexedDatasetBuilder writes); rewrite it with megatron-core"
        )
    dtype = MEGATRON_DTYPES.get(code)
    if dtype is None:
        raise ForeignFormatError(
            f"{where} records the dtype code {code}, which megatron-core does not define (known: "
            + ", ".join(f"{k} {v.name}" for k, v in MEGATRON_DTYPES.items())
            + "); the header is damaged: copy the file again from its source"
        )
    return dtype, sequences, documents


def megatron_idx_size(sequences: int, documents: int) -> tuple[int, int]:
    """Sizes of a Megatron ``.idx`` of this many sequences and documents: without and with the
    optional per-sequence modes."""
    plain = MEGATRON_HEADER.size + sequences * (4 + 8) + documents * 8
    return plain, plain + sequences


def llmc_header(data: bytes, where: str) -> tuple[int, int]:
    """``(version, tokens)`` of an llm.c shard from its first 1024 bytes."""
    if len(data) < LLMC_HEADER_BYTES:
        raise ForeignFormatError(
            f"{where} has {len(data)} bytes, fewer than an llm.c shard's 1024-byte header: the file "
            "is truncated, or it is a headerless nanoGPT .bin (pass format='nanogpt')"
        )
    header = np.frombuffer(data[:LLMC_HEADER_BYTES], "<i4")
    if int(header[0]) != LLMC_MAGIC:
        raise ForeignFormatError(
            f"{where} does not start with the llm.c magic {LLMC_MAGIC} (it starts with {int(header[0])}): "
            "it is not an llm.c shard; for a headerless uint16 .bin pass format='nanogpt'"
        )
    return int(header[1]), int(header[2])
