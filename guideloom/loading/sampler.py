"""Which samples each batch holds, and which batches are fetched together (the read-ahead groups).

The main process decides everything about the order. `OrderedBatchSampler` turns the epoch's
`guideloom.loading.schedule.EpochSchedule` (which positions this rank takes at each step) and
its order (`guideloom.loading.order.EpochOrder` or a mixture's
`guideloom.loading.mixture.MixtureOrder`: position -> sample index) into lists of sample
indexes. Workers never choose samples, so ``num_workers`` and ``prefetch_factor`` change nothing
about which samples a rank sees or their order.

Read-ahead: a *group* of consecutive batches is the unit of fetching, on local disk as on remote
storage (`grouped`). It is sized in bytes (``read_ahead_bytes``, default
`DEFAULT_READ_AHEAD_BYTES`, or ``$GUIDELOOM_READ_AHEAD_BYTES``): the largest power of two of
batches whose bytes fit, reached by doubling from one batch (groups of 1, 1, 2, 4, ... batches),
so the first batch costs one small round of requests and every later group starts at a multiple
of its own size. A group of whole shuffle buffers holds whole blocks of consecutive windows,
each of which its read fetches with one request (merged ranges). Each worker, thread or
process, is handed whole groups: the batches of a group are consecutive, so a block is never
split between workers (which would fetch it twice, or in pieces). ``read_ahead=`` (batches) sets
a fixed group of ``read_ahead + 1`` batches instead (`Grouping.from_options`). Grouping changes
when bytes are fetched, never which samples a batch holds.

The byte-sized block shuffle (`guideloom.loading.shuffling`) groups by its windows instead
(``Grouping.windows``): a group is this rank's batches whose first position lies in one window
of the order, so that the window's blocks are fetched whole, each with one merged request, and a
resume mid-window fetches only the rest of that window.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from itertools import chain, islice
from operator import itemgetter
from typing import Any, NamedTuple, Protocol

import numpy as np
from torch.utils.data import Sampler

from guideloom.loading.schedule import EpochSchedule
from guideloom.types import DatasetView

__all__ = [
    "DEFAULT_READ_AHEAD_BYTES",
    "READ_AHEAD_ENV",
    "Group",
    "GroupedBatches",
    "Grouping",
    "OrderedBatchSampler",
    "grouped",
    "read_ahead_budget",
]

_CHUNK_POSITIONS = 16384  # most positions evaluated in one call of the order
DEFAULT_READ_AHEAD_BYTES = 4 * 2**20  # bytes of batches one group fetches at most
READ_AHEAD_ENV = "GUIDELOOM_READ_AHEAD_BYTES"


_second = itemgetter(1)  # (first position, batch) -> batch


class Order(Protocol):
    """An epoch's order: sample indexes (int64) at positions of the epoch."""

    def __call__(self, positions: np.ndarray) -> np.ndarray: ...


class Group(list):  # type: ignore[type-arg]
    """The sample indexes of consecutive batches, handed to one worker process as one item;
    ``sizes`` are the batches' lengths. Grouping changes when bytes are fetched, never which
    samples a batch holds."""

    sizes: list[int] = []

    @classmethod
    def of(cls, batches: list[list[int]]) -> Group:
        """The group of ``batches`` (built in C: this runs once per group in the loop's process)."""
        item = cls(chain.from_iterable(batches))
        item.sizes = list(map(len, batches))
        return item


