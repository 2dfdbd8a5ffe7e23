"""Pydantic models of what is persisted as JSON. No I/O."""

from guideloom.manifest.models import (
    MANIFEST_VERSION,
    FileColumn,
    FileInfo,
    FormatSpecModel,
    Manifest,
    PartRecord,
    ShardInfo,
    ShardTable,
    StorageClassName,
    now_iso,
    parse_manifest,
    parse_part_record,
)

__all__ = [
    "MANIFEST_VERSION",
    "FileColumn",
    "FileInfo",
    "FormatSpecModel",
    "Manifest",
    "PartRecord",
    "ShardInfo",
    "ShardTable",
    "StorageClassName",
    "now_iso",
    "parse_manifest",
    "parse_part_record",
]
