"""Where each record came from: the input file, line (or row) and id, kept per ingestion part.

Ingestion (`guideloom.workers`) writes, beside each part's shards, one small file that says for
every record of the part, in append order, the input file it was read from, its line (1-based;
JSON Lines and text read per line), its byte offset (where the line is known only by offset: a
part that starts mid-file), its row (1-based; Parquet) and, with ``--id-field``, the input's own
id of it. `guideloom.trace` reads it to name where a step's documents came from.

The file is ``<attempt prefix>/part-NNNNN.origins.npz`` (`origins_path`), inside the folder of
the writer attempt whose shards it describes: it is kept, expired and removed with them, and a
reused part keeps its own. It is a NumPy ``.npz`` (compressed, no pickled objects) of
``files`` (the input URLs, credentials removed), and per record ``file_index`` (into
``files``), ``line``, ``offset``, ``row`` (-1 where unknown) and optionally ``id`` (text).
It is not listed in the manifest (datasets without it read and verify as before): a dataset
written by another writer, or before GuideLoom kept origins, has none, and trace says so.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import Any

import numpy as np

__all__ = ["Origin", "OriginsBuilder", "RecordOrigins", "decode_origins", "origins_path"]


def origins_path(prefix: str, part: int) -> str:
    """The origins file of part ``part`` (its number in its shard paths) under the attempt
    prefix ``prefix`` (``shards/r-<run>/a-<attempt>``).

    Args:
        prefix: The shard prefix of the attempt that wrote the part.
        part: The part's number in its file paths.

    Returns:
        The file's path relative to the dataset root.
    """
    return f"{prefix}/part-{part:05d}.origins.npz"


@dataclass(frozen=True)
class Origin:
    """Where one record came from; None where unknown."""

    file: str
    line: int | None
    offset: int | None
    row: int | None
    id: str | None

    def describe(self) -> str:
        """``file line N`` (or ``row N``, ``byte N``), with ``id=...`` when known."""
        where = (
            f" line {self.line}"
            if self.line is not None
            else f" row {self.row}"
            if self.row is not None
            else f" byte {self.offset}"
            if self.offset is not None
            else ""
        )
        return f"{self.file}{where}" + (f" id={self.id}" if self.id is not None else "")


class OriginsBuilder:
    """The origins of one part's records, added in append order (a batch at a time: ingestion
    appends batches of records), then encoded once."""

    def __init__(self) -> None:
        self._files: dict[str, int] = {}
        self._file_runs: list[tuple[int, int]] = []  # (index into files, records), in order
        self._line: list[int | None] = []
        self._offset: list[int | None] = []
        self._row: list[int | None] = []
        self._id: list[Any] = []

    def __len__(self) -> int:
        return len(self._line)

    def extend(
        self, files: Sequence[str], wheres: Sequence[tuple[int | None, int | None, int | None, Any]]
    ) -> None:
        """The origins of the next records of the part, one per record.

        Args:
            files: Each record's input file URL (credentials removed).
            wheres: Each record's ``(line, offset, row, id)``: its line (1-based), the byte
                offset of its line, its row (1-based) and the input's own id of it, each None
                where unknown.
        """
        if not wheres:
            return
        # Per batch, not per record: the records of a batch mostly share one file, and the
        # columns are taken apart by zip (kept as lists of ints, which the garbage collector
        # does not walk, unlike the tuples).
        index = self._files
        for f, same in groupby(files):
            self._file_runs.append((index.setdefault(f, len(index)), len(list(same))))
        lines, offsets, rows, ids = zip(*wheres)
        self._line += lines
        self._offset += offsets
        self._row += rows
        self._id += ids

    def encode(self) -> bytes:
        """The ``.npz`` bytes of the origins added (see the module)."""
        runs = np.array(self._file_runs, dtype=np.int64).reshape(-1, 2)
        arrays: dict[str, np.ndarray] = {
            "files": np.array(list(self._files), dtype=np.str_),
            # ("file" is savez's own argument)
            "file_index": np.repeat(runs[:, 0], runs[:, 1]).astype(np.int32),
            "line": _known(self._line),
            "offset": _known(self._offset),
            "row": _known(self._row),
        }
        ids = self._id
        if ids.count(None) != len(ids):
            arrays["id"] = np.array(["" if i is None else str(i) for i in ids], dtype=np.str_)
            arrays["has_id"] = np.array([i is not None for i in ids], dtype=bool)
        # np.savez_compressed's archive at zlib level 1: a tenth of the time of its default
        # level (6) on a part's columns of counting numbers and -1s, for about 4% more bytes
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
            for name, array in arrays.items():
                with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, array, allow_pickle=False)
        return out.getvalue()


def _known(values: Sequence[int | None]) -> np.ndarray:
    """``values`` as int64, -1 where None."""
    return np.array([-1 if v is None else v for v in values], dtype=np.int64)


def decode_origins(data: bytes, ordinals: Sequence[int]) -> list[Origin | None]:
    """The origins of records ``ordinals`` (their places in the part) from an origins file's
    bytes; None for an ordinal past the records it lists.

    Args:
        data: The ``.npz`` bytes `OriginsBuilder.encode` wrote.
        ordinals: Records of the part, 0-based, in append order.

    Returns:
        One `Origin` (or None) per ordinal.
    """
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        files = npz["files"].tolist()
        file, line, offset, row = npz["file_index"], npz["line"], npz["offset"], npz["row"]
        ids = npz["id"] if "id" in npz.files else None
        has_id = npz["has_id"] if "has_id" in npz.files else None
        out: list[Origin | None] = []
        for k in ordinals:
            if not 0 <= k < len(file):
                out.append(None)
                continue
            ident = str(ids[k]) if ids is not None and has_id is not None and has_id[k] else None
            out.append(
                Origin(
                    files[int(file[k])],
                    int(line[k]) if line[k] >= 0 else None,
                    int(offset[k]) if offset[k] >= 0 else None,
                    int(row[k]) if row[k] >= 0 else None,
                    ident,
                )
            )
        return out


class RecordOrigins:
    """The origins of a dataset's records by their dataset-wide index (what `guideloom.trace`
    calls ``records``), from the origins files of the parts that hold them; each file is read
    once, when first needed.

    Args:
        storage: The storage (at the snapshot read) whose records are looked up.
    """

    def __init__(self, storage: Any) -> None:
        self.storage = storage
        table = storage.manifest.shard_table
        self._table = table
        counts = np.asarray(table.records, dtype=np.int64)
        self._base = np.concatenate([[0], np.cumsum(counts)])
        # each shard's first record's place in its part (the part's shards in index order)
        self._first = np.zeros(len(counts), dtype=np.int64)
        seen: dict[tuple[int, int], int] = {}
        for s in sorted(
            range(len(counts)), key=lambda i: (table.prefix_id[i], table.file_part(i), table.index[i])
        ):
            key = (table.prefix_id[s], table.file_part(s))
            self._first[s] = seen.get(key, 0)
            seen[key] = int(self._first[s] + counts[s])
        self._files: dict[str, bytes | None] = {}

    def __call__(self, records: Sequence[int]) -> list[dict[str, Any] | None]:
        """``{"file", "line", "offset", "row", "id"}`` per record (None where unknown), or None
        for a record whose part kept no origins (written by another writer, or before
        GuideLoom kept them).

        Args:
            records: Dataset-wide record indexes.

        Returns:
            One dict (or None) per record, in order.
        """
        from guideloom.errors import GuideLoomError

        table = self._table
        out: list[dict[str, Any] | None] = []
        for r in records:
            s = int(np.searchsorted(self._base, r, side="right")) - 1
            path = origins_path(table.prefix[table.prefix_id[s]], table.file_part(s))
            if path not in self._files:
                try:
                    self._files[path] = self.storage.location.read(path)
                except (GuideLoomError, OSError):
                    self._files[path] = None  # no origins kept for this part
            data = self._files[path]
            if data is None:
                out.append(None)
                continue
            (found,) = decode_origins(data, [int(self._first[s] + r - self._base[s])])
            out.append(None if found is None else dict(found.__dict__))
        return out
