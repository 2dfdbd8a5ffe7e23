"""Write token documents as a Megatron ``.bin``/``.idx`` pair that megatron-core's
``IndexedDataset`` opens (and GuideLoom reads in place): `write_megatron`, `MegatronWriter`,
and `export_megatron` of a whole GuideLoom dataset (a stream's records, or documents).

The layout is megatron-core's (``megatron/core/datasets/indexed_dataset.py``, see
`guideloom.storage.foreign.layouts`): one sequence per document, document indices ``0 .. N``, no
modes. The ``.bin`` is written as the documents come; the ``.idx`` after it, from the lengths
kept in memory (12 bytes a document until it is written, 20 in the file).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import fsspec
import numpy as np

from guideloom.storage.foreign.layouts import MEGATRON_DTYPES, MEGATRON_HEADER, MEGATRON_MAGIC

__all__ = ["MegatronWriter", "export_megatron", "megatron_dtype_for", "write_megatron"]

_CODES = {dtype: code for code, dtype in MEGATRON_DTYPES.items()}
_INDEX_CHUNK = 1 << 20  # sequences per write of the .idx columns
_DOCUMENT_BATCH = 1024  # documents read per batch by `export_megatron`


def megatron_dtype_for(dtype: Any) -> np.dtype:
    """The Megatron token dtype that holds every value of ``dtype``: itself where megatron-core
    defines it; ``uint32`` as ``int32`` (megatron-core has no ``uint32``; values are checked as
    they are written) and ``uint64`` as ``int64``.

    Args:
        dtype: A NumPy integer or float dtype.

    Returns:
        One of megatron-core's dtypes.

    Raises:
        ValueError: No Megatron dtype fits (``float16``, strings, ...).
    """
    dt = np.dtype(dtype)
    wider: dict[np.dtype, np.dtype] = {
        np.dtype(np.uint32): np.dtype(np.int32),
        np.dtype(np.uint64): np.dtype(np.int64),
    }
    dt = wider.get(dt, dt)
    if dt not in _CODES:
        raise ValueError(
            f"megatron-core stores no {dt.name} tokens; pick one of "
            + ", ".join(d.name for d in MEGATRON_DTYPES.values())
        )
    return dt


class MegatronWriter:
    """Writes ``PREFIX.bin`` as documents are added and ``PREFIX.idx`` on `close`.

    Args:
        prefix: Local path or fsspec URL, without suffix.
        dtype: The token dtype (one megatron-core defines). Values that do not fit it are an error.
        storage_options: fsspec options for a remote ``prefix``.

    Raises:
        ValueError: ``dtype`` is not one megatron-core defines.
    """

    def __init__(
        self,
        prefix: str | os.PathLike[str],
        dtype: Any = np.uint16,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.dtype = np.dtype(dtype)
        self._code = _CODES.get(self.dtype)
        if self._code is None:
            raise ValueError(
                f"megatron-core stores no {self.dtype.name} tokens; pick one of "
                + ", ".join(d.name for d in MEGATRON_DTYPES.values())
            )
        self.prefix = os.fspath(prefix)
        self._options = dict(storage_options or {})
        self._bin = fsspec.open(self.prefix + ".bin", "wb", **self._options).open()
        self._lengths: list[np.ndarray] = []
        self.documents = 0
        self.tokens = 0

    def add(self, tokens: Any) -> None:
        """Add one document.

        Args:
            tokens: Its token ids (a 1-D array or list).
        """
        arr = np.asarray(tokens).reshape(-1)
        self.add_batch(arr, np.asarray([arr.size], dtype=np.int64))

    def add_batch(self, flat: np.ndarray, lengths: np.ndarray) -> None:
        """Add many documents: their tokens joined end to end, and each one's token count.

        Args:
            flat: The documents' token ids, joined (1-D).
            lengths: Tokens of each document (non-negative, summing to ``len(flat)``).

        Raises:
            ValueError: A token does not fit the dtype, a document is longer than 2**31 - 1
                tokens (Megatron's lengths are ``int32``), or ``lengths`` does not add up.
        """
        lengths = np.asarray(lengths, dtype=np.int64)
        flat = np.asarray(flat).reshape(-1)
        if int(lengths.sum()) != flat.size or (lengths < 0).any():
            raise ValueError(f"lengths add up to {int(lengths.sum())}, but {flat.size} tokens were given")
        if len(lengths) and int(lengths.max()) > np.iinfo(np.int32).max:
            raise ValueError(
                f"document {self.documents + int(lengths.argmax())} has {int(lengths.max())} tokens, more "
                "than a Megatron index records (2**31 - 1): split it"
            )
        cast = flat.astype(self.dtype)
        if flat.size and flat.dtype != self.dtype and not np.array_equal(cast, flat):
            bad = int(np.flatnonzero(cast != flat)[0])
            doc = self.documents + int(np.searchsorted(np.cumsum(lengths), bad, side="right"))
            raise ValueError(
                f"document {doc} has token ids that do not fit {self.dtype.name} (e.g. {flat[bad]}): "
                "pick a wider dtype"
            )
        self._bin.write(np.ascontiguousarray(cast, dtype=self.dtype.newbyteorder("<")).tobytes())
        self._lengths.append(lengths)
        self.documents += len(lengths)
        self.tokens += flat.size

    def close(self) -> tuple[int, int]:
        """Finish the ``.bin`` and write the ``.idx``.

        Returns:
            ``(documents, tokens)`` written.
        """
        self._bin.close()
        n = self.documents
        lengths = np.concatenate(self._lengths) if self._lengths else np.empty(0, np.int64)
        self._lengths = []
        size = self.dtype.itemsize
        with fsspec.open(self.prefix + ".idx", "wb", **self._options) as out:
            out.write(MEGATRON_HEADER.pack(MEGATRON_MAGIC, 1, self._code, n, n + 1))
            for a in range(0, n, _INDEX_CHUNK):
                out.write(lengths[a : a + _INDEX_CHUNK].astype("<i4").tobytes())
            before = 0
            for a in range(0, n, _INDEX_CHUNK):
                part = lengths[a : a + _INDEX_CHUNK] * size
                ends = np.cumsum(part) + before
                out.write((ends - part).astype("<i8").tobytes())
                before = int(ends[-1])
            for a in range(0, n + 1, _INDEX_CHUNK):
                out.write(np.arange(a, min(a + _INDEX_CHUNK, n + 1), dtype="<i8").tobytes())
        return n, self.tokens

    def abort(self) -> None:
        """Stop without writing the ``.idx`` (a ``.bin`` without it is no Megatron dataset)."""
        self._bin.close()

    def __enter__(self) -> MegatronWriter:
        return self

    def __exit__(self, kind: Any, value: Any, tb: Any) -> None:
        if kind is None:
            self.close()
        else:
            self.abort()


def write_megatron(
    prefix: str | os.PathLike[str],
    documents: Iterable[Any],
    dtype: Any = np.uint16,
    *,
    storage_options: Mapping[str, Any] | None = None,
) -> tuple[int, int]:
    """Write ``documents`` (1-D arrays or lists of token ids) to ``PREFIX.bin`` and ``PREFIX.idx``.

    Args:
        prefix: Local path or fsspec URL, without suffix.
        documents: Token id arrays, one per document, in order.
        dtype: The token dtype (one megatron-core defines: uint8, int8, int16, int32, int64,
            float32, float64, uint16). Values that do not fit it are an error.
        storage_options: fsspec options for a remote ``prefix``.

    Returns:
        ``(documents, tokens)`` written.

    Raises:
        ValueError: ``dtype`` is not one megatron-core defines, or a token does not fit it.
    """
    with MegatronWriter(prefix, dtype, storage_options) as writer:
        for doc in documents:
            writer.add(doc)
    return writer.documents, writer.tokens


def export_megatron(
    storage: Any,
    prefix: str | os.PathLike[str],
    *,
    field: str = "tokens",
    dtype: Any = None,
    eos_id: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> tuple[int, int]:
    """Write a GuideLoom dataset as a Megatron pair ``PREFIX.bin`` / ``PREFIX.idx``: one
    Megatron document per record.

    A stream's records are its documents as written (its record starts; for a stream without
    them, the text after each ``eos_id``); a document dataset's records are its documents,
    each a 1-D array of token ids or a mapping holding one under ``field``.

    Args:
        storage: A `StreamStorage` or `DocumentStorage` (``guideloom.open(url)``), or token files
            opened in place.
        prefix: Where to write: local path or fsspec URL, without suffix.
        field: The stream field (or document key) holding the token ids.
        dtype: The Megatron token dtype; None: the field's (see `megatron_dtype_for`), for
            documents the first document's.
        eos_id: For a stream without record starts: documents end after this id.
        storage_options: fsspec options for a remote ``prefix``.

    Returns:
        ``(documents, tokens)`` written.

    Raises:
        ValueError: No such field, a token that does not fit ``dtype``, a document that is not
            a 1-D array of numbers, or a stream without record starts and no ``eos_id``.
    """
    from guideloom.storage.base import DocumentStorage, StreamStorage

    if isinstance(storage, StreamStorage):
        fields = storage.format.fields  # type: ignore[attr-defined]
        if field not in fields:
            raise ValueError(
                f"{storage.url} has no stream field {field!r} (its fields: {', '.join(fields)}): "
                "pass the field that holds the token ids (--field)"
            )
        target = megatron_dtype_for(fields[field] if dtype is None else dtype)
        from guideloom.storage.foreign.records import stream_records

        with MegatronWriter(prefix, target, storage_options) as writer:
            for batch, lengths in stream_records(storage, eos_id=eos_id):
                writer.add_batch(batch[field], lengths)
        return writer.documents, writer.tokens
    if isinstance(storage, DocumentStorage):
        batches = _document_batches(storage, field)
        first = next(batches, None)
        if first is None:
            target = megatron_dtype_for(np.uint16 if dtype is None else dtype)
        else:
            target = megatron_dtype_for(first[0].dtype if dtype is None else dtype)
        with MegatronWriter(prefix, target, storage_options) as writer:
            if first is not None:
                writer.add_batch(*first)
            for flat, lengths in batches:
                writer.add_batch(flat, lengths)
        return writer.documents, writer.tokens
    raise TypeError(f"export takes a GuideLoom storage (guideloom.open(url)), got {type(storage).__name__}")


def _document_batches(storage: Any, field: str) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(flat tokens, lengths)`` of a document dataset, `_DOCUMENT_BATCH` documents at a time."""
    from guideloom.storage.documents import DocumentDataset

    view = DocumentDataset(storage)
    for a in range(0, len(view), _DOCUMENT_BATCH):
        docs = view.__getitems__(list(range(a, min(a + _DOCUMENT_BATCH, len(view)))))
        arrays = []
        for k, doc in enumerate(docs):
            value = doc.get(field) if isinstance(doc, Mapping) else doc
            arr = np.asarray(value) if value is not None else None
            if arr is None or arr.ndim != 1 or arr.dtype.kind not in "iuf" and arr.size:
                raise ValueError(
                    f"{storage.url} document {a + k} is "
                    + (
                        f"a mapping without {field!r}"
                        if value is None
                        else f"{type(doc).__name__}, not token ids"
                    )
                    + f": export writes documents that are 1-D arrays of token ids, or mappings "
                    f"holding them under --field (got keys {list(doc)[:5] if isinstance(doc, Mapping) else '-'})"
                )
            arrays.append(arr if arr.size else arr.astype(np.int64))
        lengths = np.asarray([len(x) for x in arrays], dtype=np.int64)
        yield np.concatenate(arrays) if arrays else np.empty(0, np.int64), lengths
