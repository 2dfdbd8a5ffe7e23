"""Where things live in a dataset and which bytes hold what: the one owner of that arithmetic.

Writers and readers both call these functions, so they cannot drift apart::

    <root>/manifest.json                                 written last, atomically
    <root>/parts/part-00003.json                         part 3's completion record (default run)
    <root>/parts/r-<run>/part-00003.json                 part 3's completion record (named run)
    <root>/shards/r-<run>/a-<attempt>/part-00003/shard-00000.<kind>
                                                         one attempt of part 3 (parallel parts)
    <root>/shards/w-<run>/part-00000/shard-00000.<kind>  shard files of a single writer's run

Shard files are written once, under names no other writer uses (an attempt token drawn when the
writer opens), and never rewritten: the completion record or manifest that names them is the one
atomic step that makes them part of a dataset.

Every shard file starts with a 32-byte little-endian header (``struct`` format ``<8sHHIQQ``):
magic ``b"GLMSHARD"``, header version, file kind, bytes per item, item count, reserved. The items
follow back to back. File kinds:

* ``tokens`` — stream elements (the structured dtype of the stream format);
* ``docs`` / ``docs.idx`` — encoded documents / ``uint64`` offsets ``[count + 1]`` into them;
* ``meta`` / ``spans`` — encoded annotations / span table ``(start, stop, meta_start, meta_stop)``
  in shard-relative token positions and byte offsets into ``meta``;
* ``spans.dir`` — the span directory (manifest version 2 on): for every block of
  `span_block_tokens` tokens of the shard, where the span rows of that block begin, so a
  reader finds a window's span rows with one read of this small file, however unevenly the
  spans are spread over the tokens (see `span_directory`, `span_candidates`). Datasets
  written before it (manifest version 1) have no such file; readers search the span table.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import xxhash

__all__ = [
    "HEADER_SIZE",
    "MAGIC",
    "SPAN_DIR_DTYPE",
    "SPAN_DTYPE",
    "ShardHeader",
    "checksum",
    "item_range",
    "manifest_path",
    "part_record_path",
    "shard_file_path",
    "span_block_tokens",
    "span_candidates",
    "span_dir_entries",
    "span_directory",
]

MAGIC = b"GLMSHARD"
HEADER_VERSION = 1
_HEADER = struct.Struct("<8sHHIQQ")
HEADER_SIZE = _HEADER.size  # 32 bytes

MANIFEST = "manifest.json"
PARTS_DIR = "parts"
SHARDS_DIR = "shards"

FILE_KINDS = {"tokens": 1, "docs": 2, "docs.idx": 3, "meta": 4, "spans": 5, "spans.dir": 6}

OFFSET_DTYPE = np.dtype("<u8")
SPAN_DTYPE = np.dtype([("start", "<u8"), ("stop", "<u8"), ("meta_start", "<u8"), ("meta_stop", "<u8")])
# One directory entry per block boundary x = k * block: the first span row that stops after x,
# the first that starts at or after x, and the byte offsets into ``meta`` where they begin.
SPAN_DIR_DTYPE = np.dtype([("first", "<u8"), ("after", "<u8"), ("meta_first", "<u8"), ("meta_after", "<u8")])
SPAN_DIR_ROWS_PER_BLOCK = 16  # spans per directory block on average (512 bytes of rows)
SPAN_DIR_MAX_BLOCK = 2**16  # tokens per block at most (shards with few spans)


def span_block_tokens(tokens: Any, spans: Any) -> np.ndarray:
    """Tokens per block of a shard's span directory, for shards of ``tokens`` tokens and
    ``spans`` spans (ints or arrays, elementwise): the largest power of two at most
    `SPAN_DIR_MAX_BLOCK` such that a block holds about `SPAN_DIR_ROWS_PER_BLOCK` spans on
    average. Spans are disjoint and non-empty, so a block of ``b`` tokens never holds more
    than ``b`` of them, and the directory is at most 1/8 of the span table's size (32 bytes per
    8 spans or more). Computed
    from the shard's counts in the manifest, so it is stored nowhere."""
    tokens = np.asarray(tokens, dtype=np.int64)
    spans = np.asarray(spans, dtype=np.int64)
    target = SPAN_DIR_ROWS_PER_BLOCK * tokens // np.maximum(spans, 1)
    target = np.clip(target, 1, SPAN_DIR_MAX_BLOCK)  # exact in float64 below: small powers of 2
    block = np.left_shift(1, np.floor(np.log2(target)).astype(np.int64))
    return np.where(spans > 0, block, SPAN_DIR_MAX_BLOCK)


