"""Write token documents as a Megatron ``.bin``/``.idx`` pair that megatron-core's
``IndexedDataset`` opens (and GuideLoom reads in place): `write_megatron`.

The layout is megatron-core's (``megatron/core/datasets/indexed_dataset.py``, see
`guideloom.storage.foreign.layouts`): one sequence per document, document indices ``0 .. N``, no modes.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import fsspec
import numpy as np

from guideloom.storage.foreign.layouts import MEGATRON_DTYPES, MEGATRON_HEADER, MEGATRON_MAGIC

__all__ = ["write_megatron"]

_CODES = {dtype: code for code, dtype in MEGATRON_DTYPES.items()}


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
    dt = np.dtype(dtype)
    code = _CODES.get(dt)
    if code is None:
        raise ValueError(
            f"megatron-core stores no {dt.name} tokens; pick one of "
            + ", ".join(d.name for d in MEGATRON_DTYPES.values())
        )
    target = os.fspath(prefix)
    options = dict(storage_options or {})
    lengths: list[int] = []
    with fsspec.open(target + ".bin", "wb", **options) as out:
        for k, doc in enumerate(documents):
            arr = np.asarray(doc)
            cast = arr.astype(dt)
            if arr.size and not np.array_equal(cast, arr):
                raise ValueError(
                    f"document {k} has token ids that do not fit {dt.name} (e.g. {arr[cast != arr][0]}): "
                    "pick a wider dtype"
                )
            out.write(np.ascontiguousarray(cast, dtype=dt.newbyteorder("<")).tobytes())
            lengths.append(int(arr.size))
    n = len(lengths)
    sizes = np.asarray(lengths, dtype="<i4")
    pointers = np.zeros(n, dtype="<i8")
    if n > 1:
        np.cumsum(np.asarray(lengths[:-1], dtype=np.int64) * dt.itemsize, out=pointers[1:])
    doc_idx = np.arange(n + 1, dtype="<i8")
    with fsspec.open(target + ".idx", "wb", **options) as out:
        out.write(MEGATRON_HEADER.pack(MEGATRON_MAGIC, 1, code, n, n + 1))
        out.write(sizes.tobytes())
        out.write(pointers.tobytes())
        out.write(doc_idx.tobytes())
    return n, int(sizes.sum())
