"""Streams with metadata: a stream format plus annotations mapped to token spans.

The token array is *stream data*; the separately encoded annotations are *document data*. A
span ``(start, stop, annotation)`` says that tokens ``[start, stop)`` share one stored
annotation. Subclasses decide how annotations become bytes (`encode_meta`,
`decode_meta`) and how a window and the spans overlapping it become one training sample
(`align`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from guideloom.errors import SpanError
from guideloom.formats.base import Format
from guideloom.formats.stream import StreamNumpyFormat

__all__ = ["AlignedBatch", "Span", "SpanBatch", "StreamWithMetaStorageFormat", "check_spans"]

Span = tuple[int, int, Any]


class StreamWithMetaStorageFormat(Format):
    """Base class for stream-with-metadata formats.

    Pass the stream format (the token fields) to ``__init__``; implement `encode_meta` and
    `decode_meta`; override `align` to shape samples. If your subclass has its own
    parameters, override `config` and include ``super().config()``.
    """

    def __init__(self, stream_format: StreamNumpyFormat) -> None:
        """A stream-with-metadata format over the given token fields.

        Args:
            stream_format: The per-token fields of the stream (e.g.
                `StreamNumpyFormat({"tokens": np.uint32})`).

        Raises:
            TypeError: `stream_format` is not a `StreamNumpyFormat`.
        """
        if not isinstance(stream_format, StreamNumpyFormat):
            raise TypeError(
                f"{type(self).__qualname__} wraps a StreamNumpyFormat, got {type(stream_format).__name__}"
            )
        self.stream_format = stream_format

    def config(self) -> dict[str, Any]:
        """The stream's fields, as recorded in the manifest; a subclass with parameters of its
        own adds them to ``super().config()``.

        Returns:
            `{"stream": stream_format.config()}`.
        """
        return {"stream": self.stream_format.config()}

    def encode_meta(self, annotation: Any) -> bytes:
        """Turn one annotation into bytes.

        The writer calls it once per span; any exception it raises, or a result that is not
        bytes, reaches the caller of `append` as a `RecordError`.

        Args:
            annotation: The third item of a span passed to `writer.append`.

        Returns:
            The annotation's bytes.

        Raises:
            NotImplementedError: A subclass did not implement it.
        """
        raise NotImplementedError(f"{type(self).__qualname__} must implement encode_meta")

    def decode_meta(self, data: bytes | memoryview) -> Any:
        """Turn the bytes of one annotation back into the annotation.

        Args:
            data: Exactly the bytes `encode_meta` returned (possibly as a `memoryview`).

        Returns:
            An annotation equal to the one encoded.

        Raises:
            NotImplementedError: A subclass did not implement it.
        """
        raise NotImplementedError(f"{type(self).__qualname__} must implement decode_meta")

    def decode_meta_batch(self, data: memoryview, starts: list[int], stops: list[int]) -> list[Any]:
        """Decode the annotations of a whole batch: annotation ``k`` is ``data[starts[k]:stops[k]]``.

        Readers call this once per batch (or group of batches read together). The default calls
        `decode_meta` per annotation; override it where annotations can be decoded with
        whole-array operations, for example fixed-size records with one ``np.frombuffer``.

        Args:
            data: The bytes of the batch's annotations, joined.
            starts: Where each annotation begins in ``data``.
            stops: Where each ends (exclusive).

        Returns:
            One annotation per ``(start, stop)``, in order, as `decode_meta` returns them.
        """
        decode = self.decode_meta
        return [decode(data[a:b]) for a, b in zip(starts, stops)]

    def align(self, window: dict[str, np.ndarray], spans: list[Span]) -> Any:
        """Build one sample from a window and the spans that overlap it.

        ``window`` maps each stream field to an array of ``sequence_length`` values. ``spans``
        are the annotated spans overlapping the window, clipped to it, in window coordinates
        (``0 <= start < stop <= sequence_length``), sorted. The default returns the window's
        fields plus ``"spans"``.

        Args:
            window: `{field: array of sequence_length values}`.
            spans: `(start, stop, annotation)` triples in tokens of the window, sorted and
                non-overlapping; annotations as `decode_meta` returns them.

        Returns:
            One training sample; the default is `{**window, "spans": spans}`.
        """
        return {**window, "spans": spans}

    def align_batch(self, windows: dict[str, np.ndarray], spans: list[list[Span]]) -> list[Any]:
        """Build the samples of a whole batch; readers call this, once per batch.

        ``windows`` maps each stream field to an array of shape ``(batch, sequence_length)``;
        ``spans[row]`` are row ``row``'s spans, as `align` takes them. The default calls
        `align` once per row, so a subclass that only overrides `align` keeps working;
        override this instead to shape a batch with whole-array operations.

        Args:
            windows: `{field: array of shape (batch, sequence_length)}`.
            spans: One list of `(start, stop, annotation)` triples per row, in window
                coordinates.

        Returns:
            One sample per row, in row order.
        """
        if type(self).align is StreamWithMetaStorageFormat.align:
            return AlignedBatch(windows, spans)
        return [
            self.align({name: values[row] for name, values in windows.items()}, row_spans)
            for row, row_spans in enumerate(spans)
        ]


class AlignedBatch(list[Any]):
    """What the default `align_batch` returns: the samples `align` would build (one
    ``{**window, "spans": spans}`` dict per row), together with the batch's own arrays.

    It is a plain list of those samples to every reader; the default collate sees the arrays
    and turns each field into one tensor without stacking the rows back together."""

    def __init__(self, windows: dict[str, np.ndarray], spans: list[list[Span]]) -> None:
        super().__init__(
            {**{n: v[row] for n, v in windows.items()}, "spans": s} for row, s in enumerate(spans)
        )
        self.windows = windows
        self.spans = spans

    def __getitem__(self, key: Any) -> Any:
        """A slice of rows is an `AlignedBatch` of those rows (the loader cuts a group of
        batches read together this way), so each batch keeps its arrays; an int is a sample."""
        if not isinstance(key, slice):
            return list.__getitem__(self, key)
        out = AlignedBatch.__new__(AlignedBatch)
        list.__init__(out, list.__getitem__(self, key))
        out.windows = {name: values[key] for name, values in self.windows.items()}
        out.spans = self.spans[key]
        return out


class SpanBatch:
    """A batch of a stream with metadata before its samples are built: ``windows`` (``{field:
    (batch, sequence_length) array}``) and ``spans`` (each row's spans, as `align` takes them).

    Readers hand it to the default collate when the format keeps the default `align` (see
    ``StreamWithMetaDataset.read_aligned``): the collate needs the arrays and the span lists, not
    a dict per row. Slicing gives the rows' `SpanBatch` (the loader cuts a group of batches read
    together this way)."""

    __slots__ = ("spans", "windows")

    def __init__(self, windows: dict[str, np.ndarray], spans: list[list[Span]]) -> None:
        self.windows = windows
        self.spans = spans

    def __len__(self) -> int:
        return len(self.spans)

    def __getitem__(self, rows: slice) -> SpanBatch:
        return SpanBatch({name: values[rows] for name, values in self.windows.items()}, self.spans[rows])


def check_spans(spans: Sequence[Any], length: int, where: str) -> list[Span]:
    """Validate record-relative spans: ints, ``0 <= start < stop <= length``, sorted, disjoint."""
    out: list[Span] = []
    prev_stop = 0
    for j, span in enumerate(spans):
        try:
            start, stop, annotation = span
        except (TypeError, ValueError) as err:
            raise SpanError(f"{where}: span {j} is not a (start, stop, annotation) triple") from err
        if not isinstance(start, (int, np.integer)) or not isinstance(stop, (int, np.integer)):
            raise SpanError(f"{where}: span {j} ({start!r}, {stop!r}) needs integer bounds")
        start, stop = int(start), int(stop)
        if not 0 <= start < stop <= length:
            raise SpanError(
                f"{where}: span {j} [{start}, {stop}) must satisfy 0 <= start < stop <= {length} "
                "(the record's token count); spans are record-relative and non-empty"
            )
        if start < prev_stop:
            raise SpanError(
                f"{where}: span {j} [{start}, {stop}) overlaps or comes before the previous span "
                f"(which ends at {prev_stop}); pass spans sorted by start and non-overlapping"
            )
        prev_stop = stop
        out.append((start, stop, annotation))
    return out
