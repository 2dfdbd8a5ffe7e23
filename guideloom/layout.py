"""Where things live in a dataset and which bytes hold what: the one owner of that arithmetic.

Writers, readers and the manifest models all take it from here, so they cannot drift apart. It
does no I/O and imports nothing of GuideLoom's but `guideloom.types`, so every layer may use it::

    <root>/manifest.json                                 written last, atomically
    <root>/parts/part-00003.json                         part 3's completion record (default run)
    <root>/parts/r-<run>/part-00003.json                 part 3's completion record (named run)
    <root>/shards/r-<run>/a-<attempt>/part-00003/shard-00000.<extension>
                                                         one attempt of part 3 (parallel parts)
    <root>/shards/w-<token>/part-00000/shard-00000.<extension>
                                                         shard files of a single writer's run

Shard files are written once, under names no other writer uses (an attempt token drawn when the
writer opens), and never rewritten: the completion record or manifest that names them is the one
atomic step that makes them part of a dataset.

**Files.** Every file of a shard has one *name*, used everywhere in code and as its key in the
manifest (``"data"``, ``"index"``, ``"meta"``, ``"spans"``, ``"span_dir"``), and one *kind*
(`FileKind`): its extension (which the manifest records as the file column's ``kind``), the code
its header carries, its item size and what counts its items. `LAYOUT_FILES` says which files each
layout writes, in the order the manifest lists them:

============  =============  ====  ============  ===============================================
name          extension      code  bytes/item    items
============  =============  ====  ============  ===============================================
``data``      ``tokens``     1     the format's  stream elements (``tokens`` of the shard)
``data``      ``docs``       2     1             encoded documents, back to back (bytes)
``index``     ``docs.idx``   3     8             ``uint64`` offsets into ``docs`` (``records + 1``)
``meta``      ``meta``       4     1             encoded annotations, back to back (bytes)
``spans``     ``spans``      5     32            span rows `SPAN_DTYPE` (``spans``)
``span_dir``  ``spans.dir``  6     32            span directory `SPAN_DIR_DTYPE` (`span_dir_entries`)
``starts``    ``starts``     7     8             ``uint64`` record starts (``records``)
============  =============  ====  ============  ===============================================

Record starts (manifest version 3 on) are, for every record appended to a stream shard (one
`Writer.append`, or one record of `Writer.append_batch`), the shard-relative position of its
first token, in append order: non-decreasing, the first 0, each at most the shard's ``tokens``
(an empty record starts where the next one does). Every stream layout writes them; datasets
written before them (manifest versions 1 and 2) have no such file, and readers say so
(`StreamDataset.has_record_starts`).

Span rows are ``(start, stop, meta_start, meta_stop)``: shard-relative token positions and byte
offsets into ``meta``. The span directory (manifest version 2 on) holds, for every block of
`span_block_tokens` tokens of the shard, where the span rows of that block begin, so a reader
finds a window's span rows with one read of this small file, however unevenly the spans are
spread over the tokens (see `span_directory`, `span_candidates`). Datasets written before it
(manifest version 1) have no such file; readers search the span table.

**Headers.** Every shard file starts with a 32-byte little-endian header (`HEADER_STRUCT`,
``<8sHHIQQ``): magic ``b"GLMSHARD"``, header version, kind code, bytes per item, item count,
reserved. The items follow back to back.

**Checksums** are ``"xxh3_64:<16 lowercase hex digits>"`` of a whole file, header included
(`checksum`, `parse_checksum`).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
import xxhash

from guideloom.errors import excerpt
from guideloom.types import Layout

__all__ = [
    "CHECKSUM_PATTERN",
    "DEFAULT_RUN",
    "FILES",
    "HEADER_SIZE",
    "HEADER_STRUCT",
    "KINDS",
    "LAYOUT_FILES",
    "MAGIC",
    "OFFSET_DTYPE",
    "RECORD_START_DTYPE",
    "STARTS",
    "SPAN_DIR_DTYPE",
    "SPAN_DTYPE",
    "FileKind",
    "FileName",
    "MAX_PATH_CHARS",
    "ShardHeader",
    "check_relative_path",
    "checksum",
    "item_count",
    "item_range",
    "manifest_path",
    "parse_checksum",
    "parse_shard_file_path",
    "part_record_path",
    "shard_file_extension",
    "shard_file_path",
    "snapshot_claims_path",
    "snapshot_log_path",
    "snapshot_log_sequence",
    "table_piece_path",
    "span_block_tokens",
    "span_candidates",
    "span_dir_entries",
    "span_directory",
]

# -- shard file headers ---------------------------------------------------------------------

MAGIC = b"GLMSHARD"
HEADER_VERSION = 1
HEADER_STRUCT = struct.Struct("<8sHHIQQ")  # magic, version, kind code, itemsize, count, reserved
HEADER_SIZE = HEADER_STRUCT.size  # 32 bytes

# -- item dtypes ----------------------------------------------------------------------------

OFFSET_DTYPE = np.dtype("<u8")
SPAN_DTYPE = np.dtype([("start", "<u8"), ("stop", "<u8"), ("meta_start", "<u8"), ("meta_stop", "<u8")])
# One directory entry per block boundary x = k * block: the first span row that stops after x,
# the first that starts at or after x, and the byte offsets into ``meta`` where they begin.
SPAN_DIR_DTYPE = np.dtype([("first", "<u8"), ("after", "<u8"), ("meta_first", "<u8"), ("meta_after", "<u8")])
SPAN_DIR_ROWS_PER_BLOCK = 16  # spans per directory block on average (512 bytes of rows)
SPAN_DIR_MAX_BLOCK = 2**16  # tokens per block at most (shards with few spans)

# -- the files of a shard -------------------------------------------------------------------

FileName = Literal["data", "index", "meta", "spans", "span_dir", "starts"]
"""The one name of a shard file: in code (`guideloom.types.FileTable`, byte requests) and as its
key in the manifest's ``files``."""

