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
- It gives its view a read-ahead (`guideloom.loading.read_ahead`): a loader rebuilt from the
  view and the order fetches each worker's next batches in one read, as GuideLoom's own does.
- Wrapped by accelerate's ``BatchSamplerShard`` (several processes), it gives the shard its own
  ``state_dict``, so the state accelerate saves resumes into any number of processes.
- `RankSampler` is GuideLoom's loader's ``sampler``: a ``DistributedSampler``, so that Lightning
  under DDP keeps the loader instead of injecting its own sampler.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable, Iterator
from itertools import islice
from types import FrameType
from typing import Any

import numpy as np
import torch.distributed as dist
from torch.utils.data import DistributedSampler

from guideloom.errors import OrderLostError, ResumeStateError
from guideloom.loading.order import EpochOrder, positive_int
from guideloom.loading.read_ahead import ReadAhead
from guideloom.loading.sampler import OrderedBatchSampler, read_ahead_budget
from guideloom.loading.schedule import EpochSchedule
from guideloom.loading.shuffling import resolve_shuffle
from guideloom.loading.state import LoaderState, OrderIdentity
from guideloom.types import DOCUMENTS, DatasetView, as_mixture

__all__ = ["BatchOrder", "RankSampler"]


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


def _not_a_view(view: Any) -> Exception:
    """BatchOrder given something else than a view; Lightning's sampler injection named."""
    name = type(view).__name__
    if name == "DistributedSampler" or "Sampler" in name:
        return OrderLostError(
            f"BatchOrder was given a {name} where it takes a GuideLoom view: Lightning (with "
            "DDP and Trainer(use_distributed_sampler=True), its default) rebuilds the loader to "
            "inject its DistributedSampler, which would replace GuideLoom's order, that already "
            "splits every epoch over the ranks. Fix: pass Trainer(use_distributed_sampler=False) "
            "and build the loader in train_dataloader() (it then takes each process's rank)"
        )
    return TypeError(
        f"BatchOrder takes a GuideLoom dataset view (storage's view, a Mixture's dataset(...)), got {name}"
    )


def check_epoch(view: Any, num_samples: int, batch_size: int, world_size: int, drop_last: bool) -> None:
    """ValueError when an epoch of ``view`` gives some rank no batch (naming the dataset)."""
    what = "documents" if view.layout == DOCUMENTS else "windows"
    where = view.url
    if num_samples < 1:
        raise ValueError(f"the dataset at {where} has no {what} to load")
    if world_size > num_samples:
        raise ValueError(
            f"world_size={world_size} is larger than the {num_samples} {what} of "
            f"{where}: some ranks would get no batch"
        )
    if EpochSchedule(num_samples, batch_size, world_size, drop_last).num_steps == 0:
        raise ValueError(
            f"with drop_last=True, batch_size={batch_size} and world_size={world_size} an "
            f"epoch of {num_samples} {what} ({where}) has no full batch; use a smaller batch_size or "
            "drop_last=False"
        )


_LIGHTNING = ("pytorch_lightning", "lightning")


def iteration_before_restore() -> ResumeStateError | None:
    """The `ResumeStateError` to raise at the first batch when Lightning iterates the loader
    before it restores its state, else None.

    Lightning #20550: ``trainer.estimated_stepping_batches`` (read in ``configure_optimizers``)
    builds and iterates the train loader before ``fit(ckpt_path=...)`` restores the loop's
    state, and Lightning then never hands the checkpoint's loader state to the loader: the run
    would silently start its epoch over. The loader only sees ``iter()`` either way, so this
    looks at who calls it (a frame of that property, with the trainer resuming a checkpoint).
    The error is raised at the first batch, not by ``iter()``: Lightning's teardown needs the
    iterator it was building, and would hide an error raised there behind its own.
    """
    frame: FrameType | None = sys._getframe(1)
    for _ in range(48):
        if frame is None:
            return None
        code = frame.f_code
        if code.co_name == "estimated_stepping_batches" and (
            str(frame.f_globals.get("__name__", "")).split(".")[0] in _LIGHTNING
        ):
            trainer = frame.f_locals.get("self")
            ckpt = getattr(trainer, "ckpt_path", None)  # the Trainer's, not a view's
            if ckpt is None:
                return None  # a fresh fit: there is no loader state to lose
            return ResumeStateError(
                f"Lightning is resuming from {ckpt}, but `trainer.estimated_stepping_batches` "
                "(read in configure_optimizers) iterates the GuideLoom loader before Lightning "
                "restores the checkpoint's loader state, and Lightning then never loads that "
                "state (Lightning issue #20550): the run would silently start the epoch over, "
                "replaying batches. Fix: compute the scheduler's total steps without it, e.g. "
                "`len(train_loader) * trainer.max_epochs // trainer.accumulate_grad_batches` "
                "(len(loader) is a whole epoch's batches of this rank, also after a resume; with "
                "max_steps set, use trainer.max_steps), and pass the loader or the number to "
                "your LightningModule."
            )
        frame = frame.f_back
    return None


