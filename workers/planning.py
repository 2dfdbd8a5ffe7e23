"""Deterministic part planning: the same inputs and ``part_size`` always give the same parts.

Files are taken in sorted URL order. Each file's input reader cuts it into segments
(`guideloom.types.InputReader.cut`): a splittable file (plain JSONL, plain text read per line)
larger than ``part_size`` into byte ranges of ``part_size`` (records are assigned to ranges by the
readers' ownership rule, `guideloom.workers.readers`); a Parquet file at row-group boundaries; any
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

from guideloom.types import Cut, InputReader, ReadOptions
from guideloom.workers.readers import input_reader
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


_CUT_THREADS = 16  # files cut at once by readers that read to cut (Parquet footers)


def plan_parts(
    files: Sequence[InputFile],
    *,
    part_size: int,
    text_per_line: bool,
    storage_options: dict[str, Any] | None = None,
) -> Plan:
    """Cut the (sorted) files into segments and pack them into parts of about ``part_size``.

    Readers that read a file to cut it (Parquet footers: row-group sizes) are called
    concurrently, ``_CUT_THREADS`` files at a time.
    """
    from concurrent.futures import ThreadPoolExecutor

    options = ReadOptions(text_per_line=text_per_line, storage_options=storage_options or {})
    readers: dict[str, InputReader] = {kind: input_reader(kind) for kind in {f.kind for f in files}}
    reading = [i for i, f in enumerate(files) if readers[f.kind].reads_to_cut]
    cuts: dict[int, list[Cut]] = {}
    if reading:
        with ThreadPoolExecutor(max_workers=min(_CUT_THREADS, len(reading))) as pool:
            found = pool.map(lambda i: readers[files[i].kind].cut(files[i], part_size, options), reading)
            cuts = dict(zip(reading, found))
    weighted: list[tuple[Segment, int]] = []
    for i, f in enumerate(files):
        for c in cuts[i] if i in cuts else readers[f.kind].cut(f, part_size, options):
            weighted.append((Segment(i, c.start, c.end, c.whole), c.weight))

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
