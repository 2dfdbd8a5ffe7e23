"""What a worker runs: read a group of batches in one read, collate each batch, pin it.

The same path serves the three kinds of workers (see `guideloom.loading.loader`): the training
loop's own thread (``num_workers=0``), thread workers (`guideloom.loading.threads`) and
torchdata's worker processes. `BatchSource` is the view as the DataLoader sees it; its
`BatchSource.read_group` fetches consecutive batches with one read (on object storage one round
of merged, concurrent range requests instead of one round trip per batch) and returns one
uncollated part per batch. `Finish` then collates a part and pins it when asked.

Worker processes get a whole group as one item (a `guideloom.loading.sampler.Group`) and send
it back through a pipe; `GroupCollate` collates it there. A stream group with the default
collate is read and collated *whole* (`Whole`: one tensor per field) and split into its batches
in the main process (`unrolled`: views, no copy), so one shared-memory handle per field crosses
the pipe instead of one per batch (each is a file descriptor in transit, and a group may hold a
thousand batches).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from itertools import chain
from typing import Any, NamedTuple, cast

import numpy as np
from torch.utils.data import Dataset

from guideloom.io.ranges import current_gap_budget, reset_gap_budget, set_gap_budget
from guideloom.io.stats import io_stats
from guideloom.loading.boundaries import with_cu_seqlens
from guideloom.loading.collate import collate_aligned, collate_documents, collate_windows
from guideloom.loading.metrics import Parts, mask_tokens, records_unmasked
from guideloom.loading.placement import pin
from guideloom.types import STREAM, DatasetView, GroupReader, Layout

__all__ = ["BatchSource", "Finish", "GroupCollate", "Reported", "Whole", "batch_path", "unrolled"]

Collate = Callable[[Any], Any]
_PER_BATCH = ("cu_seqlens", "max_seqlen")  # of a whole batch, not of rows: made after the cut


class Whole(NamedTuple):
    """A stream group read as one ``{field: (rows, sequence_length)}`` dict, with its batch sizes."""

    data: Any
    sizes: list[int]


class Reported(NamedTuple):
    """A worker process's collated group, with its requests so far (`guideloom.io.stats`) and
    each batch's ``loss_mask`` tokens (-1: no such field; `guideloom.loading.metrics`), counted
    in the worker so that the training loop's thread does not."""

    group: Any
    io: Any
    pid: int
    masks: Any = None


class GroupCollate:
    """Worker processes: collate each batch of a group; the main process unrolls the list
    (`unrolled`). A `Whole` group is collated whole. Each group carries the worker's request
    counts (`Reported`)."""

    def __init__(self, collate: Collate) -> None:
        self.collate = collate

    def __call__(self, parts: Any) -> Reported:
        group: Any
        if isinstance(parts, Whole):
            if self.collate is collate_windows:  # per-batch keys are made after the cut
                group = Whole(collate_windows(parts.data, whole_batch=False), parts.sizes)
            else:
                group = Whole(self.collate(parts.data), parts.sizes)
            masks = _whole_masks(group)
        else:
            group = [self.collate(p) for p in parts]
            if self.collate is collate_documents and records_unmasked(group):
                masks = [-1] * len(group)  # what mask_tokens says of each, in one pass
            else:
                masks = [mask_tokens(b) for b in group]
        return Reported(group, io_stats(), os.getpid(), masks)


def _whole_masks(group: Whole) -> list[int]:
    """``loss_mask`` tokens of each batch of a `Whole` group (-1 each without the field)."""
    mask = group.data.get("loss_mask") if isinstance(group.data, dict) else None
    if mask is None:
        return [-1] * len(group.sizes)
    rows = np.count_nonzero(np.asarray(mask).reshape(len(mask), -1), axis=1)
    starts = np.cumsum([0, *group.sizes[:-1]])
    return [int(n) for n in np.add.reduceat(rows, starts)]


def unrolled(
    groups: Iterator[Any],
    report: Callable[[int, Any], None] | None = None,
    masks: Callable[[list[int]], None] | None = None,
) -> Iterator[Any]:
    """The batches of collated groups, in order (a `Whole` group split into row slices); a
    worker's request counts go to ``report(pid, counts)``, each group's ``loss_mask`` tokens per
    batch to ``masks(counts)`` before its batches are yielded."""
    for group in groups:
        if isinstance(group, Reported):
            if report is not None:
                report(group.pid, group.io)
            if masks is not None and group.masks is not None:
                masks(group.masks)
            group = group.group
        if isinstance(group, Whole):
            bounds = np.cumsum([0, *group.sizes]).tolist()
            data = {k: v for k, v in group.data.items() if k not in _PER_BATCH}
            for lo, hi in zip(bounds[:-1], bounds[1:]):
                batch = {k: v[lo:hi] for k, v in data.items()}
                yield with_cu_seqlens(batch) if "position_ids" in batch else batch
        else:
            yield from group


