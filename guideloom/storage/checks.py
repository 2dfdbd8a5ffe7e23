"""Checking what is stored against what records it: a manifest or part record against the
storage class and format it is opened with (`check_schema`), and shard files against the
manifest (existence, size, header and checksum).

The shard checks need only a location and a manifest, not the user's format class, so
``guideloom verify`` works on any dataset.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import xxhash

import guideloom.layout as layout
from guideloom.errors import (
    SchemaMismatchError,
    ShardCorruptError,
    ShardNotFoundError,
    StorageAccessError,
    excerpt,
)
from guideloom.formats import Format, same_spec
from guideloom.io import Location
from guideloom.manifest import Manifest, PartRecord, ShardInfo
from guideloom.storage.opening import format_expression

__all__ = [
    "DEFAULT_VERIFY_CONCURRENCY",
    "check_schema",
    "check_shard",
    "load_manifest",
    "read_manifest",
    "verify_shards",
]

_CHUNK = 8 * 2**20  # bytes per request when checksumming a file
DEFAULT_VERIFY_CONCURRENCY = 16  # shards checked at once by verify


def load_manifest(location: Location) -> Manifest:
    """Open the dataset at ``location`` as every reader does (`History.open`: the current
    snapshot, every metadata file checked) and return its manifest.

    Raises:
        DatasetNotFoundError: No dataset is committed there.
        ManifestError: A metadata file is unreadable, invalid or contradicts another.
    """
    from guideloom.storage.history import History  # history reads through checks' neighbours

    return History(location).open()[1]


def read_manifest(
    url: str | os.PathLike[str], storage_options: dict[str, Any] | None = None
) -> tuple[Location, Manifest]:
    """Open any dataset's manifest without knowing its storage class or format."""
    location = Location(url, storage_options)
    return location, load_manifest(location)


def check_schema(storage_class: str, format: Format, recorded: Manifest | PartRecord, where: str) -> None:
    """`SchemaMismatchError` unless ``recorded`` (a manifest or part record, read from ``where``)
    was written with storage class ``storage_class`` and a format of the same spec as ``format``."""
    if recorded.storage_class != storage_class:
        raise SchemaMismatchError(
            f"{where} records a {_short(recorded.storage_class)}, but it was opened as "
            f"{storage_class}; reopen it with the class and format it records: "
            f"{recorded.storage_class}(url, {format_expression(recorded)})"
        )
    if not same_spec(recorded.format.model_dump(), format.spec()):
        raise SchemaMismatchError(
            f"{where} was written with format {_short(recorded.format.name)} "
            f"config={excerpt(recorded.format.config, 300)}, but opened with {type(format).__qualname__} "
            f"config={format.config()}{_field_difference(recorded.format.config, format.config())}; "
            f"reopen it with the format it was written with: {format_expression(recorded)}"
        )


def _short(value: object) -> str:
    """A value read from a file, as a message shows it: as is when short and printable, else
    an escaped excerpt."""
    if isinstance(value, str) and len(value) <= 60 and value.isprintable():
        return value
    return excerpt(value)


def _field_difference(recorded: dict[str, Any], opened: dict[str, Any]) -> str:
    """`` (field 'tokens': written <u2, opened <u4)``: the stream fields that differ, if any
    (nothing for a recorded config too damaged to compare)."""
    try:
        if "stream" in recorded and "stream" in opened:
            recorded, opened = recorded["stream"], opened["stream"]
        if not isinstance(recorded.get("fields"), list) or not isinstance(opened.get("fields"), list):
            return ""
        mine, theirs = dict(map(tuple, recorded["fields"])), dict(map(tuple, opened["fields"]))
    except (AttributeError, TypeError, ValueError):
        return ""
    diffs = [
        f"field {excerpt(name)}: written {_short(mine.get(name, 'absent'))}, opened {theirs.get(name, 'absent')}"
        for name in [*mine, *(n for n in theirs if n not in mine)]
        if mine.get(name) != theirs.get(name)
    ][:5]
    return f" ({'; '.join(diffs)})" if diffs else ""