FILES: tuple[FileName, ...] = ("data", "index", "meta", "spans", "span_dir", "starts")


@dataclass(frozen=True)
class FileKind:
    """One kind of shard file: how it is named, marked and sized.

    Attributes:
        name: The file's name in code and in the manifest (``data`` for both ``tokens`` and
            ``docs``: a layout has one or the other).
        extension: The file name's extension, which the manifest records as its ``kind``.
        code: The kind code in the file's header.
        itemsize: Bytes per item; 0 where the format decides (stream elements).
        counted_by: The shard count (a column of the shard table) that gives its item count,
            plus `extra_items`; None where the count is not one of them (bytes of encoded
            documents or annotations; directory entries, see `item_count`).
        extra_items: Items beyond ``counted_by`` (an offsets index has one more than records).
    """

    name: FileName
    extension: str
    code: int
    itemsize: int
    counted_by: Literal["records", "tokens", "spans"] | None
    extra_items: int = 0


TOKENS = FileKind("data", "tokens", 1, 0, "tokens")
DOCS = FileKind("data", "docs", 2, 1, None)
INDEX = FileKind("index", "docs.idx", 3, OFFSET_DTYPE.itemsize, "records", 1)
META = FileKind("meta", "meta", 4, 1, None)
SPANS = FileKind("spans", "spans", 5, SPAN_DTYPE.itemsize, "spans")
SPAN_DIR = FileKind("span_dir", "spans.dir", 6, SPAN_DIR_DTYPE.itemsize, None)
STARTS = FileKind("starts", "starts", 7, OFFSET_DTYPE.itemsize, "records")
"""Record starts of a stream shard: one ``uint64`` token position per record (`RECORD_START_DTYPE`)."""

RECORD_START_DTYPE = OFFSET_DTYPE

KINDS: dict[str, FileKind] = {k.extension: k for k in (TOKENS, DOCS, INDEX, META, SPANS, SPAN_DIR, STARTS)}
"""Every file kind, by extension (the manifest's ``kind`` of a file column)."""

_BY_CODE = {k.code: k for k in KINDS.values()}

LAYOUT_FILES: dict[Layout, dict[FileName, FileKind]] = {
    "documents": {"data": DOCS, "index": INDEX},
    "stream": {"data": TOKENS, "starts": STARTS},
    "stream_with_meta": {
        "data": TOKENS,
        "starts": STARTS,
        "meta": META,
        "spans": SPANS,
        "span_dir": SPAN_DIR,
    },
}
"""The files each layout writes for every shard, by name, in the order the manifest lists them.
(Datasets of streams with metadata written before manifest version 2 have no ``span_dir``;
streams written before version 3 have no ``starts``.)"""


def item_count(kind: FileKind, *, records: int, tokens: int, spans: int, nbytes: int) -> int:
    """How many items a shard's file of ``kind`` holds (what its header says), for a shard of
    ``records`` records, ``tokens`` tokens and ``spans`` spans whose file has ``nbytes`` bytes
    of items (after the header)."""
    if kind.counted_by == "records":
        return records + kind.extra_items
    if kind.counted_by == "tokens":
        return tokens
    if kind.counted_by == "spans":
        return spans
    if kind is SPAN_DIR:
        return int(span_dir_entries(tokens, spans))
    return nbytes  # encoded documents or annotations: items are bytes


