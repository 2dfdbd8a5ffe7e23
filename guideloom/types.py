"""Every seam of GuideLoom, named once: what each layer relies on from the one below it.

A contributor who wants to extend GuideLoom reads this file. Each protocol says what an
implementation must provide; the classes that implement them today are named beside it.
Protocols are structural (`typing.Protocol`): an implementation does not inherit from them.
They are checked by mypy, and the ones marked ``runtime_checkable`` can be tested with
``isinstance``.

=====================  =====================================  ====================================
seam                   who relies on it                       implemented by
=====================  =====================================  ====================================
`FileTable`            io's shard readers                     `guideloom.manifest.ShardTable`
`ShardReader`          the views (documents, windows, spans)  `guideloom.io.shards` (local, remote)
`DatasetView`          the loader and mixtures                the three dataset views, mixtures
`StreamView`           boundaries, trace (record starts)      the two stream views, their wrappers
`MixtureView`          the loader, trace (per-source plans)   `loading.mixture_dataset`
`Tokenizer`            ingestion                              `guideloom.workers.tokenizer`
`InputReader`          ingestion (planning, parts)            `guideloom.workers.readers`
=====================  =====================================  ====================================

Code outside a view's own module asks a view only what these protocols declare: no
``getattr``/``hasattr`` probes and no ``isinstance`` on a concrete view class
(`tests/test_view_contracts.py` fails on either, as `tests/test_import_graph.py` fails on an
upward import). A view that wraps another subclasses `guideloom.storage.wrapped.WrappedView`,
which forwards exactly the members declared here.

The extension points that are classes to subclass rather than protocols live with their layer:

* formats (records <-> bytes): `guideloom.formats.DocumentStorageFormat`,
  `guideloom.formats.StreamNumpyFormat`, `guideloom.formats.StreamWithMetaStorageFormat`;
* storage backends: any fsspec filesystem (``s3://``, ``gs://``, ``az://``, ``memory://``, your
  own ``fsspec.AbstractFileSystem`` registered with ``fsspec.register_implementation``);
* plug-ins chosen by name (tokenizers, input readers, formats): `guideloom.registry`.

Units: byte offsets and sizes are in bytes and half-open (``[start, stop)``), counted from the
start of the file (its header included); sample indexes count windows or documents.

This module imports nothing of GuideLoom's but the vocabulary below, so every layer may import it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, NamedTuple, Protocol, cast, runtime_checkable

import numpy as np

__all__ = [
    "DOCUMENTS",
    "LAYOUTS",
    "LAYOUT_ALIASES",
    "STREAM",
    "STREAM_WITH_META",
    "BadRecord",
    "ByteRequest",
    "Cut",
    "DatasetView",
    "Document",
    "FileTable",
    "GroupReader",
    "InputFileInfo",
    "InputReader",
    "InputRecord",
    "Layout",
    "MixtureView",
    "ReadOptions",
    "SegmentInfo",
    "ShardReader",
    "StreamView",
    "Tokenizer",
    "as_mixture",
    "layout_named",
    "stream_view",
]

Layout = Literal["documents", "stream", "stream_with_meta"]
"""The three storage layouts (`DocumentStorage`, `StreamStorage`, `StreamWithMetaStorage`)."""

DOCUMENTS: Final = "documents"
STREAM: Final = "stream"
STREAM_WITH_META: Final = "stream_with_meta"
LAYOUTS: tuple[Layout, ...] = (DOCUMENTS, STREAM, STREAM_WITH_META)
"""Every layout, spelled once: compare a layout with these constants, never a string literal."""

LAYOUT_ALIASES: dict[str, Layout] = {"document": DOCUMENTS, "stream-with-meta": STREAM_WITH_META}
"""Other spellings accepted where a user names a layout (``guideloom ingest --layout document``,
a job file's ``layout: stream-with-meta``); `layout_named` turns them into the one spelling."""


def layout_named(name: str) -> Layout:
    """The layout ``name`` spells (one of `LAYOUTS`, or an alias of `LAYOUT_ALIASES`).

    Raises:
        ValueError: ``name`` is no layout; the message lists the names accepted.
    """
    for layout in LAYOUTS:
        if name == layout:
            return layout
    if name in LAYOUT_ALIASES:
        return LAYOUT_ALIASES[name]
    accepted = ", ".join([*LAYOUTS, *LAYOUT_ALIASES])
    raise ValueError(f"unknown layout {name!r}: use one of {accepted}")


# -- files and bytes (io) ---------------------------------------------------------------------


class FileTable(Protocol):
    """Where the files of a dataset's shards are, and how large the manifest says they are.

    ``file`` is a file name of the layout (``"data"``, ``"index"``, ``"meta"``, ``"spans"``,
    ``"span_dir"``, ...: the keys of `guideloom.layout.FILES`); ``shard`` is a row of the
    manifest's shard table. Readers check every file against `size` before using its bytes.
    """

    def __len__(self) -> int:
        """Shards in the table."""
        ...

    def path(self, shard: int, file: str) -> str:
        """Path of shard ``shard``'s file ``file``, relative to the dataset root."""
        ...

    def size(self, shard: int, file: str) -> int:
        """Bytes the manifest records for that file (header included)."""
        ...

    def shard_name(self, shard: int) -> str:
        """How messages name the shard (part, index and data file path)."""
        ...


class ByteRequest(NamedTuple):
    """Bytes ``[start, stop)`` of shard ``shard``'s file ``file`` (offsets from the file's start).

    Readers take any ``(shard, file, start, stop)`` tuple: the hot paths build plain tuples (a
    named tuple costs about 0.2 µs to make, a few percent of a shuffled window's read).
    """

    shard: int
    file: str
    start: int
    stop: int


@runtime_checkable
class ShardReader(Protocol):
    """Byte access to the shard files of one dataset, the same way on every backend.

    On local disk: positioned reads on cached descriptors (``preadv`` straight into the
    caller's buffers). Elsewhere: the requests of one call merged where close and fetched with
    concurrent range requests. Every file is checked against the `FileTable`'s size (a short
    read, or a file of another size where the backend reports it, is a
    `guideloom.errors.ShardCorruptError` naming the shard; a missing file a
    `guideloom.errors.ShardNotFoundError`). Picklable and fork-safe: a copy in another process
    opens its own descriptors and connections. `guideloom.io.shards.open_shard_reader` picks
    the implementation for a location, once.

    A call is one round of I/O: callers put every request of a batch into one call (a request
    per run of back-to-back bytes, not per sample), so a remote batch costs one round trip.
    """

    @property
    def local(self) -> bool:
        """Whether the files are on local disk (positioned reads) rather than behind requests."""
        ...

    @property
    def table(self) -> FileTable:
        """The files and the sizes every read is checked against."""
        ...

    def map_file(self, shard: int, file: str) -> memoryview | None:
        """A read-only memory map of shard ``shard``'s whole file ``file`` (size-checked like a
        read), where the reader's files are on local disk; None elsewhere (read it instead).
        For small index files read many times at random (record starts): mapped pages stay
        resident in the process, so data files are read, never mapped."""
        ...

    def read(self, requests: Sequence[tuple[int, str, int, int]]) -> list[bytes]:
        """The bytes of each request (a `ByteRequest` or a plain tuple in its order), in request
        order. Bytes, not arrays: a positioned read returns them as they are, decoders take
        them, and ``np.frombuffer`` makes an array of them without a copy where one is wanted."""
        ...

    def read_iter(self, requests: Sequence[tuple[int, str, int, int]]) -> Iterator[bytes]:
        """`read`, handed out one request at a time: on local disk each read happens when the
        caller takes its bytes (decoded at once, they are still in the CPU cache, and a batch's
        bytes are never all held together); elsewhere the whole round is fetched first."""
        ...

    def read_into(
        self, requests: Sequence[tuple[int, str, int, int]], buffers: Sequence[Sequence[memoryview]]
    ) -> None:
        """Fill ``buffers[k]`` (writable 1-D byte memoryviews, format ``"B"``, together
        ``stop - start`` bytes, filled in order) with request ``k``'s bytes: on local disk one
        ``preadv`` per request straight into them, no copy."""
        ...

    def close(self) -> None:
        """Release descriptors and connections (later reads open them again)."""
        ...


# -- what the loader reads --------------------------------------------------------------------


@runtime_checkable
class DatasetView(Protocol):
    """Indexed, batched samples of one dataset (or of a mixture): what the loader reads.

    Implemented by `guideloom.DocumentDataset`, `guideloom.StreamDataset`,
    `guideloom.StreamWithMetaDataset` and a mixture's `guideloom.loading.mixture.MixtureDataset`;
    `guideloom.storage.open_view` builds the one a storage needs.
    """

    @property
    def layout(self) -> Layout:
        """The layout of the samples, which picks the default collate."""
        ...

    @property
    def url(self) -> str:
        """What messages name (a redacted URL, or the mixture's sources)."""
        ...

    @property
    def fingerprint(self) -> str:
        """The content's identity (the manifest's fingerprint, or the mixture's): what a loader
        state is checked against, independent of the URL."""
        ...

    @property
    def sequence_length(self) -> int | None:
        """Tokens per window; None for documents."""
        ...

    @property
    def sample_bytes(self) -> int:
        """Bytes one sample takes in storage, on average (sizes the loader's read-ahead)."""
        ...

    @property
    def storage(self) -> Any:
        """The `guideloom.storage.Storage` read (its ``current_snapshot`` is the snapshot the
        view reads); a mixture's is its first source's, which carries the shared layout and
        format (each source's is on `MixtureView.views`)."""
        ...

    @property
    def mixture(self) -> Any:
        """The `guideloom.Mixture` whose sources this view reads (it is then a `MixtureView`:
        see `as_mixture`), or None for one dataset's view (a wrapper of any view included)."""
        ...

    def __len__(self) -> int:
        """Samples: windows or documents."""
        ...

    def __getitem__(self, index: int) -> Any:
        """One sample (negative indexes count from the end; out of range is `IndexError`)."""
        ...

    def __getitems__(self, indexes: Sequence[int]) -> list[Any]:
        """Samples ``indexes``, read as one batch (one round of I/O)."""
        ...

    def read_batch(self, indexes: Sequence[int]) -> Any:
        """Samples ``indexes`` as the layout's default collate takes them, in one read: streams
        ``{field: (batch, sequence_length) array}``; streams with metadata a
        `guideloom.formats.meta.SpanBatch` (or what the format's ``align_batch`` returns);
        documents the list of records. Slicing the result by rows (a ``dict`` per field,
        otherwise ``[lo:hi]``) gives the batches of a group read together."""
        ...


class StreamView(DatasetView, Protocol):
    """A view of one stored stream, plain or with metadata (``layout`` is ``"stream"`` or
    ``"stream_with_meta"`` and it is not a mixture): what marking document boundaries and
    tracing records ask of it. `guideloom.StreamDataset`, `guideloom.StreamWithMetaDataset`,
    and a `guideloom.storage.wrapped.WrappedView` around either."""

    @property
    def manifest(self) -> Any:
        """The committed `guideloom.manifest.Manifest` it reads (``metadata``, ``shard_table``)."""
        ...

    @property
    def stream_format(self) -> Any:
        """The `guideloom.formats.StreamNumpyFormat` of the stream data (``fields``, ``dtype``)."""
        ...

    @property
    def has_record_starts(self) -> bool:
        """Whether the dataset stores where each appended record starts (older ones do not)."""
        ...

    @property
    def reader(self) -> ShardReader:
        """The shard reader every read of the view goes through (its index files too)."""
        ...

    def record_starts_batch(self, indexes: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where records start in windows ``indexes``: ``(positions, counts)``, int64, the
        positions (within a window) of every window in order, and how many each has."""
        ...

    def pieces(self, window: int) -> list[tuple[int, int, int, int]]:
        """Where window ``window``'s elements are stored: ``(shard, start, stop, offset)`` per
        shard it touches, elements ``[start, stop)`` of that shard being the window's from
        ``offset`` on (times the format's ``itemsize``, after the shard header: its bytes)."""
        ...


@runtime_checkable
class GroupReader(Protocol):
    """A view that reads several batches with one read and hands them back batch by batch,
    doing per-batch work on each (`guideloom.loading.boundaries.BoundaryView` marks documents
    batch by batch, where arrays stay in the CPU caches); other views' groups are read whole
    and sliced."""

    def read_batches(self, batches: Sequence[Sequence[int]]) -> list[Any]:
        """`DatasetView.read_batch` of each of ``batches``, fetched in one read."""
        ...


class MixtureView(DatasetView, Protocol):
    """The sources of a `guideloom.Mixture` read as one view
    (`guideloom.loading.mixture_dataset.MixtureDataset`): index ``offset_i + j`` is sample ``j``
    of source ``i``."""

    views: list[Any]
    """Each source's own view (a `DatasetView`), in the mixture's order."""
    plan: Any
    """The `guideloom.loading.mixture_plan.MixturePlan`: epoch length, per-source sizes."""
    mixture: Any
    """The `guideloom.Mixture` it reads (names, storages, weights)."""
    marks: Any
    """`guideloom.loading.boundaries.MixtureMarks` that add ``position_ids`` to its reads, or None."""
    sourced: bool
    """Whether its reads also say each row's source and sample (``from_storage(sources=True)``)."""

    def epoch_order(self, shuffle: Any, seed: int, epoch: int) -> Any:
        """The order of one epoch (a `guideloom.loading.mixture_order.MixtureOrder`)."""
        ...

    def split(self, indexes: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """``(source, local)`` of mixture indexes, int64: each one's source and its index there."""
        ...


def stream_view(view: DatasetView) -> StreamView | None:
    """``view`` as a `StreamView` when it is one stored stream; None for documents and mixtures."""
    if view.layout == DOCUMENTS or view.mixture is not None:
        return None
    return cast(StreamView, view)  # the layout says it: see StreamView


def as_mixture(view: DatasetView) -> MixtureView | None:
    """``view`` as a `MixtureView` when it reads a mixture's sources, else None. (An attribute
    read, not a runtime protocol check: those cost ~0.1 ms, and some callers run per pass.)"""
    return cast(MixtureView, view) if view.mixture is not None else None


# -- ingestion ---------------------------------------------------------------------------------


@runtime_checkable
class Tokenizer(Protocol):
    """Text to token ids, for ingestion. Picklable: Ray sends it to every task.

    Built-in: ``bytes``, ``hf:PATH`` and ``tiktoken:NAME`` (`guideloom.workers.tokenizer`);
    more by name through `guideloom.registry` (group ``guideloom.tokenizers``), or any object
    with these members passed as ``ingest_dataset(tokenizer=obj)``. A tokenizer that can say
    which characters each token came from also has ``encode_batch_with_offsets`` (see there).
    """

    spec: str
    """How the manifest names it (``"hf:/models/x/tokenizer.json"``, or a name of your own)."""
    vocab_size: int
    """Ids are ``0 .. vocab_size - 1``; the stored token dtype is the smallest that holds them."""
    eos_id: int | None
    """The end-of-document id appended after each document (None: it has none)."""

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Token ids of each text as an integer array, no special tokens added."""
        ...

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (special tokens shown by name)."""
        ...

    def describe(self) -> dict[str, Any]:
        """What identifies it in the manifest and in a job's identity: at least ``spec``,
        ``vocab_size``, ``eos_id`` and a hash of what defines the vocabulary."""
        ...


# -- input readers (ingestion) ----------------------------------------------------------------
#
# An input reader is one *kind* of input file (``jsonl``, ``parquet``, ``text``: the values of
# ``--input-format``). Planning asks it how a file is cut into segments; a part asks it for the
# records of one segment. Built-in kinds live in `guideloom.workers.readers`; a user's package
# adds one by name through `guideloom.registry` (group ``guideloom.input_readers``).


class InputFileInfo(Protocol):
    """One input file as planning found it (`guideloom.workers.sources.InputFile`)."""

    @property
    def url(self) -> str:
        """A local path or an fsspec URL (credentials included: never show it unredacted)."""
        ...

    @property
    def size(self) -> int:
        """Bytes as stored (compressed, when it is)."""
        ...

    @property
    def kind(self) -> str:
        """The name of its input reader (``"jsonl"``, ...)."""
        ...

    @property
    def compression(self) -> str | None:
        """``"gzip"``, ``"zstd"`` (from the name's suffix) or None."""
        ...


class SegmentInfo(Protocol):
    """A range of one input file that one part reads (`guideloom.workers.sources.Segment`)."""

    @property
    def start(self) -> int:
        """First unit of the range, in the reader's unit (bytes, row groups, ...)."""
        ...

    @property
    def end(self) -> int:
        """End of the range (exclusive), in the same unit."""
        ...

    @property
    def whole(self) -> bool:
        """True: the whole file, whatever ``start`` and ``end`` say (an unsplittable file)."""
        ...


class Cut(NamedTuple):
    """One segment of a file as its reader cuts it: units ``[start, end)`` (or the ``whole``
    file), standing for ``weight`` input bytes (as stored) when segments are packed into parts."""

    start: int
    end: int
    whole: bool
    weight: int


@dataclass(frozen=True)
class ReadOptions:
    """What a job tells every reader (the job file's keys of the same names).

    ``text_field`` names the field that holds a record's text, ``passthrough`` the fields a
    document keeps beside its tokens (a reader that can read only some fields reads these);
    ``text_per_line`` says whether a plain text file is a document per line (else one per file);
    ``storage_options`` are the fsspec options for the inputs; ``all_fields`` asks a reader that
    can read only some fields for every field (a transform sees the whole record);
    ``passthrough_defaults`` gives the value a passthrough field takes in a record without it.
    """

    text_field: str = "text"
    text_per_line: bool = False
    passthrough: tuple[str, ...] = ()
    storage_options: dict[str, Any] = field(default_factory=dict)
    all_fields: bool = False
    passthrough_defaults: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class InputRecord:
    """A record as read, before it becomes what is tokenized: its fields and where it is.

    ``line`` is 1-based when known; a segment that starts mid-file knows only ``offset``, the
    byte offset of the line's start (``guideloom.workers.sources.line_number`` turns it into a
    line for a message); ``row`` counts the rows of a table, 1-based.
    """

    data: dict[str, Any]
    line: int | None = None
    offset: int | None = None
    row: int | None = None


@dataclass(frozen=True)
class Document:
    """What the stream and document layouts tokenize: a text and the passthrough fields kept."""

    text: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BadRecord:
    """A record that cannot be used: ``reason`` is a short key counted per file (``skip``), and
    ``detail`` says what is wrong; where it is as in `InputRecord`."""

    reason: str
    detail: str
    line: int | None = None
    offset: int | None = None
    row: int | None = None


@runtime_checkable
class InputReader(Protocol):
    """One kind of input file: how planning cuts a file, and how a part reads one segment.

    Registered by name (``INPUT_READERS.register("csv", CsvReader())`` in
    `guideloom.workers.readers`, or an entry point in the group ``guideloom.input_readers``
    whose object is the reader). Readers are stateless and picklable: planning calls `cut` in
    the driver, Ray tasks call `read` on the workers, and a name must resolve there too.

    The contract that makes ingestion deterministic: for the same file and options, `cut`
    returns the same cuts, and the segments of a file, read one after another, yield every
    record of the file exactly once, in file order, whatever the cut points.
    """

    suffixes: tuple[str, ...]
    """File-name endings (after a ``.gz``/``.zst`` suffix is removed) that choose this reader
    under ``input_format: auto``, such as ``(".jsonl", ".ndjson")``; lower case."""
    reads_to_cut: bool
    """Whether `cut` reads the file (a Parquet footer): planning then calls it concurrently."""

    def cut(self, file: InputFileInfo, part_size: int, options: ReadOptions) -> list[Cut]:
        """The segments of ``file``, in order, each about ``part_size`` input bytes or less
        (a file that cannot be split, such as a compressed one: one ``whole`` cut)."""
        ...

    def read(
        self, file: InputFileInfo, segment: SegmentInfo, options: ReadOptions
    ) -> Iterator[InputRecord | Document | BadRecord]:
        """The items of one segment, in file order: an `InputRecord` for a record whose text is
        picked from its fields afterwards (``text_field``), a `Document` for one that is already
        a text (a plain text line), a `BadRecord` for one that cannot be either. A segment that
        cannot be read at all (a truncated gzip stream) raises `guideloom.errors.IngestError`
        naming the file."""
        ...