def check_shard(
    location: Location,
    shard: ShardInfo,
    verify: str = "checksum",
    *,
    size_of: Callable[[str], int] | None = None,
) -> None:
    """Raise `ShardNotFoundError` / `ShardCorruptError` if a file of the shard differs.

    ``verify``: ``"none"``, ``"size"`` (one metadata request per file, or none where ``size_of``,
    a lookup of relative path -> bytes, already knows it) or ``"checksum"`` (reads every byte and
    also checks each file's header against the counts the manifest records).
    """
    if verify not in ("none", "size", "checksum"):
        raise ValueError(f"verify must be 'none', 'size' or 'checksum', got {verify!r}")
    if verify == "none":
        return
    last_offset: int | None = None
    for info in shard.files.values():
        where = location.describe(info.path)
        if verify == "size":
            _check_size(location, shard, info.path, info.size, size_of)
            continue
        # Checksums: no size request first. The reads ask for one byte past the recorded end, so
        # a file that is shorter or longer than recorded shows in the bytes that come back.
        kind = layout.shard_file_extension(info.path)
        hasher = xxhash.xxh3_64()
        offsets = _OffsetCheck(shard, where) if kind == layout.INDEX.extension else None
        if kind == layout.STARTS.extension:
            offsets = _StartsCheck(shard, where)
        intact = True
        for start in range(0, info.size, _CHUNK):
            end = min(info.size, start + _CHUNK)
            last = end == info.size
            try:
                chunk = location.read(info.path, start=start, end=end + 1 if last else end)
            except FileNotFoundError:
                raise ShardNotFoundError(
                    f"{shard.name}: {where} is missing; restore it or rewrite the dataset"
                ) from None
            except StorageAccessError:
                _check_size(location, shard, info.path, info.size, None)  # a range past its end?
                raise
            if len(chunk) != end - start:  # shorter: truncated; one byte more: it grew
                intact = False
                break
            if start == 0:
                _check_header(chunk, kind, info.size, shard, where)
            if offsets is not None:
                offsets.feed(chunk[layout.HEADER_SIZE :] if start == 0 else chunk)
            hasher.update(chunk)
        if not intact:
            _check_size(location, shard, info.path, info.size, None)
            raise ShardCorruptError(  # the size matched on a second look: it changed meanwhile
                f"{shard.name}: {where} changed while it was being checked; check it again"
            )
        actual = layout.checksum(hasher)
        if actual != info.checksum:
            raise ShardCorruptError(
                f"{shard.name}: {where} has checksum {actual} but the manifest records "
                f"{info.checksum}; the file was altered. Restore it or rewrite the dataset"
            )
        if isinstance(offsets, _StartsCheck):
            offsets.done()
        elif offsets is not None:
            last_offset = offsets.last
    if last_offset is not None and "data" in shard.files:
        data_bytes = shard.files["data"].size - layout.HEADER_SIZE
        if last_offset != data_bytes:
            raise ShardCorruptError(
                f"{shard.name}: its index ends at byte {last_offset} of the documents, but the "
                f"documents file holds {data_bytes}; rewrite the dataset"
            )


def _check_size(
    location: Location, shard: ShardInfo, rel: str, expected: int, size_of: Callable[[str], int] | None
) -> None:
    where = location.describe(rel)
    try:
        size = (size_of or location.size)(rel)
    except FileNotFoundError:
        raise ShardNotFoundError(
            f"{shard.name}: {where} is missing; restore it or rewrite the dataset"
        ) from None
    if size != expected:
        raise ShardCorruptError(
            f"{shard.name}: {where} has {size} bytes but the manifest records {expected}; "
            "the file was truncated or replaced. Restore it or rewrite the dataset"
        )


class _OffsetCheck:
    """Document offsets (``uint64``) must start at 0 and never decrease; fed chunk by chunk."""

    def __init__(self, shard: ShardInfo, where: str) -> None:
        self.shard, self.where = shard, where
        self.last: int | None = None
        self._carry = b""

    def feed(self, data: bytes) -> None:
        data = self._carry + data
        whole = len(data) // 8 * 8
        self._carry = data[whole:]
        values = np.frombuffer(data[:whole], dtype=layout.OFFSET_DTYPE)
        if not len(values):
            return
        first_ok = values[0] == 0 if self.last is None else values[0] >= self.last
        if not first_ok or (len(values) > 1 and bool((np.diff(values.astype(np.int64)) < 0).any())):
            raise ShardCorruptError(
                f"{self.shard.name}: {self.where} holds document offsets that do not start at 0 "
                "or decrease; the index is damaged. Rewrite the dataset"
            )
        self.last = int(values[-1])


