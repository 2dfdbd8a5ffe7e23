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
from typing import overload

import xxhash

import guideloom.layout as layout
from guideloom.errors import BucketNotFoundError, DatasetNotFoundError, GuideLoomError, ManifestError, excerpt
from guideloom.io import Location
from guideloom.manifest import Manifest, ShardTable, version_for
from guideloom.manifest.models import _parse
from guideloom.manifest.snapshots import (
    Snapshot,
    SnapshotSummary,
    TablePiece,
    nearest_ids,
    parse_dataset_record,
    parse_snapshot,
    snapshot_id,
)

__all__ = ["History", "UnknownSnapshotError"]

_THREADS = 16
# The table piece columns a snapshot summary's totals are summed from.
_COLUMN_OF = {"records": "records", "tokens": "tokens", "shards": "rows of part", "bytes": "files.*.size"}


class UnknownSnapshotError(DatasetNotFoundError):
    """``snapshot=`` (or a rollback) named an id this dataset has no record of."""


class History:
    """The snapshots of the dataset at ``location``."""

    def __init__(self, location: Location) -> None:
        self.location = location
        self._legacy: tuple[Snapshot, Manifest] | None = None

    # -- reading ------------------------------------------------------------------------------

    @overload
    def open(self, snapshot: str | int | None = None) -> tuple[Snapshot, Manifest]: ...
    @overload
    def open(
        self, snapshot: str | int | None = None, *, missing_ok: bool
    ) -> tuple[Snapshot, Manifest] | None: ...

    def open(
        self, snapshot: str | int | None = None, *, missing_ok: bool = False
    ) -> tuple[Snapshot, Manifest] | None:
        """The current snapshot (or ``snapshot``) and its manifest, every file checked: the one
        way every reader opens a dataset (the storage classes, ``guideloom inspect``, ``verify``,
        ``log``, ``trace``, ``estimate``).

        Each file is parsed by its model and cross-checked: the record against its place in the
        log and against the ``manifest.json`` copy, the pieces' shard counts against their
        contents, the summary against the joined table (see docs/guarantees.md). With
        ``missing_ok``, None when no dataset is committed (a location prepared for writing).

        Raises:
            DatasetNotFoundError: No dataset is committed here (or ``snapshot`` is not kept).
            ManifestError: A file is unreadable, of an unknown version, invalid, or contradicts
                another; the message names the file and the field.
        """
        snap = self.get(snapshot) if snapshot is not None else self.current()
        if snap is None:
            if missing_ok:
                return None
            raise self._not_found()
        return snap, self.manifest(snap)

    def _not_found(self) -> DatasetNotFoundError:
        """Why there is no dataset here, as an error to raise."""
        url = self.location.display_url
        try:
            self.location.read(layout.manifest_path(), start=0)
        except DatasetNotFoundError as err:
            return err  # already says why (a URL that names a file, not the dataset's folder)
        except BucketNotFoundError as err:
            return DatasetNotFoundError(f"no dataset at {url}: {err}")
        except FileNotFoundError:
            pass
        return DatasetNotFoundError(
            f"no dataset at {url}: {layout.manifest_path()} is missing and {layout.SNAPSHOTS_DIR}/log "
            "has no snapshot. Check the URL, or write the dataset first (a dataset whose writer did "
            "not finish has no manifest)"
        )

    def current(self) -> Snapshot | None:
        """The current snapshot, or None when no dataset is committed here."""
        where = self.location.describe(layout.manifest_path())
        try:
            data = self.location.read(layout.manifest_path(), start=0)
        except FileNotFoundError:
            data = b""
        snap: Snapshot | None = None
        if data.strip():  # an empty copy: a commit killed while writing it; the log decides
            record = parse_dataset_record(data, where)
            snap = record if isinstance(record, Snapshot) else self._legacy_snapshot(data, record)
        # The log may be ahead of the copy (see the module docstring).
        seq = snap.sequence if snap is not None else 0
        ahead = None
        while self.location.exists(layout.snapshot_log_path(seq + 1)):
            seq += 1
            ahead = seq
        if ahead is not None:
            found = self.by_sequence(ahead)
            if snap is not None and ahead == snap.sequence + 1 and found.parent != snap.id:
                raise ManifestError(
                    f"{self.location.describe(layout.snapshot_log_path(ahead))} has parent "
                    f"{excerpt(found.parent)}, but the snapshot before it is {snap.id} ({where}): one "
                    "of the two was altered or damaged"
                )
            return found
        if snap is None and self.location.exists(layout.snapshot_log_path(0)):
            return self.by_sequence(0)
        if snap is not None and snap.sequence > 0:
            self._check_copy(snap, where)
        return snap

    def _check_copy(self, copy: Snapshot, where: str) -> None:
        """``ManifestError`` unless the ``manifest.json`` copy says what its log entry says."""
        rel = layout.snapshot_log_path(copy.sequence)
        try:
            logged = self.by_sequence(copy.sequence)
        except FileNotFoundError:
            raise ManifestError(
                f"{where} names snapshot {copy.id}, but {self.location.describe(rel)} does not "
                "exist: the copy was altered, or the log entry deleted outside GuideLoom. Run "
                f"`guideloom log {self.location.display_url}` and roll back to a kept snapshot"
            ) from None
        if logged != copy:
            field = next((k for k in Snapshot.model_fields if getattr(logged, k) != getattr(copy, k)), "?")
            raise ManifestError(
                f"{where} differs from {self.location.describe(rel)} in field {field}: the copy was "
                "altered or damaged. Restore it: copy the log entry over manifest.json"
            )

    def _legacy_snapshot(self, data: bytes, manifest: Manifest) -> Snapshot:
        """Snapshot 0 of a dataset whose manifest.json is a whole manifest (written before
        snapshots): its id is derived from the manifest's bytes, so every reader and writer
        names it alike."""
        digest = xxhash.xxh3_64_hexdigest(data)[:8]  # the same bytes: the same id everywhere
        if self._legacy is not None and self._legacy[0].id == snapshot_id(0, digest):
            return self._legacy[0]
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
        """Log entry ``sequence``, checked to be that entry (`FileNotFoundError` if absent)."""
        rel = layout.snapshot_log_path(sequence)
        where = self.location.describe(rel)
        snap = parse_snapshot(self.location.read(rel, start=0), where)
        if snap.sequence != sequence:
            raise ManifestError(
                f"{where} is invalid: field sequence is {snap.sequence}, but the file is log entry "
                f"{sequence}. The file was altered or damaged"
            )
        return snap

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
        for before, after in zip(found, found[1:]):
            if after.sequence == before.sequence + 1 and after.parent != before.id:
                raise ManifestError(
                    f"{self.location.describe(layout.snapshot_log_path(after.sequence))} has parent "
                    f"{excerpt(after.parent)}, but log entry {before.sequence} is {before.id}: one of "
                    "the two was altered or damaged"
                )
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
        """The manifest of ``snap``: its pieces read concurrently, each checked against what the
        record says of it, joined in order, and the join checked against the record's summary."""
        if snap.sequence == 0 and not snap.pieces:
            if self._legacy is not None and self._legacy[0].id == snap.id:
                return self._legacy[1]
            where = self.location.describe(layout.manifest_path())
            legacy = parse_dataset_record(self.location.read(layout.manifest_path(), start=0), where)
            if isinstance(legacy, Snapshot):
                raise ManifestError(f"{where}: snapshot {snap.id} has no table pieces")
            return legacy
        tables = self.location.each(self.read_piece, snap.pieces, _THREADS)
        record = self.location.describe(layout.snapshot_log_path(snap.sequence))
        pieces = ", ".join(p.path.rsplit("/", 1)[-1] for p in snap.pieces)
        try:
            table = ShardTable.concat(tables)
        except ValueError as err:
            raise ManifestError(
                f"the table pieces of snapshot {snap.id} ({record}: {pieces}) do not join: {err}. A piece was "
                "altered or damaged; roll back to another snapshot (`guideloom log` lists them)"
            ) from None
        # Summed piece by piece: a join drops file kinds that not every piece has (record starts
        # of shards appended to a dataset written before them), the summary counts their bytes.
        held = {
            "records": sum(table.records),
            "tokens": sum(table.tokens),
            "shards": len(table),
            "bytes": sum(sum(c.size) for t in tables for c in t.files.values()),
        }
        for field, value in held.items():
            if value != getattr(snap.summary, field):
                raise ManifestError(
                    f"{record} contradicts its table: field summary.{field} is "
                    f"{getattr(snap.summary, field)}, but its table pieces ({pieces}) hold "
                    f"{value} (their {_COLUMN_OF[field]}). The record or a piece was altered or damaged; roll "
                    "back to another snapshot (`guideloom log` lists them) or rewrite the dataset"
                )
        return manifest_of(snap, table, validate=False)  # each piece was validated as read

    def read_piece(self, piece: TablePiece) -> ShardTable:
        """A table piece, parsed and checked against what the record says of it (its shard
        count; `guideloom verify` also checks its size and content hash)."""
        where = self.location.describe(piece.path)
        table = self.read_table(piece.path)
        if len(table) != piece.shards:
            raise ManifestError(
                f"{where} holds {len(table)} shards (field part), but the snapshot record lists it "
                f"with {piece.shards}: the piece or the record was altered or damaged"
            )
        return table

    def read_table(self, rel: str) -> ShardTable:
        """The table piece at ``rel`` (a path a record lists, or one listed in the folder)."""
        where = self.location.describe(rel)
        try:
            data = self.location.read(rel, start=0)
        except FileNotFoundError:
            raise ManifestError(
                f"{where} is missing: the snapshot that lists it cannot be read. It was deleted "
                "outside GuideLoom; roll back to another snapshot (`guideloom log` lists them)"
            ) from None
        return _parse(ShardTable, data, where)

    def check_metadata(self, snap: Snapshot) -> list[str]:
        """What `guideloom verify` checks of the metadata beyond what an open checks: each table
        piece's size and content-named path, and the parent chain of every kept log entry
        (`snapshots` raises a `ManifestError` for a broken one)."""
        self.snapshots()
        return [p for p in (self.check_piece_bytes(piece) for piece in snap.pieces) if p is not None]

    def check_piece_bytes(self, piece: TablePiece) -> str | None:
        """What is wrong with the piece's bytes (size, content-named path), or None: what only
        `guideloom verify` checks (a piece re-serialized with other whitespace still opens)."""
        data = self.location.read(piece.path, start=0)
        digest = xxhash.xxh3_128_hexdigest(data)
        if len(data) != piece.bytes:
            return (
                f"{self.location.describe(piece.path)} has {len(data)} bytes, the record says {piece.bytes}"
            )
        if piece.path != layout.table_piece_path(digest):
            return f"{self.location.describe(piece.path)} is not named by its content (hash {digest})"
        return None

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
