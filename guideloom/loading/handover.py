"""Batches a worker process sends by value: how a loader rebuilt from a view and its `BatchOrder`
hands a batch to the training process.

torch's DataLoader moves each tensor a worker process returns into a shared-memory segment and
passes the segment's file descriptor to the training process, over a connection of its own for
each tensor (``multiprocessing.resource_sharer``, with an authentication handshake). That costs
the training process about 0.45 ms a batch on a 2-core machine, whatever the batch's size; a
batch of a few hundred KiB costs a fraction of that copied through the worker's pipe.

The read-ahead (`guideloom.loading.read_ahead`) hands each sample of a stream view as a `Row`.
The DataLoader's default collate builds a batch of dicts by copying its first sample and filling
in the collated fields, so the batch is a `Row` as well; a `Row` of CPU tensors of at most
`BY_VALUE_BYTES` in all pickles as NumPy arrays, by value, and arrives as a `Row` of tensors
again. A larger batch, a tensor NumPy cannot hold (``bfloat16``), one on a device or one that
requires grad goes the DataLoader's usual way. A `Row` is a ``dict`` in everything else: the
frameworks that rebuild batches (``type(batch)({...})``) and ``pin_memory`` keep it one.

Inside a worker process the default collate would also stack each field into a new
shared-memory segment (torch does so to save a copy when the batch is then sent its way), about
75 us a field on a 2-core machine, for a batch that then goes by value. So a `Row`'s fields are
`Sampled` arrays, a NumPy array type of its own that torch's default collate stacks with NumPy
into the batch's own memory (registered in ``default_collate_fn_map``, the extension point torch
documents for `torch.utils.data.default_collate`); a field too large to go by value is stacked
into shared memory as before. A `Sampled` array is a ``numpy.ndarray`` in everything else.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.utils.data import get_worker_info
from torch.utils.data._utils.collate import collate_numpy_array_fn, default_collate_fn_map

__all__ = ["BY_VALUE_BYTES", "Row", "Sampled", "rows"]

BY_VALUE_BYTES = 1 << 20  # a batch up to this size crosses the worker's pipe by value


class Row(dict):  # type: ignore[type-arg]
    """One sample (or, after the default collate, one batch) of ``{field: values}``."""

    __slots__ = ()

    def __copy__(self) -> Row:
        return Row(self)

    def __reduce__(self) -> Any:
        arrays = _by_value(self)
        if arrays is None:
            return (Row, (dict(self),))
        return (_tensors, (list(self), arrays))


def _by_value(row: Row) -> list[np.ndarray] | None:
    """The row's values as NumPy arrays sharing their memory, when every value is a CPU tensor
    NumPy can view and they hold at most `BY_VALUE_BYTES` together; else None."""
    arrays, total = [], 0
    for value in row.values():
        if type(value) is not torch.Tensor or value.requires_grad or value.device.type != "cpu":
            return None
        try:
            array = value.numpy()
        except (TypeError, RuntimeError):  # a dtype NumPy lacks (bfloat16), a conjugate view
            return None
        total += array.nbytes
        if total > BY_VALUE_BYTES:
            return None
        arrays.append(array)
    return arrays


def _tensors(keys: list[Any], arrays: list[np.ndarray]) -> Row:
    """A `Row` of tensors over the arrays unpickled in this process (their own, writable memory)."""
    return Row(zip(keys, map(torch.from_numpy, arrays)))


class Sampled(np.ndarray):
    """One field of one sample a rebuilt loader fetched (a view of the read's buffer): its batch
    is stacked by `collate_sampled`, the default collate's rule for this type."""


def collate_sampled(batch: list[np.ndarray], *, collate_fn_map: Any = None) -> torch.Tensor:
    """The default collate of `Sampled` fields: stacked with NumPy into a tensor of its own
    memory; in a worker process, a field larger than `BY_VALUE_BYTES` (which crosses the pipe
    the DataLoader's usual way) goes into shared memory as torch's own rule puts it, and so do
    fields of unequal shapes (torch's rule names them)."""
    first = batch[0]
    shape = first.shape
    if first.nbytes * len(batch) <= BY_VALUE_BYTES or get_worker_info() is None:
        if all(field.shape == shape for field in batch):
            out = np.empty((len(batch), *shape), dtype=first.dtype)
            np.stack(batch, out=out)  # (same dtype: the fields of one view's samples)
            return torch.from_numpy(out)
    return collate_numpy_array_fn([np.asarray(field) for field in batch], collate_fn_map=collate_fn_map)


default_collate_fn_map[Sampled] = collate_sampled


def rows(part: Any) -> Any:
    """A batch's samples as `Row`s of `Sampled` fields where they are plain dicts of NumPy arrays
    (stream views); else as they are."""
    if type(part) is list and part and type(part[0]) is dict:
        return [
            Row(
                {
                    key: value.view(Sampled) if type(value) is np.ndarray else value
                    for key, value in sample.items()
                }
            )
            for sample in part
        ]
    return part
