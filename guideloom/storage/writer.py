"""Writers: records in, shard files and a part completion record out.

A writer owns one *part*. It fills shards in memory up to ``shard_size`` bytes, writes each one
atomically when it is full (a shard closes after the record that reaches the size, so records
are never split), and, only if the ``with`` block exits cleanly, writes the part's completion
record (``writer(part=k)``) or the manifest (``writer()``) last.

Every writer attempt writes its shards under a prefix of its own (``shards/r-<run>/a-<attempt>``
or ``shards/w-<token>``), so two attempts of one part (a retried task racing its original) never
write the same file, and no file a committed manifest names is ever rewritten. The completion
record names the exact files and checksums of its attempt; writing it (one atomic write) is what
makes the attempt count, and the last attempt to write it wins.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import xxhash

import guideloom.layout as layout
from guideloom.errors import GuideLoomError, RecordError
from guideloom.formats import (
    DocumentStorageFormat,
    StreamNumpyFormat,
    StreamWithMetaStorageFormat,
    check_spans,
)
from guideloom.manifest import FileInfo, FormatSpecModel, PartRecord, ShardInfo, now_iso, version_for

if TYPE_CHECKING:
    from guideloom.storage.base import Storage

__all__ = ["DEFAULT_SHARD_SIZE", "Writer"]

DEFAULT_SHARD_SIZE = 64 * 2**20


class _ShardBuffer:
    """The files of one shard being filled: per file kind, a list of byte chunks."""

    def __init__(self, kinds: Sequence[str]):
        self.chunks: dict[str, list[bytes | memoryview]] = {k: [] for k in kinds}
        self.nbytes = 0
        self.records = 0
        self.tokens = 0
        self.spans = 0

    def add(self, kind: str, data: bytes | memoryview) -> None:
        self.chunks.setdefault(kind, []).append(data)
        self.nbytes += len(data)


class Writer:
    """Appends records to one part of a dataset. Use it as a context manager.

    Obtain one from ``storage.writer()`` (the whole dataset, committed when the block exits
    cleanly) or ``storage.writer(part=k)`` (part ``k`` of a parallel write; commit with
    ``storage.commit(num_parts=n)``). After an exception inside the block nothing is committed:
    shards already written stay invisible until a later attempt completes the part.

    Attributes:
        storage: The storage this writer writes into.
        part: The part number (0 for `storage.writer()`).
        shard_size: Bytes per shard: a shard closes after the record that reaches it.
        metadata: JSON-able values for the manifest (`writer()`) or the part's completion
            record (`writer(part=k)`).
    """

    def __init__(
        self,
        storage: Storage,
        part: int,
        *,
        shard_size: int,
        metadata: dict[str, Any] | None,
        commit: bool,
        shard_prefix: str,
        record_path: str | None = None,
    ) -> None:
        """Made by `storage.writer()`; there is no need to build one yourself.

        Args:
            storage: The storage to write into.
            part: The part number.
            shard_size: Bytes per shard.
            metadata: JSON-able values for the manifest or the part's completion record.
            commit: Whether `close` writes the manifest (`storage.writer()`) rather than a part
                completion record (`storage.writer(part=k)`).
            shard_prefix: The folder (relative to the dataset root) this attempt writes under.
            record_path: Where the part's completion record goes (parts only).

        Raises:
            ValueError: `shard_size` is not positive.
        """
        if shard_size <= 0:
            raise ValueError(f"shard_size must be a positive number of bytes, got {shard_size}")
        self.storage = storage
        self.part = part
        self.shard_size = shard_size
        self.metadata = dict(metadata or {})
        self._commit = commit
        self._prefix = shard_prefix
        self._shards: list[ShardInfo] = []
        self._kinds = _FILE_KINDS[storage.layout]
        self._buffer = _ShardBuffer(self._kinds)
        self._records = 0
        self._closed = False
        # Where the completion record goes (parallel parts). An earlier attempt's record stays
        # valid until this one replaces it: its files are never touched by this attempt.
        self._record_path = record_path

    # -- appending --------------------------------------------------------------------------

    def append(self, record: Any, spans: Sequence[Any] | None = None) -> None:
        """Append one record.

        Documents: any object the format encodes. Streams: a dict of equal-length 1-D arrays,
        one per field of the format. Streams with metadata: that dict plus ``spans``, a list of
        record-relative ``(start, stop, annotation)`` triples, sorted and non-overlapping.

        A refused record leaves the writer as it was: catch the error, skip the record and go on
        appending. When the shard being filled reaches `shard_size` bytes it is written out
        (one atomic write).

        Args:
            record: Documents: the object to encode. Streams: `{field: 1-D array}`, one value per
                token, for every field of the format and no other.
            spans: Streams with metadata only: `(start, stop, annotation)` triples in tokens
                of this record (`0 <= start < stop <= ` the record's token count), sorted by
                start and non-overlapping. None for no span.

        Raises:
            RecordError: The format refuses the record: a missing or unknown field, fields of
                different lengths, an array that is not 1-D, a value that does not fit the
                field's dtype, an `encode` / `encode_meta` that fails or does not return bytes,
                or spans given to a storage class that does not store them.
            SpanError: The spans are not `(start, stop, annotation)` triples, have non-integer
                bounds, are empty, leave the record, overlap or are out of order.
            StorageAccessError: Writing a full shard failed (the storage refused the request or
                could not be reached).
            BucketNotFoundError: Writing a full shard found no bucket at the endpoint.
            RuntimeError: The writer is closed.
        """
        if self._closed:
            raise RuntimeError("this writer is closed; open a new one with storage.writer()")
        where = f"{self.storage.location.display_url}: part {self.part} record {self._records}"
        buf = self._buffer
        fmt = self.storage.format
        if spans is not None and not isinstance(fmt, StreamWithMetaStorageFormat):
            raise RecordError(f"{where}: spans are only stored by StreamWithMetaStorage")
        if isinstance(fmt, DocumentStorageFormat):
            data = _encoded(fmt.encode, record, where, "encode")
            if buf.records == 0:
                self._offsets = [0]
            self._offsets.append(self._offsets[-1] + len(data))
            buf.add("docs", bytes(data))
        elif isinstance(fmt, StreamNumpyFormat):
            elements = fmt.to_elements(record, where)
            buf.add("tokens", elements.data.cast("B"))
            buf.tokens += len(elements)
        elif isinstance(fmt, StreamWithMetaStorageFormat):
            elements = fmt.stream_format.to_elements(record, where)
            checked = check_spans(spans or [], len(elements), where)
            # Encode every annotation before touching the shard buffer: a failure leaves no trace.
            metas = [
                _encoded(fmt.encode_meta, annotation, f"{where} span {j}", "encode_meta")
                for j, (_, _, annotation) in enumerate(checked)
            ]
            if buf.records == 0:
                self._span_rows: list[tuple[int, int, int, int]] = []
                self._meta_size = 0
            for (start, stop, _), meta in zip(checked, metas):
                size = len(meta)
                self._span_rows.append(
                    (buf.tokens + start, buf.tokens + stop, self._meta_size, self._meta_size + size)
                )
                self._meta_size += size
                buf.add("meta", bytes(meta))
            buf.spans += len(checked)
            buf.add("tokens", elements.data.cast("B"))
            buf.tokens += len(elements)
        buf.records += 1
        self._records += 1
        if buf.nbytes >= self.shard_size:
            self._flush()

    # -- shards -----------------------------------------------------------------------------

    def _flush(self) -> None:
        buf = self._buffer
        if buf.records == 0:
            return
        index = len(self._shards)
        kind = self.storage.layout
        if kind == "documents":
            offsets = np.asarray(self._offsets, dtype=layout.OFFSET_DTYPE)
            buf.add("docs.idx", offsets.data.cast("B"))
        elif kind == "stream_with_meta":
            table = np.array(self._span_rows, dtype=np.uint64).reshape(-1, 4)
            spans = np.empty(len(table), dtype=layout.SPAN_DTYPE)
            for col, name in enumerate(layout.SPAN_DTYPE.names or ()):
                spans[name] = table[:, col]
            buf.add("spans", spans.data.cast("B"))
            directory = layout.span_directory(spans, buf.tokens, self._meta_size)
            buf.add("spans.dir", directory.data.cast("B"))
        files: dict[str, FileInfo] = {}
        for file_kind, chunks in buf.chunks.items():
            itemsize, count = self._items(file_kind, buf)
            header = layout.ShardHeader(file_kind, itemsize, count).pack()
            hasher = xxhash.xxh3_64(header)
            size = len(header)
            for chunk in chunks:
                hasher.update(chunk)
                size += len(chunk)
            rel = layout.shard_file_path(self.part, index, file_kind, self._prefix)
            self.storage.location.write(rel, [header, *chunks])
            name = _FILE_NAMES.get(file_kind, file_kind)
            files[name] = FileInfo(path=rel, size=size, checksum=layout.checksum(hasher))
        self._shards.append(
            ShardInfo(
                part=self.part,
                index=index,
                records=buf.records,
                tokens=buf.tokens,
                spans=buf.spans,
                files=files,
            )
        )
        self._buffer = _ShardBuffer(self._kinds)

    def _items(self, file_kind: str, buf: _ShardBuffer) -> tuple[int, int]:
        """(bytes per item, item count) of one file of the shard, for its header."""
        if file_kind == "tokens":
            fmt = self.storage.format
            stream = fmt.stream_format if isinstance(fmt, StreamWithMetaStorageFormat) else fmt
            if not isinstance(stream, StreamNumpyFormat):
                raise TypeError(f"{type(fmt).__qualname__} is not a stream format")
            return stream.itemsize, buf.tokens
        if file_kind == "docs.idx":
            return layout.OFFSET_DTYPE.itemsize, buf.records + 1
        if file_kind == "spans":
            return layout.SPAN_DTYPE.itemsize, buf.spans
        if file_kind == "spans.dir":
            return layout.SPAN_DIR_DTYPE.itemsize, int(layout.span_dir_entries(buf.tokens, buf.spans))
        return 1, sum(len(c) for c in buf.chunks[file_kind])  # docs, meta: bytes

    # -- finishing ----------------------------------------------------------------------------

    def close(self) -> PartRecord:
        """Write the last shard and the part's completion record (and commit, for ``writer()``).

        The ``with`` block calls it when it exits cleanly; call it yourself only when not using
        the writer as a context manager.

        Returns:
            The part's `PartRecord` (its shards, with their files, sizes, checksums and counts
            of records, tokens and spans).

        Raises:
            StorageAccessError: Writing failed (the storage refused the request or could not be
                reached); nothing is committed.
            BucketNotFoundError: The bucket does not exist at the endpoint.
            RuntimeError: The writer is already closed.
        """
        if self._closed:
            raise RuntimeError("this writer is already closed")
        self._flush()
        self._closed = True
        record = PartRecord(
            version=version_for(self._shards[0].files if self._shards else ()),
            storage_class=self.storage.storage_class,  # type: ignore[arg-type]
            format=FormatSpecModel(**self.storage.format.spec()),
            shards=tuple(self._shards),
            part=self.part,
            created_at=now_iso(),
            metadata=self.metadata if not self._commit else {},
        )
        if self._commit:
            # A single writer publishes straight from its own record: no file another writer
            # of this location could replace sits between its shards and its manifest.
            self.storage._publish([record], self.metadata)
        else:
            if self._record_path is None:  # unreachable: Storage.writer always passes one
                raise RuntimeError("a part writer needs a completion record path")
            self.storage.location.write(self._record_path, record.model_dump_json(indent=1).encode())
        return record

    def abort(self) -> None:
        """Stop without writing a completion record or manifest, and remove this attempt's shards
        (no record names them, and no other writer uses this attempt's prefix)."""
        self._closed = True
        try:
            self.storage.location.delete(self._prefix, recursive=True)
        except (GuideLoomError, OSError):
            pass  # best effort: the original exception is the one the caller must see

    @property
    def shard_prefix(self) -> str:
        """The prefix (relative to the dataset root) this attempt writes its shards under."""
        return self._prefix

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    @property
    def records_written(self) -> int:
        """Records appended so far (refused records not counted)."""
        return self._records


# The manifest's name of each file kind (the others are named by their kind).
_FILE_NAMES = {"tokens": "data", "docs": "data", "docs.idx": "index", "spans.dir": "span_dir"}

_FILE_KINDS = {
    "documents": ("docs",),
    "stream": ("tokens",),
    "stream_with_meta": ("tokens", "meta"),
}


def _encoded(encode: Any, value: Any, where: str, method: str) -> bytes | bytearray | memoryview:
    """``encode(value)``, with any failure or non-bytes result reported as a `RecordError`."""
    try:
        data = encode(value)
    except RecordError:
        raise
    except Exception as err:
        owner = getattr(encode, "__self__", None)
        name = f"{type(owner).__qualname__}.{method}" if owner is not None else method
        raise RecordError(f"{where}: {name} failed: {err}") from err
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise RecordError(f"{where}: {method} must return bytes, got {type(data).__name__}")
    return data
