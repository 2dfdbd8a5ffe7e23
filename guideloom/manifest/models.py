"""The manifest and the part completion record: frozen, versioned pydantic models, no I/O.

``manifest.json`` at the dataset root is written last, in one atomic write; a dataset without
one does not exist for readers. It records the storage class, the format spec and every shard
with its record/token counts and each file's relative path, size and checksum.
``parts/part-NNNNN.json`` is the same information for one writer process; ``commit`` merges the
parts in part order into the manifest.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Collection, Sequence
from functools import cached_property
from typing import Annotated, Any, Literal, TypeVar

import numpy as np
import xxhash
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StringConstraints,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

import guideloom.layout as layout
from guideloom.errors import ManifestError, excerpt

__all__ = [
    "INT64_MAX",
    "MANIFEST_VERSION",
    "FileInfo",
    "FileColumn",
    "FormatSpecModel",
    "Manifest",
    "PartRecord",
    "ShardInfo",
    "ShardTable",
    "ShardTableBuilder",
    "StorageClassName",
    "check_relative_path",
    "parse_manifest",
    "parse_part_record",
    "version_for",
]

# Version 2 adds the span directory (``spans.dir``) to shards of streams with metadata; every
# version in READABLE_VERSIONS is read (version 1 datasets have no directory: readers search
# the span table instead). A dataset without span directories is still written as version 1,
# so older GuideLoom reads it; `version_for` picks the version a set of files needs.
# Version 3 adds record starts (``starts``) to stream shards; datasets without them keep the
# version their other files need.
MANIFEST_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)

ManifestVersion = Literal[1, 2, 3]


def version_for(file_names: Collection[str]) -> ManifestVersion:
    """The manifest version that describes shards with these file names (``"starts"``: 3,
    else ``"span_dir"``: 2, else 1)."""
    if "starts" in file_names:
        return 3
    return 2 if "span_dir" in file_names else 1


INT64_MAX = 2**63 - 1
# Counts and sizes are int64 everywhere they are used (NumPy offsets, file positions): a larger
# value cannot describe real data, so validation refuses it instead of overflowing later. Checked
# in pydantic's core (a shard table holds eight counts a shard: a Python validator per value made
# opening 10,000 shards 3x slower); JSON ``true``, ``1.0`` or ``"1"`` is refused because files are
# parsed in strict mode (`_parse`).
Count = Annotated[int, Field(ge=0, le=INT64_MAX)]


def _not_bool(value: Any) -> Any:
    """JSON ``true`` is not a count (pydantic would read it as 1)."""
    if isinstance(value, bool):
        raise ValueError("a count must be an integer, not true or false")
    return value


StorageClassName = Literal["DocumentStorage", "StreamStorage", "StreamWithMetaStorage"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FileInfo(_Frozen):
    """One file of a shard: path relative to the dataset root, size in bytes, checksum."""

    path: str
    size: Count
    checksum: str  # layout.CHECKSUM_PATTERN: "xxh3_64:<16 hex digits>" of the whole file

    @field_validator("path")
    @classmethod
    def _relative(cls, path: str) -> str:
        check_relative_path(path, "file path")
        return path

    @field_validator("checksum")
    @classmethod
    def _checksum(cls, value: str) -> str:
        layout.parse_checksum(value)
        return value


class ShardInfo(_Frozen):
    """One shard: its files and what it holds.

    ``records`` counts appended records (documents, or stream records); ``tokens`` counts stream
    elements (0 for documents); ``spans`` counts annotated spans (streams with metadata).
    """

    part: Count
    index: Count
    records: Count
    tokens: Count
    spans: Count = 0
    files: dict[str, FileInfo]

    @property
    def name(self) -> str:
        return f"part {self.part} shard {self.index} ({self.files['data'].path})"

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files.values())

    @model_validator(mode="after")
    def _has_data(self) -> ShardInfo:
        if "data" not in self.files:
            raise ValueError(f"shard part={self.part} index={self.index} has no 'data' file")
        return self


class FormatSpecModel(_Frozen):
    name: str
    module: str
    config: dict[str, Any]


class PartRecord(_Frozen):
    """The completion record one writer process leaves for its part."""

    version: Annotated[ManifestVersion, BeforeValidator(lambda v: _not_bool(v))] = 3  # MANIFEST_VERSION
    storage_class: StorageClassName
    format: FormatSpecModel
    part: Count
    shards: tuple[ShardInfo, ...]
    created_at: str
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _own_shards(self) -> PartRecord:
        seen: set[str] = set()
        for i, shard in enumerate(self.shards):
            if shard.part != self.part or shard.index != i:
                raise ValueError(
                    f"part record {self.part}: shards.{i} says part={shard.part} index={shard.index} "
                    f"(its part is {self.part}, its index {i})"
                )
            for f in shard.files.values():
                if f.path in seen:
                    raise ValueError(f"file {excerpt(f.path)} is listed twice ({shard.name})")
                seen.add(f.path)
        return self


class FileColumn(_Frozen):
    """One file of every shard: its kind (the file name's extension, a key of
    `guideloom.layout.KINDS`), sizes and checksums."""

    kind: str
    size: list[Count]
    checksum: list[Annotated[str, StringConstraints(pattern=layout.CHECKSUM_PATTERN)]]


_OPTIONAL_FILES = ("starts",)  # file kinds a joined table may lack in some pieces (see concat)


class ShardTable(_Frozen):
    """Every shard of a dataset, one column per attribute (row ``i`` is shard ``i``).

    Columns keep ``manifest.json`` small and fast to parse for datasets of many thousands of
    shards. ``files`` is keyed by the files' names (`guideloom.layout.FILES`). File paths are
    not stored: shard ``i``'s file of kind K is `guideloom.layout.shard_file_path` of its part,
    index, K and prefix (``{prefix[prefix_id[i]]}/part-{part[i]:05d}/shard-{index[i]:05d}.{K}``).
    """

    part: list[Count]
    index: list[Count]
    records: list[Count]
    tokens: list[Count]
    spans: list[Count]
    prefix: list[str]
    prefix_id: list[Count]
    files: dict[str, FileColumn]
    # Per prefix: what its shards' dataset part numbers add to the part number in their file
    # paths (parts appended to a dataset keep the paths their writers gave them). Empty: all 0;
    # written only when some value is not 0, so manifests without appends are unchanged.
    part_base: list[Count] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _drop_empty_base(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if not any(self.part_base):
            data.pop("part_base", None)
        return data

    def file_part(self, i: int) -> int:
        """The part number in shard ``i``'s file paths (its part, less its prefix's base)."""
        return self.part[i] - self.part_base[self.prefix_id[i]] if self.part_base else self.part[i]

    @model_validator(mode="after")
    def _consistent(self) -> ShardTable:
        n = len(self.part)
        lengths = {
            "index": len(self.index),
            "records": len(self.records),
            "tokens": len(self.tokens),
            "spans": len(self.spans),
            "prefix_id": len(self.prefix_id),
        }
        lengths.update({f"files.{k}.size": len(c.size) for k, c in self.files.items()})
        lengths.update({f"files.{k}.checksum": len(c.checksum) for k, c in self.files.items()})
        for name, rows in lengths.items():
            if rows != n:
                raise ValueError(f"shard table column {name} has {rows} rows, 'part' has {n}")
        if "data" not in self.files:
            raise ValueError("the shard table has no 'data' column in files")
        for name, file_column in self.files.items():
            if file_column.kind not in layout.KINDS:
                raise ValueError(f"file column {excerpt(name)} has unknown kind {excerpt(file_column.kind)}")
        for prefix in self.prefix:
            check_relative_path(prefix, "shard prefix")
        if self.part_base and len(self.part_base) != len(self.prefix):
            raise ValueError(f"part_base has {len(self.part_base)} entries for {len(self.prefix)} prefixes")
        if n:
            if max(self.prefix_id) >= len(self.prefix):
                raise ValueError("a shard's prefix_id points past the prefix list")
            order = np.lexsort((np.asarray(self.index), np.asarray(self.part)))
            if not np.array_equal(order, np.arange(n)):
                raise ValueError("shards are not in (part, index) order")
            key = np.asarray(self.part, dtype=np.int64) * 2**32 + np.asarray(self.index)
            if len(np.unique(np.stack([key, np.asarray(self.prefix_id)]), axis=1)[0]) != n:
                raise ValueError("a shard is listed twice (the same part, index and prefix_id)")
            self._sizes_fit_counts()
        return self

    def _sizes_fit_counts(self) -> None:
        """Files whose item size is fixed and whose item count is a column of the table (an
        offsets index, a span table) must be exactly header + count items long."""
        for column in self.files.values():
            kind = layout.KINDS[column.kind]
            if not kind.itemsize or kind.counted_by is None:
                continue
            counts = np.asarray(getattr(self, kind.counted_by), dtype=object)
            expected = layout.HEADER_SIZE + (counts + kind.extra_items) * kind.itemsize
            i = _first_mismatch(column.size, expected)
            if i is not None:
                raise ValueError(
                    f"{self.shard_name(i)}: its {column.kind} file has {column.size[i]} bytes, but "
                    f"{int(expected[i])} are needed for the counts the manifest records "
                    f"(records={self.records[i]}, spans={self.spans[i]})"
                )

    def check_item_sizes(self, kind: str, itemsize: int) -> None:
        """Raise ``ValueError`` naming the first shard whose ``kind`` file (stream tokens, whose
        item size the format decides) is not exactly header + recorded tokens x ``itemsize``
        bytes."""
        for column in self.files.values():
            if column.kind != kind:
                continue
            expected = layout.HEADER_SIZE + np.asarray(self.tokens, dtype=object) * itemsize
            i = _first_mismatch(column.size, expected)
            if i is not None:
                err = ValueError(
                    f"{self.shard_name(i)}: the manifest records {self.tokens[i]} tokens of "
                    f"{itemsize} bytes, which need a {int(expected[i])}-byte {kind} file, but it "
                    f"records {column.size[i]} bytes"
                )
                err.shard = i  # type: ignore[attr-defined]  # which row, for a caller naming its file
                raise err

    def __len__(self) -> int:
        return len(self.part)

    @classmethod
    def concat(cls, tables: Sequence[ShardTable]) -> ShardTable:
        """The rows of ``tables`` in order, as one table (pieces of a snapshot's table).

        Each table is already valid; what joining them could break is checked here: the same
        file columns, parts that keep increasing from one table to the next, and one part base
        per prefix. Columns are joined with ``list.extend`` (no per-row Python work).
        """
        tables = [t for t in tables if len(t)] or list(tables[:1])
        if len(tables) == 1:
            return tables[0]
        first = tables[0]
        # A file kind every piece must have, except record starts: a stream written before
        # GuideLoom stored them and appended to since has them in its newer pieces only; the
        # joined table then records none (readers fall back as for any stream without them).
        common = set(first.files).intersection(*(t.files for t in tables))
        kinds = {name: c.kind for name, c in first.files.items() if name in common}
        cols: dict[str, list[int]] = {key: [] for key in ("part", "index", "records", "tokens", "spans")}
        sizes: dict[str, list[int]] = {name: [] for name in kinds}
        checksums: dict[str, list[str]] = {name: [] for name in kinds}
        prefixes: dict[str, int] = {}
        bases: list[int] = []
        prefix_id: list[int] = []
        last_part = -1
        for table in tables:
            own = {n: c.kind for n, c in table.files.items()}
            extra = set(own) - set(kinds) - set(_OPTIONAL_FILES)
            if extra or any(own.get(n) != k for n, k in kinds.items()):
                raise ValueError(f"a table piece has files {list(table.files)}, others have {list(kinds)}")
            if table.part[0] <= last_part:
                raise ValueError(f"table pieces overlap: part {table.part[0]} follows part {last_part}")
            last_part = table.part[-1]
            remap = []
            for j, head in enumerate(table.prefix):
                base = table.part_base[j] if table.part_base else 0
                pid = prefixes.setdefault(head, len(prefixes))
                if pid == len(bases):
                    bases.append(base)
                elif bases[pid] != base:
                    raise ValueError(
                        f"shard prefix {excerpt(head)} is used with part bases {bases[pid]} and {base}"
                    )
                remap.append(pid)
            prefix_id.extend(np.asarray(remap, dtype=np.int64)[np.asarray(table.prefix_id)].tolist())
            for key, values in cols.items():
                values.extend(getattr(table, key))
            for name, file_column in table.files.items():
                if name not in kinds:
                    continue
                sizes[name].extend(file_column.size)
                checksums[name].extend(file_column.checksum)
        return cls.model_construct(
            part=cols["part"],
            index=cols["index"],
            records=cols["records"],
            tokens=cols["tokens"],
            spans=cols["spans"],
            prefix=list(prefixes),
            prefix_id=prefix_id,
            part_base=bases if any(bases) else [],
            files={
                name: FileColumn.model_construct(kind=kind, size=sizes[name], checksum=checksums[name])
                for name, kind in kinds.items()
            },
        )

    def path(self, i: int, name: str) -> str:
        """Relative path of shard ``i``'s file ``name`` (``"data"``, ``"index"``, ``"meta"``,
        ``"spans"``, ``"span_dir"``)."""
        return layout.shard_file_path(
            self.file_part(i), self.index[i], self.files[name].kind, self.prefix[self.prefix_id[i]]
        )

    def size(self, i: int, name: str) -> int:
        """Bytes the manifest records for shard ``i``'s file ``name`` (header included)."""
        return self.files[name].size[i]

    def token_bytes(self, i: int, start: int, stop: int, itemsize: int) -> tuple[int, int]:
        """Where tokens ``[start, stop)`` of stream shard ``i`` are in its ``data`` file, as
        ``(first byte, end byte)`` (``itemsize``: bytes a token, all fields): after the shard
        header. Tables of files read in place (`guideloom.storage.foreign`) count the files' own
        headers (none, or llm.c's 1024 bytes) and token sizes instead."""
        return layout.HEADER_SIZE + start * itemsize, layout.HEADER_SIZE + stop * itemsize

    def start_unit(self, i: int) -> int:
        """What one token is in shard ``i``'s ``starts`` file: 1 (its items are token
        positions); a file read in place may hold byte pointers instead (Megatron's ``.idx``)."""
        return 1

    def shard_name(self, i: int) -> str:
        """How messages name shard ``i``."""
        return f"part {self.part[i]} shard {self.index[i]} ({self.path(i, 'data')})"

    def shard(self, i: int) -> ShardInfo:
        return ShardInfo(
            part=self.part[i],
            index=self.index[i],
            records=self.records[i],
            tokens=self.tokens[i],
            spans=self.spans[i],
            files={
                name: FileInfo(path=self.path(i, name), size=c.size[i], checksum=c.checksum[i])
                for name, c in self.files.items()
            },
        )


