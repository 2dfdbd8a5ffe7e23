"""Writers: records in, shard files and a part completion record out.

A writer owns one *part*. It fills shards in memory up to ``shard_size`` bytes, writes each one
atomically when it is full (a shard closes after the record that reaches the size, so records
are never split), and, only if the ``with`` block exits cleanly, hands its finished part to its
completion (`Completion`): the part's completion record (``writer(part=k)``) or the manifest
(``writer()``), written last.

What the bytes of a record are is its layout's business: the writer asks the encoder of its
storage's layout (`guideloom.storage.encoders`) to add each record to the shard being filled and
to finish a shard's index files; the writer keeps the buffering, the shard size, the headers,
the checksums and the completion.

Every writer attempt writes its shards under a prefix of its own (``shards/r-<run>/a-<attempt>``
or ``shards/w-<token>``), so two attempts of one part (a retried task racing its original) never
write the same file, and no file a committed manifest names is ever rewritten. The completion
record names the exact files and checksums of its attempt; writing it (one atomic write) is what
makes the attempt count, and the last attempt to write it wins.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Protocol

import numpy as np
import xxhash

import guideloom.layout as layout
from guideloom.errors import GuideLoomError, RecordError
from guideloom.formats import Format
from guideloom.io import Location
from guideloom.manifest import (
    FileInfo,
    FormatSpecModel,
    PartRecord,
    ShardInfo,
    StorageClassName,
    now_iso,
    version_for,
)
from guideloom.storage.encoders import ShardBuffer, encoder_for
from guideloom.types import Layout

__all__ = ["DEFAULT_SHARD_SIZE", "Completion", "WriteTarget", "Writer"]

DEFAULT_SHARD_SIZE = 64 * 2**20

Completion = Callable[[PartRecord], PartRecord]
"""What a writer does with its finished part when it closes cleanly: it is called once with the
part's record (its shards and the writer's metadata), makes the part count (a part completion
record, or a manifest), and returns the record `Writer.close` returns."""


class WriteTarget(Protocol):
    """What a writer needs of the storage it writes into (`guideloom.storage.Storage` has it)."""

    @property
    def location(self) -> Location: ...

    @property
    def format(self) -> Format: ...

    @property
    def layout(self) -> Layout: ...

    @property
    def storage_class(self) -> StorageClassName: ...


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
        storage: WriteTarget,
        part: int,
        *,
        shard_size: int,
        metadata: dict[str, Any] | None,
        shard_prefix: str,
        on_complete: Completion,
    ) -> None:
        """Made by `storage.writer()`; there is no need to build one yourself.

        Args:
            storage: The storage to write into.
            part: The part number.
            shard_size: Bytes per shard.
            metadata: JSON-able values for the manifest or the part's completion record.
            shard_prefix: The folder (relative to the dataset root) this attempt writes under.
            on_complete: What `close` does with the finished part (see `Completion`): write
                the part's completion record (`storage.writer(part=k)`), or publish the
                manifest (`storage.writer()`).

        Raises:
            ValueError: `shard_size` is not positive.
        """
        if shard_size <= 0:
            raise ValueError(f"shard_size must be a positive number of bytes, got {shard_size}")
        self.storage = storage
        self.part = part
        self.shard_size = shard_size
        self.metadata = dict(metadata or {})
        self._prefix = shard_prefix
        self._on_complete = on_complete
        self._shards: list[ShardInfo] = []
        self._encoder = encoder_for(storage.layout, storage.format)
        if hasattr(self._encoder, "size_hint"):  # a shard's buffer, sized once for a whole shard
            self._encoder.size_hint = min(self.shard_size + (64 << 10), 256 << 20)
        self._buffer = self._encoder.new_shard()
        # Records that cannot be refused (one field of the format's exact dtype) skip the checks
        # and the error label: the stream encoder's `exact_values`, then its `pack_record`.
        self._exact_values: Callable[[Any], np.ndarray | None] | None = getattr(
            self._encoder, "exact_values", None
        )
        self._records = 0
        self._closed = False
        self._where = f"{storage.location.display_url}: part {part} record "

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
        buf = self._buffer
        exact = self._exact_values
        values = exact(record) if exact is not None and spans is None else None
        if values is not None:
            self._encoder.pack_record(buf, values)  # type: ignore[attr-defined]
        else:
            where = f"{self._where}{self._records}"
            encoder = self._encoder
            if spans is not None and not encoder.takes_spans:
                raise RecordError(f"{where}: spans are only stored by StreamWithMetaStorage")
            encoder.append(buf, record, spans, where)
        buf.records += 1
        self._records += 1
        if buf.nbytes >= self.shard_size:
            self._flush()

    def append_batch(self, records: Any, lengths: Any = None, spans: Sequence[Any] | None = None) -> int:
        """Append many records at once: the same as `append` of each in turn, with one copy per
        buffer for streams.

        Streams take either ``records`` a dict of flat 1-D arrays (every field of the format,
        all records' values joined end to end) with ``lengths`` the tokens of each record, or
        a list of records (dicts of 1-D arrays, as `append` takes them). Each record's start is
        recorded (the stream's record starts); the batch fills shards as appending its records
        one by one would: a shard is written out after the record that brings it to `shard_size`
        bytes, and the batch's next records start the next shard (a record is never split).
        Documents: a list of records, appended one by one. Streams with metadata: the same, and
        ``spans``, one list per record as `append` takes them.

        Args:
            records: A dict of flat arrays (streams, with ``lengths``) or a sequence of records.
            lengths: Tokens per record (a 1-D array of non-negative ints summing to the length
                of the flat arrays); only with a dict of flat arrays.
            spans: Streams with metadata only: per record, its `(start, stop, annotation)`
                triples in its own tokens (as `append`'s ``spans``; empty for none). None: no
                record has spans.

        Returns:
            How many records were appended.

        Raises:
            RecordError: The format refuses a record (named by its number), ``lengths`` is
                missing, not 1-D non-negative ints, or does not add up to the fields' length,
                ``spans`` is given to a storage class that does not store them or does not
                hold one list per record, or an annotation's encoding fails. For streams
                nothing of the batch is added then; for documents the records before the
                refused one stay appended.
            SpanError: A record's spans are invalid (nothing of the batch is added then).
            StorageAccessError: Writing a full shard failed.
            RuntimeError: The writer is closed.
        """
        if self._closed:
            raise RuntimeError("this writer is closed; open a new one with storage.writer()")
        encoder = self._encoder
        if spans is not None and not encoder.takes_spans:
            raise RecordError(f"{self._where}{self._records}: spans are only stored by StreamWithMetaStorage")
        if not encoder.takes_batches:
            if lengths is not None:
                raise RecordError(
                    f"{self._where}{self._records}: lengths= is for streams (flat arrays of "
                    "tokens); pass documents as a list of records"
                )
            count = 0
            for record in records:
                self.append(record)
                count += 1
            return count
        elements, lens = encoder.batch_elements(records, lengths, self._where, self._records)  # type: ignore[attr-defined]
        count = len(lens)
        itemsize = encoder.element_size
        ends = np.cumsum(lens)  # each record's end, in tokens of the batch
        checked = None
        bytes_end = ends * itemsize  # each record's end, in bytes of the batch (data, annotations)
        if spans is not None:
            checked = encoder.batch_spans(spans, lens, self._where, self._records)  # type: ignore[attr-defined]
            bytes_end += np.cumsum(np.fromiter((sum(map(len, m)) for _, m in checked), np.int64, count))
        done = tok = 0
        while done < count:
            # the records that fill the shard being written: up to the first whose end reaches
            # shard_size (at least one), as appending them one by one would cut
            buf = self._buffer
            before = int(bytes_end[done - 1]) if done else 0
            room = before + self.shard_size - buf.nbytes
            stop = min(count, max(int(np.searchsorted(bytes_end, room)), done) + 1)
            end = int(ends[stop - 1])
            piece = elements[tok:end]
            full = buf.nbytes + int(bytes_end[stop - 1]) - before >= self.shard_size
            # `elements` may be the caller's own array: a piece that fills a shard is written
            # before this call returns; one that stays buffered is copied (the caller may reuse
            # its array as soon as the call returns).
            kept = piece if full else piece.copy()
            if checked is None:
                encoder.add_elements(buf, kept, lens[done:stop])  # type: ignore[attr-defined]
            else:
                encoder.add_elements(buf, kept, lens[done:stop], checked[done:stop])  # type: ignore[attr-defined]
            buf.records += stop - done
            self._records += stop - done
            if full:
                try:
                    self._flush()
                except BaseException:
                    _own_chunks(buf)  # the shard stays buffered: keep its bytes, not the caller's
                    raise
            done, tok = stop, end
        return count

    # -- shards -----------------------------------------------------------------------------

    def _flush(self) -> None:
        """Write the shard being filled (if it holds a record), one atomic write per file."""
        buf = self._buffer
        if buf.records == 0:
            return
        index = len(self._shards)
        encoder = self._encoder
        encoder.finish(buf)
        files: dict[str, FileInfo] = {}
        for name, chunks in buf.chunks.items():
            kind = encoder.files[name]
            itemsize, count = encoder.header(kind, buf)
            header = layout.ShardHeader(kind.extension, itemsize, count).pack()
            hasher = xxhash.xxh3_64(header)
            size = len(header)
            for chunk in chunks:
                hasher.update(chunk)
                size += len(chunk)
            rel = layout.shard_file_path(self.part, index, kind.extension, self._prefix)
            self.storage.location.write(rel, [header, *chunks])
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
        self._buffer = encoder.new_shard()

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
            storage_class=self.storage.storage_class,
            format=FormatSpecModel(**self.storage.format.spec()),
            shards=tuple(self._shards),
            part=self.part,
            created_at=now_iso(),
            metadata=self.metadata,
        )
        return self._on_complete(record)

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

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    @property
    def records_written(self) -> int:
        """Records appended so far (refused records not counted)."""
        return self._records


def _own_chunks(buf: ShardBuffer) -> None:
    """Replace ``buf``'s chunks by copies of their bytes (chunks that may view a caller's arrays)."""
    for name, chunks in buf.chunks.items():
        buf.chunks[name] = [bytes(chunk) for chunk in chunks]