def ranks_refused(order: BatchOrder) -> OrderLostError | None:
    """The `OrderLostError` for an order whose rank and world size were taken as 0 and 1 because
    torch.distributed was not initialized yet, iterated once it is, with more ranks: every rank
    would read the whole epoch (a loader built before ``init_process_group``, or before
    Lightning's or accelerate's processes set it up). None when the ranks fit."""
    if not order._ranks_from_dist or not (dist.is_available() and dist.is_initialized()):
        return None
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if (rank, world_size) == (order.rank, order.world_size):
        return None
    return OrderLostError(
        f"this GuideLoom loader (or BatchOrder) was built before torch.distributed was "
        f"initialized, so it took rank={order.rank} of world_size={order.world_size}, but it is "
        f"iterated on rank {rank} of a process group of {world_size}: every rank would read the "
        "same batches. Build it after the process group exists (Lightning: return it from "
        "train_dataloader() of your LightningModule or LightningDataModule; accelerate: after "
        "Accelerator(); plain PyTorch: after init_process_group), or pass rank= and world_size="
    )


def _accelerate_shard(frame: FrameType | None) -> Any:
    """accelerate's ``BatchSamplerShard`` iterating the order (``frame`` is the caller's), or None."""
    owner = frame.f_locals.get("self") if frame is not None else None
    kind = type(owner)
    if kind.__name__ == "BatchSamplerShard" and kind.__module__.split(".")[0] == "accelerate":
        return owner
    return None


def _raising(error: Exception) -> Iterator[Any]:
    raise error
    yield  # a generator: it raises at its first item