class Manifest(_Frozen):
    """What a committed dataset holds. Readers open a dataset by reading only this.

    Attributes:
        version: The manifest format version (3 for datasets with record starts; 2 without them
            but with span directories; 1 with neither; all three are read).
        storage_class: The storage class that wrote the dataset.
        format: The format's spec: class name, module and configuration.
        num_parts: How many parts (writers) the dataset was written by.
        total_records: Records appended, over all shards (documents, or stream records).
        total_tokens: Stream elements (tokens) over all shards; 0 for documents.
        total_spans: Annotated spans over all shards (streams with metadata).
        total_bytes: Bytes of every shard file, headers included.
        created_at: When it was committed (ISO 8601, UTC).
        guideloom_version: The GuideLoom version that committed it.
        metadata: The JSON-able values passed to `writer()` or `commit`.
        shard_table: Every shard's counts and files, as columns.
    """

    version: Annotated[ManifestVersion, BeforeValidator(lambda v: _not_bool(v))] = 3  # MANIFEST_VERSION
    storage_class: StorageClassName
    format: FormatSpecModel
    num_parts: Count
    total_records: Count
    total_tokens: Count
    total_spans: Count
    total_bytes: Count
    created_at: str
    guideloom_version: str
    metadata: dict[str, Any] = Field(default_factory=dict)
    shard_table: ShardTable

    @model_validator(mode="after")
    def _totals_agree(self) -> Manifest:
        table = self.shard_table
        checks = {
            "total_records": sum(table.records),
            "total_tokens": sum(table.tokens),
            "total_spans": sum(table.spans),
            "total_bytes": sum(sum(c.size) for c in table.files.values()),
        }
        for name, value in checks.items():
            if getattr(self, name) != value:
                raise ValueError(f"{name} is {getattr(self, name)} but the shards add up to {value}")
        return self

    @cached_property
    def shards(self) -> tuple[ShardInfo, ...]:
        """Every shard as a `ShardInfo` (built on first use; views use the columns)."""
        return tuple(self.shard_table.shard(i) for i in range(len(self.shard_table)))

    @property
    def num_shards(self) -> int:
        """How many shards the dataset has (over all parts)."""
        return len(self.shard_table)

    @cached_property
    def fingerprint(self) -> str:
        """A hash of the content: storage class, format spec and every shard's counts and checksums.

        It does not depend on the URL, so a dataset copied to another bucket has the same
        fingerprint, and a loader checkpoint taken on one resumes on the other.
        """
        table = self.shard_table
        content = {
            "storage_class": self.storage_class,
            "format": [self.format.name, self.format.config],
            "records": table.records,
            "tokens": table.tokens,
            "spans": table.spans,
            "checksums": {name: c.checksum for name, c in table.files.items()},
        }
        return xxhash.xxh3_64_hexdigest(json.dumps(content, sort_keys=True).encode())

    @classmethod
    def from_table(
        cls,
        table: ShardTable,
        *,
        storage_class: str,
        format: FormatSpecModel,
        num_parts: int,
        guideloom_version: str,
        metadata: dict[str, Any],
    ) -> Manifest:
        """The manifest of a complete shard table (totals are summed from its columns).

        Args:
            table: Every shard of the dataset, in part order.
            storage_class: `"DocumentStorage"`, `"StreamStorage"` or `"StreamWithMetaStorage"`.
            format: The format's spec.
            num_parts: How many parts wrote the shards.
            guideloom_version: The GuideLoom version that commits it.
            metadata: JSON-able values kept in the manifest.

        Returns:
            A validated `Manifest`, stamped with the current time.

        Raises:
            pydantic.ValidationError: A value is out of range (a negative or too large count,
                an unknown storage class, a shard path that is not relative).
        """
        return cls(
            version=version_for(table.files),
            storage_class=storage_class,  # type: ignore[arg-type]
            format=format,
            shard_table=table,
            num_parts=num_parts,
            total_records=sum(table.records),
            total_tokens=sum(table.tokens),
            total_spans=sum(table.spans),
            total_bytes=sum(sum(c.size) for c in table.files.values()),
            created_at=now_iso(),
            guideloom_version=guideloom_version,
            metadata=metadata,
        )

    def to_json(self) -> bytes:
        """The manifest as `manifest.json` stores it.

        Returns:
            Compact UTF-8 JSON.
        """
        return self.model_dump_json().encode("utf-8")


