"""Deterministic part planning: the same inputs and ``part_size`` always give the same parts.

Files are taken in sorted URL order. A splittable file (plain JSONL, plain text read per line)
larger than ``part_size`` is cut into byte ranges of ``part_size`` (records are assigned to ranges
by `guideloom.workers.sources`' ownership rule); a Parquet file is cut at row-group boundaries; any
other file (compressed, or a text file that is one document) is one unsplittable segment. The
segments are then packed, in order, into parts of about ``part_size`` input bytes each, so many
small files share a part and one big file still feeds every worker.

Nothing here depends on the number of workers, so neither do the shards.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from guideloom.workers.sources import InputFile, Segment

__all__ = ["Plan", "plan_parts"]


@dataclass(frozen=True)
class Plan:
    """The files and, for each part number, the segments it reads (in order).

    ``part_bytes[k]`` is how many input bytes (as stored) part ``k`` reads: progress and ETA.
    """

    files: tuple[InputFile, ...]
    parts: tuple[tuple[Segment, ...], ...]
    part_bytes: tuple[int, ...]

    def digest(self, identity: dict[str, Any]) -> str:
        """sha256 of the files (URL, size, kind), the parts and the job's identity options."""
        doc = {
            "version": 1,
            "files": [asdict(f) for f in self.files],
            "parts": [[asdict(s) for s in part] for part in self.parts],
            "identity": identity,
        }
        return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


_FOOTER_THREADS = 16  # Parquet footers read at once while planning
_FOOTER_BLOCK = 256 * 1024  # bytes per read while parsing a footer


def _splittable(f: InputFile, text_per_line: bool) -> bool:
    return f.compression is None and (f.kind == "jsonl" or (f.kind == "text" and text_per_line))


def _row_group_segments(
    i: int, f: InputFile, part_size: int, storage_options: dict[str, Any]
) -> list[tuple[Segment, int]]:
    import pyarrow.parquet as pq
    from fsspec.core import url_to_fs

    fs, path = url_to_fs(f.url, **storage_options)
    # Small blocks: the footer is read with a few ranged requests, not a 50 MiB read-ahead.
    with fs.open(path, "rb", block_size=_FOOTER_BLOCK) as raw:
        meta = pq.ParquetFile(raw).metadata
    out: list[tuple[Segment, int]] = []
    start, acc = 0, 0
    for g in range(meta.num_row_groups):
        acc += meta.row_group(g).total_byte_size
        if acc >= part_size:
            out.append((Segment(i, start, g + 1), acc))
            start, acc = g + 1, 0
    if start < meta.num_row_groups or not out:
        out.append((Segment(i, start, meta.num_row_groups), acc))
    return out


def plan_parts(
    files: Sequence[InputFile],
    *,
    part_size: int,
    text_per_line: bool,
    storage_options: dict[str, Any] | None = None,
) -> Plan:
    """Cut the (sorted) files into segments and pack them into parts of about ``part_size``.

    Parquet footers (row-group sizes) are read concurrently, ``_FOOTER_THREADS`` at a time.
    """
    from concurrent.futures import ThreadPoolExecutor

    parquet = [i for i, f in enumerate(files) if f.kind == "parquet"]
    row_groups: dict[int, list[tuple[Segment, int]]] = {}
    if parquet:
        with ThreadPoolExecutor(max_workers=min(_FOOTER_THREADS, len(parquet))) as pool:
            segments = pool.map(
                lambda i: _row_group_segments(i, files[i], part_size, storage_options or {}), parquet
            )
            row_groups = dict(zip(parquet, segments))
    weighted: list[tuple[Segment, int]] = []
    for i, f in enumerate(files):
        if _splittable(f, text_per_line) and f.size > part_size:
            for start in range(0, f.size, part_size):
                end = min(start + part_size, f.size)
                weighted.append((Segment(i, start, end), end - start))
        elif f.kind == "parquet":
            weighted.extend(row_groups[i])
        else:
            weighted.append((Segment(i, 0, f.size, whole=True), f.size))

    parts: list[tuple[Segment, ...]] = []
    sizes: list[int] = []
    current: list[Segment] = []
    acc = 0
    for seg, weight in weighted:
        if current and acc + weight > part_size:
            parts.append(tuple(current))
            sizes.append(acc)
            current, acc = [], 0
        current.append(seg)
        acc += weight
    if current:
        parts.append(tuple(current))
        sizes.append(acc)
    return Plan(tuple(files), tuple(parts), tuple(sizes))
