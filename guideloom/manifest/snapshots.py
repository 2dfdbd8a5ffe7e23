"""Snapshots: the immutable, numbered commits of a dataset (models only, no I/O).

A dataset written by this GuideLoom keeps its history under ``snapshots/``::

    manifest.json                  the current snapshot's record (a copy; a hint for readers)
    snapshots/log/00000007.json    snapshot 7's record: created once, never replaced
    snapshots/tables/<hash>.json   a piece of a shard table (a `ShardTable`), named by its content

A snapshot's shard table is the concatenation of its *pieces*, in order. An append adds one
piece for its own shards and reuses the pieces of the snapshot it appends to, so it writes
O(k) bytes for k new shards; to keep the number of pieces (the requests an open makes) near
log2(shards), the last pieces are merged while a piece is not more than twice the size of the
one after it (`merge_plan`), which rewrites each shard's row O(log n) times over its life.

The log entry with the next sequence number is created with an exclusive create (a hard link on
local disk, ``If-None-Match: *`` on S3): that is the compare-and-swap that makes a commit. A
``manifest.json`` that is a whole `Manifest` (written before snapshots existed) is snapshot 0.
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

import guideloom.layout as layout
from guideloom.errors import excerpt
from guideloom.manifest.models import (
    Count,
    FormatSpecModel,
    Manifest,
    _Frozen,
    _parse,
    parse_manifest,
    unknown_version,
)

__all__ = [
    "SNAPSHOT_VERSION",
    "Operation",
    "Snapshot",
    "SnapshotSummary",
    "TablePiece",
    "merge_plan",
    "nearest_ids",
    "is_snapshot_record",
    "parse_dataset_record",
    "parse_snapshot",
    "snapshot_id",
]

# The value of the ``version`` key of a snapshot record. Not an int: a GuideLoom from before
# snapshots reading manifest.json says "has version 'snapshots-1' ... Upgrade guideloom".
SNAPSHOT_VERSION = "snapshots-1"
Operation = Literal["write", "append", "overwrite", "rollback"]


def snapshot_id(sequence: int, token: str) -> str:
    """A snapshot's id: its sequence number and a token (``00000007-3fa2c9d1``)."""
    return f"{sequence:08d}-{token}"


_ID = re.compile(r"[0-9]{8,19}-[0-9a-f]{8}")


def id_sequence(value: str, field: str) -> int:
    """The sequence number of a snapshot id; ``ValueError`` naming ``field`` unless ``value`` is
    one (``<8+ digits>-<8 hex digits>``)."""
    if not _ID.fullmatch(value):
        raise ValueError(f"{field} {excerpt(value)} is not a snapshot id ('<sequence>-<8 hex digits>')")
    return int(value.split("-", 1)[0])


class SnapshotSummary(_Frozen):
    """What a snapshot holds and what its commit changed."""

    records: Count
    tokens: Count
    shards: Count
    bytes: Count
    added_shards: Count
    removed_shards: Count
    added_records: Count
    added_tokens: Count

    @model_validator(mode="after")
    def _added_fit(self) -> SnapshotSummary:
        for added, total in (
            ("added_shards", "shards"),
            ("added_records", "records"),
            ("added_tokens", "tokens"),
        ):
            if getattr(self, added) > getattr(self, total):
                raise ValueError(
                    f"summary.{added}={getattr(self, added)} is more than summary.{total}={getattr(self, total)}"
                )
        return self


class TablePiece(_Frozen):
    """One piece of a snapshot's shard table: where it is and how many shards and parts it has."""

    path: str
    shards: Count
    parts: Count
    bytes: Count

    @field_validator("path")
    @classmethod
    def _in_tables(cls, path: str) -> str:
        layout.check_relative_path(path, "table piece path")
        if not path.startswith(f"{layout.SNAPSHOTS_DIR}/tables/") or path.count("/") != 2:
            raise ValueError(f"table piece path {excerpt(path)} is not in {layout.SNAPSHOTS_DIR}/tables/")
        return path