check_relative_path = layout.check_relative_path


class ShardTableBuilder:
    """Collects parts' shards into the columns of a `ShardTable`.

    ``add_part`` copies a record's numbers into flat lists and keeps nothing else, so a commit
    of many parts holds the table's columns, not one model object per shard.
    """

    def __init__(self) -> None:
        self.num_parts = 0
        self._cols: dict[str, list[int]] = {k: [] for k in ("part", "index", "records", "tokens", "spans")}
        self._prefixes: dict[str, int] = {}
        self._prefix_id: list[int] = []
        self._base: list[int] = []
        self._kinds: dict[str, str] = {}
        self._sizes: dict[str, list[int]] = {}
        self._checksums: dict[str, list[str]] = {}

    def add_part(self, record: PartRecord, base: int = 0) -> None:
        """Add a part's shards; ``base`` is added to their part numbers (a part appended to a
        dataset of ``base`` parts keeps the file paths its writer gave it)."""
        for shard in record.shards:
            self.add_shard(shard, base)
        self.num_parts += 1

    def _prefix(self, head: str, base: int) -> int:
        pid = self._prefixes.setdefault(head, len(self._prefixes))
        if pid == len(self._base):
            self._base.append(base)
        elif self._base[pid] != base:
            raise ValueError(
                f"shard prefix {excerpt(head)} is used with part bases {self._base[pid]} and {base}"
            )
        return pid

    def add_shard(self, shard: ShardInfo, base: int = 0) -> None:
        """Append one shard: its path must be ``<prefix>/part-PPPPP/shard-SSSSS.<kind>`` for its
        own part and index (`guideloom.layout.shard_file_path`), and it must have the same files
        (and kinds) as the shards before. ``base`` is added to its part number."""
        head = ""
        if self._cols["part"] and list(shard.files) != list(self._kinds):
            raise ValueError(f"{shard.name} has files {list(shard.files)}, others have {list(self._kinds)}")
        for name, f in shard.files.items():
            parsed = layout.parse_shard_file_path(f.path, shard.part, shard.index)
            if parsed is None:
                raise ValueError(
                    f"{excerpt(f.path)} is not a shard file path of part {shard.part} shard {shard.index}"
                )
            head, kind = parsed
            if self._kinds.setdefault(name, kind) != kind:
                raise ValueError(
                    f"file {excerpt(name)} has kind {excerpt(self._kinds[name])} and {excerpt(kind)} in one dataset"
                )
            self._sizes.setdefault(name, []).append(f.size)
            self._checksums.setdefault(name, []).append(f.checksum)
        self._prefix_id.append(self._prefix(head, base))
        for key in self._cols:
            self._cols[key].append(getattr(shard, key))
        self._cols["part"][-1] += base

    @property
    def shards(self) -> int:
        """Shards added so far (0: the parts hold no record, and `build` has no table to make)."""
        return len(self._cols["part"])

    def build(self) -> ShardTable:
        return ShardTable(
            **self._cols,
            prefix=list(self._prefixes),
            prefix_id=self._prefix_id,
            part_base=self._base if any(self._base) else [],
            files={
                name: FileColumn(kind=kind, size=self._sizes[name], checksum=self._checksums[name])
                for name, kind in self._kinds.items()
            },
        )


