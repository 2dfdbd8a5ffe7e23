"""Input files: find them, pick each one's reader, and turn the records of a segment into documents.

A *segment* is a half-open range of one file in its reader's unit: bytes ``[start, end)`` of a
splittable file (plain JSONL, plain text with one document per line), row groups
``[start, end)`` of a Parquet file, or the whole of any other file (compressed files and
one-document-per-file text cannot be split). How each kind is cut and read is its input reader's
business (`guideloom.workers.readers`); this module finds the files, names each one's kind, and
turns a reader's records into documents (`document`: the ``text_field`` and passthrough fields).

Reading yields `Doc` for a document and `Bad` for a record that cannot be one; the
caller decides (``--on-bad-record``) what a Bad means.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from guideloom.errors import IngestError
from guideloom.io import redact_url
from guideloom.io.backends import backend_of_fs
from guideloom.io.location import endpoint_of
from guideloom.types import BadRecord, Document, InputReader, InputRecord, ReadOptions
from guideloom.workers.readers import BUILTIN_KINDS, INPUT_READERS, first_fields, input_reader, line_number

__all__ = [
    "Bad",
    "Doc",
    "InputFile",
    "Segment",
    "document",
    "expand_inputs",
    "line_number",
    "read_segment",
]

_COMPRESSION_BY_SUFFIX = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}
_SURROGATE = re.compile("[\ud800-\udfff]")  # valid in JSON ("\\ud800"), not encodable as UTF-8

Doc = Document
"""One document: its text and the passthrough fields asked for (`guideloom.types.Document`)."""

Bad = BadRecord
"""A record that is not a document (`guideloom.types.BadRecord`): ``reason`` is a short key
counted per file; ``line`` is 1-based when known, else ``offset`` is the byte offset of the
line's start, which `line_number` turns into a line when needed."""


@dataclass(frozen=True)
class InputFile:
    """One input file; ``url`` is what messages and the manifest show; ``kind`` names its
    input reader."""

    url: str
    size: int
    kind: str
    compression: str | None


@dataclass(frozen=True)
class Segment:
    """A half-open range of one input: bytes, or row groups for Parquet; ``whole`` = all of it."""

    file: int  # index into the plan's file list
    start: int
    end: int
    whole: bool = False


def _suffix_table() -> list[tuple[str, str]]:
    """(suffix, kind) in the order ``auto`` tries them: the built-in kinds first, then the other
    registered or installed ones by name."""
    kinds = [k for k in BUILTIN_KINDS if k in INPUT_READERS]
    kinds += [k for k in INPUT_READERS.names() if k not in BUILTIN_KINDS]
    return [(suffix, kind) for kind in kinds for suffix in input_reader(kind).suffixes]


