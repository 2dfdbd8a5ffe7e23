"""Shard encoders: one class per layout turns appended records into the bytes of a shard's files.

The `Writer` owns everything a layout does not change (buffering, shard size, flushing, headers,
checksums, completion); the encoder of its storage's layout owns what does:

* `DocumentEncoder` (``documents``): each record encoded by the format into ``data``; the
  offsets index (``index``) when the shard closes;
* `StreamEncoder` (``stream``): each record's elements into ``data``;
* `StreamWithMetaEncoder` (``stream_with_meta``): elements into ``data``, each span's
  annotation into ``meta``; the span table (``spans``) and the span directory (``span_dir``)
  when the shard closes.

`ENCODERS` maps each layout to its encoder class (the layouts are fixed by the storage classes).
An encoder fills a `ShardBuffer` that `new_shard` gives it; a record it refuses leaves the buffer
and the encoder's own state as they were (everything that can fail runs before the first change).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

import guideloom.layout as layout
from guideloom.errors import RecordError, SpanError
from guideloom.formats import (
    DocumentStorageFormat,
    Format,
    Span,
    StreamNumpyFormat,
    StreamWithMetaStorageFormat,
    check_spans,
)
from guideloom.layout import FileKind, FileName
from guideloom.types import DOCUMENTS, STREAM, STREAM_WITH_META, Layout

__all__ = [
    "ENCODERS",
    "DocumentEncoder",
    "ShardBuffer",
    "ShardEncoder",
    "StreamEncoder",
    "StreamWithMetaEncoder",
    "encoder_for",
]

Chunk = bytes | memoryview


class ShardBuffer:
    """The files of one shard being filled: per file name, a list of byte chunks (in the order
    `guideloom.layout.LAYOUT_FILES` lists the layout's files), and the shard's counts."""

    __slots__ = ("chunks", "nbytes", "records", "spans", "tokens")

    def __init__(self, names: Sequence[FileName]) -> None:
        self.chunks: dict[FileName, list[Chunk]] = {name: [] for name in names}
        self.nbytes = 0  # bytes of every chunk so far (what shard_size is compared with)
        self.records = 0
        self.tokens = 0
        self.spans = 0

    def add(self, name: FileName, data: Chunk) -> None:
        self.chunks[name].append(data)
        self.nbytes += len(data)


class ShardEncoder:
    """Base of the encoders: records of one layout -> byte chunks of its shard files.

    Attributes:
        layout: The layout it encodes (a key of `ENCODERS`).
        takes_spans: Whether `append` stores spans.
        files: The layout's files, by name (`guideloom.layout.LAYOUT_FILES`).
        element_size: Bytes per stream element (0 for documents).
    """

    layout: ClassVar[Layout]
    takes_spans: ClassVar[bool] = False

    def __init__(self, format: Format) -> None:
        self.files: dict[FileName, FileKind] = layout.LAYOUT_FILES[self.layout]
        self.element_size = 0

    def new_shard(self) -> ShardBuffer:
        """An empty buffer for the next shard (and this encoder's per-shard state reset)."""
        return ShardBuffer(tuple(self.files))

    def append(self, shard: ShardBuffer, record: Any, spans: Sequence[Any] | None, where: str) -> None:
        """Add one record's bytes to ``shard`` and count its tokens and spans (not the record:
        the writer counts records). ``where`` starts every error message.

        Raises:
            RecordError: The format refuses the record (nothing is added then).
            SpanError: The spans are invalid (nothing is added then).
        """
        raise NotImplementedError

    takes_batches: ClassVar[bool] = False
    """Whether `append_batch` is implemented (streams); the writer appends documents one by one."""

    def append_batch(self, shard: ShardBuffer, records: Any, lengths: Any, where: str, first: int) -> int:
        """Add many records at once (one copy per buffer) and return how many; ``where`` is
        followed by a record number (``first`` is the first record's) in error messages.

        Raises:
            RecordError: The format refuses a record, or the lengths are wrong (nothing of the
                batch is added then).
        """
        raise NotImplementedError

    def finish(self, shard: ShardBuffer) -> None:
        """Add the files that describe the whole shard (indexes), before it is written."""

    def header(self, kind: FileKind, shard: ShardBuffer) -> tuple[int, int]:
        """``(bytes per item, item count)`` of ``shard``'s file of ``kind``, for its header."""
        itemsize = kind.itemsize or self.element_size
        nbytes = sum(map(len, shard.chunks[kind.name]))
        count = layout.item_count(
            kind, records=shard.records, tokens=shard.tokens, spans=shard.spans, nbytes=nbytes
        )
        return itemsize, count


class DocumentEncoder(ShardEncoder):
    """Documents: the format's bytes of each record back to back, and their offsets."""

    layout = DOCUMENTS

    def __init__(self, format: Format) -> None:
        super().__init__(format)
        if not isinstance(format, DocumentStorageFormat):
            raise TypeError(
                f"documents are encoded by a DocumentStorageFormat, got {type(format).__qualname__}"
            )
        self._encode = format.encode
        self._offsets = [0]

    def new_shard(self) -> ShardBuffer:
        self._offsets = [0]
        return super().new_shard()

    def append(self, shard: ShardBuffer, record: Any, spans: Sequence[Any] | None, where: str) -> None:
        data = _encoded(self._encode, record, where, "encode")
        offsets = self._offsets
        offsets.append(offsets[-1] + len(data))
        shard.add("data", bytes(data))

    def finish(self, shard: ShardBuffer) -> None:
        offsets = np.asarray(self._offsets, dtype=layout.OFFSET_DTYPE)
        shard.add("index", offsets.data.cast("B"))


class _RecordStarts(ShardEncoder):
    """What both stream encoders share: the record starts of the shard being filled (where each
    appended record's first token lies, shard-relative), kept as Python ints for single appends
    and as arrays for batches, in append order, and written as the ``starts`` file."""

    def __init__(self, format: Format) -> None:
        super().__init__(format)
        self._starts: list[int] = []  # single appends since the last batch
        self._start_arrays: list[np.ndarray] = []  # earlier starts, in order
        self._stream_format: StreamNumpyFormat = format  # type: ignore[assignment]

    def new_shard(self) -> ShardBuffer:
        self._starts = []
        self._start_arrays = []
        return super().new_shard()

    takes_batches = True

    def _elements_of_batch(
        self, records: Any, lengths: Any, where: str, first: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(elements, lengths)`` of a batch: a dict of flat arrays with ``lengths`` per record,
        or a sequence of records (dicts of 1-D arrays), joined with one copy per field. Flat
        arrays of exactly the format's one field come back uncopied (a view of the caller's
        array): the writer copies only what it keeps past the call (see `Writer.append_batch`)."""
        fmt = self._stream_format
        head = f"{where}{first}"
        if isinstance(records, Mapping):
            if lengths is None:
                raise RecordError(
                    f"{head}: a batch given as flat arrays needs lengths= (tokens per record); "
                    "or pass a list of records"
                )
            lens = np.asarray(lengths)
            if lens.ndim != 1 or (lens.size and (lens.dtype.kind not in "iu" or int(lens.min()) < 0)):
                raise RecordError(f"{head}: lengths must be a 1-D array of non-negative ints")
            last = f"{where}{first + max(len(lens) - 1, 0)}"
            elements = fmt.to_elements(records, f"{head}..{last.rsplit(' ', 1)[-1]}", copy=False)
            total = int(lens.sum())
            if total != len(elements):
                raise RecordError(
                    f"{head}..: lengths add up to {total} tokens but the fields hold "
                    f"{len(elements)}; give one length per record, summing to the fields' length"
                )
            return elements, lens.astype(np.int64, copy=False)
        if lengths is not None:
            raise RecordError(f"{head}: lengths= goes with a dict of flat arrays, not a list of records")
        records = list(records)
        exact: list[np.ndarray] = []  # one field, each record of exactly its dtype: one concatenate
        for record in records:
            values = fmt.exact_values(record)
            if values is None:
                break
            exact.append(values)
        else:
            lens = np.fromiter(map(len, exact), np.int64, len(exact))
            values = np.concatenate(exact) if exact else np.empty(0, fmt.dtype)
            return values.view(fmt.dtype), lens  # a new array: no copy needed
        lens = np.empty(len(records), np.int64)
        for field in fmt.fields:
            missing = [i for i, r in enumerate(records) if not isinstance(r, Mapping) or field not in r]
            if missing:
                fmt.to_elements(records[missing[0]], f"{where}{first + missing[0]}")  # names the cause
        joined: dict[str, np.ndarray] = {}
        for k, field in enumerate(fmt.fields):
            arrays = [np.asarray(r[field]) for r in records]
            if k == 0:
                lens[:] = [a.shape[0] if a.ndim == 1 else -1 for a in arrays]
            bad = [i for i, a in enumerate(arrays) if a.ndim != 1 or a.shape[0] != lens[i]]
            if bad:
                fmt.to_elements(records[bad[0]], f"{where}{first + bad[0]}")  # names the cause
            joined[field] = np.concatenate(arrays) if arrays else np.empty(0, fmt.dtype[field])
        extra = [i for i, r in enumerate(records) if len(r) != len(fmt.fields)]
        if extra:
            fmt.to_elements(records[extra[0]], f"{where}{first + extra[0]}")
        return fmt.to_elements(joined, f"{head}..{first + max(len(records) - 1, 0)}", copy=False), lens

    def append_batch(self, shard: ShardBuffer, records: Any, lengths: Any, where: str, first: int) -> int:
        elements, lens = self._elements_of_batch(records, lengths, where, first)
        self.add_elements(shard, elements, lens)
        return len(lens)

    def batch_elements(
        self, records: Any, lengths: Any, where: str, first: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """A batch checked and joined, nothing added yet: ``(elements, lengths)`` for
        `add_elements` (the writer adds them in parts that fill its shards).

        Raises:
            RecordError: The format refuses a record, or the lengths are wrong.
        """
        return self._elements_of_batch(records, lengths, where, first)

    def add_elements(self, shard: ShardBuffer, elements: np.ndarray, lens: np.ndarray) -> None:
        """Add records of ``lens`` tokens, whose elements are ``elements`` joined, to ``shard``."""
        if self._starts:
            self._start_arrays.append(np.asarray(self._starts, dtype=np.int64))
            self._starts = []
        starts = np.empty(len(lens), np.int64)
        if len(lens):
            starts[0] = 0
            np.cumsum(lens[:-1], out=starts[1:])
        self._start_arrays.append(starts + shard.tokens)
        shard.add("data", elements.data.cast("B"))
        shard.tokens += len(elements)

    def _finish_starts(self, shard: ShardBuffer) -> None:
        parts = [*self._start_arrays, np.asarray(self._starts, dtype=np.int64)]
        starts = np.concatenate(parts).astype(layout.RECORD_START_DTYPE)
        shard.chunks["starts"].append(starts.data.cast("B"))  # not counted in the shard's size


class StreamEncoder(_RecordStarts):
    """A stream: each record's structured elements back to back, and where each record starts."""

    layout = STREAM

    def __init__(self, format: Format) -> None:
        if not isinstance(format, StreamNumpyFormat):
            raise TypeError(f"streams are encoded by a StreamNumpyFormat, got {type(format).__qualname__}")
        super().__init__(format)
        self._to_elements = format.to_elements
        self.element_size = format.itemsize
        # A one-field stream's records of exactly its dtype (the common case, one `append` per
        # document) are copied into one buffer per shard, written as one chunk: one copy and no
        # array per record, one write per shard (see `pack_record`). The writer calls the two
        # itself for such records (no ``where`` is needed: they cannot be refused).
        self.exact_values = format.exact_values
        self.size_hint = 1 << 20  # bytes the first buffer of a shard holds (the writer sets it)
        self._pack = np.empty(0, np.uint8)
        self._view = self._pack.data  # _pack's bytes (slice assignment is cheaper here)
        self._packed = 0  # bytes in _pack
        self._sealed = 0  # bytes of _pack already handed to the shard as chunks

    def new_shard(self) -> ShardBuffer:
        self._pack = np.empty(0, np.uint8)
        self._view = self._pack.data
        self._packed = self._sealed = 0
        return super().new_shard()

    def append(self, shard: ShardBuffer, record: Any, spans: Sequence[Any] | None, where: str) -> None:
        values = self.exact_values(record)
        if values is not None:
            self.pack_record(shard, values)
            return
        elements = self._to_elements(record, where)
        self._seal(shard)
        self._starts.append(shard.tokens)
        shard.add("data", elements.data.cast("B"))
        shard.tokens += len(elements)

    def pack_record(self, shard: ShardBuffer, values: np.ndarray) -> None:
        """Copy one record of the single field's dtype into the shard's buffer."""
        n = values.nbytes
        end = self._packed + n
        if end > len(self._view):
            self._grow(n)
            end = self._packed + n
        try:
            self._view[self._packed : end] = values.data.cast("B")
        except TypeError:  # a strided view: memoryview casts only contiguous buffers
            self._pack[self._packed : end].view(values.dtype)[:] = values
        self._packed = end
        self._starts.append(shard.tokens)
        shard.tokens += len(values)
        shard.nbytes += n

    def _grow(self, need: int) -> None:
        """A larger buffer for what is not sealed yet plus ``need`` bytes (sealed chunks keep
        the old buffer alive until the shard is written)."""
        unsealed = self._pack[self._sealed : self._packed]
        size = max(self.size_hint, 2 * self._pack.size, len(unsealed) + need)
        fresh = np.empty(size, np.uint8)
        fresh[: len(unsealed)] = unsealed
        self._pack, self._packed, self._sealed = fresh, len(unsealed), 0
        self._view = fresh.data

    def _seal(self, shard: ShardBuffer) -> None:
        """Hand the buffer's bytes not yet handed over to the shard, as one chunk (already
        counted in its size), before anything else is added to its data."""
        if self._packed > self._sealed:
            shard.chunks["data"].append(self._pack[self._sealed : self._packed].data)
            self._sealed = self._packed

    def add_elements(self, shard: ShardBuffer, elements: np.ndarray, lens: np.ndarray) -> None:
        self._seal(shard)
        super().add_elements(shard, elements, lens)

    def finish(self, shard: ShardBuffer) -> None:
        self._seal(shard)
        self._finish_starts(shard)


class StreamWithMetaEncoder(_RecordStarts):
    """A stream plus annotations: elements, each span's encoded annotation, and per shard the
    span table and its directory."""

    layout = STREAM_WITH_META
    takes_spans = True

    def __init__(self, format: Format) -> None:
        if not isinstance(format, StreamWithMetaStorageFormat):
            raise TypeError(
                f"streams with metadata are encoded by a StreamWithMetaStorageFormat, got {type(format).__qualname__}"
            )
        super().__init__(format.stream_format)
        self._to_elements = format.stream_format.to_elements
        self._encode_meta = format.encode_meta
        self.element_size = format.stream_format.itemsize
        self._span_rows: list[tuple[int, int, int, int]] = []
        self._meta_size = 0

    def new_shard(self) -> ShardBuffer:
        self._span_rows = []
        self._meta_size = 0
        return super().new_shard()

    def append(self, shard: ShardBuffer, record: Any, spans: Sequence[Any] | None, where: str) -> None:
        elements = self._to_elements(record, where)
        # Encode every annotation before touching the shard buffer: a failure leaves no trace.
        checked, metas = self._checked(spans or [], len(elements), where)
        at = shard.tokens
        self._place(shard, at, checked, metas)
        self._starts.append(at)
        shard.add("data", elements.data.cast("B"))
        shard.tokens += len(elements)

    def _checked(self, spans: Sequence[Any], length: int, where: str) -> _Checked:
        """A record's spans checked and their annotations encoded, errors naming ``where`` and
        the span; nothing is added to a shard."""
        checked = check_spans(spans, length, where)
        metas = [
            bytes(_encoded(self._encode_meta, annotation, f"{where} span {j}", "encode_meta"))
            for j, (_, _, annotation) in enumerate(checked)
        ]
        return checked, metas

    def _place(self, shard: ShardBuffer, at: int, checked: list[Span], metas: list[bytes]) -> None:
        """A record's checked spans and encoded annotations into ``shard``, the record starting
        at token ``at`` of the shard."""
        size = self._meta_size
        for (start, stop, _), meta in zip(checked, metas):
            self._span_rows.append((at + start, at + stop, size, size + len(meta)))
            size += len(meta)
            shard.add("meta", meta)
        shard.spans += len(checked)
        self._meta_size = size

    def batch_spans(self, spans: Sequence[Any], lens: np.ndarray, where: str, first: int) -> list[_Checked]:
        """Each record's spans of a batch checked and their annotations encoded, nothing added
        yet (a refused span leaves the shard as it was): for `add_elements`.

        Raises:
            RecordError: ``spans`` is not one list per record, or an annotation's encoding fails.
            SpanError: A record's spans are invalid (the record is named).
        """
        if len(spans) != len(lens):
            raise RecordError(
                f"{where}{first}..: spans= holds {len(spans)} lists for {len(lens)} records; give "
                "one list (empty for none) per record"
            )
        out: list[_Checked] = []
        for k, (record_spans, length) in enumerate(zip(spans, lens.tolist())):
            if not record_spans:
                out.append(_NO_SPANS)
                continue
            try:  # the record's name is made only for an error (most batches have none)
                checked = check_spans(record_spans, length, "")
                metas = [bytes(_encoded(self._encode_meta, a, "", "encode_meta")) for _, _, a in checked]
            except (RecordError, SpanError):
                checked, metas = self._checked(
                    record_spans, length, f"{where}{first + k}"
                )  # raises, naming it
            out.append((checked, metas))
        return out

    def add_elements(
        self, shard: ShardBuffer, elements: np.ndarray, lens: np.ndarray, spans: Sequence[_Checked] = ()
    ) -> None:
        """`_RecordStarts.add_elements`, with each record's spans (from `batch_spans`; none
        when empty) placed at the record's start in the shard."""
        at = shard.tokens
        super().add_elements(shard, elements, lens)
        if not spans:
            return
        for (checked, metas), start in zip(spans, (at + np.cumsum(lens) - lens).tolist()):
            self._place(shard, start, checked, metas)

    def finish(self, shard: ShardBuffer) -> None:
        self._finish_starts(shard)
        table = np.array(self._span_rows, dtype=np.uint64).reshape(-1, 4)
        spans = np.empty(len(table), dtype=layout.SPAN_DTYPE)
        for col, name in enumerate(layout.SPAN_DTYPE.names or ()):
            spans[name] = table[:, col]
        shard.add("spans", spans.data.cast("B"))
        directory = layout.span_directory(spans, shard.tokens, self._meta_size)
        shard.add("span_dir", directory.data.cast("B"))


_Checked = tuple[list[Span], list[bytes]]  # a record's checked spans and encoded annotations
_NO_SPANS: _Checked = ([], [])


ENCODERS: dict[Layout, type[ShardEncoder]] = {
    cls.layout: cls for cls in (DocumentEncoder, StreamEncoder, StreamWithMetaEncoder)
}
"""The encoder class of each layout."""


def encoder_for(layout_name: Layout, format: Format) -> ShardEncoder:
    """A fresh encoder of records in ``format`` for shards of ``layout_name``.

    Raises:
        KeyError: ``layout_name`` is not a layout (see `guideloom.types.LAYOUTS`).
        TypeError: ``format`` is not of the kind the layout stores.
    """
    return ENCODERS[layout_name](format)


def _encoded(
    encode: Callable[[Any], Any], value: Any, where: str, method: str
) -> bytes | bytearray | memoryview:
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