def span_block_tokens(tokens: npt.ArrayLike, spans: npt.ArrayLike) -> np.ndarray:
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


def span_dir_entries(tokens: npt.ArrayLike, spans: npt.ArrayLike) -> np.ndarray:
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


# -- paths ----------------------------------------------------------------------------------

MANIFEST = "manifest.json"
PARTS_DIR = "parts"
SHARDS_DIR = "shards"
SNAPSHOTS_DIR = "snapshots"  # log/<sequence>.json, tables/<hash>.json, claims/<sequence>/
DEFAULT_RUN = "default"
_RUN_FOLDER = "r-"  # parts/r-<run>, shards/r-<run>
_ATTEMPT_FOLDER = "a-"  # shards/r-<run>/a-<attempt>
_GENERATION_FOLDER = "w-"  # shards/w-<token>


def manifest_path() -> str:
    """The manifest, relative to the dataset root."""
    return MANIFEST


def snapshot_log_path(sequence: int) -> str:
    """The record of snapshot number ``sequence`` (created once, never replaced)."""
    return f"{SNAPSHOTS_DIR}/log/{sequence:08d}.json"


def snapshot_log_sequence(name: str) -> int | None:
    """The sequence number of a file name of ``snapshots/log`` (None for another name)."""
    stem, _, ext = name.partition(".")
    return int(stem) if ext == "json" and stem.isdigit() else None


def snapshot_claims_path(sequence: int) -> str:
    """The folder of claims on snapshot number ``sequence``, on stores without conditional
    writes (`guideloom.io.Location.create`); empty once the number is taken."""
    return f"{SNAPSHOTS_DIR}/claims/{sequence:08d}"


_EMPTY_OR_DOTS = frozenset(("", ".", ".."))  # path components check_relative_path refuses
_CONTROL = re.compile("[\x00-\x1f\x7f]")  # control characters (checked on every read's path)


def check_relative_path(path: str, what: str) -> None:
    """``ValueError`` unless ``path`` is a plain relative path of named components: the one rule
    that keeps every path a dataset's metadata names (shard prefixes and files, table pieces)
    inside the dataset root, on every store. `guideloom.io.Location.path` applies it again to
    every path it joins to the root."""
    if (
        not isinstance(path, str)
        or not path
        or len(path) > MAX_PATH_CHARS
        or "://" in path
        or "\\" in path
        or ":" in path.split("/", 1)[0]
        or not _EMPTY_OR_DOTS.isdisjoint(path.split("/"))
        or _CONTROL.search(path) is not None
    ):
        raise ValueError(
            f"{what} {excerpt(path)} must be relative to the dataset root: a path of named "
            f"components of at most {MAX_PATH_CHARS} characters (no leading or doubled '/', no "
            "'.' or '..', no URL scheme, drive, backslash or control characters)"
        )


MAX_PATH_CHARS = 1024  # longer relative paths are refused (no store keys them anyway)


def table_piece_path(name: str) -> str:
    """A piece of a snapshot's shard table (named by a hash of its content)."""
    return f"{SNAPSHOTS_DIR}/tables/{name}.json"


def part_record_path(part: int, run: str | None = None) -> str:
    """Part ``part``'s completion record of run ``run`` (``None``: the default run)."""
    if run is None or run == DEFAULT_RUN:
        return f"{PARTS_DIR}/part-{part:05d}.json"
    return f"{PARTS_DIR}/{_RUN_FOLDER}{run}/part-{part:05d}.json"


def parts_folder_run(name: str) -> str | None:
    """The run whose part records a folder ``name`` of ``parts/`` holds (``r-<run>``), or None
    for an entry that is not such a folder (the default run's records lie in ``parts/``)."""
    return name[len(_RUN_FOLDER) :] if name.startswith(_RUN_FOLDER) else None


def run_prefix(run: str | None) -> str:
    """Where the attempts of one parallel run keep their shards: ``shards/r-<run>``."""
    return f"{SHARDS_DIR}/{_RUN_FOLDER}{run or DEFAULT_RUN}"


def attempt_prefix(run: str | None, attempt: str) -> str:
    """The shard prefix of one writer attempt of a parallel run (unique per attempt)."""
    return f"{run_prefix(run)}/{_ATTEMPT_FOLDER}{attempt}"


def attempt_prefix_of(path: str) -> str:
    """The attempt prefix (``shards/r-<run>/a-<attempt>``) of a file under a run's prefix."""
    return "/".join(path.split("/")[:3])


