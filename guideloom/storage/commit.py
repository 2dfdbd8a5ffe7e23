"""The commit protocol: how finished parts become the dataset that readers see.

A dataset changes in exactly one step: the exclusive creation of its next snapshot record,
``snapshots/log/<sequence>.json`` (`History.create`: created only if no commit took that
sequence number first, the compare-and-swap). `Committer.publish` and `Committer.rollback` are
the only callers. Everything before that step adds files no snapshot names yet (shards under an
attempt's own prefix, part completion records, the snapshot's shard-table piece); everything
after it is a copy or a clean-up: ``manifest.json`` is overwritten with the new record as a hint
for readers (a reader that finds it stale follows the log one number further), and files no
kept snapshot names are removed. So a reader always sees one whole committed snapshot.

* A part writer (``storage.writer(part=k, run=r)``) ends by writing its completion record
  (`Committer.write_part_record`), which names the exact files and checksums of its attempt;
  the last attempt to write it wins.
* ``storage.commit(num_parts=n, run=r)`` (`Committer.commit`) reads the records of parts
  ``0 .. n - 1``, checks that each names files of the recorded sizes, merges them in part order
  and publishes the snapshot.
* A single writer (``storage.writer()``) publishes straight from its own record
  (`Committer.publish_record`): no file another writer could replace sits between its shards
  and its snapshot.
* A write or overwrite that loses the race for its sequence number is a `CommitConflictError`
  (nothing committed); an append retries on top of the winner (only its metadata is redone),
  and an append job that already landed (`Snapshot.job`) is not committed twice.
* After publishing, the shard folders of the run's losing attempts are removed (best effort).
  The files of older snapshots stay while a snapshot names them: `Committer.expire` deletes
  snapshots and then files no kept snapshot uses that are older than the grace period;
  `Committer.remove_unreferenced` removes what the current snapshot does not use.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import xxhash

import guideloom.layout as layout
from guideloom.errors import (
    CommitConflictError,
    DatasetNotFoundError,
    GuideLoomError,
    IncompletePartsError,
    ManifestError,
    RecordError,
    SchemaMismatchError,
    ShardCorruptError,
    ShardNotFoundError,
)
from guideloom.formats import Format
from guideloom.io import Location
from guideloom.manifest import (
    FormatSpecModel,
    Manifest,
    PartRecord,
    ShardTable,
    ShardTableBuilder,
    StorageClassName,
    now_iso,
    parse_part_record,
)
from guideloom.manifest.snapshots import (
    Operation,
    Snapshot,
    SnapshotSummary,
    merge_plan,
    snapshot_id,
)
from guideloom.storage.checks import check_schema, check_shard
from guideloom.storage.history import History, manifest_of, new_token, summary_of

__all__ = ["DEFAULT_GRACE", "Committer", "check_run"]

_COMMIT_THREADS = 32  # part records read at once by commit
_COMMIT_CHUNK = 1024  # parts in flight at once (bounds the records held in memory)
DEFAULT_GRACE = _dt.timedelta(days=1)  # expire never deletes files younger than this
_CAS_RETRIES = 50  # an append retried on top of this many other commits at most
_CURRENT = object()  # publish(expected=...): the snapshot current when the commit starts
_RUN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def check_run(run: str | None) -> str:
    """``run`` as a valid run name (``None`` is the default run); ``ValueError`` otherwise."""
    if run is None:
        return layout.DEFAULT_RUN
    if not isinstance(run, str) or not _RUN.fullmatch(run):
        raise ValueError(
            f"run must be 1-64 letters, digits, '-' or '_' (starting with a letter or digit), "
            f"got {run!r}; derive it from the job, e.g. a hash of its inputs and options"
        )
    return run


class Committer:
    """The commit protocol of one dataset location, for one storage class and format.

    `guideloom.storage.Storage` delegates its part records, commits and clean-up here; the
    public API and its documentation are the storage's. ``on_publish`` is called with every
    manifest this committer commits, with its snapshot, right after committing it (the storage
    caches it); ``cached`` returns the storage's cached manifest and its snapshot id.
    """

    def __init__(
        self,
        location: Location,
        storage_class: StorageClassName,
        format: Format,
        *,
        on_publish: Callable[[Manifest, Snapshot], None] | None = None,
        cached: Callable[[], tuple[Manifest, str] | None] | None = None,
    ) -> None:
        self.location = location
        self.storage_class = storage_class
        self.format: Format | None = format
        self.history = History(location)
        self._on_publish = on_publish
        self._cached = cached
        # (files, bytes) the last `expire` left because they are younger than its grace period
        self.grace_kept: tuple[int, int] = (0, 0)

    @classmethod
    def of_location(cls, location: Location) -> Committer:
        """A committer for maintenance without the format class (``guideloom rollback``,
        ``guideloom expire``): it can roll back and expire, not commit parts."""
        current = History(location).current()
        if current is None:
            raise DatasetNotFoundError(f"no dataset at {location.display_url}")
        committer = cls.__new__(cls)
        committer.location, committer.storage_class = location, current.storage_class
        committer.format = None
        committer.history, committer._on_publish, committer._cached = History(location), None, None
        return committer

    def _format(self) -> Format:
        if self.format is None:
            raise ValueError("this committer was opened without a format: open the storage class to commit")
        return self.format

    def _spec(self) -> FormatSpecModel:
        return FormatSpecModel(**self._format().spec())

    # -- part records -----------------------------------------------------------------------

    def write_part_record(self, record: PartRecord, run: str) -> PartRecord:
        """Write ``record`` as its part's completion record in run ``run`` (one atomic write:
        from now on a commit of the run takes this attempt's files for the part)."""
        self.location.write(
            layout.part_record_path(record.part, run), record.model_dump_json(indent=1).encode()
        )
        return record

    def read_part_record(self, part: int, run: str | None) -> PartRecord:
        """Part ``part``'s completion record in run ``run`` (see `Storage.read_part_record`)."""
        rel = layout.part_record_path(part, check_run(run))
        where = self.location.describe(rel)
        # start=0: a ranged GET needs no size request first (a record is never empty).
        record = parse_part_record(self.location.read(rel, start=0), where)
        check_schema(self.storage_class, self._format(), record, where)
        if record.part != part:
            raise ManifestError(f"{where} says it is part {record.part}")
        return record

    def part_complete(self, part: int, verify: str, run: str | None) -> bool:
        """Whether part ``part`` of run ``run`` may be committed as it is (see
        `Storage.part_complete`)."""
        try:
            record = self.read_part_record(part, run)
            for shard in record.shards:
                check_shard(self.location, shard, verify)
        except (FileNotFoundError, ManifestError, ShardCorruptError):
            return False
        return True

    # -- committing -------------------------------------------------------------------------

    def commit(
        self,
        num_parts: int,
        metadata: dict[str, Any] | None,
        *,
        run: str | None,
        cleanup: bool,
        append: bool = False,
        first_part: int = 0,
    ) -> Manifest:
        """Publish the manifest of parts ``first_part .. num_parts - 1`` of run ``run`` (see
        `Storage.commit`); `IncompletePartsError` naming the parts that are not complete."""
        if isinstance(num_parts, bool) or not isinstance(num_parts, int) or num_parts <= 0:
            raise ValueError(f"num_parts must be a positive int, got {num_parts!r}")
        if isinstance(first_part, bool) or not isinstance(first_part, int) or not 0 <= first_part < num_parts:
            raise ValueError(f"first_part must be an int in [0, num_parts={num_parts}), got {first_part!r}")
        if first_part and not append:
            raise ValueError(
                f"first_part={first_part} commits the rest of a run on top of its earlier parts: "
                "pass append=True"
            )
        run = check_run(run)
        listed = self.location.sizes_under(layout.run_prefix(run))
        builder = ShardTableBuilder()
        bad: list[tuple[int, str]] = []
        identity = xxhash.xxh3_64(run.encode())
        finished = ""
        with ThreadPoolExecutor(max_workers=min(_COMMIT_THREADS, num_parts - first_part)) as pool:
            for start in range(first_part, num_parts, _COMMIT_CHUNK):  # bounded: records are dropped as added
                parts = range(start, min(num_parts, start + _COMMIT_CHUNK))
                for k, (record, why) in zip(parts, pool.map(lambda k: self._try_part(k, run, listed), parts)):
                    if record is None:
                        bad.append((k, why))
                    elif not bad:
                        builder.add_part(record)
                        # The job: its run and the exact attempt files its records name.
                        identity.update(
                            record.shards[0].files["data"].path.encode() if record.shards else b"-"
                        )
                        identity.update(str(sum(s.records for s in record.shards)).encode())
                        finished = max(finished, record.created_at)
        if not builder.shards:  # parts without a record: the job is which parts they are
            identity.update(f"parts {first_part}..{num_parts - 1}".encode())
        if bad:
            listing = "; ".join(f"part {k}: {why}" for k, why in bad[:20])
            more = f" (and {len(bad) - 20} more)" if len(bad) > 20 else ""
            raise IncompletePartsError(
                f"cannot commit {self.location.display_url}: {len(bad)} of {num_parts - first_part} parts have "
                f"no valid completion record: {listing}{more}. Re-run the writers of those parts, "
                "then commit"
            )
        # Every attempt of the run, winners and losers: the losers' folders go after publishing.
        attempts = {layout.attempt_prefix_of(rel) for rel in listed}
        return self.publish(
            builder,
            metadata,
            cleanup=cleanup,
            stale=attempts,
            append=append,
            job=f"{run}:{identity.hexdigest()}" if append else None,
            job_since=_earlier(finished, seconds=5) if finished else None,
            first_part=first_part,
        )

    def publish_record(
        self, record: PartRecord, *, append: bool = False, expected: Snapshot | None = None
    ) -> PartRecord:
        """A single writer's completion: commit a snapshot of its one part (appended, or the
        whole dataset), with the record's metadata as the snapshot's, and return the record
        without it (the part keeps no record of its own)."""
        if not record.shards:  # nothing appended: nothing to commit
            if append:
                return record.model_copy(update={"metadata": {}})  # the dataset stays as it was
            kept = "the dataset committed there is unchanged" if expected is not None else "no dataset"
            raise RecordError(
                f"{self.location.display_url}: the writer was closed without a record appended, so "
                f"nothing was committed ({kept}): append at least one record before the writer "
                "closes (a dataset holds one record or more)"
            )
        builder = ShardTableBuilder()
        builder.add_part(record)
        try:
            self.publish(builder, record.metadata or None, append=append, expected=expected)
        except CommitConflictError:
            # Nothing names this writer's shards: remove them (its own prefix; best effort).
            if record.shards:
                self._remove_quietly(_prefix_of(record.shards[0].files["data"].path))
            raise
        return record.model_copy(update={"metadata": {}})

    def publish(
        self,
        parts: ShardTableBuilder,
        metadata: dict[str, Any] | None,
        *,
        cleanup: bool = True,
        stale: set[str] | None = None,
        append: bool = False,
        expected: Snapshot | None | object = _CURRENT,
        job: str | None = None,
        job_since: str | None = None,
        first_part: int = 0,
    ) -> Manifest:
        """Commit a snapshot of ``parts``: the whole dataset, or (``append``) added after the
        current snapshot's records. The commit is a compare-and-swap of the next log entry:
        an append that loses the race retries on top of the winner (only metadata is redone);
        a write or overwrite raises `CommitConflictError` if the current snapshot is no longer
        ``expected`` (default: the one current when this call starts). ``first_part``: the
        rows are parts ``first_part ..`` of a run whose earlier parts the current snapshot ends
        with (an append of a run's next parts)."""
        # Parts that hold no record (every document of an append step was a duplicate, say):
        # an append records them as parts that added nothing; a write has no dataset to make.
        table = parts.build() if parts.shards else None
        if expected is _CURRENT and not append:
            expected = self.history.current()
        for _ in range(_CAS_RETRIES):
            current = self.history.current()
            if table is None and (not append or current is None):
                self._refuse_empty(parts.num_parts, current, append)
            if append:
                if job is not None and current is not None:
                    landed = self._landed(job, current, job_since)
                    if landed is not None:
                        return self._manifest_of(landed, None, None)
                if current is not None:
                    self._check_same_schema(current)
                    current = self.history.materialize(current)
            else:
                self._check_expected(expected, current, "overwrite" if current is not None else "write")
                if current is not None:
                    current = self.history.materialize(current)
            snap, new_rows = self._next(
                current, table, parts.num_parts, metadata, append=append, job=job, first_part=first_part
            )
            if self.history.create(snap):
                manifest = self._manifest_of(snap, current, new_rows)
                if self._on_publish is not None:
                    self._on_publish(manifest, snap)
                if cleanup and stale:
                    self._remove_losers(stale, manifest)
                return manifest
            if not append:
                landed = self.history.current()
                raise CommitConflictError(
                    f"cannot commit to {self.location.display_url}: snapshot "
                    f"{landed.id if landed else '?'} landed while this commit was based on "
                    f"{_name(current)}; nothing was committed. Re-run the write on top of the new "
                    "snapshot (or append instead of overwriting)"
                )
        raise CommitConflictError(
            f"cannot append to {self.location.display_url}: {_CAS_RETRIES} other commits landed "
            "while this one retried; run it again (its shards are kept and reused)"
        )

    def _refuse_empty(self, num_parts: int, current: Snapshot | None, append: bool) -> None:
        """`RecordError` for a commit of parts that hold no record with no dataset to add to."""
        held = f"the {num_parts} part{'' if num_parts == 1 else 's'} committed hold{'s' if num_parts == 1 else ''} no record"
        if append:
            raise RecordError(
                f"{self.location.display_url}: nothing to append: {held} and no dataset is "
                "committed there, so nothing was committed. Write at least one record in some part, "
                "then commit again (a dataset holds one record or more)"
            )
        kept = "the dataset committed there is unchanged" if current is not None else "no dataset"
        raise RecordError(
            f"{self.location.display_url}: {held}, so nothing was committed ({kept}): write at "
            "least one record in some part, then commit again (a dataset holds one record or more)"
        )

    def rollback(self, target: Snapshot, expected: Snapshot) -> Snapshot:
        """Make ``target``'s content current (a new snapshot with its pieces) if ``expected`` is
        still current; `CommitConflictError` naming both otherwise."""
        from guideloom._version import __version__

        current = self.history.current()
        self._check_expected(expected, current, "rollback")
        assert current is not None
        current = self.history.materialize(current)
        target = self.history.materialize(target)
        self._check_pieces(target)
        # The shards that change: those of the target that the current snapshot lacks (added),
        # and those of the current snapshot that the target lacks (removed); shared ones stay.
        now = set(self._data_paths(current))
        then = set(self._data_paths(target))
        snap = Snapshot(
            id=snapshot_id(current.sequence + 1, new_token()),
            sequence=current.sequence + 1,
            parent=current.id,
            time=now_iso(),
            operation="rollback",
            summary=target.summary.model_copy(
                update={"added_shards": len(then - now), "removed_shards": len(now - then)}
            ),
            storage_class=target.storage_class,
            format=target.format,
            num_parts=target.num_parts,
            guideloom_version=__version__,
            metadata=target.metadata,
            pieces=target.pieces,
            source=target.id,
        )
        if not self.history.create(snap):
            landed = self.history.current()
            raise CommitConflictError(
                f"cannot roll {self.location.display_url} back to {target.id}: snapshot "
                f"{landed.id if landed else '?'} landed after {current.id}, the one this rollback "
                "was based on; nothing was changed. Look at `guideloom log` and roll back again"
            )
        if self._on_publish is not None:
            self._on_publish(self.history.manifest(snap), snap)
        return snap

    def _data_paths(self, snap: Snapshot) -> list[str]:
        """The data file of each of ``snap``'s shards."""
        table = self.history.manifest(snap).shard_table
        return [table.path(i, "data") for i in range(len(table))]

    def _check_pieces(self, snap: Snapshot) -> None:
        for piece in snap.pieces:
            if not self.location.exists(piece.path):
                raise ManifestError(
                    f"snapshot {snap.id} of {self.location.display_url} cannot be restored: its "
                    f"table piece {piece.path} is gone. Pick a kept snapshot (`guideloom log`)"
                )

    def _check_expected(
        self, expected: Snapshot | None | object, current: Snapshot | None, what: str
    ) -> None:
        if expected is _CURRENT:
            return
        want = expected.id if isinstance(expected, Snapshot) else None
        have = current.id if current is not None else None
        if want != have:
            raise CommitConflictError(
                f"cannot {what} {self.location.display_url}: it was at snapshot {want or '(none)'} "
                f"when this {what} started, but snapshot {have or '(none)'} has landed since; "
                f"nothing was committed. Check `guideloom log {self.location.display_url}`, then "
                f"run the {what} again on top of {have or 'the empty location'}"
            )

    def _check_same_schema(self, current: Snapshot) -> None:
        mine = self._spec()
        if current.storage_class != self.storage_class or current.format != mine:
            raise SchemaMismatchError(
                f"cannot append to {self.location.display_url}: the dataset is a "
                f"{current.storage_class} with format {current.format.name} {current.format.config}, "
                f"the appended records are a {self.storage_class} with format {mine.name} "
                f"{mine.config}. Open it with the storage class and format it records "
                "(`guideloom inspect` prints them), or write to another URL"
            )

    def _landed(self, job: str, current: Snapshot, since: str | None) -> Snapshot | None:
        """The snapshot an append job ``job`` already made (walking back from ``current`` to the
        time its parts were finished), or None."""
        snap: Snapshot | None = current
        while snap is not None:
            if snap.job == job:
                return snap
            if since is not None and snap.time < since:
                return None
            if snap.parent is None or snap.sequence == 0:
                return None
            try:
                snap = self.history.by_sequence(snap.sequence - 1)
            except FileNotFoundError:
                return None  # expired
        return None

    def _next(
        self,
        current: Snapshot | None,
        table: ShardTable | None,
        num_parts: int,
        metadata: dict[str, Any] | None,
        *,
        append: bool,
        job: str | None,
        first_part: int = 0,
    ) -> tuple[Snapshot, ShardTable | None]:
        """The snapshot that follows ``current`` with ``table`` (its rows, parts ``first_part
        ..`` of their run, shifted after the current parts for an append), its pieces written;
        and the rows as shifted. No table (parts without a record, appended): the parts are
        counted, the pieces are the current ones, and no rows are returned."""
        from guideloom._version import __version__

        seq = current.sequence + 1 if current is not None else 1
        if first_part and (current is None or current.num_parts < first_part):
            have = "no snapshot"
            if current is not None:
                have = f"{current.num_parts} part{'' if current.num_parts == 1 else 's'}"
            raise ValueError(
                f"cannot commit parts {first_part}.. of this run to {self.location.display_url} on "
                f"top of its earlier parts: the dataset has {have} (it was rolled back or "
                "overwritten since). Commit the run's parts from part 0 instead"
            )
        if append and current is not None:
            rows: ShardTable | None = None
            if table is None:  # parts that added nothing: the current pieces and totals
                pieces = list(current.pieces)
                summary = current.summary.model_copy(
                    update={"added_shards": 0, "removed_shards": 0, "added_records": 0, "added_tokens": 0}
                )
            else:
                rows = _shifted(table, current.num_parts - first_part)
                pieces = [*current.pieces, self.history.write_piece(rows, num_parts)]
                merge = merge_plan([p.shards for p in pieces])
                if merge > 1:
                    olds = pieces[-merge:-1]
                    joined = ShardTable.concat([*(self.history.read_piece(p) for p in olds), rows])
                    merged = self.history.write_piece(joined, sum(p.parts for p in olds) + num_parts)
                    pieces = [*pieces[:-merge], merged]
                base = current.summary
                added_records, added_tokens = sum(rows.records), sum(rows.tokens)
                summary = SnapshotSummary(
                    records=base.records + added_records,
                    tokens=base.tokens + added_tokens,
                    shards=base.shards + len(rows),
                    bytes=base.bytes + sum(sum(c.size) for c in rows.files.values()),
                    added_shards=len(rows),
                    removed_shards=0,
                    added_records=added_records,
                    added_tokens=added_tokens,
                )
            return (
                Snapshot(
                    id=snapshot_id(seq, new_token()),
                    sequence=seq,
                    parent=current.id,
                    time=now_iso(),
                    operation="append",
                    summary=summary,
                    storage_class=self.storage_class,
                    format=self._spec(),
                    num_parts=current.num_parts + num_parts,
                    guideloom_version=__version__,
                    metadata=dict(current.metadata if metadata is None else metadata),
                    pieces=tuple(pieces),
                    job=job,
                ),
                rows,
            )
        assert table is not None  # `publish` refused a write of parts without a record
        piece = self.history.write_piece(table, num_parts)
        op: Operation = "write" if current is None else "overwrite"
        if append:
            op = "write"
        return (
            Snapshot(
                id=snapshot_id(seq, new_token()),
                sequence=seq,
                parent=current.id if current is not None else None,
                time=now_iso(),
                operation=op,
                summary=summary_of(table, added=len(table), removed=current.summary.shards if current else 0),
                storage_class=self.storage_class,
                format=self._spec(),
                num_parts=num_parts,
                guideloom_version=__version__,
                metadata=dict(metadata or {}),
                pieces=(piece,),
                job=job,
            ),
            table,
        )

    def _manifest_of(self, snap: Snapshot, base: Snapshot | None, rows: ShardTable | None) -> Manifest:
        """``snap``'s manifest: from the cached manifest of ``base`` and the appended ``rows``
        when the storage holds it (no piece is read), else read from its pieces."""
        cached = self._cached() if self._cached is not None else None
        if rows is not None and snap.operation == "append" and base is not None and cached is not None:
            manifest, cached_id = cached
            if cached_id == base.id:
                return manifest_of(snap, ShardTable.concat([manifest.shard_table, rows]), validate=False)
        if rows is not None and snap.operation != "append":
            return manifest_of(snap, rows)
        return self.history.manifest(snap)

    def _remove_losers(self, stale: set[str], manifest: Manifest) -> None:
        """Remove this run's losing attempts that no kept snapshot uses (best effort)."""
        losers = stale - set(manifest.shard_table.prefix)
        if not losers:
            return
        try:
            used = self.referenced_prefixes()
        except (GuideLoomError, OSError):
            return
        for prefix in sorted(losers - used):
            self._remove_quietly(prefix)

    def referenced_prefixes(self, snapshots: list[Snapshot] | None = None) -> set[str]:
        """Every shard prefix some snapshot of ``snapshots`` (default: all kept) uses."""
        snaps = self.history.snapshots() if snapshots is None else snapshots
        paths = {p.path for s in snaps for p in s.pieces}
        used: set[str] = set()
        for path in sorted(paths):
            used.update(self.history.read_table(path).prefix)
        for s in snaps:
            if s.sequence == 0 and not s.pieces:
                used.update(self.history.manifest(s).shard_table.prefix)
        return used

    def _try_part(self, part: int, run: str, listed: dict[str, int]) -> tuple[PartRecord | None, str]:
        try:
            record = self.read_part_record(part, run)
        except FileNotFoundError:
            return None, "missing (the writer did not finish)"
        except (ManifestError, SchemaMismatchError) as err:
            return None, str(err)

        def size_of(rel: str) -> int:
            # From the listing taken when commit started; a file written since (or outside the
            # run's prefix) is asked for on its own.
            size = listed.get(rel)
            return self.location.size(rel) if size is None else size

        try:
            for shard in record.shards:
                check_shard(self.location, shard, "size", size_of=size_of)
        except (ShardNotFoundError, ShardCorruptError) as err:
            return None, str(err)
        return record, ""

    # -- cleaning up ------------------------------------------------------------------------

    def expire(
        self, older_than: _dt.datetime | _dt.timedelta | None, keep_last: int, grace: _dt.timedelta
    ) -> list[Snapshot]:
        """Delete snapshots, then unused files older than ``grace`` (see `Storage.expire`)."""
        if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1:
            raise ValueError(
                f"keep_last must be at least 1, got {keep_last!r}: the current snapshot is always "
                "kept (readers need it). Pass keep_last=1 to keep only the current snapshot"
            )
        if isinstance(older_than, _dt.timedelta):
            cutoff: str | None = _earlier(now_iso(), seconds=older_than.total_seconds())
        elif isinstance(older_than, _dt.datetime):
            if older_than.tzinfo is None:
                raise ValueError(
                    f"older_than must be an aware datetime (with a time zone), got {older_than!r}"
                )
            cutoff = older_than.astimezone(_dt.timezone.utc).isoformat(timespec="seconds")
        elif older_than is None:
            cutoff = None
        else:
            raise TypeError(f"older_than must be a datetime, a timedelta or None, got {older_than!r}")
        current = self.history.current()
        if current is None:
            raise DatasetNotFoundError(f"no dataset at {self.location.display_url}: nothing to expire")
        current = self.history.materialize(current)
        snaps = self.history.snapshots()
        newest = {s.id for s in snaps[-keep_last:]} | {current.id}
        expired = [s for s in snaps if s.id not in newest and (cutoff is None or s.time < cutoff)]
        for snap in expired:
            self.location.delete(layout.snapshot_log_path(snap.sequence))
        self._remove_unused(grace)
        return expired

    def _remove_unused(self, grace: _dt.timedelta) -> None:
        """Delete table pieces, shard folders and part records that no kept snapshot uses and
        that are older than ``grace`` (so the files of writers still running are kept)."""
        import time

        kept = self.history.snapshots()  # read again: commits may have landed meanwhile
        used = self.referenced_prefixes(kept)
        pieces = {p.path for s in kept for p in s.pieces}
        limit = time.time() - grace.total_seconds()
        tables = f"{layout.SNAPSHOTS_DIR}/tables"
        young: list[str] = []  # unused, but younger than the grace period: they stay
        for rel, when in self.location.modified_under(tables).items():
            if rel not in pieces:
                if when < limit:
                    self.location.delete(rel)
                else:
                    young.append(rel)
        from guideloom.storage.hashindex import remove_unused as remove_unused_hashes

        remove_unused_hashes(self.location, kept, limit)  # the exact-duplicate index's pieces
        newest: dict[str, float] = {}
        files_of: dict[str, list[str]] = {}
        for rel, when in self.location.modified_under(layout.SHARDS_DIR).items():
            prefix = _prefix_of(rel)
            newest[prefix] = max(newest.get(prefix, 0.0), when)
            files_of.setdefault(prefix, []).append(rel)
        for prefix, when in sorted(newest.items()):
            if prefix not in used and when < limit:
                self.location.delete(prefix, recursive=True)
            elif prefix not in used:
                young += files_of[prefix]
        runs = {layout.run_of_prefix(p) for p in used}
        for rel, when in self.location.modified_under(layout.PARTS_DIR).items():
            folder = rel.split("/")[1] if rel.count("/") >= 2 else None
            run = layout.parts_folder_run(folder) if folder else layout.DEFAULT_RUN
            if run not in runs and when < limit:
                self.location.delete(rel)
            elif run not in runs:
                young.append(rel)
        self.grace_kept = (len(young), self._sizes(young))

    def _sizes(self, rels: list[str]) -> int:
        """Bytes of the files ``rels`` (one listing per top folder they lie in)."""
        if not rels:
            return 0
        sizes: dict[str, int] = {}
        for top in sorted({r.split("/", 1)[0] for r in rels}):
            sizes.update(self.location.sizes_under(top))
        return sum(sizes.get(r, 0) for r in rels)

    def remove_unreferenced(self, manifest: Manifest) -> None:
        """Remove shard folders and part records that no kept snapshot (``manifest`` is the
        current one) uses (see `Storage.remove_unreferenced`)."""
        used = set(manifest.shard_table.prefix) | self.referenced_prefixes()
        self._remove_outside(layout.SHARDS_DIR, used)
        runs = {layout.run_of_prefix(p) for p in used} - {None}
        for name in self.location.list(layout.PARTS_DIR):
            rel = f"{layout.PARTS_DIR}/{name}"
            folder_run = layout.parts_folder_run(name)
            run = layout.DEFAULT_RUN if folder_run is None else folder_run
            if run not in runs:
                self.location.delete(rel, recursive=folder_run is not None)
            elif folder_run is not None:
                keep = {layout.part_record_path(k, run) for k in range(manifest.num_parts)}
                for record in self.location.list(rel):
                    if f"{rel}/{record}" not in keep:
                        self.location.delete(f"{rel}/{record}")
            elif rel not in {layout.part_record_path(k) for k in range(manifest.num_parts)}:
                self.location.delete(rel)

    def _remove_outside(self, rel: str, used: set[str]) -> None:
        """Delete everything under ``rel`` that is neither a used prefix nor above one."""
        for name in self.location.list(rel):
            path = f"{rel}/{name}"
            if path in used:
                continue
            if any(u.startswith(path + "/") for u in used):
                self._remove_outside(path, used)
            else:
                self.location.delete(path, recursive=True)

    def _remove_quietly(self, rel: str) -> None:
        # Cleanup after a commit is best effort: the commit itself already succeeded.
        try:
            self.location.delete(rel, recursive=True)
        except (GuideLoomError, OSError):
            pass


def _name(snap: Snapshot | None) -> str:
    return snap.id if snap is not None else "(no snapshot: an empty location)"


def _earlier(iso: str, *, seconds: float) -> str:
    """``iso`` (a UTC time) moved ``seconds`` earlier, in the same format."""
    moment = _dt.datetime.fromisoformat(iso) - _dt.timedelta(seconds=seconds)
    return moment.isoformat(timespec="seconds")


def _shifted(table: ShardTable, base: int) -> ShardTable:
    """``table`` (rows of freshly written parts, numbered from 0) as parts ``base ..``: part
    numbers shifted, file paths kept (each prefix records the shift)."""
    if base == 0:
        return table
    if any(table.part_base):
        raise ValueError("only rows of freshly written parts can be shifted")
    return table.model_copy(
        update={"part": [p + base for p in table.part], "part_base": [base] * len(table.prefix)}
    )


def _prefix_of(rel: str) -> str:
    """The shard prefix of a shard file path (``shards/w-x`` or ``shards/r-run/a-x``)."""
    pieces = rel.split("/")
    return "/".join(pieces[:3] if len(pieces) > 2 and pieces[1].startswith("r-") else pieces[:2])
