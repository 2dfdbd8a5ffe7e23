"""Where finished batches land: pinned host memory, and a device, one batch ahead of use.

- ``pin_memory=True``: every tensor of a batch is copied into page-locked (pinned) host memory,
  from which a copy to the GPU can run asynchronously. Pinning needs an accelerator; without one
  (a CPU-only machine) it is skipped, silently, and batches stay in ordinary memory.
- ``device=...``: every tensor of a batch is copied to that device with ``non_blocking=True``,
  and the copy of batch ``k + 1`` is issued when batch ``k`` is handed to the training loop, so
  on a GPU the transfer overlaps the step that uses batch ``k``. With ``pin_memory=True`` too,
  the copies are truly asynchronous (from pageable memory CUDA copies synchronously).

Batches are walked recursively: tensors in dicts, lists and tuples are moved; anything else
(strings, numbers, document records) is left as it is.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch

__all__ = ["Placed", "accelerator_available", "move", "pin"]


def accelerator_available() -> bool:
    """True when torch has a device that pinned memory serves (CUDA, or another accelerator)."""
    acc = getattr(torch, "accelerator", None)
    if acc is not None and hasattr(acc, "is_available"):
        return bool(acc.is_available())
    return bool(torch.cuda.is_available())


def _walk(batch: Any, fn: Any) -> Any:
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, Mapping):
        return {k: _walk(v, fn) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a named tuple
        return type(batch)(*(_walk(v, fn) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(_walk(v, fn) for v in batch)
    return batch


def pin(batch: Any) -> Any:
    """``batch`` with its tensors in pinned memory (unchanged without an accelerator)."""
    if not accelerator_available():
        return batch
    return _walk(batch, lambda t: t if t.is_pinned() else t.pin_memory())


def move(batch: Any, device: torch.device) -> Any:
    """``batch`` with its tensors copied to ``device``, asynchronously where the source is pinned."""
    return _walk(batch, lambda t: t.to(device, non_blocking=True))


class Placed:
    """Batches of ``source`` moved to ``device``, each copy issued one batch before it is used.

    ``next()`` returns batch ``k`` (already moved) after issuing the copy of batch ``k + 1``. An
    error met while fetching batch ``k + 1`` is raised at the following ``next()``, so batch
    ``k``, already fetched, is not lost.
    """

    def __init__(self, source: Iterator[Any], device: torch.device) -> None:
        self._source = source
        self._device = device
        self._ahead: list[Any] = []  # zero or one moved batch
        self._error: BaseException | None = None
        self._done = False
        self._started = False

    def __iter__(self) -> Placed:
        return self

    def _pull(self) -> None:
        try:
            self._ahead.append(move(next(self._source), self._device))
        except StopIteration:
            self._done = True
        except BaseException as err:  # noqa: BLE001 - re-raised at the next call
            self._error = err

    def __next__(self) -> Any:
        if not self._started:
            self._started = True
            self._pull()
        if not self._ahead:
            if self._error is not None:
                err, self._error = self._error, None
                self._done = True
                raise err
            raise StopIteration
        current = self._ahead.pop()
        if not self._done and self._error is None:
            self._pull()
        return current
