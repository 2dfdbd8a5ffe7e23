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
from typing import Any, Literal

from pydantic import Field

from guideloom.manifest.models import Count, FormatSpecModel, _Frozen, _parse

__all__ = [
    "SNAPSHOT_VERSION",
    "Operation",
    "Snapshot",
    "SnapshotSummary",
    "TablePiece",
    "merge_plan",
    "nearest_ids",
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


class TablePiece(_Frozen):
    """One piece of a snapshot's shard table: where it is and how many shards and parts it has."""

    path: str
    shards: Count
    parts: Count
    bytes: Count


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


def is_snapshot_record(data: bytes) -> bool:
    """Whether manifest.json bytes are a snapshot record (not a whole `Manifest`)."""
    return b'"version":"snapshots-' in data[:64]


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
