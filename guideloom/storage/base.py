"""The three storage classes: a location, a layout and a format; opening, writing, deleting.

``XStorage(url, format)`` opens a committed dataset, checking that it was written with the same
storage class and format, or prepares an empty location for writing. The schema is never
inferred from file contents: the caller names it, and the manifest confirms it.

What a storage delegates: the bytes of records to its layout's encoder (through `Writer`), the
commit protocol (part records, commits, clean-up) to `guideloom.storage.commit.Committer`, and
the checks of shard files to `guideloom.storage.checks`.
"""

from __future__ import annotations

import datetime as _dt
import os
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, ClassVar

import guideloom.layout as layout
from guideloom.errors import DatasetExistsError, DatasetNotFoundError, ManifestError
from guideloom.formats import (
    DocumentStorageFormat,
    Format,
    StreamNumpyFormat,
    StreamWithMetaStorageFormat,
)
from guideloom.io import Location
from guideloom.io.cache import block_cache
from guideloom.manifest import Manifest, PartRecord, ShardInfo, StorageClassName
from guideloom.manifest.snapshots import Snapshot
from guideloom.storage.checks import (
    DEFAULT_VERIFY_CONCURRENCY,
    check_schema,
    check_shard,
    verify_shards,
)
from guideloom.storage.commit import DEFAULT_GRACE, Committer, check_run
from guideloom.storage.writer import DEFAULT_SHARD_SIZE, Writer
from guideloom.types import DOCUMENTS, STREAM, STREAM_WITH_META, Layout

__all__ = ["DocumentStorage", "Storage", "StreamStorage", "StreamWithMetaStorage", "check_run"]