class BatchOrder(OrderedBatchSampler):
    """This rank's batches of sample indexes of a GuideLoom view, in GuideLoom's order; stateful.

    Args:
        view: A GuideLoom dataset view (``storage.dataset(...)``, a mixture's ``dataset(...)``).
        batch_size: Samples per batch (per rank).
        shuffle: False, True, ``"block"``, ``"full"``, a `guideloom.Shuffle` or a `ShuffleSettings`.
        seed: The order's seed.
        drop_last: Leave out the epoch's last, smaller batch.
        rank: This process's rank (default: torch.distributed's, else 0).
        world_size: The number of ranks (default: torch.distributed's, else 1).

    Raises:
        ValueError: A setting out of range (a non-positive ``batch_size``, a ``rank`` outside
            ``0 .. world_size - 1``, a non-integer ``seed``), an empty view, more ranks than
            samples, or no full batch with ``drop_last``.
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
        if not isinstance(view, DatasetView):
            raise _not_a_view(view)
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        batch_size = positive_int("batch_size", batch_size)
        from_dist = rank is None and world_size is None
        rank, world_size = _distributed_default(rank, world_size)
        settings, own_seed = resolve_shuffle(shuffle, view)
        seed = seed if own_seed is None else own_seed
        mixture = as_mixture(view)
        num_samples = mixture.plan.epoch_length if mixture else len(view)
        check_epoch(view, num_samples, batch_size, world_size, bool(drop_last))
        identity = OrderIdentity.of_view(
            view, mixture, num_samples=num_samples, seed=int(seed), shuffle=settings
        )
        self._setup(view, identity, batch_size, rank, world_size, bool(drop_last))
        self._ranks_from_dist = from_dist
        self._attach()

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
        # every skip_steps so far: (epoch, first position, end position), saved in the state
        self._skipped: tuple[tuple[int, int, int], ...] = ()
        # rank and world size were torch.distributed's defaults (0 and 1 before it is set up)
        self._ranks_from_dist = False
        self._ahead: ReadAhead | None = None  # the view's read-ahead, when attached (`_attach`)
        self._configure(0, 0)

    def _attach(self) -> None:
        """Give the view this order's read-ahead (`guideloom.loading.read_ahead`): a loader
        rebuilt from the view and this order then reads ahead the batches each worker will be
        asked for. Not for mixtures (their batches are read per source)."""
        if as_mixture(self.view) is not None or read_ahead_budget(None) == 0:
            return
        ahead = ReadAhead(self)
        ahead.configure(self._epoch, self._schedule.start, self._skipped)
        try:
            self.view._ahead = ahead
        except AttributeError:  # a view class of the user's own without room for it
            return
        self._ahead = ahead

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
        self._epoch_of_split = epoch
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
        self._segments = self._split(schedule)
        if self._ahead is not None:  # what worker processes started from here on guess from
            self._ahead.configure(epoch, position, self._skipped)

    def _split(self, schedule: EpochSchedule) -> list[tuple[EpochSchedule, int]]:
        """The pass as ``(schedule, steps)`` pieces: the skipped steps of this epoch ahead of
        ``schedule.start`` cut it (the last piece runs to the epoch's end: steps -1)."""
        pieces: list[tuple[EpochSchedule, int]] = []
        current = schedule
        for epoch, lo, hi in sorted(self._skipped):
            if epoch != self._epoch_of_split or lo < current.start:
                continue
            pieces.append((current, (lo - current.start) // current.step_size))
            current = EpochSchedule(
                current.num_samples, current.batch_size, current.world_size, current.drop_last, hi
            )
        pieces.append((current, -1))
        return pieces

    def _positioned(self, schedule: EpochSchedule | None = None) -> Iterator[tuple[int, list[int]]]:
        # the pass's batches (and their first positions) without the steps skip_steps left out;
        # a pass of one whole piece (no skip_steps: the usual one) is the sampler's own iterator,
        # with no generator frame around it (one less resume per batch)
        if schedule is not None:
            return OrderedBatchSampler._positioned(self, schedule)
        if len(self._segments) == 1 and self._segments[0][1] < 0:
            return OrderedBatchSampler._positioned(self, self._segments[0][0])
        return self._pieces()

    def _pieces(self) -> Iterator[tuple[int, list[int]]]:
        for piece, steps in self._segments:
            batches = OrderedBatchSampler._positioned(self, piece)
            yield from (batches if steps < 0 else islice(batches, steps))

    def _walk(self, received: int) -> tuple[EpochSchedule, int]:
        """The piece of the pass the ``received``-th batch ends in, and the steps taken in it."""
        for piece, steps in self._segments:
            if steps < 0 or received < steps:
                return piece, received
            received -= steps
        raise AssertionError("the last piece runs to the epoch's end")

    def pass_steps(self) -> int:
        """Batches of this rank the current pass yields (skipped steps left out)."""
        return sum(p.num_steps if n < 0 else n for p, n in self._segments)

    def handed_out(self, received: int) -> int:
        """The epoch's positions handed out after ``received`` batches of the pass (skipped ones
        count as handed out: the next pass starts after them).

        Args:
            received: Batches of the pass the training loop has taken.

        Returns:
            Positions of the epoch (all ranks') handed out so far.
        """
        piece, steps = self._walk(received)
        if steps >= piece.num_steps:
            return piece.start + piece.consumed
        return piece.start + steps * piece.step_size

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
        refused = iteration_before_restore() or ranks_refused(self)  # Lightning #20550, ranks
        shard = _accelerate_shard(sys._getframe(1))
        if refused is None and shard is not None:
            refused = self._shard_refused(shard)
        if refused is not None:
            return _raising(refused)
        if not self._fresh:
            self._next_epoch()
        if self._schedule.num_steps == 0:  # a state at an epoch's last batch: never an empty pass
            self._next_epoch()
        self._yielded, self._ended = 0, False
        if shard is not None and self.world_size > 1:
            # torchdata saves a batch sampler's state only when it has one, and accelerate's
            # shard has none: it would save a count of batches, which resumes into the same
            # number of processes only. The order's state resumes into any (2 -> 1).
            shard.state_dict, shard.load_state_dict = self.state_dict, self.load_state_dict
            return self._counted(self._all_ranks(), every=self.world_size)
        return self._counted(self._batches())

    def _counted(self, batches: Iterator[list[int]], every: int = 1) -> Iterator[list[int]]:
        # The pass starts with its first batch: torch's worker iterator calls iter() twice
        # before it fetches anything, which must not move the order to the next epoch.
        for k, batch in enumerate(batches):
            self._fresh = False
            if k % every == self.rank % every:  # every rank's batches: count this rank's
                self._yielded += 1
            yield batch
        self._ended = True

    def _all_ranks(self) -> Iterator[list[int]]:
        """Every rank's batches of the pass, step by step (rank 0's, rank 1's, ...): the global
        order that accelerate's ``BatchSamplerShard`` deals out, batch ``k`` to process
        ``k % world_size``, so that each process gets exactly this order's batches of its rank."""
        twins = []
        for rank in range(self.world_size):
            twin = copy.copy(self)
            twin.rank = rank
            twins.append(twin._batches())
        for step in zip(*twins):  # every rank has the same number of batches
            yield from step

    def _shard_refused(self, shard: Any) -> OrderLostError | None:
        """accelerate's ``prepare()`` on several processes wraps the order in its
        ``BatchSamplerShard``, which deals the batches out over processes again: exact only when
        its processes are this order's ranks and it keeps every batch as it is."""
        fix = (
            "build the loader after Accelerator() (it then takes the process group's rank and "
            "world size) and prepare it with DataLoaderConfiguration(use_stateful_dataloader=True)"
        )
        if shard.num_processes == 1:
            return None
        if shard.split_batches:
            return OrderLostError(
                "accelerate's split_batches=True splits each of GuideLoom's batches over the "
                f"{shard.num_processes} processes, but the batch order already gives each rank its "
                "own batches: leave split_batches out (the loader's batch_size is per process)"
            )
        if (shard.num_processes, shard.process_index) != (self.world_size, self.rank):
            return OrderLostError(
                f"accelerate deals batches out over {shard.num_processes} processes (this one is "
                f"{shard.process_index}), but GuideLoom's batch order was built for rank "
                f"{self.rank} of world_size={self.world_size}: each process would read another "
                f"rank's share or only part of its own. Fix: {fix}"
            )
        last_smaller = self._schedule.last_batch_size not in (0, self.batch_size)
        if shard.even_batches and last_smaller:
            return OrderLostError(
                f"this epoch ends with smaller batches ({self._schedule.last_batch_size} samples "
                "a rank), which accelerate's even_batches=True pads with samples from the "
                "epoch's start (repeating them): pass DataLoaderConfiguration(even_batches=False, "
                "use_stateful_dataloader=True), or drop_last=True to the loader"
            )
        return None

    def __len__(self) -> int:
        """A whole epoch's batches of this rank (whatever position the order is at); asked by
        accelerate's ``BatchSamplerShard``, every rank's (what it deals out, see `__iter__`)."""
        ident = self.identity
        steps = EpochSchedule(ident.num_samples, self.batch_size, self.world_size, self.drop_last).num_steps
        shard = _accelerate_shard(sys._getframe(1))
        if shard is not None and shard.num_processes == self.world_size > 1:
            return steps * self.world_size
        return steps

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
            piece, steps = self._walk(received)
            position = piece.position_after(steps)
        if self._skipped:
            extra["skipped"] = self._skipped
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
        if state_dict is None:  # torchdata's state of a wrapped batch sampler that had none
            raise ResumeStateError(
                "the loader state holds no state of GuideLoom's order (torchdata saved None for "
                "the batch sampler: it was wrapped by one without a state, such as accelerate's "
                "BatchSamplerShard with several processes in a release before the order gave it "
                "one), only a count of batches: it resumes into the same number of processes, "
                "where torchdata skips that many batches itself. Save again with this release "
                "to resume into another number of processes"
            )
        saved = LoaderState.from_dict(state_dict)
        saved.identity.check_continues(self.identity, self._source_names())
        epoch, position = self._next_pass(saved)
        self._skipped = saved.skipped
        self._configure(epoch, position)

    def skip_steps(self, steps: range) -> None:
        """Leave out global steps ``steps.start .. steps.stop - 1`` of the pass about to start:
        it yields step ``start - 1``'s batch, then step ``stop``'s; the skipped batches are
        never read. Steps are numbered from the start of training at this order's batch size
        and world size (as `guideloom.trace` numbers them); the range starts in the epoch the
        next pass is in, at or after where it starts, and may run on into later epochs (their
        first steps are left out when the order gets there). The skip is part of the state: a
        resume from any later state (any world size) and `guideloom.trace` leave the same
        samples out.

        Args:
            steps: ``range(A, B)``: the global steps to leave out.

        Raises:
            ValueError: Not a non-empty range of consecutive steps, the pass already started, or
                the range starts before the next pass (or after its epoch).
        """
        if not isinstance(steps, range) or steps.step != 1 or len(steps) == 0:
            raise ValueError(f"skip_steps takes a non-empty range of consecutive steps, got {steps!r}")
        if not self._fresh:
            raise ValueError(
                "skip_steps is for the pass about to start: call it after load_state_dict (or "
                "between epochs), before iterating the loader"
            )
        schedule, per_epoch = self._schedule, len(self)
        epoch, step_size = self._epoch, schedule.step_size
        if schedule.start % step_size:
            raise ValueError(
                f"the pass starts at position {schedule.start} of epoch {epoch}, not at a step of "
                f"{step_size} positions (batch_size * world_size): step numbers do not apply; "
                "resume with the saving run's batch size and world size to skip steps"
            )
        first = epoch * per_epoch + schedule.start // step_size
        last = (epoch + 1) * per_epoch
        if not first <= steps.start < last:
            raise ValueError(
                f"skip_steps({steps!r}): the next pass runs steps {first}..{last - 1} (epoch "
                f"{epoch}, {per_epoch} steps an epoch at batch_size={self.batch_size}, "
                f"world_size={self.world_size}); start the range inside it (it may run on into "
                "later epochs)"
            )
        # One entry per epoch the range touches: a skip may run on into later epochs.
        num_samples = self.identity.num_samples
        added, at = [], steps.start
        while at < steps.stop:
            current = at // per_epoch
            end = min(steps.stop, (current + 1) * per_epoch)
            base = current * per_epoch
            lo = (at - base) * step_size
            hi = (
                num_samples
                if end == (current + 1) * per_epoch
                else min((end - base) * step_size, num_samples)
            )
            added.append((current, lo, hi))
            at = end
        self._skipped = tuple(sorted({*self._skipped, *added}))
        self._segments = self._split(schedule)
        if self._ahead is not None:
            self._ahead.configure(epoch, schedule.start, self._skipped)

    def _next_pass(self, saved: LoaderState) -> tuple[int, int]:
        num_samples = self.identity.num_samples

        def batches_left(position: int) -> int:
            return EpochSchedule(
                num_samples, self.batch_size, self.world_size, self.drop_last, position
            ).num_steps

        return saved.next_pass(batches_left)


class RankSampler(DistributedSampler):  # type: ignore[type-arg]
    """GuideLoom's loader's ``sampler``: this rank's samples of the order, as a
    ``DistributedSampler``, because that is what Lightning looks for. Lightning under DDP with
    ``use_distributed_sampler=True`` (its default) rebuilds a loader whose ``sampler`` is not a
    ``DistributedSampler`` around its own one, which would replace GuideLoom's order; a loader
    that already has one is kept as it is. The order is the loader's ``batch_sampler`` (a
    `BatchOrder`, which already splits every epoch over the ranks); this only describes it.
    Iterating it yields the sample indexes of the order's next pass and moves nothing.

    Args:
        order: The loader's `BatchOrder`.
    """

    def __init__(self, order: BatchOrder) -> None:  # no DistributedSampler.__init__: no process group needed
        self.order = order
        self.dataset = order.view
        self.num_replicas, self.rank = order.world_size, order.rank
        self.shuffle = order.identity.shuffle.mode != "none"
        self.seed, self.drop_last = order.identity.seed, order.drop_last
        self.epoch = 0

    @property
    def num_samples(self) -> int:  # type: ignore[override]
        """This rank's samples in a whole epoch."""
        ident, order = self.order.identity, self.order
        schedule = EpochSchedule(ident.num_samples, order.batch_size, order.world_size, order.drop_last)
        return schedule.full_steps * schedule.batch_size + schedule.last_batch_size

    @property
    def total_size(self) -> int:  # type: ignore[override]
        """Every rank's samples in a whole epoch."""
        return self.num_samples * self.num_replicas

    def __iter__(self) -> Iterator[int]:
        for batch in self.order._batches():
            yield from batch

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Noted only: Lightning calls ``set_epoch`` on the loader's ``batch_sampler`` too (the
        order, which moves to that epoch).

        Args:
            epoch: The epoch about to start.
        """
        self.epoch = epoch
