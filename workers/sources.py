"""Input files: find them, and read the records of one segment of one file.

A *segment* is a half-open range of one file: bytes ``[start, end)`` of a splittable file (plain
JSONL, or plain text with one document per line), row groups ``[start, end)`` of a Parquet file,
or the whole of any other file (compressed files and one-document-per-file text cannot be split).

Record ownership in a byte range: the segment that contains a line's first byte owns the line.
A segment that starts mid-file therefore skips to just after the next newline at or after
``start - 1``, and reads lines while a line's first byte is before ``end``. Adjacent segments
then read every line exactly once, whatever the split points.

Reading yields `Doc` for a document and `Bad` for a record that cannot be one; the
caller decides (``--on-bad-record``) what a Bad means.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any, Literal

from guideloom.errors import IngestError

__all__ = [
    "Bad",
    "Doc",
    "InputFile",
    "Segment",
    "expand_inputs",
    "line_number",
    "read_segment",
]

Kind = Literal["jsonl", "parquet", "text"]

_KIND_BY_SUFFIX: dict[str, Kind] = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".txt": "text",
    ".text": "text",
    ".md": "text",
}
_COMPRESSION_BY_SUFFIX = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}
_READ_BLOCK = 4 * 2**20  # bytes per request when reading inputs sequentially
_SURROGATE = re.compile("[\ud800-\udfff]")  # valid in JSON ("\\ud800"), not encodable as UTF-8


@dataclass(frozen=True)
class InputFile:
    """One input file; ``url`` is what messages and the manifest show."""

    url: str
    size: int
    kind: Kind
    compression: str | None


@dataclass(frozen=True)
class Segment:
    """A half-open range of one input: bytes, or row groups for Parquet; ``whole`` = all of it."""

    file: int  # index into the plan's file list
    start: int
    end: int
    whole: bool = False


@dataclass(frozen=True)
class Doc:
    """One document: its text and the passthrough fields asked for."""

    text: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Bad:
    """A record that is not a document: ``reason`` is a short key counted per file.

    ``line`` is 1-based when known; a segment that starts mid-file knows only ``offset``, the
    byte offset of the line's start, which `line_number` turns into a line when needed.
    """

    reason: str
    detail: str
    line: int | None = None
    offset: int | None = None
    row: int | None = None


def _kind_and_compression(url: str, input_format: str) -> tuple[Kind, str | None]:
    name = url.rsplit("/", 1)[-1].lower()
    compression = None
    for suffix, comp in _COMPRESSION_BY_SUFFIX.items():
        if name.endswith(suffix):
            compression, name = comp, name[: -len(suffix)]
    if input_format != "auto":
        return input_format, compression  # type: ignore[return-value]
    for suffix, kind in _KIND_BY_SUFFIX.items():
        if name.endswith(suffix):
            return kind, compression
    raise IngestError(
        f"input {url}: cannot tell its format from the name; pass --input-format jsonl|parquet|text"
    )


_LISTING_THREADS = 16  # concurrent metadata requests while planning (explicit file lists)


def expand_inputs(patterns: list[str], input_format: str, storage_options: dict[str, Any]) -> list[InputFile]:
    """Every input file, sorted by URL: globs expanded, directories listed recursively.

    A glob or a directory costs its listing requests only (sizes come from the listing, never
    one request per file); explicit file paths are looked up concurrently, at most
    ``_LISTING_THREADS`` at a time. Raises IngestError naming the pattern when a glob matches
    nothing, a path does not exist or the storage refuses the listing (missing bucket, no
    permission).
    """
    from concurrent.futures import ThreadPoolExecutor

    from fsspec.core import split_protocol, url_to_fs

    resolved = []
    filesystems: dict[str, Any] = {}  # one filesystem per protocol, not one per input
    for pattern in patterns:
        protocol = split_protocol(pattern)[0] or "file"
        try:
            if "::" not in pattern and protocol in filesystems:
                fs = filesystems[protocol]
                resolved.append((pattern, fs, fs._strip_protocol(pattern)))
                continue
            fs, path = url_to_fs(pattern, **storage_options)
            filesystems[protocol] = fs
            resolved.append((pattern, fs, path))
        except (PermissionError, FileNotFoundError, OSError) as err:
            raise _listing_error(pattern, err) from err
    with ThreadPoolExecutor(max_workers=max(1, min(_LISTING_THREADS, len(resolved)))) as pool:
        listings = list(pool.map(lambda r: _expand_one(*r), resolved))
    found: dict[str, InputFile] = {}
    for (_, fs, _), entries in zip(resolved, listings):
        for p, size in entries:
            url = p if _is_local(fs) else fs.unstrip_protocol(p)
            kind, comp = _kind_and_compression(url, input_format)
            found[url] = InputFile(url, size, kind, comp)
    return [found[u] for u in sorted(found)]


def _expand_one(pattern: str, fs: Any, path: str) -> list[tuple[str, int]]:
    """``(path, size)`` of every file ``pattern`` names, from listings or one info request."""
    try:
        if any(c in path for c in "*?["):
            matches = fs.glob(path, detail=True)
            entries = [(p, int(i["size"])) for p, i in matches.items() if i.get("type") != "directory"]
            if not entries:
                raise IngestError(f"input glob {pattern} matches no file: check the pattern")
            return entries
        try:
            info = fs.info(path)
        except FileNotFoundError:
            raise IngestError(f"input {pattern} does not exist: check the path or URL") from None
        if info.get("type") == "directory":
            found = fs.find(path, detail=True)
            entries = [(p, int(i["size"])) for p, i in found.items() if i.get("type") != "directory"]
            if not entries:
                raise IngestError(f"input directory {pattern} holds no file")
            return entries
        return [(path, int(info["size"]))]
    except IngestError:
        raise
    except (PermissionError, FileNotFoundError, OSError) as err:
        raise _listing_error(pattern, err) from err


def _listing_error(pattern: str, err: BaseException) -> IngestError:
    return IngestError(
        f"cannot list input {pattern}: {type(err).__name__}: {err}; check that the "
        "bucket exists and that the credentials may read it"
    )


def _is_local(fs: Any) -> bool:
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return protocol in ("file", "local")


def _open(f: InputFile, storage_options: dict[str, Any]) -> Any:
    from fsspec.core import url_to_fs

    fs, path = url_to_fs(f.url, **storage_options)
    return fs.open(path, "rb", block_size=_READ_BLOCK)


def _decompressed(raw: IO[bytes], compression: str | None) -> IO[bytes]:
    if compression == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    if compression == "zstd":
        import zstandard

        reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
        return io.BufferedReader(reader, buffer_size=_READ_BLOCK)  # type: ignore[arg-type]
    return raw


def _lines(f: InputFile, seg: Segment, options: dict[str, Any]) -> Iterator[tuple[int, bytes]]:
    """(offset of the line's first byte, line with its newline) for the lines the segment owns."""
    with _open(f, options) as raw:
        if seg.whole:
            yield from _decompressed_lines(f, raw)
            return
        pos = seg.start
        if seg.start > 0:
            raw.seek(seg.start - 1)
            pos = seg.start - 1 + len(raw.readline())  # the rest of the line a previous part owns
        while pos < seg.end:
            line = raw.readline()
            if not line:
                return
            yield pos, line
            pos += len(line)


def _decompressed_lines(f: InputFile, raw: IO[bytes]) -> Iterator[tuple[int, bytes]]:
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


def line_number(f: InputFile, offset: int, options: dict[str, Any]) -> int:
    """1-based line number of the line that starts at byte ``offset`` (plain files only)."""
    count = 0
    with _open(f, options) as raw:
        remaining = offset
        while remaining > 0:
            chunk = raw.read(min(_READ_BLOCK, remaining))
            if not chunk:
                break
            count += chunk.count(b"\n")
            remaining -= len(chunk)
    return count + 1


def read_segment(
    f: InputFile,
    seg: Segment,
    *,
    text_field: str,
    text_per_line: bool,
    passthrough: list[str],
    storage_options: dict[str, Any],
) -> Iterator[Doc | Bad]:
    """The documents and bad records of one segment, in file order."""
    if f.kind == "parquet":
        yield from _parquet(f, seg, text_field, passthrough, storage_options)
    elif f.kind == "text" and not text_per_line:
        yield from _whole_text(f, storage_options)
    else:
        known = seg.whole or seg.start == 0  # else only byte offsets, resolved on demand
        for n, (offset, raw) in enumerate(_lines(f, seg, storage_options), start=1):
            where = {"line": n if known else None, "offset": offset}
            if f.kind == "jsonl":
                yield _json_record(raw, text_field, passthrough, where)
            else:
                yield _text_line(raw, where)


def _decode(raw: bytes, where: dict[str, Any]) -> str | Bad:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        return Bad("invalid_utf8", f"invalid UTF-8 at byte {err.start} ({err.reason})", **where)


def _text_line(raw: bytes, where: dict[str, Any]) -> Doc | Bad:
    text = _decode(raw.rstrip(b"\r\n"), where)
    return text if isinstance(text, Bad) else Doc(text)


def _whole_text(f: InputFile, options: dict[str, Any]) -> Iterator[Doc | Bad]:
    with _open(f, options) as raw:
        data = b"".join(line for _, line in _decompressed_lines(f, raw))
    text = _decode(data, {})
    yield text if isinstance(text, Bad) else Doc(text)


def _json_record(raw: bytes, text_field: str, passthrough: list[str], where: dict[str, Any]) -> Doc | Bad:
    line = _decode(raw, where)
    if isinstance(line, Bad):
        return line
    if not line.strip():
        return Doc("")  # a blank line: counted as an empty document, like {"text": ""}
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as err:
        return Bad("malformed_json", f"malformed JSON: {err.msg} at column {err.colno}", **where)
    if not isinstance(obj, dict):
        return Bad("not_object", f"a JSON {type(obj).__name__}, not an object", **where)
    return _doc_from_mapping(obj, text_field, passthrough, where)


def _doc_from_mapping(
    obj: dict[str, Any], text_field: str, passthrough: list[str], where: dict[str, Any]
) -> Doc | Bad:
    if text_field not in obj:
        fields = ", ".join(sorted(map(str, obj))[:8]) or "none"
        return Bad(
            "missing_field",
            f"no text field {text_field!r} (fields: {fields}); choose one with --text-field",
            **where,
        )
    text = obj[text_field]
    if not isinstance(text, str):
        return Bad(
            "not_string",
            f"text field {text_field!r} is {type(text).__name__}, not a string",
            **where,
        )
    lone = _SURROGATE.search(text)
    if lone is not None:
        return Bad(
            "lone_surrogate",
            f"text field {text_field!r} holds a lone surrogate \\u{ord(lone.group()):04x} at "
            f"character {lone.start()} (valid JSON escape, not encodable as UTF-8)",
            **where,
        )
    missing = [name for name in passthrough if name not in obj]
    if missing:
        return Bad("missing_field", f"no passthrough field {missing[0]!r}", **where)
    return Doc(text, {name: obj[name] for name in passthrough})


def _parquet(
    f: InputFile, seg: Segment, text_field: str, passthrough: list[str], options: dict[str, Any]
) -> Iterator[Doc | Bad]:
    import pyarrow.parquet as pq

    with _open(f, options) as raw:
        pf = pq.ParquetFile(raw)
        groups = list(range(pf.num_row_groups)) if seg.whole else list(range(seg.start, seg.end))
        row = sum(pf.metadata.row_group(g).num_rows for g in range(groups[0])) if groups else 0
        names = set(pf.schema_arrow.names)
        columns = [c for c in dict.fromkeys([text_field, *passthrough]) if c in names]
        for batch in pf.iter_batches(row_groups=groups, columns=columns, batch_size=1024):
            for obj in batch.to_pylist():
                row += 1
                yield _doc_from_mapping(obj, text_field, passthrough, {"row": row})
