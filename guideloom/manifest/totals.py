"""A dataset's documents and tokens as ``guideloom ingest`` recorded them, for the whole dataset.

Ingestion records its counts in the manifest metadata under ``"ingest"``. From metadata version
3 on, ``documents`` and ``tokens`` there are the whole dataset's (an append adds its own counts,
kept under ``"job"``, to those of the dataset it appended to). Earlier versions recorded the last
job's counts only, so after an ``--append`` they described the appended records alone; for
those, `ingest_totals` adds the counts up along the snapshot log (each append on top of its
parent, back to the write or overwrite that began the dataset), which repairs them on open.

Counts the shard table holds are taken from it (a stream's tokens, a document dataset's
records); the others (a document dataset's tokens, a stream's documents) come from the
metadata. For metadata before version 3 a plain stream's documents are its records (ingestion
wrote one stream record per document).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from guideloom.manifest.models import Manifest
from guideloom.manifest.snapshots import Snapshot

__all__ = ["INGEST_KEY", "WHOLE_DATASET_VERSION", "IngestTotals", "ingest_totals"]

INGEST_KEY = "ingest"  # the metadata key guideloom ingest writes (guideloom.workers.results)
WHOLE_DATASET_VERSION = 3  # the first ingest metadata version whose counts cover the whole dataset


class IngestTotals:
    """``documents`` and ``tokens`` of a whole dataset; None where they are not known."""

    __slots__ = ("documents", "tokens")

    def __init__(self, documents: int | None, tokens: int | None) -> None:
        self.documents, self.tokens = documents, tokens

    def __repr__(self) -> str:
        return f"IngestTotals(documents={self.documents}, tokens={self.tokens})"


def _ingest(metadata: dict[str, Any] | None) -> dict[str, Any] | None:
    meta = (metadata or {}).get(INGEST_KEY)
    return meta if isinstance(meta, dict) else None


def _count(meta: dict[str, Any] | None, key: str) -> int | None:
    value = (meta or {}).get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _summed(key: str, snapshots: Sequence[Snapshot], start: str | None) -> int | None:
    """``key`` added up along the log from ``start`` (default: the newest snapshot) back to the
    write or overwrite that began the dataset; a later step of a ``--commit-every`` job already
    counts its earlier steps (same plan), and a rollback continues from the snapshot it restores.
    None when a snapshot on the way records no count or is no longer kept."""
    by_id = {s.id: s for s in snapshots}
    if not by_id:
        return None
    snap = by_id.get(start) if start is not None else max(snapshots, key=lambda s: s.sequence)
    total, plan, seen = 0, None, set()
    while snap is not None and snap.id not in seen:
        seen.add(snap.id)
        if snap.operation == "rollback":
            snap = by_id.get(snap.source or "")
            continue
        meta = _ingest(snap.metadata)
        if meta is None:
            return None
        if plan is None or meta.get("plan") != plan:  # an earlier step of the same job: counted
            value = _count(meta, key)
            if value is None:
                return None
            total += value
        plan = meta.get("plan")
        if snap.operation != "append" or snap.parent is None:
            return total
        snap = by_id.get(snap.parent)
    return None


def ingest_totals(
    manifest: Manifest,
    snapshots: Callable[[], Sequence[Snapshot]] | None = None,
    snapshot_id: str | None = None,
) -> IngestTotals:
    """The whole dataset's documents and tokens (see the module docstring).

    Args:
        manifest: The dataset's manifest (at the snapshot read).
        snapshots: Reads the dataset's snapshot log (e.g. ``storage.snapshots``); needed only for
            metadata written before version 3. Without it such counts are None.
        snapshot_id: The snapshot ``manifest`` is (default: the newest).
    """
    meta = _ingest(manifest.metadata)
    cls = manifest.storage_class
    documents = manifest.total_records if cls == "DocumentStorage" else None
    tokens = manifest.total_tokens if cls != "DocumentStorage" else None
    if meta is None:
        return IngestTotals(documents, tokens)
    if (_count(meta, "version") or 0) >= WHOLE_DATASET_VERSION:
        return IngestTotals(
            documents if documents is not None else _count(meta, "documents"),
            tokens if tokens is not None else _count(meta, "tokens"),
        )
    if cls == "StreamStorage":
        documents = manifest.total_records  # ingestion writes one stream record per document
    found: dict[str, int | None] = {"documents": documents, "tokens": tokens}
    for key in [k for k, v in found.items() if v is None]:
        found[key] = _summed(key, snapshots(), snapshot_id) if snapshots is not None else None
    return IngestTotals(found["documents"], found["tokens"])
