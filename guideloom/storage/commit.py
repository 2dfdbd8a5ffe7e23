"""The commit protocol: how finished parts become the dataset that readers see.

A dataset changes in exactly one step: ``manifest.json`` is replaced by one atomic write
(`Committer.publish`). Everything before that step adds files no manifest names yet (shards under
an attempt's own prefix, part completion records); everything after it removes files the new
manifest no longer names. So a reader always sees one whole committed dataset, old or new.

* A part writer (``storage.writer(part=k, run=r)``) ends by writing its completion record
  (`Committer.write_part_record`), which names the exact files and checksums of its attempt;
  the last attempt to write it wins.
* ``storage.commit(num_parts=n, run=r)`` (`Committer.commit`) reads the records of parts
  ``0 .. n - 1``, checks that each names files of the recorded sizes, merges them in part order
  and publishes the manifest.
* A single writer (``storage.writer()``) publishes straight from its own record
  (`Committer.publish_record`): no file another writer could replace sits between its shards
  and its manifest.
* After publishing, the shard folders of the manifest it replaced and of the run's losing
  attempts are removed (best effort); `Committer.remove_unreferenced` removes everything else the
  committed manifest does not use.

`Committer.publish` is the one place that changes what a dataset is: a compare-and-swap commit
(publish only if the manifest is still the one the commit started from) or a log of snapshots
belongs there, in `_swap`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import guideloom.layout as layout
from guideloom.errors import (
    DatasetNotFoundError,
    GuideLoomError,
    IncompletePartsError,
    ManifestError,
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
    ShardTableBuilder,
    StorageClassName,
    parse_part_record,
)
from guideloom.storage.checks import check_schema, check_shard, load_manifest

__all__ = ["Committer", "check_run"]

_COMMIT_THREADS = 32  # part records read at once by commit
_COMMIT_CHUNK = 1024  # parts in flight at once (bounds the records held in memory)
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
    manifest this committer writes, right after writing it (the storage caches it).
    """

    def __init__(
        self,
        location: Location,
        storage_class: StorageClassName,
        format: Format,
        *,
        on_publish: Callable[[Manifest], None] | None = None,
    ) -> None:
        self.location = location
        self.storage_class = storage_class
        self.format = format
        self._on_publish = on_publish

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
        check_schema(self.storage_class, self.format, record, where)
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
        self, num_parts: int, metadata: dict[str, Any] | None, *, run: str | None, cleanup: bool
    ) -> Manifest:
        """Publish the manifest of parts ``0 .. num_parts - 1`` of run ``run`` (see
        `Storage.commit`); `IncompletePartsError` naming the parts that are not complete."""
        if isinstance(num_parts, bool) or not isinstance(num_parts, int) or num_parts <= 0:
            raise ValueError(f"num_parts must be a positive int, got {num_parts!r}")
        run = check_run(run)
        listed = self.location.sizes_under(layout.run_prefix(run))
        builder = ShardTableBuilder()
        bad: list[tuple[int, str]] = []
        with ThreadPoolExecutor(max_workers=min(_COMMIT_THREADS, num_parts)) as pool:
            for start in range(0, num_parts, _COMMIT_CHUNK):  # bounded: records are dropped as added
                parts = range(start, min(num_parts, start + _COMMIT_CHUNK))
                for k, (record, why) in zip(parts, pool.map(lambda k: self._try_part(k, run, listed), parts)):
                    if record is None:
                        bad.append((k, why))
                    elif not bad:
                        builder.add_part(record)
        if bad:
            listing = "; ".join(f"part {k}: {why}" for k, why in bad[:20])
            more = f" (and {len(bad) - 20} more)" if len(bad) > 20 else ""
            raise IncompletePartsError(
                f"cannot commit {self.location.display_url}: {len(bad)} of {num_parts} parts have "
                f"no valid completion record: {listing}{more}. Re-run the writers of those parts, "
                "then commit"
            )
        # Every attempt of the run, winners and losers: the losers' folders go after publishing.
        attempts = {layout.attempt_prefix_of(rel) for rel in listed}
        return self.publish(builder, metadata, cleanup=cleanup, stale=attempts)

    def publish_record(self, record: PartRecord) -> PartRecord:
        """A single writer's completion: publish the manifest of its one part, with the record's
        metadata as the manifest's, and return the record without it (the part keeps no record
        of its own)."""
        builder = ShardTableBuilder()
        builder.add_part(record)
        self.publish(builder, record.metadata)
        return record.model_copy(update={"metadata": {}})

    def publish(
        self,
        parts: ShardTableBuilder,
        metadata: dict[str, Any] | None,
        *,
        cleanup: bool = True,
        stale: set[str] | None = None,
    ) -> Manifest:
        """Write the manifest of ``parts``, then (with ``cleanup``) remove the shard folders of
        the manifest it replaced and the prefixes in ``stale`` that the new one does not use."""
        from guideloom._version import __version__

        previous = self._current_manifest()
        manifest = Manifest.from_table(
            parts.build(),
            storage_class=self.storage_class,
            format=FormatSpecModel(**self.format.spec()),
            num_parts=parts.num_parts,
            guideloom_version=__version__,
            metadata=dict(metadata or {}),
        )
        self._swap(previous, manifest)
        if self._on_publish is not None:
            self._on_publish(manifest)
        if cleanup:
            used = set(manifest.shard_table.prefix)
            old = set(previous.shard_table.prefix) if previous is not None else set()
            for prefix in sorted((old | (stale or set())) - used):
                if not any(u.startswith(prefix + "/") for u in used):
                    self._remove_quietly(prefix)
        return manifest

    def _swap(self, previous: Manifest | None, manifest: Manifest) -> None:
        """Replace the committed manifest (``previous``, None if there was none) with
        ``manifest``: today one atomic write, whoever committed in between (the last writer
        wins); a compare-and-swap commit makes this conditional on ``previous``."""
        self.location.write(layout.manifest_path(), manifest.to_json())

    def _current_manifest(self) -> Manifest | None:
        """The manifest committed here right now, or None (missing or unreadable)."""
        try:
            return load_manifest(self.location)
        except (DatasetNotFoundError, ManifestError):
            return None

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

    def remove_unreferenced(self, manifest: Manifest) -> None:
        """Remove shard folders and part records that ``manifest`` (the committed one) does not
        use (see `Storage.remove_unreferenced`)."""
        used = set(manifest.shard_table.prefix)
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
