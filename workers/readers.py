"""Input readers by name: the built-in kinds ``jsonl``, ``parquet`` and ``text``, and the registry.

Each kind is one object with the `guideloom.types.InputReader` protocol: how planning cuts a file
into segments (``cut``) and how a part reads one segment (``read``). `INPUT_READERS` holds them by
the name ``--input-format`` takes; a package adds a kind with an entry point whose object is the
reader (an instance, or a class that takes no arguments)::

    [project.entry-points."guideloom.input_readers"]
    csv = "my_package.readers:CsvReader"

Byte segments (plain JSONL, plain text read per line) follow one ownership rule: the segment
that contains a line's first byte owns the line. A segment that starts mid-file therefore skips
to just after the next newline at or after ``start - 1``, and reads lines while a line's first
byte is before ``end``. Adjacent segments then read every line exactly once, whatever the split
points. A compressed file (``.gz``, ``.zst``) cannot be split: it is one ``whole`` segment.
Parquet files are cut at row-group boundaries.
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from collections.abc import Iterator
from typing import IO, Any

from guideloom.errors import IngestError, PluginError
from guideloom.registry import GROUPS, Registry
from guideloom.types import (
    BadRecord,
    Cut,
    Document,
    InputFileInfo,
    InputReader,
    InputRecord,
    ReadOptions,
    SegmentInfo,
)

__all__ = [
    "INPUT_READERS",
    "JsonlReader",
    "LineReader",
    "ParquetReader",
    "TextReader",
    "input_reader",
    "line_number",
    "open_input",
]

INPUT_READERS: Registry[InputReader] = Registry(
    GROUPS["input_readers"], "input reader", hint="guideloom.workers.readers.INPUT_READERS"
)
"""Input readers by the name ``--input-format`` (and an `InputFile`'s ``kind``) gives them."""

READ_BLOCK = 4 * 2**20  # bytes per request when reading inputs sequentially
FOOTER_BLOCK = 256 * 1024  # bytes per read while parsing a Parquet footer
PARQUET_BATCH_ROWS = 1024


def input_reader(name: str) -> InputReader:
    """The reader registered (or installed) as ``name``; a class is instantiated once.

    Raises:
        IngestError: No reader has that name (the message lists the known ones and how to add
            one), or the object registered does not have the `InputReader` members.
    """
    try:
        reader: Any = INPUT_READERS.get(name)
    except PluginError as err:
        raise IngestError(str(err)) from err
    if isinstance(reader, type):  # an entry point may name the class
        reader = INPUT_READERS.register(name, reader(), replace=True)
    if not isinstance(reader, InputReader):
        raise IngestError(
            f"the input reader {name!r} ({type(reader).__qualname__}) lacks members of "
            "guideloom.types.InputReader (suffixes, reads_to_cut, cut, read)"
        )
    return reader


def open_input(f: InputFileInfo, options: dict[str, Any], block_size: int = READ_BLOCK) -> Any:
    """The file as stored (not decompressed), opened for reading with ``block_size`` requests."""
    from fsspec.core import url_to_fs

    fs, path = url_to_fs(f.url, **options)
    return fs.open(path, "rb", block_size=block_size)


def line_number(f: InputFileInfo, offset: int, options: dict[str, Any]) -> int:
    """1-based line number of the line that starts at byte ``offset`` (plain files only)."""
    count = 0
    with open_input(f, options) as raw:
        remaining = offset
        while remaining > 0:
            chunk = raw.read(min(READ_BLOCK, remaining))
            if not chunk:
                break
            count += chunk.count(b"\n")
            remaining -= len(chunk)
    return count + 1


def _decompressed(raw: IO[bytes], compression: str | None) -> IO[bytes]:
    if compression == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    if compression == "zstd":
        import zstandard

        reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
        return io.BufferedReader(reader, buffer_size=READ_BLOCK)  # type: ignore[arg-type]
    return raw


def _decompressed_lines(f: InputFileInfo, raw: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    """The lines of a whole (maybe compressed) file; a truncated or corrupt stream is an
    IngestError naming the file, the decompressed offset reached and the compressed one."""
    stream = _decompressed(raw, f.compression)
    pos = 0
    try:
        for line in stream:
            yield pos, line
            pos += len(line)
    except (EOFError, OSError, zlib.error, ValueError) as err:
        if f.compression is None and not isinstance(err, EOFError):
            raise
        try:
            at = f" (compressed byte {raw.tell():,} of {f.size:,})"
        except (OSError, ValueError):
            at = ""
        raise IngestError(
            f"{f.url}: {f.compression or 'the'} data ends or breaks after {pos:,} decompressed "
            f"bytes{at}: {type(err).__name__}: {err}. The file is truncated or corrupt: "
            "re-create or re-download it (the lines before that point were read)"
        ) from None


def _decode(raw: bytes, line: int | None, offset: int | None) -> str | BadRecord:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        detail = f"invalid UTF-8 at byte {err.start} ({err.reason})"
        return BadRecord("invalid_utf8", detail, line=line, offset=offset)


class LineReader:
    """Base of the kinds whose records are lines: byte-range cuts and the lines a segment owns.

    A subclass says whether a file can be split (`splittable`) and turns a line into an item
    (`item`); ``line`` is None when the segment starts mid-file (only ``offset`` is known).
    """

    suffixes: tuple[str, ...] = ()
    reads_to_cut: bool = False

    def splittable(self, file: InputFileInfo, options: ReadOptions) -> bool:
        """Whether a file of this kind may be cut at byte offsets (never when compressed)."""
        return file.compression is None

    def cut(self, file: InputFileInfo, part_size: int, options: ReadOptions) -> list[Cut]:
        if self.splittable(file, options) and file.size > part_size:
            return [
                Cut(
                    start, min(start + part_size, file.size), False, min(start + part_size, file.size) - start
                )
                for start in range(0, file.size, part_size)
            ]
        return [Cut(0, file.size, True, file.size)]

    def read(
        self, file: InputFileInfo, segment: SegmentInfo, options: ReadOptions
    ) -> Iterator[InputRecord | Document | BadRecord]:
        known = segment.whole or segment.start == 0  # else only byte offsets, resolved on demand
        item = self.item
        for n, (offset, raw) in enumerate(self.lines(file, segment, options), start=1):
            yield item(raw, n if known else None, offset, options)

    def item(
        self, raw: bytes, line: int | None, offset: int, options: ReadOptions
    ) -> InputRecord | Document | BadRecord:
        """The item of one line (``raw`` with its newline)."""
        raise NotImplementedError

    @staticmethod
    def lines(file: InputFileInfo, segment: SegmentInfo, options: ReadOptions) -> Iterator[tuple[int, bytes]]:
        """(offset of the line's first byte, line with its newline) for the lines the segment owns."""
        with open_input(file, options.storage_options) as raw:
            if segment.whole:
                yield from _decompressed_lines(file, raw)
                return
            pos = segment.start
            if segment.start > 0:
                raw.seek(segment.start - 1)
                pos = segment.start - 1 + len(raw.readline())  # the rest of the line a previous part owns
            while pos < segment.end:
                line = raw.readline()
                if not line:
                    return
                yield pos, line
                pos += len(line)


class JsonlReader(LineReader):
    """JSON Lines: each line an object, whose ``text_field`` is picked afterwards; a blank line
    is an empty document (counted, like ``{"text": ""}``)."""

    suffixes: tuple[str, ...] = (".jsonl", ".ndjson", ".json")

    def item(
        self, raw: bytes, line: int | None, offset: int, options: ReadOptions
    ) -> InputRecord | Document | BadRecord:
        text = _decode(raw, line, offset)
        if isinstance(text, BadRecord):
            return text
        if not text.strip():
            return Document("")
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as err:
            # Python's message may end in "at" already ("Invalid control character at"). The
            # column is counted from the line's start: err.colno restarts after the newline the
            # line still holds, so a truncated line's error would read "column 1".
            body = len(text.rstrip("\r\n"))
            # (the decoder may have skipped the newline too: the end of the line is one past
            # its last character)
            where = f"column {min(err.pos, body) + 1}" + (" (the end of the line)" if err.pos >= body else "")
            detail = f"malformed JSON: {err.msg.removesuffix(' at')} at {where}"
            return BadRecord("malformed_json", detail, line=line, offset=offset)
        if not isinstance(obj, dict):
            detail = f"a JSON {type(obj).__name__}, not an object"
            return BadRecord("not_object", detail, line=line, offset=offset)
        return InputRecord(obj, line=line, offset=offset)


class TextReader(LineReader):
    """Plain text: one document per file, or per line with ``text_per_line`` (then splittable)."""

    suffixes: tuple[str, ...] = (".txt", ".text", ".md")

    def splittable(self, file: InputFileInfo, options: ReadOptions) -> bool:
        return options.text_per_line and file.compression is None

    def read(
        self, file: InputFileInfo, segment: SegmentInfo, options: ReadOptions
    ) -> Iterator[InputRecord | Document | BadRecord]:
        if options.text_per_line:
            yield from super().read(file, segment, options)
            return
        with open_input(file, options.storage_options) as raw:
            data = b"".join(line for _, line in _decompressed_lines(file, raw))
        text = _decode(data, None, None)
        yield text if isinstance(text, BadRecord) else Document(text)

    def item(
        self, raw: bytes, line: int | None, offset: int, options: ReadOptions
    ) -> InputRecord | Document | BadRecord:
        text = _decode(raw.rstrip(b"\r\n"), line, offset)
        return text if isinstance(text, BadRecord) else Document(text)


class ParquetReader:
    """Parquet: cut at row-group boundaries (about ``part_size`` bytes of row groups each, from
    the footer); reads the ``text_field`` and passthrough columns only."""

    suffixes: tuple[str, ...] = (".parquet", ".pq")
    reads_to_cut: bool = True

    def cut(self, file: InputFileInfo, part_size: int, options: ReadOptions) -> list[Cut]:
        import pyarrow.parquet as pq

        # Small blocks: the footer is read with a few ranged requests, not a 50 MiB read-ahead.
        with open_input(file, options.storage_options, FOOTER_BLOCK) as raw:
            meta = pq.ParquetFile(raw).metadata
        out: list[Cut] = []
        start, acc = 0, 0
        for g in range(meta.num_row_groups):
            acc += meta.row_group(g).total_byte_size
            if acc >= part_size:
                out.append(Cut(start, g + 1, False, acc))
                start, acc = g + 1, 0
        if start < meta.num_row_groups or not out:
            out.append(Cut(start, meta.num_row_groups, False, acc))
        return out

    def read(
        self, file: InputFileInfo, segment: SegmentInfo, options: ReadOptions
    ) -> Iterator[InputRecord | Document | BadRecord]:
        import pyarrow.parquet as pq

        with open_input(file, options.storage_options) as raw:
            pf = pq.ParquetFile(raw)
            whole = range(pf.num_row_groups)
            groups = list(whole) if segment.whole else list(range(segment.start, segment.end))
            row = sum(pf.metadata.row_group(g).num_rows for g in range(groups[0])) if groups else 0
            names = set(pf.schema_arrow.names)
            wanted = dict.fromkeys([options.text_field, *options.passthrough])
            columns: list[str] | None = [c for c in wanted if c in names]
            if options.all_fields or not names.issuperset(options.passthrough) or not columns:
                # a file without a field asked for is read whole, so that the bad record it
                # makes lists the fields the file has
                columns = None
            for batch in pf.iter_batches(row_groups=groups, columns=columns, batch_size=PARQUET_BATCH_ROWS):
                for obj in batch.to_pylist():
                    row += 1
                    yield InputRecord(obj, row=row)


INPUT_READERS.register("jsonl", JsonlReader())
INPUT_READERS.register("parquet", ParquetReader())
INPUT_READERS.register("text", TextReader())
BUILTIN_KINDS = ("jsonl", "parquet", "text")  # tried first, in this order, for input_format auto


def first_fields(f: InputFileInfo, storage_options: dict[str, Any]) -> tuple[dict[str, str], bool] | None:
    """The fields the records of ``f`` have, as ``{name: type}``, and whether that holds for
    every record (a Parquet schema) or only for the first one (JSON Lines: its first record).
    None where the kind has no fields (plain text, a reader of your own) or nothing was found
    (an empty file, a first line that is not a JSON object: the job's bad-record rules say
    what that is). Reads the Parquet footer or the first line, with small ranged reads."""
    if f.kind == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        with open_input(f, storage_options, FOOTER_BLOCK) as raw:
            schema = pq.ParquetFile(raw).schema_arrow
        kinds = {}
        for col in schema:
            t = col.type
            kinds[col.name] = (
                "str"
                if pa.types.is_string(t) or pa.types.is_large_string(t)
                else "list"
                if pa.types.is_list(t) or pa.types.is_large_list(t)
                else str(t)
            )
        return kinds, True
    if f.kind != "jsonl":
        return None
    with open_input(f, storage_options, FOOTER_BLOCK) as raw:
        for _, line in _decompressed_lines(f, raw):
            if line.strip():
                try:
                    obj = json.loads(line)
                except ValueError:
                    return None
                if not isinstance(obj, dict):
                    return None
                return {str(k): type(v).__name__ for k, v in obj.items()}, False
    return None
