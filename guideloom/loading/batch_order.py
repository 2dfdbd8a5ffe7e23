"""`BatchOrder`: GuideLoom's order as a public, stateful, elastic batch sampler.

It is the loader's ``batch_sampler``: it owns the epoch's order (seed, shuffle settings, epoch)
and where the next pass starts, and yields this rank's batches of sample indexes. A loader
rebuilt by a framework from ``loader.dataset`` and ``loader.batch_sampler`` (accelerate,
Lightning, torchdata's own ``StatefulDataLoader``, torch's ``DataLoader``) therefore reads
GuideLoom's batches; a stateful one saves this sampler's ``state_dict`` (torchdata saves a
batch sampler that has one) and resumes exactly, in O(1).

- ``len(order)`` is always a whole epoch's batches of this rank (as torchdata's ``len``).
- Each ``iter(order)`` is one pass: the rest of the current epoch right after construction or
  ``load_state_dict``, else the next epoch. It never yields an empty pass: a state saved at an
  epoch's last batch resumes into the next epoch (the loader's own ``for`` loop keeps
  torchdata's rule, see `guideloom.loading.loader`).
- ``set_epoch(e)`` (what Lightning and accelerate call before each epoch) starts epoch ``e`` at
  its beginning unless the order is already in epoch ``e``.
- The state is the loader's (`guideloom.loading.state.LoaderState`): a state from another
  dataset, order or setting raises the same named `ResumeStateError`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch.distributed as dist

from guideloom.loading.order import EpochOrder, ShuffleSettings, positive_int
from guideloom.loading.sampler import OrderedBatchSampler
from guideloom.loading.schedule import EpochSchedule
from guideloom.loading.state import LoaderState, OrderIdentity
from guideloom.types import as_mixture

__all__ = ["BatchOrder"]


def _distributed_default(rank: int | None, world_size: int | None) -> tuple[int, int]:
    initialized = dist.is_available() and dist.is_initialized()
    if world_size is None:
        world_size = dist.get_world_size() if initialized else 1
    if rank is None:
        rank = dist.get_rank() if initialized else 0
    world_size = positive_int("world_size", world_size)
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be an integer in [0, world_size={world_size}), got {rank!r}")
    return int(rank), world_size


class BatchOrder(OrderedBatchSampler):
    """This rank's batches of sample indexes of a GuideLoom view, in GuideLoom's order; stateful.

    Args:
        view: A GuideLoom dataset view (``storage.dataset(...)``, a mixture's ``dataset(...)``).
        batch_size: Samples per batch (per rank).
        shuffle: False, True, ``"blocks"``, ``"full"`` or a `ShuffleSettings`.
        seed: The order's seed.
        drop_last: Leave out the epoch's last, smaller batch.
        rank: This process's rank (default: torch.distributed's, else 0).
        world_size: The number of ranks (default: torch.distributed's, else 1).
    """

    def __init__(
        self,
        view: Any,
        batch_size: int = 1,
        *,
        shuffle: Any = False,
        seed: int = 0,
        drop_last: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        rank, world_size = _distributed_default(rank, world_size)
        settings = (
            shuffle
            if isinstance(shuffle, ShuffleSettings)
            else ShuffleSettings.from_options(shuffle, None, None, None)
        )
        mixture = as_mixture(view)
        num_samples = mixture.plan.epoch_length if mixture else len(view)
        identity = OrderIdentity.of_view(
            view, mixture, num_samples=num_samples, seed=int(seed), shuffle=settings
        )
        self._setup(view, identity, int(batch_size), rank, world_size, bool(drop_last))

    @classmethod
    def _for_loader(
        cls, view: Any, identity: OrderIdentity, batch_size: int, rank: int, world_size: int, drop_last: bool
    ) -> BatchOrder:
        order = cls.__new__(cls)
        order._setup(view, identity, batch_size, rank, world_size, drop_last)
        return order

    def _setup(
        self, view: Any, identity: OrderIdentity, batch_size: int, rank: int, world_size: int, drop_last: bool
    ) -> None:
        OrderedBatchSampler.__init__(self, rank)
        self.view = view
        self.identity = identity
        self.batch_size = batch_size
        self.world_size = world_size
        self.drop_last = drop_last
        # called before the order moves to the next epoch on its own (the loader's bookkeeping)
        self._on_epoch_end: Callable[[], None] | None = None
        self._yielded = 0  # batches the current pass's iterator has yielded
        self._ended = False
        self._configure(0, 0)

    # -- the order ---------------------------------------------------------------------------
    @property
    def sampler(self) -> BatchOrder:
        """Itself: Lightning calls ``set_epoch`` on ``loader.batch_sampler.sampler``."""
        return self

    @property
    def epoch(self) -> int:
        """The epoch of the current pass (or of the next one, before it starts)."""
        return self._epoch

    def _source_names(self) -> tuple[str, ...]:
        mixture = as_mixture(self.view)
        return tuple(mixture.mixture.names) if mixture is not None else ()

    def _configure(self, epoch: int, position: int) -> None:
        """The next pass starts at ``position`` of ``epoch``."""
        ident = self.identity
        schedule = EpochSchedule(
            ident.num_samples, self.batch_size, self.world_size, self.drop_last, position
        )
        order: Any
        mixture = as_mixture(self.view)
        if mixture is not None:
            order = mixture.epoch_order(ident.shuffle, ident.seed, epoch)
        else:
            order = EpochOrder(ident.num_samples, shuffle=ident.shuffle, seed=ident.seed, epoch=epoch)
        self.configure(order, schedule)
        self._epoch = epoch
        self._schedule = schedule
        self._fresh = True  # the next pass starts here instead of moving to the next epoch
        self._yielded, self._ended = 0, False

    def _next_epoch(self) -> None:
        if self._on_epoch_end is not None:
            self._on_epoch_end()
        self._configure(self._epoch + 1, 0)

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` at its beginning, unless the order is already in ``epoch`` (so the
        ``set_epoch`` a framework calls before each epoch keeps a resumed position).

        Args:
            epoch: The epoch the next pass reads (0-based).
        """
        if epoch == self._epoch:
            return
        if epoch == self._epoch + 1:
            self._next_epoch()
        else:
            self._configure(int(epoch), 0)

    def __iter__(self) -> Iterator[list[int]]:
        if not self._fresh:
            self._next_epoch()
        if self._schedule.num_steps == 0:  # a state at an epoch's last batch: never an empty pass
            self._next_epoch()
        self._yielded, self._ended = 0, False
        return self._counted(self._batches())

    def _counted(self, batches: Iterator[list[int]]) -> Iterator[list[int]]:
        # The pass starts with its first batch: torch's worker iterator calls iter() twice
        # before it fetches anything, which must not move the order to the next epoch.
        for batch in batches:
            self._fresh = False
            self._yielded += 1
            yield batch
        self._ended = True

    def __len__(self) -> int:
        """A whole epoch's batches of this rank (whatever position the order is at)."""
        ident = self.identity
        return EpochSchedule(ident.num_samples, self.batch_size, self.world_size, self.drop_last).num_steps

    # -- state -------------------------------------------------------------------------------
    def state_at(self, received: int, ended: bool, **extra: Any) -> dict[str, Any]:
        """The state after ``received`` batches of the current pass.

        Args:
            received: Batches of the current pass the training loop has taken.
            ended: Whether the pass raised StopIteration (the epoch is over).
            **extra: More `guideloom.loading.state.LoaderState` fields (a loader's own).

        Returns:
            The state as `state_dict` gives it.
        """
        schedule = self._schedule
        if received == 0 and not ended:
            position = schedule.start
        else:
            position = schedule.position_after(received)
        return LoaderState(
            self.identity,
            epoch=self._epoch,
            position=position,
            batch_size=self.batch_size,
            world_size=self.world_size,
            drop_last=self.drop_last,
            finished=ended,
            **extra,
        ).to_dict()

    def state_dict(self) -> dict[str, Any]:
        """Where this order is: after the batches its current pass has yielded.

        Returns:
            A small dict (seed, epoch, one global position, the order's identity) that
            `load_state_dict` takes, on any rank and with any worker count.
        """
        if self._fresh:
            return self.state_at(0, False)
        return self.state_at(self._yielded, self._ended)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue from a saved state (this order's or a GuideLoom loader's): the next pass
        starts there, in O(1).

        Args:
            state_dict: What `state_dict` (or `StatefulDataLoader.state_dict`) returned.

        Raises:
            ResumeStateError: The state is of other data or another order (named).
        """
        saved = LoaderState.from_dict(state_dict)
        saved.identity.check_continues(self.identity, self._source_names())
        epoch, position = self._next_pass(saved)
        self._configure(epoch, position)

    def _next_pass(self, saved: LoaderState) -> tuple[int, int]:
        num_samples = self.identity.num_samples

        def batches_left(position: int) -> int:
            return EpochSchedule(
                num_samples, self.batch_size, self.world_size, self.drop_last, position
            ).num_steps

        return saved.next_pass(batches_left)
