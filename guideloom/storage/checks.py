"""Checking shard files against the manifest: existence, size and checksum.

These need only a location and a manifest, not the user's format class, so ``guideloom verify``
works on any dataset.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import xxhash

from guideloom.errors import DatasetNotFoundError, ShardCorruptError, ShardNotFoundError
from guideloom.io import Location
from guideloom.manifest import Manifest, ShardInfo, parse_manifest
from guideloom.storage import layout

__all__ = ["check_shard", "load_manifest", "read_manifest", "verify_shards"]

_CHUNK = 8 * 2**20  # bytes per request when checksumming a file


def load_manifest(location: Location) -> Manifest:
    """Read and validate the manifest at ``location``; `DatasetNotFoundError` if none."""
    try:
        data = location.read(layout.manifest_path())
    except FileNotFoundError:
        raise DatasetNotFoundError(
            f"no dataset at {location.display_url}: {layout.manifest_path()} is missing. Check the "
            "URL, or write the dataset first (a dataset whose writer did not finish has no manifest)"
        ) from None
    return parse_manifest(data, location.describe(layout.manifest_path()))


def read_manifest(
    url: str | os.PathLike[str], storage_options: dict[str, Any] | None = None
) -> tuple[Location, Manifest]:
    """Open any dataset's manifest without knowing its storage class or format."""
    location = Location(url, storage_options)
    return location, load_manifest(location)


def check_shard(location: Location, shard: ShardInfo, verify: str = "checksum") -> None:
    """Raise `ShardNotFoundError` / `ShardCorruptError` if a file of the shard differs.

    ``verify``: ``"none"``, ``"size"`` (one metadata request per file) or ``"checksum"`` (reads
    every byte).
    """
    if verify not in ("none", "size", "checksum"):
        raise ValueError(f"verify must be 'none', 'size' or 'checksum', got {verify!r}")
    if verify == "none":
        return
    for info in shard.files.values():
        where = location.describe(info.path)
        try:
            size = location.size(info.path)
        except FileNotFoundError:
            raise ShardNotFoundError(
                f"{shard.name}: {where} is missing; restore it or rewrite the dataset"
            ) from None
        if size != info.size:
            raise ShardCorruptError(
                f"{shard.name}: {where} has {size} bytes but the manifest records {info.size}; "
                "the file was truncated or replaced. Restore it or rewrite the dataset"
            )
        if verify == "checksum":
            hasher = xxhash.xxh3_64()
            for start in range(0, size, _CHUNK):
                chunk = location.read(info.path, start=start, end=min(size, start + _CHUNK))
                if start == 0:
                    _check_header(chunk, info.path, shard, where)
                hasher.update(chunk)
            actual = layout.checksum(hasher)
            if actual != info.checksum:
                raise ShardCorruptError(
                    f"{shard.name}: {where} has checksum {actual} but the manifest records "
                    f"{info.checksum}; the file was altered. Restore it or rewrite the dataset"
                )


def _check_header(data: bytes, path: str, shard: ShardInfo, where: str) -> None:
    """The file starts with a GuideLoom header of the kind its name says."""
    try:
        header = layout.ShardHeader.unpack(data, where)
    except ValueError as err:
        raise ShardCorruptError(f"{shard.name}: {err}; restore the file or rewrite the dataset") from None
    kind = path.rsplit("/", 1)[-1].split(".", 1)[1]
    if header.kind != kind:
        raise ShardCorruptError(
            f"{shard.name}: {where} has a {header.kind!r} header but is a {kind!r} file; restore it"
        )


def verify_shards(
    location: Location, manifest: Manifest, checksums: bool = True
) -> Iterator[tuple[ShardInfo, Exception | None]]:
    """Check every shard; yields ``(shard, error or None)`` in manifest order."""
    for shard in manifest.shards:
        try:
            check_shard(location, shard, "checksum" if checksums else "size")
        except (ShardNotFoundError, ShardCorruptError) as err:
            yield shard, err
        else:
            yield shard, None
