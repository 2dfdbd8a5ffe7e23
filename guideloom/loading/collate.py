"""Turning one fetched batch into what the training step gets (runs in the DataLoader workers).

- stream windows (``view.read_windows``: a dict of ``(batch, sequence_length)`` NumPy arrays)
  become a dict of tensors of the same shape;
- aligned stream-with-metadata samples (whatever the format's ``align`` returns) are collated
  field by field: equal-shape arrays and plain numbers stack into tensors, anything else (strings,
  lists of spans, ragged arrays, dicts) stays a list with one entry per sample;
- documents stay a list of decoded records (pass ``collate_fn`` to pad them, for example).

Dtypes: an ``nn.Embedding`` takes int32 or int64 ids, and torch has no uint16/uint32 arithmetic,
so ``uint16`` and, in the ``tokens`` field (token ids of a tokenizer with fewer than 256 ids),
``uint8`` become ``int32``, and
``uint32``/``uint64`` become ``int64`` (``uint64`` values above ``2**63 - 1`` would wrap; no
tokenizer has that many ids): every stored width of token ids reaches ``nn.Embedding`` as a type
it accepts (``torch.uint8`` would fail with "Expected ... Long, Int; but got torch.ByteTensor").
Other ``uint8`` fields (a ``loss_mask``), ``bool``, signed integers and floats keep their dtype.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from numbers import Number
from typing import Any

import numpy as np
import torch

from guideloom.formats.meta import AlignedBatch, SpanBatch
from guideloom.loading.boundaries import cu_seqlens_of

__all__ = ["collate_aligned", "collate_documents", "collate_windows", "to_tensor"]

_WIDEN: dict[np.dtype[Any], np.dtype[Any]] = {
    np.dtype(np.uint16): np.dtype(np.int32),
    np.dtype(np.uint32): np.dtype(np.int64),
    np.dtype(np.uint64): np.dtype(np.int64),
}


TOKEN_FIELD = "tokens"  # the ids field: uint8 ids are widened there too


def to_tensor(array: np.ndarray, name: str | None = None) -> torch.Tensor:
    """A tensor over ``array`` (no copy when the dtype needs no widening and it is writable);
    ``name`` is the field's (the ``tokens`` field's ``uint8`` ids become ``int32``)."""
    target = _WIDEN.get(array.dtype)
    if target is None and name == TOKEN_FIELD and array.dtype == np.uint8:
        target = np.dtype(np.int32)
    if target is not None:
        array = array.astype(target)
    elif not array.flags.writeable or not array.flags.c_contiguous:
        array = np.array(array, order="C")  # torch refuses to alias read-only memory
    return torch.from_numpy(array)


def collate_windows(windows: Mapping[str, np.ndarray], whole_batch: bool = True) -> dict[str, torch.Tensor]:
    """Stream batch: field -> tensor of shape (batch, sequence_length); with ``position_ids``
    (``boundaries=``) also ``cu_seqlens`` and ``max_seqlen`` (`boundaries.with_cu_seqlens`),
    unless ``whole_batch`` is False (a group of batches, cut into batches later)."""
    batch: dict[str, Any] = {name: to_tensor(np.asarray(values), name) for name, values in windows.items()}
    position_ids = windows.get("position_ids")
    if position_ids is not None and whole_batch:
        cu, longest = cu_seqlens_of(np.asarray(position_ids))
        batch["cu_seqlens"] = torch.from_numpy(cu)
        batch["max_seqlen"] = longest
    return batch


def collate_documents(records: Sequence[Any]) -> list[Any]:
    """Document batch: the decoded records, as a list, untouched."""
    return list(records)


def _collate_field(values: list[Any], name: str | None = None) -> Any:
    first = values[0]
    if isinstance(first, np.ndarray) and first.dtype.kind in "biuf":
        if all(
            isinstance(v, np.ndarray) and v.shape == first.shape and v.dtype == first.dtype for v in values
        ):
            return to_tensor(np.stack(values), name)
    elif isinstance(first, torch.Tensor):
        if all(isinstance(v, torch.Tensor) and v.shape == first.shape for v in values):
            return torch.stack(values)
    elif isinstance(first, (Number, np.number)) and not isinstance(first, complex):
        if all(isinstance(v, (Number, np.number)) and not isinstance(v, complex) for v in values):
            return to_tensor(np.asarray(values))
    return list(values)


def collate_aligned(samples: Sequence[Any]) -> Any:
    """Stream-with-metadata batch: dict samples are collated per key, others as one field."""
    if isinstance(samples, SpanBatch) or (
        isinstance(samples, AlignedBatch) and len(samples) == len(samples.spans)
    ):
        # The default align: the batch's arrays are the stacked rows already.
        fields: dict[str, Any] = {n: to_tensor(v, n) for n, v in samples.windows.items() if n != "spans"}
        fields["spans"] = list(samples.spans)
        return fields
    samples = list(samples)
    if samples and all(isinstance(s, Mapping) for s in samples):
        keys = list(samples[0].keys())
        if all(list(s.keys()) == keys for s in samples):
            return {key: _collate_field([s[key] for s in samples], key) for key in keys}
    return _collate_field(samples) if samples else []