class Storage:
    """Base of the storage classes; use `DocumentStorage`, `StreamStorage` or
    `StreamWithMetaStorage`."""

    storage_class: ClassVar[StorageClassName]
    layout: ClassVar[Layout]
    # The view `open_view` (and so the loader) opens on this storage; None: its layout's view.
    # A storage of files read in place (`guideloom.storage.foreign`) names a view of its own.
    view_class: ClassVar[type[Any] | None] = None
    format_type: ClassVar[type[Format]]

    def __init__(
        self,
        url: str | os.PathLike[str],
        format: Format,
        *,
        storage_options: dict[str, Any] | None = None,
        snapshot: str | int | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_bytes: int | None = None,
    ) -> None:
        """Open the dataset at ``url``, or prepare an empty location for writing.

        An empty location is accepted (a writer may be about to write there); what needs the
        dataset (`manifest`, a view, the loader) raises `DatasetNotFoundError` then. A committed
        dataset is checked at once: its storage class and format must be the ones given here.

        Args:
            url: A local path or an fsspec URL (`s3://bucket/prefix`, `gs://...`, `memory://...`)
                of the dataset's root folder.
            format: The format the records are (or will be) encoded with: a
                `DocumentStorageFormat` for `DocumentStorage`, a `StreamNumpyFormat` for
                `StreamStorage`, a `StreamWithMetaStorageFormat` for `StreamWithMetaStorage`.
            storage_options: fsspec options for the filesystem (credentials,
                `client_kwargs.endpoint_url`, ...) plus `guideloom_deadline_s`, the deadline of
                every storage operation in seconds. Never written to the manifest.
            snapshot: Open this snapshot (an id from `snapshots()` or `guideloom log`, or its
                sequence number) instead of the current one. Such a storage only reads: it
                cannot write, commit, roll back or expire.
            cache_dir: A folder on local disk for the opt-in block cache of what views read
                (`guideloom.io.cache`): 1 MiB blocks of shard and index files, shared by the
                processes of the node, checked against the manifest before use, so a second
                epoch sends no data requests. None (the default): no cache, nothing on disk.
            cache_bytes: The most bytes the cache's files may take (least recently used blocks
                are evicted); default the smaller of 16 GiB and half the free space of
                `cache_dir`. Only with `cache_dir`.

        Raises:
            SchemaMismatchError: The dataset at `url` was written with another storage class or
                format (or another format configuration, such as a field's dtype).
            ManifestError: Its `manifest.json` is unreadable, of an unknown version, or
                contradicts itself.
            UnknownProtocolError: fsspec knows no filesystem for the URL's scheme, or its
                package is not installed.
            StorageAccessError: The storage refused the request or could not be reached.
            TypeError: `format` is not of the kind this storage class stores.
            DatasetNotFoundError: `snapshot` names no kept snapshot (the message lists the
                nearest ids).
            ValueError: `cache_bytes` without `cache_dir`, a negative `cache_bytes`, or a
                `cache_dir` that is a file or cannot be created.
        """
        if not isinstance(format, self.format_type):
            raise TypeError(
                f"{type(self).__name__} stores records with a {self.format_type.__name__}, got "
                f"{type(format).__name__}; pick the storage class that matches the format "
                "(DocumentStorage + DocumentStorageFormat, StreamStorage + StreamNumpyFormat, "
                "StreamWithMetaStorage + StreamWithMetaStorageFormat)"
            )
        self.format = format
        self.block_cache = block_cache(cache_dir, cache_bytes)  # None: off (the default)
        self.location = Location(url, storage_options)
        self._manifest: Manifest | None = None
        self._snapshot: Snapshot | None = None
        self._pinned = snapshot
        self._commits = Committer(
            self.location, self.storage_class, format, on_publish=self._published, cached=self._cached
        )
        self._load_manifest(missing_ok=snapshot is None)

    @property
    def url(self) -> str:
        """The dataset URL, without credentials."""
        return self.location.display_url

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r}, {self.format!r})"

    # -- the manifest -----------------------------------------------------------------------

    def _load_manifest(self, missing_ok: bool = False) -> Manifest | None:
        history = self._commits.history
        opened = history.open(self._pinned, missing_ok=missing_ok)
        if opened is None:
            return None
        snap, manifest = opened
        where = self.location.describe(layout.manifest_path())
        if self._pinned is not None:
            where = f"{where} (snapshot {snap.id})"
        check_schema(self.storage_class, self.format, manifest, where)
        self._check_counts(manifest, snap)
        self._manifest, self._snapshot = manifest, snap
        return manifest

    def _check_counts(self, manifest: Manifest, snap: Snapshot) -> None:
        """The cheap check at open: token files are exactly as long as their counts need.

        (Index and span files are checked by the manifest itself; headers and content by
        `verify`.) The error names the file that records the shard: its table piece, or
        ``manifest.json`` for a dataset written before snapshots.
        """
        fmt = self.format
        stream = fmt.stream_format if isinstance(fmt, StreamWithMetaStorageFormat) else fmt
        if isinstance(stream, StreamNumpyFormat):
            try:
                manifest.shard_table.check_item_sizes("tokens", stream.itemsize)
            except ValueError as err:
                where = self.location.describe(_piece_of(snap, getattr(err, "shard", 0)))
                raise ManifestError(
                    f"{where} contradicts itself (field tokens or files.data.size): {err}. The file "
                    "was altered or damaged: roll back to another snapshot (`guideloom log` lists "
                    "them) or rewrite the dataset"
                ) from None

    def _published(self, manifest: Manifest, snapshot: Snapshot) -> None:
        """What the committer calls right after a commit: its manifest is the one to use now."""
        self._manifest, self._snapshot = manifest, snapshot

    def _cached(self) -> tuple[Manifest, str] | None:
        if self._manifest is None or self._snapshot is None:
            return None
        return self._manifest, self._snapshot.id

    def _writable(self, what: str) -> None:
        if self._pinned is not None:
            raise ValueError(
                f"this storage reads snapshot {self._pinned!r} of {self.url}; it cannot {what}. "
                "Open the storage without snapshot= to change the dataset"
            )

    # -- snapshots ----------------------------------------------------------------------------

    def file_identities(self) -> list[tuple[str, str]] | None:
        """``(path, identity)`` of each file a dataset read in place is made of (identity: its
        size and ETag or modification time), recorded in loader states so that a file changed
        under a state is named; None for a GuideLoom dataset (its snapshots say what changed)."""
        return None

    @property
    def current_snapshot(self) -> Snapshot:
        """The snapshot this storage reads: the pinned one (``snapshot=``), or the one current
        when the manifest was last read (`refresh` re-reads it).

        Raises:
            DatasetNotFoundError: No dataset is committed at the URL.
        """
        _ = self.manifest
        assert self._snapshot is not None
        return self._snapshot

    def at_snapshot(self, snapshot: str | int) -> Storage:
        """The same dataset opened at ``snapshot`` (read-only, pinned; same format and options).

        Args:
            snapshot: The id (or sequence number) of a kept snapshot.

        Returns:
            A new storage of the same class, reading that snapshot (as ``snapshot=`` opens it).

        Raises:
            DatasetNotFoundError: `snapshot` is not kept (the message names the oldest kept
                snapshot when it has expired, or lists the nearest ids).
        """
        cache = self.block_cache
        return type(self)(
            self.location.url,
            self.format,
            storage_options=self.location.storage_options,
            snapshot=snapshot,
            cache_dir=cache.directory if cache else None,
            cache_bytes=cache.capacity if cache else None,
        )

    def snapshots(self) -> list[Snapshot]:
        """Every kept snapshot of the dataset, oldest first (``id``, ``parent``, ``operation``,
        ``time``, ``summary`` ...). A dataset written before snapshots existed has one.

        Raises:
            StorageAccessError: The storage refused a request or could not be reached.
        """
        return self._commits.history.snapshots()

    def rollback(self, snapshot: str | int) -> Snapshot:
        """Make an older snapshot's content current: a new snapshot (operation ``rollback``)
        whose shards are exactly those of ``snapshot``. No shard file is written or deleted.

        Args:
            snapshot: The id (or sequence number) of a kept snapshot.

        Returns:
            The new current snapshot.

        Raises:
            DatasetNotFoundError: `snapshot` is not kept (expired, or never existed; the
                message lists the nearest ids), or no dataset is committed at the URL.
            CommitConflictError: Another commit landed while rolling back (both are named).
        """
        self._writable("roll back")
        history = self._commits.history
        current = history.current()
        if current is None:
            raise DatasetNotFoundError(f"no dataset at {self.url}: there is nothing to roll back")
        target = history.get(snapshot)
        return self._commits.rollback(target, current)

    def expire(
        self,
        older_than: _dt.datetime | _dt.timedelta | None = None,
        keep_last: int = 1,
        *,
        grace: _dt.timedelta = DEFAULT_GRACE,
    ) -> list[Snapshot]:
        """Delete old snapshots, then the shard files and part records no kept snapshot uses.

        A snapshot is expired when it is older than ``older_than`` (a time, or an age) and is
        not among the ``keep_last`` newest; the current snapshot is always kept. Files are then
        deleted only if no kept snapshot names them and they are older than ``grace`` (default
        one day): a writer still running writes files younger than that, so its shards are
        never deleted under it (a writer that runs longer than ``grace`` without finishing
        should be given a larger ``grace``).

        Args:
            older_than: Expire snapshots committed before this time (an aware datetime) or
                longer ago than this age; None: every snapshot beyond `keep_last`.
            keep_last: How many of the newest snapshots to keep whatever their age (at least 1).
            grace: Files younger than this are never deleted.

        Returns:
            The snapshots expired, oldest first.

        Raises:
            ValueError: `keep_last` is less than 1.
            DatasetNotFoundError: No dataset is committed at the URL.
        """
        self._writable("expire snapshots")
        return self._commits.expire(older_than, keep_last, grace)

    @property
    def manifest(self) -> Manifest:
        """The committed manifest (read once and cached; `refresh` re-reads it).

        Raises:
            DatasetNotFoundError: No dataset is committed at the URL.
            ManifestError: The manifest is unreadable, of an unknown version or invalid.
            SchemaMismatchError: The dataset has another storage class or format.
        """
        manifest = self._manifest or self._load_manifest()
        if manifest is None:  # unreachable: _load_manifest raises when there is none
            raise DatasetNotFoundError(f"no dataset at {self.url}")
        return manifest

    def refresh(self) -> Manifest:
        """Re-read the manifest, e.g. after another process committed.

        Returns:
            The manifest now committed at the URL.

        Raises:
            DatasetNotFoundError: No dataset is committed at the URL (any more).
            SchemaMismatchError: The dataset now there has another storage class or format.
            ManifestError: The manifest now there is unreadable, of an unknown version or invalid.
            StorageAccessError: The storage refused the request or could not be reached.
        """
        self._manifest = None
        return self.manifest

    def exists(self) -> bool:
        """Whether a committed dataset (a snapshot) is at the URL.

        Returns:
            True when `manifest.json` exists at the URL, or a snapshot whose `manifest.json`
            copy was not written (a commit that crashed right after landing); False for an
            empty location or one whose writer has not committed.

        Raises:
            StorageAccessError: The storage refused the request or could not be reached.
        """
        if self.location.exists(layout.manifest_path()):
            return True
        return self._commits.history.current() is not None

    # -- writing ----------------------------------------------------------------------------

    def writer(
        self,
        part: int | None = None,
        *,
        overwrite: bool = False,
        shard_size: int = DEFAULT_SHARD_SIZE,
        metadata: dict[str, Any] | None = None,
        run: str | None = None,
        append: bool = False,
    ) -> Writer:
        """A writer for the whole dataset, or for part ``part`` of a parallel write.

        ``writer()`` writes a dataset of one part and commits its manifest when the ``with``
        block exits cleanly. It refuses a location that already holds a dataset unless
        ``overwrite=True``; then the old dataset stays readable until the new manifest replaces
        it (one atomic write), and its files are removed after that. If the block raises,
        nothing is committed and the old dataset is kept as it was. Two single writers racing
        on one location: the manifest written last wins, and it always has its shards.

        ``writer(part=k)`` writes part ``k`` of run ``run`` and, on a clean exit, its completion
        record; call `commit` with the same ``run`` once every part is done. ``run`` names
        one parallel job (letters, digits, ``-``, ``_``; at most 64): pass the same value for a
        re-run of the same job, so finished parts are found and reused, and a new value for a
        different job, so none of another job's parts can be taken for its own. The default
        (``None``) is one fixed run. Each attempt writes under a prefix of its own, so an
        attempt racing another attempt of the same part, or an overwrite of a committed dataset,
        never touches a file that a completion record or the live manifest names; the old
        dataset stays readable until `commit` replaces its manifest.
        ``overwrite=True`` allows writing parts where a dataset is committed.

        ``shard_size`` is in bytes: a shard closes after the record that reaches it.
        ``metadata`` is a JSON-able dict kept in the manifest (``writer()``) or in the part's
        completion record (``writer(part=k)``).

        ``writer(append=True)`` adds its records after the dataset's (a new snapshot with
        operation ``append``; the existing shard files are not touched). If another commit
        lands first, the append is redone on top of it (only metadata). An empty location is
        written as with ``writer()``. For parallel appends write the new parts as parts
        ``0 .. n - 1`` of a run of their own (``writer(part=k, run=r, append=True)``: append
        allows writing parts where a dataset is committed) and call
        ``commit(num_parts=n, run=r, append=True)``.

        Args:
            part: The part to write (a non-negative int), or None for the whole dataset.
            overwrite: Replace a dataset already committed at the URL (parts: allow writing
                parts where a dataset is committed; `commit` replaces it).
            shard_size: Bytes per shard: a shard closes after the record that reaches it.
            metadata: JSON-able values kept in the manifest or the part's completion record.
            run: The parallel job a part belongs to (see above); None is one fixed run.
            append: Add the records after the current snapshot's (a part: allow writing it
                where a dataset is committed, for `commit(..., append=True)`).

        Returns:
            A `Writer`: use it as a context manager and call `append(record)` inside.

        Raises:
            DatasetExistsError: A dataset is committed at the URL and `overwrite` is False.
            StorageAccessError: The storage refused the request or could not be reached.
            ValueError: `part` is not a non-negative int, `run` is not a valid run name or is
                given without `part`, or `shard_size` is not positive.
            RecordError: As the ``with`` block ends: a single writer (no `part`) that is not an
                append was closed without a record appended (nothing is committed; a dataset
                already there is unchanged). An append without a record commits nothing.
        """
        self._writable("write")
        if self.exists() and not overwrite and not append:
            raise DatasetExistsError(
                f"a dataset is already committed at {self.url}; pass overwrite=True to replace it, "
                "append=True to add to it, call storage.delete() first, or choose another URL"
            )
        attempt = uuid.uuid4().hex[:12]
        if part is None:
            if run is not None:
                raise ValueError("run= names a parallel job: pass it with writer(part=k), commit(run=...)")
            # A single writer publishes straight from its own record: no file another writer
            # of this location could replace sits between its shards and its manifest.
            return Writer(
                self,
                0,
                shard_size=shard_size,
                metadata=metadata,
                shard_prefix=layout.generation_prefix(attempt),
                on_complete=partial(
                    self._commits.publish_record, append=append, expected=self._commits.history.current()
                ),
            )
        if isinstance(part, bool) or not isinstance(part, int) or part < 0:
            raise ValueError(f"part must be a non-negative int, got {part!r}")
        run = check_run(run)
        # An earlier attempt's record stays valid until this one replaces it: its files are
        # never touched by this attempt.
        return Writer(
            self,
            part,
            shard_size=shard_size,
            metadata=metadata,
            shard_prefix=layout.attempt_prefix(run, attempt),
            on_complete=partial(self._commits.write_part_record, run=run),
        )

    def delete(self) -> None:
        """Delete the dataset: the manifest first (readers stop seeing it), then parts and shards.

        Nothing at the URL is fine: deleting an empty location does nothing. Files outside the
        dataset's `manifest.json`, `snapshots/`, `parts/` and `shards/` are left alone.

        Raises:
            StorageAccessError: The storage refused a request (e.g. no permission to delete) or
                could not be reached.
        """
        self._writable("delete")
        self.location.delete(layout.manifest_path())
        self.location.delete(layout.SNAPSHOTS_DIR, recursive=True)
        self._manifest = self._snapshot = None
        self.location.delete(layout.PARTS_DIR, recursive=True)
        self.location.delete(layout.SHARDS_DIR, recursive=True)

    def remove_unreferenced(self) -> None:
        """Remove shard folders and part records that no kept snapshot uses, at once.

        Prefer `expire`, which does the same safely while writers run (it keeps files younger
        than its grace period). This one has no grace period: only call it while no writer is
        running on this location, as it also removes the files of writers that have not
        finished yet (a running writer's later commit then fails, naming the missing files,
        instead of publishing anything wrong).

        Raises:
            DatasetNotFoundError: No dataset is committed at the URL.
            StorageAccessError: The storage refused a request or could not be reached.
        """
        self._writable("remove files")
        self._commits.remove_unreferenced(self.manifest)

    def read_part_record(self, part: int, *, run: str | None = None) -> PartRecord:
        """Part ``part``'s completion record in run ``run``.

        Args:
            part: The part number (a non-negative int).
            run: The parallel job the part belongs to (see `writer`); None is the default run.

        Returns:
            The part's `PartRecord`: its shards (files, sizes, checksums, counts of records,
            tokens and spans) and metadata.

        Raises:
            FileNotFoundError: The part has no completion record (its writer did not finish).
            ManifestError: The record is not valid JSON, of an unknown version, invalid, or
                names another part.
            SchemaMismatchError: The part was written with another storage class or format.
            StorageAccessError: The storage refused the request or could not be reached.
            ValueError: `run` is not a valid run name.
        """
        return self._commits.read_part_record(part, run)

    def part_complete(self, part: int, verify: str = "size", *, run: str | None = None) -> bool:
        """Whether part ``part`` of run ``run`` has a valid completion record whose files match it.

        ``verify`` is ``"none"`` (the record parses), ``"size"`` (every shard file has the
        recorded size) or ``"checksum"`` (and the recorded checksum; reads every byte).

        Args:
            part: The part number.
            verify: `"none"`, `"size"` or `"checksum"`.
            run: The parallel job the part belongs to (see `writer`); None is the default run.

        Returns:
            True when the part may be committed as it is; False when it must be written again
            (no record, a damaged record, a missing or altered shard file).

        Raises:
            SchemaMismatchError: The part was written with another storage class or format.
            StorageAccessError: The storage refused a request or could not be reached.
            ValueError: `verify` is not one of the three values, or `run` is not a valid run
                name.
        """
        return self._commits.part_complete(part, verify, run)

    def commit(
        self,
        num_parts: int,
        metadata: dict[str, Any] | None = None,
        *,
        run: str | None = None,
        cleanup: bool = True,
        append: bool = False,
        first_part: int = 0,
    ) -> Manifest:
        """Write the manifest of parts ``0 .. num_parts - 1`` of run ``run`` in part order, atomically.

        Each part contributes exactly the files its completion record names, with the checksums
        recorded there; those files are never rewritten, so a manifest never mixes two attempts.
        Refuses (`IncompletePartsError`, naming them) if any part has no valid completion
        record or a shard file missing or of another size than recorded; nothing is written then.
        Until the new manifest is written, a dataset committed here before stays readable.

        With ``cleanup`` (the default), after writing it removes the shard files of the manifest
        it replaced and of this run's attempts that lost (a writer of this run still running
        then finds its files gone, and its part fails a later commit clearly). Part records are
        read concurrently, shard sizes come from one listing of the run's files, and memory
        grows with the shard table only.

        Args:
            num_parts: How many parts the dataset has (parts `0 .. num_parts - 1`).
            metadata: JSON-able values stored in the manifest; None keeps part 0's metadata.
            run: The run whose parts to commit (the value the part writers were given).
            cleanup: Remove this run's losing attempts (files of older snapshots are only
                removed by `expire`).
            append: Add the parts after the current snapshot's records (parts numbered on from
                the dataset's); a re-run of the same job (same run, same part records) that
                already landed commits nothing and returns its manifest.
            first_part: Commit only parts ``first_part .. num_parts - 1``, appended (needs
                ``append=True``) on top of a snapshot that ends with the run's parts before
                ``first_part``: a run committed in steps (`guideloom ingest --commit-every`),
                whose final snapshot has the shard table of one commit of all its parts. Pass
                ``cleanup=False`` until the last step: cleanup removes every attempt of the run
                no snapshot uses, also those of parts not committed yet.

        Returns:
            The committed `Manifest`.

        Raises:
            IncompletePartsError: Some parts are missing or damaged, or were written with another
                storage class or format (each is named); nothing is written.
            StorageAccessError: The storage refused a request or could not be reached.
            ValueError: `num_parts` is not a positive int, `first_part` is not in
                ``0 .. num_parts - 1`` (or given without `append`, or the dataset does not hold
                that many parts), or `run` is not a valid run name.
        """
        self._writable("commit")
        return self._commits.commit(
            num_parts, metadata, run=run, cleanup=cleanup, append=append, first_part=first_part
        )

    # -- checking ---------------------------------------------------------------------------

    def check_shard(self, shard: ShardInfo, verify: str = "checksum") -> None:
        """Check one shard's files against what the manifest (or a part record) says of them.

        Args:
            shard: The shard, as listed by `manifest.shards` or a part record.
            verify: `"none"` (no check), `"size"` (each file's size in bytes) or `"checksum"`
                (the size, and the checksum of every byte read; also each file's header).

        Raises:
            ShardNotFoundError: A file of the shard is missing.
            ShardCorruptError: A file has another size, checksum or header than recorded.
            StorageAccessError: The storage refused a request or could not be reached.
            ValueError: `verify` is not one of the three values.
        """
        check_shard(self.location, shard, verify)

    def verify(
        self,
        checksums: bool = True,
        *,
        concurrency: int = DEFAULT_VERIFY_CONCURRENCY,
        progress: Callable[[int, int], None] | None = None,
    ) -> Iterator[tuple[ShardInfo, Exception | None]]:
        """Check every shard of the manifest; yields ``(shard, error or None)`` in manifest order.

        With ``checksums`` every byte is read and each file's header is checked against the
        manifest's counts; without, only sizes. Shards are checked concurrently.

        Args:
            checksums: Read every byte and compare checksums; False compares sizes only.
            concurrency: How many shards are checked at once (threads).
            progress: Called as `progress(done, total)` (in shards) after each shard.

        Returns:
            An iterator of `(shard, None)` for a shard that matches the manifest and
            `(shard, error)` with a `ShardNotFoundError` or `ShardCorruptError` for one that
            does not, in manifest order.

        Raises:
            DatasetNotFoundError: No dataset is committed at the URL (raised by the call).
            StorageAccessError: The storage refused a request or could not be reached (raised
                while iterating, not yielded).
            ValueError: `concurrency` is not positive (raised at the first item).
        """
        return verify_shards(
            self.location, self.manifest, checksums, concurrency=concurrency, progress=progress
        )


class DocumentStorage(Storage):
    """Documents: one record per sample, each encoded by a `DocumentStorageFormat`."""

    storage_class = "DocumentStorage"
    layout = DOCUMENTS
    format_type = DocumentStorageFormat


class StreamStorage(Storage):
    """A stream: records joined end to end, read as fixed, non-overlapping windows."""

    storage_class = "StreamStorage"
    layout = STREAM
    format_type = StreamNumpyFormat


class StreamWithMetaStorage(Storage):
    """A stream plus annotations mapped to token spans (a `StreamWithMetaStorageFormat`)."""

    storage_class = "StreamWithMetaStorage"
    layout = STREAM_WITH_META
    format_type = StreamWithMetaStorageFormat


def _piece_of(snap: Snapshot, shard: int) -> str:
    """The file that records shard number ``shard`` of ``snap``: its table piece (or
    manifest.json for a dataset written before snapshots)."""
    first = 0
    for piece in snap.pieces:
        if shard < first + piece.shards:
            return piece.path
        first += piece.shards
    return layout.manifest_path()