def _first_mismatch(sizes: Sequence[int], expected: np.ndarray) -> int | None:
    """The first shard whose recorded file size is not ``expected`` (exact Python ints)."""
    bad = np.flatnonzero(np.asarray(sizes, dtype=object) != expected)
    return int(bad[0]) if len(bad) else None


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


_Model = TypeVar("_Model", bound=BaseModel)


def _parse(model: type[_Model], data: bytes, where: str) -> _Model:
    """``data`` parsed as ``model``; `ManifestError` naming ``where``, and for an invalid value
    its field, otherwise. A message quotes at most a short escaped excerpt of a value, never the
    file's bytes (pydantic's own message echoes its whole input)."""
    try:  # strict: a count is a JSON integer (``true`` is not 1, ``"1"`` and ``1.0`` are not 1)
        return model.model_validate_json(data, strict=True)
    except ValidationError as first:
        err: ValidationError = first
    # Explain the failure: unreadable JSON, an unknown version, or invalid content.
    try:
        raw = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as bad:
        raise ManifestError(
            f"{where} is not valid JSON ({_json_problem(bad)}); the file is damaged"
        ) from None
    if isinstance(raw, dict) and unknown_version(raw.get("version"), model):
        raise ManifestError(
            f"{where} has version {excerpt(raw.get('version'))}; this GuideLoom reads versions "
            f"{', '.join(map(str, _known_versions(model)))}. Upgrade guideloom to read it"
        ) from None
    raise ManifestError(
        f"{where} is invalid: {describe_errors(err)}. The file was altered or damaged"
    ) from None


