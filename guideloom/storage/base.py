"""The three storage classes: a location, a layout and a format, plus writing and committing.

``XStorage(url, format)`` opens a committed dataset, checking that it was written with the same
storage class and format, or prepares an empty location for writing. The schema is never
inferred from file contents: the caller names it, and the manifest confirms it.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

from guideloom.errors import (
    DatasetExistsError,
    DatasetNotFoundError,
    IncompletePartsError,
    ManifestError,
    SchemaMismatchError,
    ShardCorruptError,
    ShardNotFoundError,
)
from guideloom.formats import (
    DocumentStorageFormat,
    Format,
    StreamNumpyFormat,
    StreamWithMetaStorageFormat,
    same_spec,
)
from guideloom.io import Location
from guideloom.manifest import (
    Manifest,
    PartRecord,
    ShardInfo,
    parse_part_record,
)
from guideloom.storage import layout
from guideloom.storage.checks import check_shard, load_manifest, verify_shards
from guideloom.storage.writer import DEFAULT_SHARD_SIZE, Writer

__all__ = ["DocumentStorage", "Storage", "StreamStorage", "StreamWithMetaStorage"]


class Storage:
    """Base of the storage classes; use `DocumentStorage`, `StreamStorage` or
    `StreamWithMetaStorage`."""

    storage_class: ClassVar[str]
    layout: ClassVar[str]
    format_type: ClassVar[type[Format]]

    def __init__(
        self, url: str | os.PathLike[str], format: Format, *, storage_options: dict[str, Any] | None = None
    ) -> None:
        if not isinstance(format, self.format_type):
            raise TypeError(
                f"{type(self).__name__} stores records with a {self.format_type.__name__}, got "
                f"{type(format).__name__}; pick the storage class that matches the format "
                "(DocumentStorage + DocumentStorageFormat, StreamStorage + StreamNumpyFormat, "
                "StreamWithMetaStorage + StreamWithMetaStorageFormat)"
            )
        self.format = format
        self.location = Location(url, storage_options)
        self._manifest: Manifest | None = None
        self._load_manifest(missing_ok=True)

    @property
    def url(self) -> str:
        """The dataset URL, without credentials."""
        return self.location.display_url

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r}, {self.format!r})"

    # -- the manifest -----------------------------------------------------------------------

    def _load_manifest(self, missing_ok: bool = False) -> Manifest | None:
        try:
            manifest = load_manifest(self.location)
        except DatasetNotFoundError:
            if missing_ok:
                return None
            raise
        self._check_schema(manifest, self.location.describe(layout.manifest_path()))
        self._manifest = manifest
        return manifest

    def _check_schema(self, recorded: Manifest | PartRecord, where: str) -> None:
        if recorded.storage_class != self.storage_class:
            raise SchemaMismatchError(
                f"{where} records a {recorded.storage_class}, but it was opened as "
                f"{self.storage_class}; reopen it with {recorded.storage_class} and its format "
                f"{recorded.format.name}({recorded.format.config})"
            )
        if not same_spec(recorded.format.model_dump(), self.format.spec()):
            raise SchemaMismatchError(
                f"{where} was written with format {recorded.format.name} "
                f"config={recorded.format.config}, but opened with {type(self.format).__qualname__} "
                f"config={self.format.config()}; reopen it with the format it was written with"
            )

    @property
    def manifest(self) -> Manifest:
        """The committed manifest (read once and cached; `refresh` re-reads it)."""
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
        """
        self._manifest = None
        return self.manifest

    def exists(self) -> bool:
        """Whether a committed dataset (a manifest) is at the URL."""
        return self.location.exists(layout.manifest_path())

    # -- writing ----------------------------------------------------------------------------

    def writer(
        self,
        part: int | None = None,
        *,
        overwrite: bool = False,
        shard_size: int = DEFAULT_SHARD_SIZE,
        metadata: dict[str, Any] | None = None,
    ) -> Writer:
        """A writer for the whole dataset, or for part ``part`` of a parallel write.

        ``writer()`` writes part 0 and commits the manifest when its ``with`` block exits
        cleanly. It refuses a location that already holds a dataset unless ``overwrite=True``;
        then the old dataset stays readable until the new manifest replaces it (one atomic
        write), and its files are removed after that. If the block raises, the old dataset is
        kept as it was.
        ``writer(part=k, overwrite=True)`` deletes only the old manifest, since other processes
        may be writing their parts. ``writer(part=k)`` writes part ``k`` and its completion record; call
        `commit` once every part is done. ``shard_size`` is in bytes: a shard closes after
        the record that reaches it. ``metadata`` is a JSON-able dict kept in the manifest
        (``writer()``) or in the part's completion record (``writer(part=k)``).

        Args:
            part: The part to write (a non-negative int), or None for the whole dataset.
            overwrite: Replace a dataset already committed at the URL.
            shard_size: Bytes per shard: a shard closes after the record that reaches it.
            metadata: JSON-able values kept in the manifest or the part's completion record.

        Returns:
            A `Writer`: use it as a context manager and call `append(record)` inside.

        Raises:
            DatasetExistsError: A dataset is committed at the URL and `overwrite` is False.
            ValueError: `part` is not a non-negative int.
        """
        committed = self.exists()
        if committed and not overwrite:
            raise DatasetExistsError(
                f"a dataset is already committed at {self.url}; pass overwrite=True to replace it, "
                "call storage.delete() first, or choose another URL"
            )
        if part is None:
            # A run of its own: the dataset it replaces stays readable until the new manifest
            # is written, and is removed only then.
            prefix = layout.generation_prefix(uuid.uuid4().hex[:12])
            return Writer(self, 0, shard_size=shard_size, metadata=metadata, commit=True, shard_prefix=prefix)
        if not isinstance(part, int) or part < 0:
            raise ValueError(f"part must be a non-negative int, got {part!r}")
        if committed:
            # Only hide the old dataset: other processes may already be writing their parts.
            self.location.delete(layout.manifest_path())
            self._manifest = None
        return Writer(self, part, shard_size=shard_size, metadata=metadata, commit=False)

    def delete(self) -> None:
        """Delete the dataset: the manifest first (readers stop seeing it), then parts and shards."""
        self.location.delete(layout.manifest_path())
        self._manifest = None
        self.location.delete(layout.PARTS_DIR, recursive=True)
        self.location.delete(layout.SHARDS_DIR, recursive=True)

    def remove_unreferenced(self) -> None:
        """Remove shard directories and part records that the manifest does not use."""
        manifest = self.manifest
        table = manifest.shard_table
        used_dirs = {table.path(i, "data").rsplit("/", 1)[0] for i in range(len(table))}
        used_tops = {d.split("/")[1] for d in used_dirs}
        for top in self.location.list(layout.SHARDS_DIR):
            if top not in used_tops:
                self.location.delete(f"{layout.SHARDS_DIR}/{top}", recursive=True)
            elif top.startswith("w-"):
                for name in self.location.list(f"{layout.SHARDS_DIR}/{top}"):
                    if f"{layout.SHARDS_DIR}/{top}/{name}" not in used_dirs:
                        self.location.delete(f"{layout.SHARDS_DIR}/{top}/{name}", recursive=True)
        keep = {layout.part_record_path(k).rsplit("/", 1)[-1] for k in range(manifest.num_parts)}
        for name in self.location.list(layout.PARTS_DIR):
            if name not in keep:
                self.location.delete(f"{layout.PARTS_DIR}/{name}")

    def read_part_record(self, part: int) -> PartRecord:
        """Part ``part``'s completion record; ``FileNotFoundError`` if it has none."""
        rel = layout.part_record_path(part)
        record = parse_part_record(self.location.read(rel), self.location.describe(rel))
        self._check_schema(record, self.location.describe(rel))
        if record.part != part:
            raise ManifestError(f"{self.location.describe(rel)} says it is part {record.part}")
        return record

    def part_complete(self, part: int, verify: str = "size") -> bool:
        """Whether part ``part`` has a valid completion record whose shard files match it.

        ``verify`` is ``"none"`` (the record parses), ``"size"`` (every shard file has the
        recorded size) or ``"checksum"`` (and the recorded checksum; reads every byte).

        Args:
            part: The part number.
            verify: `"none"`, `"size"` or `"checksum"`.

        Returns:
            True when the part may be committed as it is; False when it must be written again.

        Raises:
            ValueError: `verify` is not one of the three values.
        """
        try:
            record = self.read_part_record(part)
            for shard in record.shards:
                self.check_shard(shard, verify)
        except (FileNotFoundError, ManifestError, ShardCorruptError):
            return False
        return True

    def commit(self, num_parts: int, metadata: dict[str, Any] | None = None) -> Manifest:
        """Write the manifest of parts ``0 .. num_parts - 1`` in part order, atomically.

        Refuses (`IncompletePartsError`, naming them) if any part has no valid completion
        record or a shard file of another size than recorded. Nothing is written then.

        Args:
            num_parts: How many parts the dataset has (parts `0 .. num_parts - 1`).
            metadata: JSON-able values stored in the manifest; None keeps part 0's metadata.

        Returns:
            The committed `Manifest`.

        Raises:
            IncompletePartsError: Some parts are missing or damaged (each is named).
            SchemaMismatchError: A part was written with another storage class or format.
            ValueError: `num_parts` is not a positive int.
        """
        if not isinstance(num_parts, int) or num_parts <= 0:
            raise ValueError(f"num_parts must be a positive int, got {num_parts!r}")
        with ThreadPoolExecutor(max_workers=min(16, num_parts)) as pool:
            results = list(pool.map(self._try_part, range(num_parts)))
        bad = [(k, why) for k, (rec, why) in enumerate(results) if rec is None]
        if bad:
            listed = "; ".join(f"part {k}: {why}" for k, why in bad[:20])
            more = f" (and {len(bad) - 20} more)" if len(bad) > 20 else ""
            raise IncompletePartsError(
                f"cannot commit {self.url}: {len(bad)} of {num_parts} parts have no valid "
                f"completion record: {listed}{more}. Re-run the writers of those parts, then commit"
            )
        records = [rec for rec, _ in results if rec is not None]
        from guideloom import __version__

        manifest = Manifest.from_parts(records, guideloom_version=__version__, metadata=dict(metadata or {}))
        self.location.write(layout.manifest_path(), manifest.to_json())
        self._manifest = manifest
        return manifest

    def _try_part(self, part: int) -> tuple[PartRecord | None, str]:
        try:
            record = self.read_part_record(part)
        except FileNotFoundError:
            return None, "missing (the writer did not finish)"
        except (ManifestError, SchemaMismatchError) as err:
            return None, str(err)
        try:
            for shard in record.shards:
                self.check_shard(shard, "size")
        except (ShardNotFoundError, ShardCorruptError) as err:
            return None, str(err)
        return record, ""

    # -- checking ---------------------------------------------------------------------------

    def check_shard(self, shard: ShardInfo, verify: str = "checksum") -> None:
        """Raise `ShardNotFoundError` / `ShardCorruptError` if a file differs."""
        check_shard(self.location, shard, verify)

    def verify(self, checksums: bool = True) -> Iterator[tuple[ShardInfo, Exception | None]]:
        """Check every shard of the manifest; yields ``(shard, error or None)``.

        Args:
            checksums: Read every byte and compare checksums; False compares sizes only (one
                metadata request per file).

        Yields:
            `(shard, None)` for a shard that matches the manifest, `(shard, error)` with a
            `ShardNotFoundError` or `ShardCorruptError` for one that does not.

        Raises:
            DatasetNotFoundError: No dataset is committed at the URL.
        """
        return verify_shards(self.location, self.manifest, checksums)


class DocumentStorage(Storage):
    """Documents: one record per sample, each encoded by a `DocumentStorageFormat`."""

    storage_class = "DocumentStorage"
    layout = "documents"
    format_type = DocumentStorageFormat


class StreamStorage(Storage):
    """A stream: records joined end to end, read as fixed, non-overlapping windows."""

    storage_class = "StreamStorage"
    layout = "stream"
    format_type = StreamNumpyFormat


class StreamWithMetaStorage(Storage):
    """A stream plus annotations mapped to token spans (a `StreamWithMetaStorageFormat`)."""

    storage_class = "StreamWithMetaStorage"
    layout = "stream_with_meta"
    format_type = StreamWithMetaStorageFormat