def run_of_prefix(prefix: str) -> str | None:
    """The run a shard prefix ``shards/r-<run>/a-<attempt>`` belongs to (None for others)."""
    pieces = prefix.split("/")
    if len(pieces) == 3 and pieces[1].startswith(_RUN_FOLDER):
        return pieces[1][len(_RUN_FOLDER) :]
    return None


def generation_prefix(token: str) -> str:
    """Shards of one single-writer run: ``shards/w-<token>``, so an overwrite never touches the
    files of the dataset it replaces until the new manifest is in place."""
    return f"{SHARDS_DIR}/{_GENERATION_FOLDER}{token}"


def part_dir(part: int, prefix: str = SHARDS_DIR) -> str:
    """The folder of part ``part``'s shards under ``prefix``."""
    return f"{prefix}/part-{part:05d}"


def shard_file_path(part: int, index: int, extension: str, prefix: str = SHARDS_DIR) -> str:
    """Shard ``index`` of part ``part``'s file of the kind with ``extension`` (a key of
    `KINDS`), under ``prefix``: ``<prefix>/part-PPPPP/shard-SSSSS.<extension>``."""
    if extension not in KINDS:
        raise ValueError(f"unknown shard file kind {excerpt(extension)}")
    return f"{prefix}/part-{part:05d}/shard-{index:05d}.{extension}"


def parse_shard_file_path(path: str, part: int, index: int) -> tuple[str, str] | None:
    """``(prefix, extension)`` of a shard file path of part ``part`` shard ``index`` (the inverse
    of `shard_file_path`, the extension not checked), or None if ``path`` is not one."""
    prefix, _, tail = path.rpartition("/part-")
    expected = f"{part:05d}/shard-{index:05d}."
    if not tail.startswith(expected):
        return None
    return prefix, tail[len(expected) :]


def shard_file_extension(path: str) -> str:
    """The extension of a shard file path (``docs.idx`` of ``.../shard-00000.docs.idx``)."""
    return path.rsplit("/", 1)[-1].split(".", 1)[1]


# -- headers --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShardHeader:
    """The header of a shard file: its kind (the extension, a key of `KINDS`), bytes per item
    and item count."""

    kind: str
    itemsize: int
    count: int

    def pack(self) -> bytes:
        """The 32 header bytes."""
        return HEADER_STRUCT.pack(MAGIC, HEADER_VERSION, KINDS[self.kind].code, self.itemsize, self.count, 0)

    @classmethod
    def unpack(cls, data: bytes, where: str) -> ShardHeader:
        """Parse a header; ``ValueError`` naming ``where`` if it is not one."""
        if len(data) < HEADER_SIZE:
            raise ValueError(f"{where}: file is shorter than a shard header ({len(data)} bytes)")
        magic, version, code, itemsize, count, _ = HEADER_STRUCT.unpack(data[:HEADER_SIZE])
        if magic != MAGIC:
            raise ValueError(f"{where}: not a GuideLoom shard file (bad magic {magic!r})")
        if version != HEADER_VERSION:
            raise ValueError(f"{where}: shard header version {version}; upgrade guideloom to read it")
        if code not in _BY_CODE:
            raise ValueError(f"{where}: unknown shard file kind {code}")
        return cls(_BY_CODE[code].extension, itemsize, count)


def item_range(start: int, stop: int, itemsize: int) -> tuple[int, int]:
    """Half-open byte range of items ``[start, stop)`` in a shard file."""
    return HEADER_SIZE + start * itemsize, HEADER_SIZE + stop * itemsize


# -- checksums ------------------------------------------------------------------------------

CHECKSUM_ALGORITHM = "xxh3_64"
CHECKSUM_PATTERN = r"^xxh3_64:[0-9a-f]{16}$"
"""What every recorded checksum matches (a regular expression)."""
_CHECKSUM = re.compile(CHECKSUM_PATTERN)


def checksum(hasher: xxhash.xxh3_64) -> str:
    """The checksum of what ``hasher`` has seen, as the manifest records it."""
    return f"{CHECKSUM_ALGORITHM}:{hasher.hexdigest()}"


def parse_checksum(value: str) -> int:
    """The 64-bit digest of a recorded checksum; ``ValueError`` unless it is
    ``"xxh3_64:<16 lowercase hex digits>"``."""
    if not isinstance(value, str) or not _CHECKSUM.fullmatch(value):
        raise ValueError(f"checksum {excerpt(value)} is not '{CHECKSUM_ALGORITHM}:<16 hex digits>'")
    return int(value[len(CHECKSUM_ALGORITHM) + 1 :], 16)