def _kind_and_compression(
    url: str, input_format: str, table: list[tuple[str, str]]
) -> tuple[str, str | None]:
    name = url.rsplit("/", 1)[-1].lower()
    compression = None
    for suffix, comp in _COMPRESSION_BY_SUFFIX.items():
        if name.endswith(suffix):
            compression, name = comp, name[: -len(suffix)]
    if input_format != "auto":
        return input_format, compression
    for suffix, kind in table:
        if name.endswith(suffix):
            return kind, compression
    raise IngestError(
        f"input {url}: cannot tell its format from the name; pass --input-format "
        f"{'|'.join(INPUT_READERS.names())}"
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
    if input_format != "auto":
        input_reader(input_format)  # an IngestError listing the known kinds when it is none
        table: list[tuple[str, str]] = []
    else:
        table = _suffix_table()
    found: dict[str, InputFile] = {}
    for (_, fs, _), entries in zip(resolved, listings):
        for p, size in entries:
            url = p if _is_local(fs) else fs.unstrip_protocol(p)
            kind, comp = _kind_and_compression(url, input_format, table)
            found[url] = InputFile(url, size, kind, comp)
    return [found[u] for u in sorted(found)]


def _expand_one(pattern: str, fs: Any, path: str) -> list[tuple[str, int]]:
    """``(path, size)`` of every file ``pattern`` names, from listings or one info request."""
    try:
        if any(c in path for c in "*?["):
            matches = fs.glob(path, detail=True)
            entries = [(p, int(i["size"])) for p, i in matches.items() if i.get("type") != "directory"]
            if not entries:
                _check_bucket(pattern, fs, path)
                raise IngestError(f"input glob {pattern} matches no file: check the pattern")
            return entries
        try:
            info = fs.info(path)
        except FileNotFoundError:
            _check_bucket(pattern, fs, path)
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


def _check_bucket(pattern: str, fs: Any, path: str) -> None:
    """On an object store, raise IngestError naming the endpoint when the bucket (container) of
    a pattern that found nothing does not exist (one request, only on this error path)."""
    if _is_local(fs) or "://" not in pattern:
        return
    bucket = path.lstrip("/").split("/", 1)[0]
    try:
        there = bool(fs.exists(bucket))
    except Exception:  # the listing's own error will be shown
        return
    if not there:
        word = "container" if pattern.startswith(("az://", "abfs")) else "bucket"
        raise IngestError(
            f"input {pattern}: the {word} {bucket!r} does not exist at the endpoint "
            f"{endpoint_of(fs, pattern, {})}; check its name and the endpoint (input_storage_options, "
            'or --input-storage-options \'{"client_kwargs": {"endpoint_url": ...}}\')'
        )


def _listing_error(pattern: str, err: BaseException) -> IngestError:
    return IngestError(
        f"cannot list input {pattern}: {type(err).__name__}: {err}; check that the "
        "bucket exists and that the credentials may read it"
    )


def _is_local(fs: Any) -> bool:
    """Whether ``fs`` is local disk: the answer of its store's backend (`guideloom.io.backends`)."""
    return backend_of_fs(fs).is_local


def read_segment(
    f: InputFile,
    seg: Segment,
    *,
    text_field: str,
    text_per_line: bool,
    passthrough: list[str],
    storage_options: dict[str, Any],
    reader: InputReader | None = None,
) -> Iterator[Doc | Bad]:
    """The documents and bad records of one segment, in file order (``reader``: the file's
    input reader, when the caller has it already)."""
    options = ReadOptions(text_field, text_per_line, tuple(passthrough), storage_options)
    for item in (reader or input_reader(f.kind)).read(f, seg, options):
        yield document(item, options) if isinstance(item, InputRecord) else item


def document(record: InputRecord, options: ReadOptions) -> Doc | Bad:
    """The document of a record: its ``text_field`` (a string that UTF-8 can encode) and its
    passthrough fields, or the Bad record that says which of them is missing or wrong."""
    obj, text_field = record.data, options.text_field
    if text_field not in obj:
        fields = ", ".join(sorted(map(str, obj))[:8]) or "none"
        return _bad(
            record,
            "missing_field",
            f"no text field {text_field!r} (fields: {fields}); choose one with --text-field",
        )
    text = obj[text_field]
    if not isinstance(text, str):
        return _bad(record, "not_string", f"text field {text_field!r} is {type(text).__name__}, not a string")
    lone = _SURROGATE.search(text)
    if lone is not None:
        return _bad(
            record,
            "lone_surrogate",
            f"text field {text_field!r} holds a lone surrogate \\u{ord(lone.group()):04x} at "
            f"character {lone.start()} (valid JSON escape, not encodable as UTF-8)",
        )
    missing = [name for name in options.passthrough if name not in obj]
    if missing:
        defaults = options.passthrough_defaults
        absent = [name for name in missing if name not in defaults]
        if absent:
            fields = ", ".join(sorted(map(str, obj))[:8]) or "none"
            return _bad(
                record,
                "missing_field",
                f"no passthrough field {absent[0]!r} (fields: {fields}); give records without it "
                f"a value with --passthrough-default {absent[0]}=VALUE, or drop it from --passthrough",
            )
        return Doc(text, {name: obj[name] if name in obj else defaults[name] for name in options.passthrough})
    return Doc(text, {name: obj[name] for name in options.passthrough})


def _bad(record: InputRecord, reason: str, detail: str) -> Bad:
    return Bad(reason, detail, line=record.line, offset=record.offset, row=record.row)


@dataclass(frozen=True)
class NeededField:
    """A field every record must have: its ``name``, what it is for (``what``: "text field"),
    the option that names it (``option``) and the type the records should hold there."""

    name: str
    what: str
    option: str
    kind: str = "str"
    drop: bool = False  # the fix is dropping it from ``option`` (else naming another field)
    also: str = ""  # another fix, said after the first


def check_fields(
    files: list[InputFile], needed: list[NeededField], storage_options: dict[str, Any], *, first_fails: bool
) -> None:
    """Check, before any task starts, that the first input file of each kind has the fields the
    job reads: a Parquet file's schema (every row), a JSON Lines file's first record (checked
    only when ``first_fails``: a missing field there would stop the job anyway).

    Raises:
        IngestError: Names the file, the missing field, the fields it has, and the option to
            change (with a field of the right type where the file has one).
    """
    seen: set[str] = set()
    for f in files:
        if f.kind in seen or not needed:
            continue
        seen.add(f.kind)
        found = first_fields(f, storage_options)
        if found is None:
            continue
        have, every = found
        if not every and not first_fails:
            continue
        for need in needed:
            if need.name in have:
                continue
            listed = ", ".join(f"{k} ({t})" for k, t in list(have.items())[:12]) or "none"
            where = "its columns" if every else "its first record"
            if need.drop:
                fix = f"drop it from {need.option}"
            else:
                like = [k for k, t in have.items() if t == need.kind]
                fix = f"name the field that holds it: {need.option} {like[0] if like else 'FIELD'}"
            fix += f", {need.also}" if need.also else ""
            raise IngestError(
                f"input {redact_url(f.url)}: no {need.what} {need.name!r} in {where}: {listed}; {fix}"
            )