def _json_problem(bad: Exception) -> str:
    if isinstance(bad, json.JSONDecodeError):
        return f"{bad.msg} at line {bad.lineno} column {bad.colno}"
    if isinstance(bad, UnicodeDecodeError):
        return f"not UTF-8 at byte {bad.start}"
    return "nested too deeply"


def _known_versions(model: type[BaseModel]) -> tuple[object, ...]:
    field = model.model_fields.get("version")
    if field is not None and field.default not in (None, *READABLE_VERSIONS):
        return (field.default,)  # a snapshot record
    return READABLE_VERSIONS


def unknown_version(version: object, model: type[BaseModel]) -> bool:
    """Whether ``version`` is one a later GuideLoom may write for ``model``'s files: a larger
    int than this one reads (a manifest, a part record) or a later ``snapshots-N``. Anything
    else that is not a known version is an invalid value, not a reason to upgrade."""
    if isinstance(version, bool):
        return False
    if isinstance(version, int):
        return version > max(READABLE_VERSIONS) and version <= INT64_MAX
    if isinstance(version, str) and version.startswith("snapshots-"):
        tail = version.removeprefix("snapshots-")
        return tail.isdigit() and tail.isascii() and len(tail) < 10 and int(tail) > 1
    return False


def describe_errors(err: ValidationError, limit: int = 3) -> str:
    """The first ``limit`` problems of ``err``: each its field (``pieces.0.path``), what is
    wrong and a short escaped excerpt of the value."""
    problems = []
    errors = err.errors(include_url=False, include_context=False, include_input=True)
    for e in errors[:limit]:
        field = excerpt_text(".".join(str(x) for x in e["loc"]), 80) or "(the whole file)"
        value = e.get("input")
        shown = "" if isinstance(value, (dict, list)) else f" (value {excerpt(value)})"
        message = e["msg"].removeprefix("Value error, ")
        problems.append(f"field {field}: {excerpt_text(message)}{shown}")
    more = f"; and {len(errors) - limit} more" if len(errors) > limit else ""
    return "; ".join(problems) + more


def excerpt_text(message: str, limit: int = 400) -> str:
    """A message of ours, cut to ``limit`` characters (its quoted values are excerpts already)."""
    return message if len(message) <= limit else f"{message[:limit]}..."


def parse_manifest(data: bytes, where: str) -> Manifest:
    """Parse and validate manifest bytes; errors name ``where`` (a redacted URL)."""
    return _parse(Manifest, data, where)


def parse_part_record(data: bytes, where: str) -> PartRecord:
    """Parse and validate a part completion record; errors name ``where`` (a redacted URL)."""
    return _parse(PartRecord, data, where)
