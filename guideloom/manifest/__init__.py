"""Pydantic models of what is persisted as JSON. No I/O."""

from guideloom.manifest.models import (
    INT64_MAX,
    MANIFEST_VERSION,
    FileColumn,
    FileInfo,
    FormatSpecModel,
    Manifest,
    PartRecord,
    ShardInfo,
    ShardTable,
    ShardTableBuilder,
    StorageClassName,
    now_iso,
    parse_manifest,
    parse_part_record,
    version_for,
)

__all__ = [
    "INT64_MAX",
    "MANIFEST_VERSION",
    "FileColumn",
    "FileInfo",
    "FormatSpecModel",
    "Manifest",
    "PartRecord",
    "ShardInfo",
    "ShardTable",
    "ShardTableBuilder",
    "StorageClassName",
    "now_iso",
    "parse_manifest",
    "parse_part_record",
    "version_for",
]