def span_dir_entries(tokens: Any, spans: Any) -> np.ndarray:
    """Entries of a shard's span directory (elementwise): one per block boundary
    ``0, b, 2b, ...`` up to the first at or past the shard's last token."""
    tokens = np.asarray(tokens, dtype=np.int64)
    return -(-tokens // span_block_tokens(tokens, spans)) + 1


def span_directory(table: np.ndarray, tokens: int, meta_size: int) -> np.ndarray:
    """The span directory of a shard: ``table`` its span rows (`SPAN_DTYPE`, sorted and
    disjoint), ``tokens`` its token count, ``meta_size`` the bytes of its ``meta`` file's items."""
    count = len(table)
    block = int(span_block_tokens(tokens, count))
    bounds = np.arange(int(span_dir_entries(tokens, count)), dtype=np.uint64) * np.uint64(block)
    meta_at = np.append(table["meta_start"], np.uint64(meta_size))  # meta offset of row r
    out = np.empty(len(bounds), SPAN_DIR_DTYPE)
    out["first"] = np.searchsorted(table["stop"], bounds, side="right")
    out["after"] = np.searchsorted(table["start"], bounds, side="left")
    out["meta_first"] = meta_at[out["first"]]
    out["meta_after"] = meta_at[out["after"]]
    return out


def span_candidates(
    starts: np.ndarray, stops: np.ndarray, block: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For token ranges ``[starts, stops)`` of a shard (``stops > starts``): the directory
    entries ``(k0, k1)`` whose ``first`` row (of ``k0``) and ``after`` row (of ``k1``) bound
    the span rows that may overlap the range, ``[dir[k0].first, dir[k1].after)``; the meta
    bytes of those rows are ``[dir[k0].meta_first, dir[k1].meta_after)``."""
    return starts // block, -(-stops // block)


def manifest_path() -> str:
    return MANIFEST


DEFAULT_RUN = "default"


def part_record_path(part: int, run: str | None = None) -> str:
    """Part ``part``'s completion record of run ``run`` (``None``: the default run)."""
    if run is None or run == DEFAULT_RUN:
        return f"{PARTS_DIR}/part-{part:05d}.json"
    return f"{PARTS_DIR}/r-{run}/part-{part:05d}.json"


def run_prefix(run: str | None) -> str:
    """Where the attempts of one parallel run keep their shards: ``shards/r-<run>``."""
    return f"{SHARDS_DIR}/r-{run or DEFAULT_RUN}"


def attempt_prefix(run: str | None, attempt: str) -> str:
    """The shard prefix of one writer attempt of a parallel run (unique per attempt)."""
    return f"{run_prefix(run)}/a-{attempt}"


def shard_file_path(part: int, index: int, kind: str, prefix: str = SHARDS_DIR) -> str:
    if kind not in FILE_KINDS:
        raise ValueError(f"unknown shard file kind {kind!r}")
    return f"{part_dir(part, prefix)}/shard-{index:05d}.{kind}"


def part_dir(part: int, prefix: str = SHARDS_DIR) -> str:
    return f"{prefix}/part-{part:05d}"


def generation_prefix(token: str) -> str:
    """Shards of one single-writer run: ``shards/w-<token>``, so an overwrite never touches the
    files of the dataset it replaces until the new manifest is in place."""
    return f"{SHARDS_DIR}/w-{token}"


@dataclass(frozen=True)
class ShardHeader:
    kind: str
    itemsize: int
    count: int

    def pack(self) -> bytes:
        return _HEADER.pack(MAGIC, HEADER_VERSION, FILE_KINDS[self.kind], self.itemsize, self.count, 0)

    @classmethod
    def unpack(cls, data: bytes, where: str) -> ShardHeader:
        """Parse a header; ``ValueError`` naming ``where`` if it is not one."""
        if len(data) < HEADER_SIZE:
            raise ValueError(f"{where}: file is shorter than a shard header ({len(data)} bytes)")
        magic, version, kind, itemsize, count, _ = _HEADER.unpack(data[:HEADER_SIZE])
        if magic != MAGIC:
            raise ValueError(f"{where}: not a GuideLoom shard file (bad magic {magic!r})")
        if version != HEADER_VERSION:
            raise ValueError(f"{where}: shard header version {version}; upgrade guideloom to read it")
        names = {v: k for k, v in FILE_KINDS.items()}
        if kind not in names:
            raise ValueError(f"{where}: unknown shard file kind {kind}")
        return cls(names[kind], itemsize, count)


def item_range(start: int, stop: int, itemsize: int) -> tuple[int, int]:
    """Half-open byte range of items ``[start, stop)`` in a shard file."""
    return HEADER_SIZE + start * itemsize, HEADER_SIZE + stop * itemsize


def checksum(hasher: xxhash.xxh3_64) -> str:
    return f"xxh3_64:{hasher.hexdigest()}"
