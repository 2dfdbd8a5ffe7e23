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
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["BY_VALUE_BYTES", "Row", "rows"]

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


def rows(part: Any) -> Any:
    """A batch's samples as `Row`s where they are plain dicts (stream views); else as they are."""
    if type(part) is list and part and type(part[0]) is dict:
        return [Row(sample) for sample in part]
    return part
