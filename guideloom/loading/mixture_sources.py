"""Which source each row came from, and how much each source has delivered (per-source accounting).

Two things, both from the closed-form order (no per-row bookkeeping in the training loop):

- ``from_storage(mixture, sources=True)`` reads the mixture through a `SourcedMixtureDataset`,
  whose batches also hold ``source`` (int64 ``(B,)``: each row's source, its index in the
  mixture) and ``source_index`` (int64 ``(B,)``: the row's sample in that source's own view).
  Both come from the row's mixture index (source offset + sample) with one ``searchsorted`` per
  read, the arithmetic `guideloom.trace` uses (`MixtureDataset.split`). Stream batches get them
  as two more tensors; document batches (a list of records otherwise) become
  ``{"documents": [records], "source": ..., "source_index": ...}``; a ``collate_fn`` that returns
  a dict gets the two keys added.
- `delivered` counts each source's samples among the first ``p`` positions of an epoch
  (`guideloom.loading.interleave.Interleave.counts`, O(#sources)): the loader's
  ``source_counts()`` is the completed epochs' counts (kept in its state) plus those of the
  positions handed out in the current epoch. Positions do not depend on the world size or the
  workers, so the counts after an elastic resume are those of an uninterrupted run at the same
  global position. `RankCounts` counts one rank's rows the same way, from its schedule.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, SupportsIndex, overload

import numpy as np
import torch

from guideloom.loading.mixture_dataset import MixtureDataset
from guideloom.loading.schedule import EpochSchedule
from guideloom.types import as_mixture

__all__ = ["RankCounts", "Sourced", "SourcedCollate", "SourcedMixtureDataset", "delivered", "source_names"]

SOURCE_KEY = "source"
SOURCE_INDEX_KEY = "source_index"
DOCUMENTS_KEY = "documents"


class Sourced(list):  # type: ignore[type-arg]
    """A batch's samples (a list) with each row's ``source`` and ``source_index`` (int64 arrays).

    Slices keep the arrays (a group of batches read together is cut into its batches by slicing).
    """

    source: np.ndarray
    source_index: np.ndarray

    def __init__(self, samples: Sequence[Any], source: np.ndarray, source_index: np.ndarray) -> None:
        super().__init__(samples)
        self.source = source
        self.source_index = source_index

    @overload
    def __getitem__(self, key: SupportsIndex) -> Any: ...
    @overload
    def __getitem__(self, key: slice) -> Sourced: ...
    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            return Sourced(list.__getitem__(self, key), self.source[key], self.source_index[key])
        return list.__getitem__(self, key)


class SourcedMixtureDataset(MixtureDataset):
    """A `MixtureDataset` whose reads also say each row's source and sample in it (``sources=True``).

    Same order, identity and fingerprint as the plain dataset: states move freely between the two.
    """

    sourced = True

    def read_windows(self, indexes: Sequence[int]) -> dict[str, np.ndarray]:
        src, local = self._split(indexes)  # once, for the read and the keys
        out = self._marked(self._read_split(src, local), src, local)
        out[SOURCE_KEY] = src
        out[SOURCE_INDEX_KEY] = local
        return out

    def __getitems__(self, indexes: Sequence[int]) -> list[Any]:
        samples = super().__getitems__(indexes)
        src, local = self._split(indexes)
        return Sourced(samples, src, local)


class SourcedCollate:
    """The loader's collate for a `SourcedMixtureDataset`: a `Sourced` list of samples is collated
    by ``collate`` and given the ``source`` and ``source_index`` tensors (stream windows read as
    arrays already hold them and pass through)."""

    def __init__(self, collate: Callable[[Any], Any]) -> None:
        self.collate = collate

    def __call__(self, part: Any) -> Any:
        if not isinstance(part, Sourced):
            return self.collate(part)
        batch = self.collate(list(part))
        keys = {
            SOURCE_KEY: torch.from_numpy(np.ascontiguousarray(part.source, dtype=np.int64)),
            SOURCE_INDEX_KEY: torch.from_numpy(np.ascontiguousarray(part.source_index, dtype=np.int64)),
        }
        if isinstance(batch, list):  # documents (the default collate keeps the list of records)
            return {DOCUMENTS_KEY: batch, **keys}
        if isinstance(batch, dict):
            return {**batch, **keys}
        raise TypeError(
            f"sources=True adds the 'source' and 'source_index' keys to each batch, but the "
            f"collate_fn returned a {type(batch).__name__}; return a dict from collate_fn, or "
            "build the loader without sources=True (loader.source_counts() works without it)"
        )


def delivered(view: Any, positions: int) -> list[int]:
    """Samples of each source among the first ``positions`` positions of an epoch (one entry for
    a single dataset)."""
    mixture = as_mixture(view)
    if mixture is not None:
        return [int(c) for c in mixture.plan.interleave.counts(int(positions))]
    return [int(positions)]


class RankCounts:
    """Samples of each source that one rank's loader has received since it was built (in memory,
    not in the state: after a change of world size a rank's own history has no meaning).

    Counted from the schedule in closed form (the interleave's counts at the ends of the rank's
    positions: once for the pass's received steps with one rank, per step with several), only when
    asked: `start` at every pass, `update` with the batches the loop has received of it.
    """

    def __init__(self, view: Any, rank: int) -> None:
        self.rank = rank
        self.totals = [0] * len(source_names(view))
        self._mixture = as_mixture(view)  # None: one source, every position is its sample
        self._schedule: EpochSchedule | None = None
        self._counted = 0  # steps of the current pass already in the totals

    def start(self, schedule: EpochSchedule) -> None:
        """A new pass (or a new start) with ``schedule``; count the old one first (`update`)."""
        self._schedule, self._counted = schedule, 0

    def update(self, received: int) -> list[int]:
        """Add the steps ``[counted, received)`` of the current pass; returns the totals."""
        schedule = self._schedule
        if schedule is None:
            return self.totals
        stop = min(received, schedule.num_steps)
        if stop <= self._counted:
            return self.totals
        if self._mixture is not None:  # each step's split between the sources: the interleave's
            counts = self._mixture.plan.interleave.counts
            if schedule.world_size == 1:  # one rank's steps are one run of positions: its ends
                spans = [(schedule.batch_range(self._counted, 0)[0], schedule.batch_range(stop - 1, 0)[1])]
            else:  # a rank's share of each step, apart (a pass's worth once per pass)
                spans = [schedule.batch_range(step, self.rank) for step in range(self._counted, stop)]
            totals = self.totals
            for lo, hi in spans:
                totals = [t + b - a for t, a, b in zip(totals, counts(lo), counts(hi))]
            self.totals = totals
        else:
            # one source: the steps' batch sizes summed in closed form (step by step, as above,
            # this cost 1.3 us per batch of the pass at each epoch's end)
            full = min(stop, schedule.full_steps) - min(self._counted, schedule.full_steps)
            tail = schedule.last_batch_size if self._counted <= schedule.full_steps < stop else 0
            self.totals = [self.totals[0] + full * schedule.batch_size + tail]
        self._counted = max(self._counted, stop)
        return self.totals


def source_names(view: Any) -> tuple[str, ...]:
    """The names `source_counts` reports: the mixture's, or the single dataset's URL."""
    if as_mixture(view) is not None:
        return tuple(view.mixture.names)
    return (str(view.url),)