def _read_ahead(view: Any) -> Any:
    """The read-ahead a `BatchOrder` attached to ``view`` (`guideloom.loading.read_ahead`), or
    None (every GuideLoom view has the attribute; a view of the user's own class may not)."""
    try:
        return view._ahead
    except AttributeError:
        return None


class BatchSource(Dataset):  # type: ignore[type-arg]
    """The view as the DataLoader sees it: ``__getitems__`` fetches one batch, or one group of
    consecutive batches (a `guideloom.loading.sampler.Group`, from worker processes' sampler),
    in one read: on object storage one round of merged, concurrent range requests instead of
    one round trip per batch.

    ``batched``: read what the layout's default collate takes (`DatasetView.read_batch`);
    otherwise (a user's ``collate_fn``) the list of samples (``__getitems__``).
    """

    def __init__(self, view: DatasetView, batched: bool) -> None:
        self.view = view
        self.batched = batched
        # streams read for the default collate: one dict of (B, L) arrays per read, which a
        # group keeps whole (one tensor per field through a worker's pipe, see `Whole`)
        self.columns = batched and view.layout == STREAM
        # a view that marks each batch of a group itself (boundaries): asked once, not per read
        self._by_batch = self.columns and isinstance(view, GroupReader)
        # The gap budget of group reads: None reads a group's ranges through every small gap
        # (a rank's dense share of a block-shuffle window costs a request per block, not per
        # sample); the default keeps the reader's own budget. Set by the loader.
        self.gap_budget: float | None = current_gap_budget()

    def __len__(self) -> int:
        return len(self.view)

    def __getitem__(self, index: int) -> Any:
        return self.view[index]

    def _read(self, indexes: list[int]) -> Any:
        ahead = _read_ahead(self.view)  # a BatchOrder's read-ahead: not for this read
        if ahead is not None:
            before = ahead.pause()  # (ahead.off() without a context manager's frames)
            try:
                return self.view.read_batch(indexes) if self.batched else self.view.__getitems__(indexes)
            finally:
                ahead.resume(before)
        if self.batched:
            return self.view.read_batch(indexes)
        return self.view.__getitems__(indexes)

    def read_group(self, batches: list[list[int]]) -> list[Any]:
        """Several batches fetched with one read; one uncollated result per batch, in order."""
        return self._budgeted(self._read_group, batches)

    def _budgeted(self, read: Callable[[Any], Any], arg: Any) -> Any:
        """``read(arg)`` with this fetcher's gap budget in the reads' context. Set only where the
        context has another (once set, every read looks it up); per group: no context manager."""
        if current_gap_budget() == self.gap_budget:
            return read(arg)
        token = set_gap_budget(self.gap_budget)
        try:
            return read(arg)
        finally:
            reset_gap_budget(token)

    def _read_group(self, batches: list[list[int]]) -> list[Any]:
        if len(batches) == 1:
            return [self._read(list(batches[0]))]
        if self._by_batch:
            return cast(GroupReader, self.view).read_batches(batches)
        data = self._read(list(chain.from_iterable(batches)))  # C loops, no frame per sample
        bounds = np.cumsum([0, *map(len, batches)]).tolist()
        cuts = zip(bounds[:-1], bounds[1:])
        if self.columns:  # metrics() counts the group's loss_mask in one call (`Parts`)
            return Parts([{k: v[lo:hi] for k, v in data.items()} for lo, hi in cuts], data)
        return [data[lo:hi] for lo, hi in cuts]

    def __getitems__(self, indexes: list[int]) -> Any:
        sizes = getattr(indexes, "sizes", None)  # a Group of batches, or one batch's list
        if sizes is None:
            ahead = _read_ahead(self.view)  # a loader rebuilt from this and a BatchOrder
            if ahead is not None and ahead.active():
                return ahead.fetch(self.view, indexes, self)
            return self._read(list(indexes))
        if self.columns:
            return Whole(self._budgeted(self._read, list(indexes)), list(sizes))
        bounds = np.cumsum([0, *sizes]).tolist()
        flat = list(indexes)
        return self.read_group([flat[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:])])


_COLLATES: dict[Layout, Collate] = {
    "stream": collate_windows,
    "stream_with_meta": collate_aligned,
    "documents": collate_documents,
}


def batch_path(view: DatasetView, collate_fn: Collate | None) -> tuple[BatchSource, Collate]:
    """The source and collate of a view: a ``collate_fn`` gets lists of samples; by default
    streams are read as ``{field: array}`` windows and collated to tensors, streams with
    metadata as aligned batches, documents as lists of records."""
    if collate_fn is not None:
        return BatchSource(view, batched=False), collate_fn
    return BatchSource(view, batched=True), _COLLATES[view.layout]


class Finish:
    """One fetched batch -> what the loop receives: collated, and pinned when asked (thread
    workers and ``num_workers=0``; torch's pin-memory thread serves worker processes)."""

    def __init__(self, collate: Collate, pin_memory: bool) -> None:
        self.collate = collate
        self.pin_memory = pin_memory

    def __call__(self, part: Any) -> Any:
        batch = self.collate(part)
        return pin(batch) if self.pin_memory else batch
