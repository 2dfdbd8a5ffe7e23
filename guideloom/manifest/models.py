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
from collections.abc import Sequence
from typing import Any, Literal

import xxhash
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from guideloom.errors import ManifestError

__all__ = [
    "MANIFEST_VERSION",
    "FileInfo",
    "FormatSpecModel",
    "Manifest",
    "PartRecord",
    "ShardInfo",
    "StorageClassName",
    "parse_manifest",
    "parse_part_record",
]

MANIFEST_VERSION = 1
StorageClassName = Literal["DocumentStorage", "StreamStorage", "StreamWithMetaStorage"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FileInfo(_Frozen):
    """One file of a shard: path relative to the dataset root, size in bytes, checksum."""

    path: str
    size: int = Field(ge=0)
    checksum: str  # "xxh3_64:<16 hex digits>" of the whole file

    @field_validator("path")
    @classmethod
    def _relative(cls, path: str) -> str:
        if not path or path.startswith("/") or "://" in path or ".." in path.split("/"):
            raise ValueError(f"file path {path!r} must be relative to the dataset root")
        return path

    @field_validator("checksum")
    @classmethod
    def _checksum(cls, value: str) -> str:
        algo, _, digest = value.partition(":")
        if algo != "xxh3_64" or len(digest) != 16:
            raise ValueError(f"checksum {value!r} is not 'xxh3_64:<16 hex digits>'")
        int(digest, 16)
        return value


class ShardInfo(_Frozen):
    """One shard: its files and what it holds.

    ``records`` counts appended records (documents, or stream records); ``tokens`` counts stream
    elements (0 for documents); ``spans`` counts annotated spans (streams with metadata).
    """

    part: int = Field(ge=0)
    index: int = Field(ge=0)
    records: int = Field(ge=0)
    tokens: int = Field(ge=0)
    spans: int = Field(default=0, ge=0)
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


class _Shards(_Frozen):
    storage_class: StorageClassName
    format: FormatSpecModel
    shards: tuple[ShardInfo, ...]

    @field_validator("shards")
    @classmethod
    def _shards_unique(cls, shards: tuple[ShardInfo, ...]) -> tuple[ShardInfo, ...]:
        seen: set[str] = set()
        for shard in shards:
            for f in shard.files.values():
                if f.path in seen:
                    raise ValueError(f"file {f.path!r} is listed twice ({shard.name})")
                seen.add(f.path)
        return shards


class PartRecord(_Shards):
    """The completion record one writer process leaves for its part."""

    version: Literal[1] = 1
    part: int = Field(ge=0)
    created_at: str
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _own_shards(self) -> PartRecord:
        for i, shard in enumerate(self.shards):
            if shard.part != self.part or shard.index != i:
                raise ValueError(
                    f"part record {self.part}: shard {i} says part={shard.part} index={shard.index}"
                )
        return self


class Manifest(_Shards):
    """What a committed dataset holds. Readers open a dataset by reading only this."""

    version: Literal[1] = 1
    num_parts: int = Field(ge=0)
    total_records: int = Field(ge=0)
    total_tokens: int = Field(ge=0)
    total_spans: int = Field(ge=0)
    total_bytes: int = Field(ge=0)
    created_at: str
    guideloom_version: str
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _totals_agree(self) -> Manifest:
        checks = {
            "total_records": sum(s.records for s in self.shards),
            "total_tokens": sum(s.tokens for s in self.shards),
            "total_spans": sum(s.spans for s in self.shards),
            "total_bytes": sum(s.size for s in self.shards),
        }
        for name, value in checks.items():
            if getattr(self, name) != value:
                raise ValueError(f"{name} is {getattr(self, name)} but the shards add up to {value}")
        order = [(s.part, s.index) for s in self.shards]
        if order != sorted(order):
            raise ValueError("shards are not in (part, index) order")
        return self

    @property
    def fingerprint(self) -> str:
        """A hash of the content: storage class, format spec and every shard's counts and checksums.

        It does not depend on the URL, so a dataset copied to another bucket has the same
        fingerprint, and a loader checkpoint taken on one resumes on the other.
        """
        content = {
            "storage_class": self.storage_class,
            "format": [self.format.name, self.format.config],
            "shards": [
                [s.records, s.tokens, s.spans, sorted((k, f.checksum) for k, f in s.files.items())]
                for s in self.shards
            ],
        }
        return xxhash.xxh3_64_hexdigest(json.dumps(content, sort_keys=True).encode())

    @classmethod
    def from_parts(
        cls, parts: Sequence[PartRecord], *, guideloom_version: str, metadata: dict[str, Any]
    ) -> Manifest:
        shards = tuple(s for p in parts for s in p.shards)
        first = parts[0]
        return cls(
            storage_class=first.storage_class,
            format=first.format,
            shards=shards,
            num_parts=len(parts),
            total_records=sum(s.records for s in shards),
            total_tokens=sum(s.tokens for s in shards),
            total_spans=sum(s.spans for s in shards),
            total_bytes=sum(s.size for s in shards),
            created_at=now_iso(),
            guideloom_version=guideloom_version,
            metadata=metadata,
        )

    def to_json(self) -> bytes:
        return self.model_dump_json(indent=1).encode("utf-8")


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _parse(model: type[BaseModel], data: bytes, where: str) -> Any:
    try:
        raw = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ManifestError(f"{where} is not valid JSON ({err}); the file is damaged") from err
    if isinstance(raw, dict) and raw.get("version") not in (None, MANIFEST_VERSION):
        raise ManifestError(
            f"{where} has version {raw.get('version')!r}; this GuideLoom reads version "
            f"{MANIFEST_VERSION}. Upgrade guideloom to read it"
        )
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        raise ManifestError(f"{where} is invalid: {err}") from err


def parse_manifest(data: bytes, where: str) -> Manifest:
    """Parse and validate manifest bytes; errors name ``where`` (a redacted URL)."""
    result: Manifest = _parse(Manifest, data, where)
    return result


def parse_part_record(data: bytes, where: str) -> PartRecord:
    result: PartRecord = _parse(PartRecord, data, where)
    return result