class _StartsCheck(_OffsetCheck):
    """Record starts (``uint64``) must start at 0, never decrease and stay within the shard's
    tokens; fed chunk by chunk."""

    def feed(self, data: bytes) -> None:
        try:
            super().feed(data)
        except ShardCorruptError:
            raise ShardCorruptError(
                f"{self.shard.name}: {self.where} holds record starts that do not start at 0 or "
                "decrease; the record-start file is damaged. Rewrite the dataset"
            ) from None

    def done(self) -> None:
        if self.last is not None and self.last > self.shard.tokens:
            raise ShardCorruptError(
                f"{self.shard.name}: {self.where} holds a record start at token {self.last}, past "
                f"the shard's {self.shard.tokens} tokens; the record-start file is damaged. "
                "Rewrite the dataset"
            )


def _expected_count(kind: str, shard: ShardInfo, size: int) -> int:
    """How many items a file of ``kind`` (an extension) must hold for the counts the manifest
    records."""
    return layout.item_count(
        layout.KINDS[kind],
        records=shard.records,
        tokens=shard.tokens,
        spans=shard.spans,
        nbytes=size - layout.HEADER_SIZE,
    )


def _check_header(data: bytes, kind: str, size: int, shard: ShardInfo, where: str) -> None:
    """The file starts with a GuideLoom header of its kind, whose counts match the manifest."""
    try:
        header = layout.ShardHeader.unpack(data, where)
    except ValueError as err:
        raise ShardCorruptError(f"{shard.name}: {err}; restore the file or rewrite the dataset") from None
    if header.kind != kind:
        raise ShardCorruptError(
            f"{shard.name}: {where} has a {header.kind!r} header but is a {kind!r} file; restore it"
        )
    expected = _expected_count(kind, shard, size)
    if header.count != expected or layout.HEADER_SIZE + header.count * header.itemsize != size:
        raise ShardCorruptError(
            f"{shard.name}: {where} has a header for {header.count} items of {header.itemsize} "
            f"bytes in a {size}-byte file, but the manifest's counts need {expected} items; the "
            "manifest or the file was altered. Rewrite the dataset"
        )


def verify_shards(
    location: Location,
    manifest: Manifest,
    checksums: bool = True,
    *,
    concurrency: int = DEFAULT_VERIFY_CONCURRENCY,
    progress: Callable[[int, int], None] | None = None,
) -> Iterator[tuple[ShardInfo, Exception | None]]:
    """Check every shard; yields ``(shard, error or None)`` in manifest order.

    Up to ``concurrency`` shards are checked at once (threads; each reads its files in 8 MiB
    requests), and at most twice that many results wait in memory. ``progress(done, total)``
    is called after each shard, in order. Errors that are not about the shard's content (the
    storage cannot be reached) are raised, not yielded.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be a positive number of shards, got {concurrency}")
    table = manifest.shard_table
    total = len(table)
    verify = "checksum" if checksums else "size"

    def one(i: int) -> tuple[ShardInfo, Exception | None]:
        shard = table.shard(i)
        try:
            check_shard(location, shard, verify)
        except (ShardNotFoundError, ShardCorruptError) as err:
            return shard, err
        return shard, None

    window = 2 * concurrency
    with ThreadPoolExecutor(max_workers=min(concurrency, max(total, 1))) as pool:
        pending: list[Future[tuple[ShardInfo, Exception | None]]] = []
        submitted = 0
        try:
            for done in range(total):
                while submitted < total and len(pending) < window:
                    pending.append(pool.submit(one, submitted))
                    submitted += 1
                result = pending.pop(0).result()
                if progress is not None:
                    progress(done + 1, total)
                yield result
        finally:  # stopped early (an error, or the caller broke off): start nothing more
            for future in pending:
                future.cancel()
