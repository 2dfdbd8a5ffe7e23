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
  in shard-relative token positions and byte offsets into ``meta``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import xxhash

__all__ = [
    "HEADER_SIZE",
    "MAGIC",
    "SPAN_DTYPE",
    "ShardHeader",
    "checksum",
    "item_range",
    "manifest_path",
    "part_record_path",
    "shard_file_path",
]

MAGIC = b"GLMSHARD"
HEADER_VERSION = 1
_HEADER = struct.Struct("<8sHHIQQ")
HEADER_SIZE = _HEADER.size  # 32 bytes

MANIFEST = "manifest.json"
PARTS_DIR = "parts"
SHARDS_DIR = "shards"

FILE_KINDS = {"tokens": 1, "docs": 2, "docs.idx": 3, "meta": 4, "spans": 5}

OFFSET_DTYPE = np.dtype("<u8")
SPAN_DTYPE = np.dtype([("start", "<u8"), ("stop", "<u8"), ("meta_start", "<u8"), ("meta_stop", "<u8")])


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