class Snapshot(_Frozen):
    """One commit of a dataset.

    Attributes:
        id: ``<sequence>-<token>``; what `snapshot=`, `rollback` and `guideloom log` use.
        sequence: 1, 2, 3, ... in commit order (0: a dataset written before snapshots).
        parent: The id of the snapshot this commit was made on top of (None for the first).
        time: When it was committed (ISO 8601, UTC).
        operation: ``write``, ``append``, ``overwrite`` or ``rollback``.
        summary: Its records, tokens, shards and bytes, and the shards it added and removed.
        job: The identity of the append job that made it (a re-run of that job lands once).
        source: For a rollback, the id of the snapshot whose content it restores.
    """

    version: Literal["snapshots-1"] = "snapshots-1"
    id: str
    sequence: Count
    parent: str | None
    time: str
    operation: Operation
    summary: SnapshotSummary
    storage_class: Literal["DocumentStorage", "StreamStorage", "StreamWithMetaStorage"]
    format: FormatSpecModel
    num_parts: Count
    guideloom_version: str
    metadata: dict[str, Any] = Field(default_factory=dict)
    pieces: tuple[TablePiece, ...]
    job: str | None = None
    source: str | None = None

    @model_validator(mode="after")
    def _ids_agree(self) -> Snapshot:
        """The id carries the sequence number; the parent is the snapshot one number before
        (None only for the first); a rollback's source is an earlier one; the pieces hold
        ``summary.shards`` shards."""
        if id_sequence(self.id, "id") != self.sequence:
            raise ValueError(f"id {excerpt(self.id)} does not start with its sequence {self.sequence:08d}")
        if self.parent is None:
            if self.sequence > 1:
                raise ValueError(f"parent is null, but snapshot {self.sequence} must have one")
        elif id_sequence(self.parent, "parent") != self.sequence - 1:
            raise ValueError(f"parent {excerpt(self.parent)} is not the snapshot before {self.sequence}")
        if self.source is not None and id_sequence(self.source, "source") >= self.sequence:
            raise ValueError(f"source {excerpt(self.source)} is not an earlier snapshot")
        if (self.source is None) == (self.operation == "rollback"):
            raise ValueError("source is set exactly when operation is 'rollback'")
        if self.pieces and sum(p.shards for p in self.pieces) != self.summary.shards:
            raise ValueError(
                f"the pieces hold {sum(p.shards for p in self.pieces)} shards, summary.shards "
                f"says {self.summary.shards}"
            )
        return self

    def to_json(self) -> bytes:
        return self.model_dump_json().encode("utf-8")

    def __str__(self) -> str:
        s = self.summary
        return (
            f"{self.id}  {self.time}  {self.operation:<9}  parent={self.parent or '-'}  "
            f"records={s.records} tokens={s.tokens} shards={s.shards} (+{s.added_shards} -{s.removed_shards})"
            + (f"  restores={self.source}" if self.operation == "rollback" and self.source else "")
        )


def parse_snapshot(data: bytes, where: str) -> Snapshot:
    """Parse a snapshot record; `ManifestError` naming ``where`` if it is not one."""
    return _parse(Snapshot, data, where)


def parse_dataset_record(data: bytes, where: str) -> Snapshot | Manifest:
    """``manifest.json``'s bytes parsed: a snapshot record, or a whole `Manifest` (written before
    snapshots). Which one is decided by parsing (a ``version`` that is a string is a snapshot
    record's), not by bytes, so a record re-serialized with other whitespace still reads."""
    try:
        raw = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return parse_manifest(data, where)  # raises the ManifestError that explains
    if isinstance(raw, dict) and _looks_like_snapshot(raw):
        return parse_snapshot(data, where)
    return parse_manifest(data, where)


def _looks_like_snapshot(raw: dict[str, Any]) -> bool:
    """A snapshot record's ``version`` is a string; one whose version is missing or damaged is
    still known by its own fields (so the message names the version, not a manifest's fields)."""
    version = raw.get("version")
    if isinstance(version, str):
        return True
    if unknown_version(version, Manifest):  # a later manifest version: say "upgrade"
        return False
    return "shard_table" not in raw and bool({"pieces", "sequence", "summary"} & set(raw))


def is_snapshot_record(data: bytes) -> bool:
    """Whether manifest.json bytes are a snapshot record (not a whole `Manifest`), by parsing."""
    try:
        raw = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return False
    return isinstance(raw, dict) and _looks_like_snapshot(raw)


def merge_plan(sizes: list[int]) -> int:
    """How many of the last pieces (shard counts ``sizes``, the new piece last) to merge into one:
    while a piece is not more than twice the size of the merged ones after it, it joins them.
    Returns 1 when the new piece stays on its own."""
    merged = sizes[-1] if sizes else 0
    count = 1
    while count < len(sizes) and sizes[-count - 1] <= 2 * merged:
        merged += sizes[-count - 1]
        count += 1
    return count


def nearest_ids(wanted: str, ids: list[str], n: int = 5) -> list[str]:
    """The ids most like ``wanted``: by sequence number where it has one, else by spelling."""
    head = wanted.split("-", 1)[0]
    if head.isdigit() and ids:
        target = int(head)
        return sorted(ids, key=lambda i: (abs(int(i.split("-", 1)[0]) - target), i))[:n]
    close = difflib.get_close_matches(wanted, ids, n=n, cutoff=0.0)
    return close or ids[-n:]