class Grouping(NamedTuple):
    """How consecutive batches are grouped for fetching: ``size`` batches per group, grown from
    one batch by doubling when ``ramp`` (see the module docstring)."""

    size: int
    ramp: bool
    windows: bool = False  # group by the order's windows (`OrderedBatchSampler.groups`)

    @classmethod
    def from_options(
        cls, read_ahead: Any, read_ahead_bytes: Any, view: DatasetView, batch_size: int
    ) -> Grouping:
        """The loader's ``read_ahead`` (batches) or ``read_ahead_bytes`` (bytes per read) for
        batches of ``batch_size`` samples of ``view``; ValueError for a bad setting."""
        if read_ahead is not None:
            if read_ahead_bytes is not None:
                raise ValueError(
                    "read_ahead (batches) and read_ahead_bytes both given: set one; read_ahead "
                    "fixes the group, read_ahead_bytes sizes it by bytes"
                )
            if (
                isinstance(read_ahead, bool)
                or not isinstance(read_ahead, (int, np.integer))
                or read_ahead < 0
            ):
                raise ValueError(f"read_ahead must be a non-negative integer (batches), got {read_ahead!r}")
            return cls(int(read_ahead) + 1, False)
        # Local disk too: a group is one pass of the order, one positioned read per run of
        # windows and one collate, and one item through a worker's pipe, instead of one per batch
        # (2-4x the batches/s of lone batches with num_workers=0, 10-18x with worker processes).
        budget = read_ahead_budget(read_ahead_bytes)
        batch_bytes = batch_size * view.sample_bytes
        fit = max(1, budget // batch_bytes)
        return cls(1 << (fit.bit_length() - 1), fit > 1)


def grouped(batches: Iterator[list[int]], size: int, ramp: bool) -> Iterator[list[list[int]]]:
    """Consecutive batches in groups of ``size``, each fetched with one read; with ``ramp`` the
    groups grow 1, 1, 2, 4, ... (each as large as all before it) up to ``size``.

    A group's range requests run concurrently, so its first batch costs about one round trip,
    as a lone batch would.
    """
    batches = iter(batches)
    done, target = 0, 1 if ramp else size
    while group := list(map(list, islice(batches, target))):  # a group taken in C, not per batch
        yield group
        done += len(group)
        target = min(size, max(1, done)) if ramp else size


def read_ahead_budget(value: Any) -> int:
    """``read_ahead_bytes`` as given, else ``$GUIDELOOM_READ_AHEAD_BYTES``, else the default;
    a ValueError naming the setting when it is not a non-negative whole number of bytes."""
    if value is None:
        raw = os.environ.get(READ_AHEAD_ENV)
        if raw is None or not raw.strip():
            return DEFAULT_READ_AHEAD_BYTES
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(
                f"{READ_AHEAD_ENV}={raw!r} is not a whole number of bytes; set it to e.g. 4194304 (4 MiB)"
            ) from None
        where = f"{READ_AHEAD_ENV}={raw!r}"
    else:
        where = f"read_ahead_bytes={value!r}"
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{where} must be a non-negative whole number of bytes (0: one batch per read)")
    return int(value)


class OrderedBatchSampler(Sampler[list[int]]):
    """Yields this rank's batches of sample indexes for the configured (rest of an) epoch."""

    def __init__(self, rank: int, grouping: Grouping | None = None) -> None:
        """``grouping``: yield `Group`s of consecutive batches (worker processes: the DataLoader
        hands item j to worker j % workers, so each worker gets whole groups); None yields
        single batches."""
        super().__init__()
        self.rank = rank
        self.grouping = grouping
        self.order: Order | None = None
        self.schedule: EpochSchedule | None = None

    def configure(self, order: Order, schedule: EpochSchedule) -> None:
        """Read ``order`` with ``schedule`` from the next pass on.

        Args:
            order: The epoch's order (sample index of each position).
            schedule: Which positions this rank takes, in batches, from where.
        """
        self.order, self.schedule = order, schedule

    def __iter__(self) -> Iterator[list[int]]:
        if self.grouping is None:
            yield from self._batches()
            return
        for group in self.groups(self.grouping):
            yield Group.of(group)

    def groups(self, grouping: Grouping) -> Iterator[list[list[int]]]:
        """The current pass's batches in groups fetched with one read each: by bytes
        (`grouped`), or with ``grouping.windows`` by the order's windows (the batches whose
        first position lies in one window of the byte-sized block shuffle).

        Args:
            grouping: How to group (`Grouping.from_options`, with ``windows`` set by the loader).
        """
        if not grouping.windows:
            yield from grouped(self._batches(), grouping.size, grouping.ramp)
            return
        window_of = self.order.window_of  # type: ignore[union-attr]
        group: list[list[int]] = []
        current = -1
        for first, batch in self._positioned():
            window = int(window_of(np.array([first], dtype=np.int64))[0])
            if group and window != current:
                yield group
                group = []
            group.append(batch)
            current = window
        if group:
            yield group

    def _batches(self, schedule: EpochSchedule | None = None) -> Iterator[list[int]]:
        """The batches of ``schedule`` (default: the configured one) in the configured order."""
        return map(_second, self._positioned(schedule))  # no Python frame per batch

    def _positioned(self, schedule: EpochSchedule | None = None) -> Iterator[tuple[int, list[int]]]:
        """``(first position, batch)`` of each batch of ``schedule`` (default: the configured
        one) in the configured order."""
        order, schedule = self.order, schedule or self.schedule
        if order is None or schedule is None:
            raise RuntimeError("the batch sampler was iterated before it was configured")
        # The order is evaluated for a chunk of steps at once: NumPy's per-call overhead, not the
        # arithmetic, dominates for one batch of a few positions. Chunks start at one step (a
        # fast first batch) and grow to _CHUNK_POSITIONS positions.
        size, step_size = schedule.batch_size, schedule.step_size
        offsets = np.arange(size, dtype=np.int64) + self.rank * size
        first, full, steps = 0, schedule.full_steps, 1
        max_steps = max(1, _CHUNK_POSITIONS // size)
        while first < full:
            steps = min(steps, full - first)
            bases = schedule.start + (first + np.arange(steps, dtype=np.int64)) * step_size
            rows = order((bases[:, None] + offsets).ravel()).reshape(steps, size).tolist()
            yield from zip((bases + offsets[0]).tolist(), rows)
            first += steps
            steps = min(steps * 4, max_steps)
        if schedule.last_batch_size:
            lo, hi = schedule.batch_range(full, self.rank)
            yield lo, order(np.arange(lo, hi, dtype=np.int64)).tolist()

    def __len__(self) -> int:
        return self.schedule.num_steps if self.schedule is not None else 0


class GroupedBatches(Sampler[list[int]]):
    """The current pass of an `OrderedBatchSampler` in `Group`s of consecutive batches: what the
    loader's worker processes get (the DataLoader hands item j to worker j % workers, so each
    worker gets whole groups). Iterating it does not move the order to another epoch."""

    def __init__(self, batches: OrderedBatchSampler, grouping: Grouping) -> None:
        super().__init__()
        self.batches = batches
        self.grouping = grouping

    def __iter__(self) -> Iterator[list[int]]:
        for group in self.batches.groups(self.grouping):
            yield Group.of(group)

    def __len__(self) -> int:
        schedule = self.batches.schedule
        if schedule is None:
            return 0
        if self.grouping.windows:  # one group per window the pass touches (at most)
            return schedule.num_steps
        return -(-schedule.num_steps // self.grouping.size)
