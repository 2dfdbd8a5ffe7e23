"""The snapshot log of one dataset location: reading snapshots and creating the next one.

See `guideloom.manifest.snapshots` for the files. Readers take ``manifest.json`` (the current
snapshot's record, or a whole manifest written before snapshots existed) as a hint and look one
sequence number further (one existence check): a commit whose log entry was created but whose
``manifest.json`` copy was not (a crash between the two, or a slower committer's copy landing
last) is still the current snapshot.
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import xxhash

import guideloom.layout as layout
from guideloom.errors import DatasetNotFoundError, GuideLoomError, ManifestError
from guideloom.io import Location
from guideloom.manifest import Manifest, ShardTable, parse_manifest, version_for
from guideloom.manifest.snapshots import (
    Snapshot,
    SnapshotSummary,
    TablePiece,
    is_snapshot_record,
    nearest_ids,
    parse_snapshot,
    snapshot_id,
)

__all__ = ["History", "UnknownSnapshotError"]

_THREADS = 16


class UnknownSnapshotError(DatasetNotFoundError):
    """``snapshot=`` (or a rollback) named an id this dataset has no record of."""


class History:
    """The snapshots of the dataset at ``location``."""

    def __init__(self, location: Location) -> None:
        self.location = location
        self._legacy: tuple[Snapshot, Manifest] | None = None

    # -- reading ------------------------------------------------------------------------------

    def current(self) -> Snapshot | None:
        """The current snapshot, or None when no dataset is committed here."""
        try:
            data = self.location.read(layout.manifest_path(), start=0)
        except FileNotFoundError:
            data = b""
        if data and not is_snapshot_record(data):
            legacy = self._legacy_snapshot(data)
            snap: Snapshot | None = legacy
        elif data:
            snap = parse_snapshot(data, self.location.describe(layout.manifest_path()))
        else:
            snap = None
        # The log may be ahead of the copy (see the module docstring).
        seq = snap.sequence if snap is not None else 0
        ahead = None
        while self.location.exists(layout.snapshot_log_path(seq + 1)):
            seq += 1
            ahead = seq
        if ahead is not None:
            return self.by_sequence(ahead)
        if snap is None and self.location.exists(layout.snapshot_log_path(0)):
            return self.by_sequence(0)
        return snap

    def _legacy_snapshot(self, data: bytes) -> Snapshot:
        """Snapshot 0 of a dataset whose manifest.json is a whole manifest (written before
        snapshots): its id is derived from the manifest's bytes, so every reader and writer
        names it alike."""
        digest = xxhash.xxh3_64_hexdigest(data)[:8]  # the same bytes: the same id everywhere
        if self._legacy is not None and self._legacy[0].id == snapshot_id(0, digest):
            return self._legacy[0]
        manifest = parse_manifest(data, self.location.describe(layout.manifest_path()))
        table = manifest.shard_table
        snap = Snapshot(
            id=snapshot_id(0, digest),
            sequence=0,
            parent=None,
            time=manifest.created_at,
            operation="write",
            summary=_summary(table, added=len(table), removed=0),
            storage_class=manifest.storage_class,
            format=manifest.format,
            num_parts=manifest.num_parts,
            guideloom_version=manifest.guideloom_version,
            metadata=manifest.metadata,
            pieces=(),
        )
        self._legacy = (snap, manifest)
        return snap

    def by_sequence(self, sequence: int) -> Snapshot:
        rel = layout.snapshot_log_path(sequence)
        return parse_snapshot(self.location.read(rel, start=0), self.location.describe(rel))

    def snapshots(self) -> list[Snapshot]:
        """Every snapshot kept, oldest first (one listing, records read concurrently)."""
        seqs = sorted(
            s
            for s in (
                layout.snapshot_log_sequence(n) for n in self.location.list(f"{layout.SNAPSHOTS_DIR}/log")
            )
            if s is not None
        )
        with ThreadPoolExecutor(max_workers=_THREADS) as pool:
            found = list(pool.map(self.by_sequence, seqs))
        if not found:
            cur = self.current()
            return [cur] if cur is not None else []
        return found

    def get(self, wanted: str | int) -> Snapshot:
        """The snapshot with id ``wanted`` (or sequence number); `UnknownSnapshotError` listing
        the nearest ids otherwise."""
        text = str(wanted)
        head = text.split("-", 1)[0]
        if head.isdigit():
            try:
                snap = self.by_sequence(int(head))
            except FileNotFoundError:
                snap = None
            if snap is None:
                cur = self.current()
                snap = cur if cur is not None and cur.sequence == int(head) else None
            if snap is not None and (snap.id == text or text == head or text == str(snap.sequence)):
                return snap
        kept = self.snapshots()
        ids = [s.id for s in kept]
        near = ", ".join(nearest_ids(text, ids)) or "none"
        if head.isdigit() and kept and int(head) < kept[0].sequence:
            raise UnknownSnapshotError(
                f"snapshot {text!r} of {self.location.display_url} has expired (its record was "
                f"deleted by expire); the oldest snapshot kept is {kept[0].id}. Pick a kept one: "
                f"{near}"
            )
        raise UnknownSnapshotError(
            f"{self.location.display_url} has no snapshot {text!r} (it never existed or has expired); "
            f"the nearest kept ids are: {near}. Run `guideloom log {self.location.display_url}` to "
            "list them all"
        )

    def manifest(self, snap: Snapshot) -> Manifest:
        """The manifest of ``snap``: its pieces read concurrently and joined in order."""
        if snap.sequence == 0 and not snap.pieces:
            if self._legacy is not None and self._legacy[0].id == snap.id:
                return self._legacy[1]
            data = self.location.read(layout.manifest_path(), start=0)
            if is_snapshot_record(data):
                raise ManifestError(f"{self.location.display_url}: snapshot {snap.id} has no table")
            return parse_manifest(data, self.location.describe(layout.manifest_path()))
        tables = self.location.each(self.read_piece, snap.pieces, _THREADS)
        try:
            table = ShardTable.concat(tables)
        except ValueError as err:
            raise ManifestError(
                f"{self.location.display_url}: snapshot {snap.id} is inconsistent: {err}"
            ) from None
        return manifest_of(snap, table, validate=False)  # each piece was validated as read

    def read_piece(self, piece: TablePiece) -> ShardTable:
        where = self.location.describe(piece.path)
        try:
            data = self.location.read(piece.path, start=0)
        except FileNotFoundError:
            raise ManifestError(
                f"{where} is missing: the snapshot that lists it cannot be read. It was deleted "
                "outside GuideLoom; roll back to another snapshot (`guideloom log` lists them)"
            ) from None
        try:
            return ShardTable.model_validate_json(data)
        except ValueError as err:
            raise ManifestError(
                f"{where} is not a valid shard table piece ({err}); the file is damaged"
            ) from None

    # -- writing ------------------------------------------------------------------------------

    def write_piece(self, table: ShardTable, parts: int) -> TablePiece:
        """Write a shard table piece (named by its content, so writing it twice is harmless)."""
        data = table.model_dump_json().encode()
        rel = layout.table_piece_path(xxhash.xxh3_128_hexdigest(data))
        self.location.write(rel, data)
        return TablePiece(path=rel, shards=len(table), parts=parts, bytes=len(data))

    def materialize(self, snap: Snapshot) -> Snapshot:
        """Give a dataset written before snapshots its log entry 0 and table piece (once; a
        racing writer doing the same writes the same bytes)."""
        if snap.sequence != 0 or snap.pieces:
            return snap
        manifest = self.manifest(snap)
        piece = self.write_piece(manifest.shard_table, manifest.num_parts)
        full = snap.model_copy(update={"pieces": (piece,)})
        self.location.create(layout.snapshot_log_path(0), full.to_json(), layout.snapshot_claims_path(0))
        return self.by_sequence(0)

    def create(self, snap: Snapshot) -> bool:
        """Create ``snap``'s log entry if its sequence number is free (the compare-and-swap);
        then copy it to manifest.json. False if another commit took the number."""
        rel = layout.snapshot_log_path(snap.sequence)
        data = snap.to_json()
        if not self.location.create(rel, data, layout.snapshot_claims_path(snap.sequence)):
            # A retried request may have created it already: then the bytes are this commit's.
            try:
                if self.location.read(rel, start=0) != data:
                    return False
            except FileNotFoundError:
                return False
        try:
            self.location.write(layout.manifest_path(), data)
        except (GuideLoomError, OSError):
            pass  # the commit has landed: the copy is a hint, and readers follow the log past it
        return True


def new_token() -> str:
    return uuid.uuid4().hex[:8]


def manifest_of(snap: Snapshot, table: ShardTable, *, validate: bool = True) -> Manifest:
    """The `Manifest` readers use for ``snap`` with its joined shard ``table`` (``validate``
    False: a table joined by `ShardTable.concat` from validated pieces, not checked again)."""
    if not validate:
        return Manifest.model_construct(
            version=version_for(table.files),
            storage_class=snap.storage_class,
            format=snap.format,
            num_parts=snap.num_parts,
            total_records=sum(table.records),
            total_tokens=sum(table.tokens),
            total_spans=sum(table.spans),
            total_bytes=sum(sum(c.size) for c in table.files.values()),
            created_at=snap.time,
            guideloom_version=snap.guideloom_version,
            metadata=snap.metadata,
            shard_table=table,
        )
    return Manifest.from_table(
        table,
        storage_class=snap.storage_class,
        format=snap.format,
        num_parts=snap.num_parts,
        guideloom_version=snap.guideloom_version,
        metadata=snap.metadata,
    ).model_copy(update={"created_at": snap.time})


def _summary(
    table: ShardTable, *, added: int, removed: int, added_records: int = -1, added_tokens: int = -1
) -> SnapshotSummary:
    return SnapshotSummary(
        records=sum(table.records),
        tokens=sum(table.tokens),
        shards=len(table),
        bytes=sum(sum(c.size) for c in table.files.values()),
        added_shards=added,
        removed_shards=removed,
        added_records=sum(table.records) if added_records < 0 else added_records,
        added_tokens=sum(table.tokens) if added_tokens < 0 else added_tokens,
    )


summary_of = _summary
