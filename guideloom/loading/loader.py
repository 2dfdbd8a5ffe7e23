"""``StatefulDataLoader``: torchdata's loader, with exact, O(1), elastic resume over GuideLoom views.

A true subclass of torchdata's ``StatefulDataLoader``: given a plain torch dataset (map-style or
iterable), or a GuideLoom view together with ``sampler=``, ``batch_sampler=``, ``generator=`` or
``in_order=False``, it *is* torchdata's loader (construction, passes, ``state_dict``,
``load_state_dict``, ``len`` and attributes are torchdata's own; torchdata's own test file runs
against it in ``tests/loading/torchdata``). Its arguments take torchdata's positions.

GuideLoom's own path is `StatefulDataLoader.from_storage` (or a view, `DocumentDataset`,
`StreamDataset`, `StreamWithMetaDataset` or a mixture's): then the main process decides
everything about the order and every pass runs the same batch path, whoever fetches:

- `guideloom.loading.sampler`: the epoch's schedule and order -> this rank's batches of sample
  indexes, in groups of consecutive batches sized by bytes (the read-ahead);
- `guideloom.loading.fetch`: one read per group, collate, pin (what a worker runs);
- `guideloom.loading.view_recipe`: what ``from_storage`` makes a view of (subset, boundaries,
  sources, reopening at a snapshot); `guideloom.loading.batch_order`: the order (`BatchOrder`);
  `guideloom.loading.read_settings`: how it reads (`ReadSettings`); `from_storage` is those three
  put together, and a user can put them together too
  (``StatefulDataLoader(view, batch_sampler=BatchOrder(view, ...), read=ReadSettings(...))``);
- `guideloom.loading.snapshots`: following a growing dataset, resuming an older snapshot;
  `guideloom.loading.loader_args`: which path (GuideLoom's or torchdata's) the arguments pick;
- this module: the loader, its passes and its state. With ``num_workers=0`` the training loop's
  own thread fetches; with worker processes (``parallel_method="process"``, the default)
  torchdata's workers, each group pickled back through a pipe; with ``parallel_method="thread"``
  a pool of threads in this process (`guideloom.loading.threads`), batches handed over by
  reference. Then (one batch ahead) the copy to ``device`` (`guideloom.loading.placement`).

The state is ``(epoch, position, finished)``: ``position`` counts the samples handed out in the
epoch over all ranks, up to the last batch the caller has *received* (not what was dispatched to
workers or prefetched). Loading a state configures the sampler to start there: no earlier batch
is read, replayed or skipped through, so resuming at 90 % of an epoch costs what resuming at 1 %
does. torchdata's own snapshot and fast-forward machinery is not used.

Resume semantics (the ``docs/training.md`` section)
---------------------------------------------------
- ``state_dict()`` may be called at any time, also between epochs and before the first batch; it
  describes the position after the last batch the loop has received. It is a small dict of ints
  and short strings (see `guideloom.loading.state`); save it next to the model's checkpoint.
- ``load_state_dict(state)`` on a freshly built loader (same dataset content, ``sequence_length``,
  ``seed`` and shuffle settings) makes the next ``iter(loader)`` continue exactly: mid-epoch it
  yields the rest of that epoch. The end of an epoch is torchdata's rule: a state saved inside
  the loop at the epoch's last batch resumes into an empty pass, and the pass after it starts
  the next epoch; a state saved after the loop ended starts the next epoch. So the usual
  ``for epoch in range(start_epoch, num_epochs): for batch in loader:`` loop trains every epoch
  exactly once. Iterating the loader again (a new ``for`` loop) always starts the next epoch.
- ``num_workers``, ``prefetch_factor``, ``batch_size``, ``drop_last`` and the world size may
  differ on resume. After a change of world size every rank loads the state *rank 0* saved; the
  rest of the epoch is then split over the new ranks, every remaining sample exactly once (except
  the bounded end-of-epoch remainder below).
- Every rank gets the same number of batches per epoch (`guideloom.loading.schedule`). At the end
  of an epoch, fewer than ``world_size * batch_size`` positions remain: with ``drop_last=True``
  they are not handed out; with ``drop_last=False`` each rank gets one smaller last batch of
  ``remaining // world_size`` and at most ``world_size - 1`` samples are left out.
- A state from another dataset content, ``sequence_length``, seed, shuffle setting or layout, or a
  corrupt or truncated one, raises `guideloom.errors.ResumeStateError`. The same dataset
  copied to another URL or bucket resumes (the check uses the manifest's content fingerprint).
- Ranks must save at the same step (the usual case: all ranks run the same number of steps).

In a training loop::

    loader = StatefulDataLoader.from_storage(storage, sequence_length=2048, batch_size=8,
                                             shuffle=True, seed=0, num_workers=2)
    start_epoch = 0
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model"])
        loader.load_state_dict(checkpoint["loader"])      # O(1): nothing is re-read
        start_epoch = checkpoint["epoch"]
    for epoch in range(start_epoch, num_epochs):
        for batch in loader:                                # one pass = (the rest of) one epoch
            loss = train_step(model, batch)
            if should_save() and rank == 0:
                torch.save({"model": model.state_dict(), "loader": loader.state_dict(),
                            "epoch": epoch}, path)
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any

import numpy as np
import torch
from torchdata.stateful_dataloader import StatefulDataLoader as _TorchdataLoader

from guideloom.io.stats import IOStats, io_stats, merge_stats, subtract_stats
from guideloom.loading.batch_order import (
    BatchOrder,
    RankSampler,
    _distributed_default,
    check_epoch,
    iteration_before_restore,
    ranks_refused,
)
from guideloom.loading.collate import collate_documents
from guideloom.loading.fetch import BatchSource, Finish, GroupCollate, batch_path, unrolled
from guideloom.loading.loader_args import (
    DEFAULT,
    ORDER_ARGUMENTS,
    is_view,
    or_default,
    refuse_guideloom_only,
    refuse_order_settings,
    torchdata_init,
)
from guideloom.loading.metrics import METRICS_KEY, Counted, LoaderMeter, checked, keeps_columns
from guideloom.loading.mixture_sources import (
    RankCounts,
    SourcedCollate,
    delivered,
    source_names,
)
from guideloom.loading.order import positive_int
from guideloom.loading.passes import Pass, Progress, TimedPass
from guideloom.loading.placement import Placed, accelerator_available
from guideloom.loading.read_settings import ReadSettings
from guideloom.loading.sampler import (
    DEFAULT_READ_AHEAD_BYTES,
    READ_AHEAD_ENV,
    GroupedBatches,
    Grouping,
)
from guideloom.loading.schedule import EpochSchedule
from guideloom.loading.shuffling import resolve_shuffle
from guideloom.loading.snapshots import SnapshotMoves
from guideloom.loading.state import LoaderState, OrderIdentity
from guideloom.loading.threads import SourceCopies, ThreadBatches, thread_settings
from guideloom.loading.view_recipe import ViewRecipe
from guideloom.storage import Storage
from guideloom.types import DatasetView, as_mixture

__all__ = ["DEFAULT_READ_AHEAD_BYTES", "READ_AHEAD_ENV", "StatefulDataLoader"]


def _weak_call(method: Callable[[], None]) -> Callable[[], None]:
    """``method`` called through a weak reference to its object (a no-op once it is gone)."""
    ref = weakref.WeakMethod(method)

    def call() -> None:
        bound = ref()
        if bound is not None:
            bound()

    return call


def _named_counts(view: Any, totals: list[int]) -> dict[str, dict[str, int | None]]:
    """`StatefulDataLoader.source_counts`' figures: ``totals`` samples of each source."""
    length = view.sequence_length
    out: dict[str, dict[str, int | None]] = {}
    for name, samples in zip(source_names(view), totals):
        out[name] = {"samples": samples, "tokens": samples * length if length else None}
    return out


def _counts_at(view: Any, before: list[int], handed: int) -> dict[str, dict[str, int | None]]:
    """The global source counts with ``handed`` positions of the current epoch handed out."""
    return _named_counts(view, [a + b for a, b in zip(before, delivered(view, handed))])


class StatefulDataLoader(SnapshotMoves, _TorchdataLoader):
    """torchdata's ``StatefulDataLoader``; over a GuideLoom view, resumable exactly and in O(1).

    Build GuideLoom's loader with `from_storage`. Batches: streams give a dict of tensors of
    shape ``(batch, sequence_length)``; streams with metadata give the format's aligned samples
    collated per field (see `guideloom.loading.collate`); documents give a list of records.
    ``collate_fn``, when given, receives the list of samples instead.

    Iterating it (``for batch in loader``) yields the rest of the current epoch, then a new
    ``for`` loop starts the next epoch; ``len(loader)`` is always a whole epoch's batches (torchdata's rule), also after a resume.
    Reading errors of a batch (`ShardNotFoundError`, `ShardCorruptError`,
    `StorageAccessError`) reach the loop with their type and message, also from worker
    processes.

    Given a plain torch dataset, or a view with ``sampler=``, ``batch_sampler=``,
    ``generator=`` or ``in_order=False``, it is torchdata's loader, unchanged.
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int | None = 1,
        shuffle: bool | str | None = None,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int = 0,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: Any = None,
        generator: Any = None,
        *,
        seed: int = DEFAULT,
        rank: int | None = None,
        world_size: int | None = None,
        shuffle_block_size: int = DEFAULT,
        shuffle_buffer_blocks: int = DEFAULT,
        shuffle_run_size: int | None = None,
        shuffle_block_bytes: int | None = None,
        shuffle_window_bytes: int | None = None,
        shuffle_window_blocks: int | None = None,
        read_ahead: int | None = None,
        read_ahead_bytes: int | None = None,
        read: ReadSettings | None = None,
        parallel_method: str = DEFAULT,
        device: str | torch.device | None = None,
        **kwargs: Any,
    ) -> None:
        """A loader over a view (`from_storage` builds the view from a storage), or torchdata's.

        The positional arguments are torchdata's, in its order (``dataset, batch_size, shuffle,
        sampler, batch_sampler, num_workers, collate_fn, pin_memory, drop_last, timeout,
        worker_init_fn, multiprocessing_context, generator``); the keyword-only ones from
        ``seed`` to ``device`` are GuideLoom's and apply to views only.

        Args:
            dataset: A `DocumentDataset`, `StreamDataset` or `StreamWithMetaDataset` (or the view
                of a `Mixture`, `mixture.dataset(...)`): GuideLoom's loader. Any other torch
                dataset (map-style or iterable): torchdata's loader, with torchdata's arguments.
            batch_size: Samples (windows or documents) per batch on each rank.
            shuffle: `False` / None (sequential), `True` or `"full"` (a random permutation per
                epoch), `"block"` (blocks of consecutive samples permuted, then samples permuted
                inside windows of blocks; see `from_storage`) or a `guideloom.Shuffle`.
            sampler: torchdata's: with it (or `batch_sampler`, `generator`) the order is the
                sampler's, and the loader is torchdata's.
            batch_sampler: A `BatchOrder` of this very `dataset`: GuideLoom's loader in that
                order (its batch size, shuffle, seed, `drop_last` and ranks; leave those out
                here). Any other batch sampler: as `sampler`.
            num_workers: Worker processes (or threads, with `parallel_method="thread"`) that
                fetch and collate batches; 0 fetches in the training loop's thread.
            collate_fn: Turns a batch's list of samples into what the loop receives; default:
                tensors per field (streams) or the list of records (documents).
            pin_memory: Put batches in pinned host memory (skipped without an accelerator).
            drop_last: Leave out the end-of-epoch remainder that does not fill a batch on every
                rank.
            timeout: Seconds to wait for one batch (or group) from a worker; 0 waits forever.
            worker_init_fn: Called in each worker process with its id (processes only).
            multiprocessing_context: How worker processes start (processes only).
            generator: As `sampler`.
            seed: The seed of the order (default 0); with the epoch number it decides every
                epoch's order.
            rank: This process's rank; default: torch.distributed's, or 0.
            world_size: The number of ranks; default: torch.distributed's, or 1.
            shuffle_block_size: `shuffle="block"`, the block order in samples of GuideLoom
                before the byte-sized shuffle (kept so that its states resume): samples per
                block (64 then).
            shuffle_buffer_blocks: That old order: blocks per shuffle buffer (4 then).
            shuffle_run_size: That old order: consecutive samples kept together inside a
                buffer; it must divide `shuffle_block_size`; default `gcd(8, shuffle_block_size)`.
            shuffle_block_bytes: `shuffle="block"`: bytes of consecutive samples per block
                (default 1 MiB; see `guideloom.loading.shuffling`).
            shuffle_window_bytes: `shuffle="block"`: bytes of blocks whose samples are permuted
                together, read as one group per rank (default 512 MiB).
            shuffle_window_blocks: `shuffle="block"`: blocks per window, instead of
                `shuffle_window_bytes`.
            read_ahead: Batches a worker fetches together with the current one, in one round of
                concurrent range requests (a fixed group of `read_ahead + 1` batches); default:
                sized by `read_ahead_bytes`. It changes when bytes are fetched, never which
                samples a batch holds.
            read_ahead_bytes: When `read_ahead` is not given: the most bytes of
                batches one read fetches (a group of a power of two of batches, grown from one
                batch; see `guideloom.loading.sampler`); default `$GUIDELOOM_READ_AHEAD_BYTES`,
                or 4 MiB. Each worker holds at most `prefetch_factor + 1` such groups.
            read: A `ReadSettings` with the read-ahead (`read_ahead` / `read_ahead_bytes` given
                loose are shorthands for its fields; a field given both ways is refused). Its
                cache fields are refused here: a view reads through its storage's cache.
            parallel_method: `"process"` (default: torchdata's worker processes) or `"thread"`
                (threads of this process, batches handed over without a copy).
            device: Copy every batch's tensors to this device (e.g. `"cuda"`) with
                `non_blocking=True`, one batch ahead; None leaves them on the CPU.
            **kwargs: torchdata's keyword-only options (`prefetch_factor` in batches per
                worker, `persistent_workers`, `pin_memory_device`, `in_order`,
                `snapshot_every_n_steps`).

        Raises:
            TypeError: GuideLoom-only arguments (`seed` .. `device`, or a string `shuffle`) with
                a plain torch dataset or with `sampler=` / `batch_sampler=` / `generator=` /
                `in_order=False` (the message names them); a GuideLoom storage or `Mixture`
                given instead of a view (use `from_storage`); order settings given beside a
                `BatchOrder`; `read=` with cache fields.
            ValueError: A setting out of range: a non-positive `batch_size` or block setting,
                a `shuffle_run_size` that does not divide the block size, a `rank` outside
                `0 .. world_size - 1`, more ranks than samples, no full batch with `drop_last`,
                an empty dataset, an unknown `shuffle` or `parallel_method`, or a process-only
                option with thread workers. torchdata's own checks for its loader.
        """
        guideloom_only = {
            "seed": seed,
            "rank": rank,
            "world_size": world_size,
            "shuffle_block_size": shuffle_block_size,
            "shuffle_buffer_blocks": shuffle_buffer_blocks,
            "shuffle_run_size": shuffle_run_size,
            "shuffle_block_bytes": shuffle_block_bytes,
            "shuffle_window_bytes": shuffle_window_bytes,
            "shuffle_window_blocks": shuffle_window_blocks,
            "read_ahead": read_ahead,
            "read_ahead_bytes": read_ahead_bytes,
            "read": read,
            "parallel_method": parallel_method,
            "device": device,
        }
        # A BatchOrder of this very view is GuideLoom's order: the loader is GuideLoom's.
        order = (
            batch_sampler if isinstance(batch_sampler, BatchOrder) and batch_sampler.view is dataset else None
        )
        takes_order = [
            n
            for n, v in zip(
                ORDER_ARGUMENTS, (sampler, None if order is not None else batch_sampler, generator)
            )
            if v is not None
        ]
        if not kwargs.get("in_order", True):
            takes_order.append("in_order=False")
        self._guideloom = is_view(dataset) and not takes_order
        if not self._guideloom:
            refuse_guideloom_only(dataset, takes_order, shuffle, guideloom_only)
            torchdata_init(
                self, dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn,
                pin_memory, drop_last, timeout, worker_init_fn, multiprocessing_context, generator,
                **kwargs,
            )  # fmt: skip
            return
        if order is not None:
            refuse_order_settings(order, batch_size, shuffle, drop_last, guideloom_only)
        self._io_base = io_stats()  # this process's requests before this loader
        self._worker_io: dict[int, Any] = {}  # worker process id -> its requests (reported)
        torch_options = {
            "timeout": timeout,
            "worker_init_fn": worker_init_fn,
            "multiprocessing_context": multiprocessing_context,
            **kwargs,
        }
        reading = ReadSettings.merged(read, read_ahead=read_ahead, read_ahead_bytes=read_ahead_bytes)
        if reading.cache:
            raise TypeError(
                "read=ReadSettings(cache_dir=...) is for a storage given as a URL "
                "(StatefulDataLoader.from_storage(url, read=...)); a view reads through the cache its "
                "storage was opened with: open the storage with it (ReadSettings(cache_dir=...).open(url))"
            )
        self._build(
            dataset,
            batch_size=batch_size,
            shuffle=shuffle,
            seed=or_default(seed, 0),
            drop_last=drop_last,
            rank=rank,
            world_size=world_size,
            num_workers=num_workers,
            collate_fn=collate_fn,
            shuffle_sizes={
                "shuffle_block_size": or_default(shuffle_block_size, None),
                "shuffle_buffer_blocks": or_default(shuffle_buffer_blocks, None),
                "shuffle_run_size": shuffle_run_size,
                "shuffle_block_bytes": shuffle_block_bytes,
                "shuffle_window_bytes": shuffle_window_bytes,
                "shuffle_window_blocks": shuffle_window_blocks,
            },
            read=reading,
            parallel_method=or_default(parallel_method, "process"),
            device=device,
            pin_memory=pin_memory,
            torch_options=torch_options,
            order=order,
        )

    def _build(
        self,
        view: Any,
        *,
        batch_size: Any,
        shuffle: Any,
        seed: Any,
        drop_last: bool,
        rank: int | None,
        world_size: int | None,
        num_workers: Any,
        collate_fn: Callable[[list[Any]], Any] | None,
        shuffle_sizes: dict[str, Any],
        read: ReadSettings,
        parallel_method: Any,
        device: str | torch.device | None,
        pin_memory: bool,
        torch_options: dict[str, Any],
        order: BatchOrder | None = None,
    ) -> None:
        """GuideLoom's loader over ``view``: every setting checked here, once (see `__init__`)."""
        mixture = as_mixture(view)  # see loading/mixture.py
        if order is None:
            settings, own_seed = resolve_shuffle(shuffle, view, **shuffle_sizes)  # loading/shuffling.py
            seed = seed if own_seed is None else own_seed
            if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
                raise ValueError(f"seed must be an integer, got {seed!r}")
            batch_size = positive_int("batch_size", batch_size)
            from_dist = rank is None and world_size is None
            rank, world_size = _distributed_default(rank, world_size)
            num_samples = mixture.plan.epoch_length if mixture else len(view)
            check_epoch(view, num_samples, batch_size, world_size, bool(drop_last))
            identity = OrderIdentity.of_view(
                view, mixture, num_samples=num_samples, seed=int(seed), shuffle=settings
            )
            order = BatchOrder._for_loader(view, identity, batch_size, rank, world_size, bool(drop_last))
            order._ranks_from_dist = from_dist
            order._attach()  # read-ahead for loaders rebuilt from loader.dataset and this order
        else:  # the caller's BatchOrder (checked when it was made)
            batch_size, rank, world_size = order.batch_size, order.rank, order.world_size
            drop_last, settings = order.drop_last, order.identity.shuffle

        source, collate = batch_path(view, collate_fn)
        if mixture is not None and mixture.sourced:  # sources=True: the source keys (mixture_sources)
            collate = SourcedCollate(collate)
        kwargs = dict(torch_options)
        kwargs.setdefault("snapshot_every_n_steps", None)  # our state needs no torchdata snapshots
        grouping = Grouping.from_options(read.read_ahead, read.read_ahead_bytes, view, batch_size)
        if settings.sized and mixture is None and read.read_ahead is None and read.read_ahead_bytes is None:
            grouping = grouping._replace(windows=True)  # a window's blocks fetched whole
            source.gap_budget = None  # a rank's share of a window: through the gaps of a block
        if isinstance(num_workers, bool) or not isinstance(num_workers, (int, np.integer)) or num_workers < 0:
            raise ValueError(f"num_workers must be a non-negative integer, got {num_workers!r}")
        threads = thread_settings(parallel_method, int(num_workers), kwargs)
        self._threads = threads
        self._device = None if device is None else torch.device(device)
        self._pin = bool(pin_memory)
        torch_workers = 0 if threads is not None else int(num_workers)
        if self._pin and torch_workers and accelerator_available():
            kwargs["pin_memory"] = True  # torch's pin-memory thread serves its worker processes
        # torchdata's worker processes get whole groups from the sampler (one item each); thread
        # workers and num_workers=0 group consecutive batches themselves (see _groups).
        self._grouping = grouping
        self._finish_batch = Finish(collate, self._pin)
        # Public: the view as a DataLoader reads it, the order (a stateful batch sampler) and the
        # batch's collate; a loader rebuilt from them reads GuideLoom's batches.
        torchdata_init(
            self, source, batch_sampler=order, num_workers=torch_workers, collate_fn=collate, **kwargs
        )
        # torchdata's worker processes get whole groups (one item each) from a private loader.
        self._workers: _TorchdataLoader | None = None
        if torch_workers:
            self._workers = _TorchdataLoader.__new__(_TorchdataLoader)
            torchdata_init(
                self._workers,
                source,
                batch_sampler=GroupedBatches(order, grouping),
                num_workers=torch_workers,
                collate_fn=GroupCollate(collate),
                **kwargs,
            )
        # DataLoader sets these to None/False for a batch_sampler; report the real settings.
        object.__setattr__(self, "batch_size", batch_size)
        object.__setattr__(self, "drop_last", bool(drop_last))
        # a DistributedSampler, so that Lightning's DDP keeps the loader instead of injecting its own
        object.__setattr__(self, "sampler", RankSampler(order))
        if threads is not None:  # torchdata was given 0 (it starts no processes); report the threads
            object.__setattr__(self, "num_workers", int(num_workers))
        self.parallel_method = "thread" if threads is not None else "process"
        self.device = self._device

        self.view = view
        self._mixture = mixture
        self.rank = rank
        self.world_size = world_size
        self._shuffle = settings
        self._source_names: tuple[str, ...] = tuple(mixture.mixture.names) if mixture else ()
        # weakly: a loader dropped mid-epoch is freed at once, not by a later garbage collection
        # (which closes torch's worker queues before the workers hear to stop: 5 s each, then a kill)
        order._on_epoch_end = _weak_call(self._epoch_ends)
        self._live: Progress | None = None  # what the current pass has delivered
        self._pass: weakref.ref[Pass] | None = None  # the current pass, not kept alive by us
        self._copies: SourceCopies | None = None  # thread workers' private views, made lazily
        # per source: samples delivered in the epochs before this one (source_counts)
        self._samples_before = [0] * len(source_names(view))
        self._rank_counts = RankCounts(view, rank)  # source_counts(scope="rank")
        self._meter = LoaderMeter(rank, world_size)  # metrics(): this rank's counters
        self._reopen: Callable[[str | None], DatasetView] | None = None  # from_storage sets it
        # a Mixture's: its view with each source at the given snapshot (from_storage sets it)
        self._reopen_sources: Callable[[Sequence[str | None]], DatasetView] | None = None
        self._follow = False
        self._prepare(epoch=0, position=0)

    @classmethod
    def from_storage(
        cls,
        storage: Any,
        *,
        sequence_length: int | None = None,
        batch_size: int = 1,
        shuffle: bool | str = False,
        seed: int = 0,
        drop_last: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
        num_workers: int = 0,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        parallel_method: str = "process",
        device: str | torch.device | None = None,
        pin_memory: bool = False,
        boundaries: str | None = None,
        labels: bool = False,
        eos_id: int | None = None,
        pack: Any = None,
        sources: bool = False,
        follow: bool = False,
        skip: int | None = None,
        take: int | None = None,
        holdout: float | None = None,
        holdout_seed: int = 0,
        held_out: bool = False,
        shuffle_block_size: int | None = None,
        shuffle_buffer_blocks: int | None = None,
        shuffle_run_size: int | None = None,
        read_ahead: int | None = None,
        read_ahead_bytes: int | None = None,
        read: ReadSettings | None = None,
        storage_options: dict[str, Any] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_bytes: int | None = None,
        **kwargs: Any,
    ) -> StatefulDataLoader:
        """A loader over ``storage`` wrapped in its matching view.

        It is three pieces a caller can also put together: the view (``storage``'s view with
        ``skip`` / ``take`` / ``holdout`` and ``boundaries`` / ``labels`` applied, as
        ``view.holdout(f)[0].skip(n).take(m)`` and `guideloom.loading.boundaries.BoundaryView`
        do: `guideloom.loading.view_recipe`), the order (`BatchOrder`: ``batch_size``,
        ``shuffle`` and its block settings, ``seed``, ``drop_last``, ``rank``, ``world_size``) and
        how it reads (`ReadSettings`: ``read_ahead``, ``read_ahead_bytes``, ``cache_dir``,
        ``cache_bytes``; pass ``read=ReadSettings(...)`` or the loose keywords). So
        ``StatefulDataLoader(view, batch_sampler=BatchOrder(view, 8, shuffle=True),
        read=ReadSettings(read_ahead=2))`` gives the batches and states this method does.

        ``storage`` may also be a dataset's URL (a local path or an fsspec URL, with
        ``storage_options``): it is opened with `guideloom.open`, with the storage class and
        format its manifest records.

        ``follow=True``: at each epoch boundary (never inside an epoch) the loader re-reads the
        storage and moves to its current snapshot, so records appended meanwhile are in the next
        epoch's order (`docs/datasets-that-grow.md`). Whether it follows or not, a state saved on
        an older snapshot resumes on that snapshot exactly (the view is reopened there).

        ``boundaries`` (streams): where documents start inside windows, so that batches also
        hold ``position_ids`` ``(B, L)`` int64 (0 at each document start and window start),
        ``cu_seqlens`` (int32, 1-D over the ``B * L`` flattened tokens: 0, every document and
        row start, ``B * L``) and ``max_seqlen``; ``"records"`` (the stored record starts),
        ``"eos"`` (after each ``eos_id``; default: the ingestion tokenizer's, from the manifest)
        or a field name (where its value changes). ``labels=True`` adds ``labels`` ``(B, L)``:
        the next token of the same document, ``-100`` at each document's last token, the
        window's last token and where the target's ``loss_mask`` is 0 (alone it implies
        ``boundaries="records"``). See `guideloom.loading.boundaries` and docs/training.md.

        ``pack="whole"`` (one stream): each window holds whole records and padding instead of
        ``sequence_length`` consecutive tokens, with ``loss_mask``, ``position_ids``, ``labels``
        and ``cu_seqlens`` per record (`guideloom.loading.packing`; ``pack=Packing(...)`` sets
        the buffer, the pad id and what happens to records longer than the window).

        ``sources=True`` (mixtures): batches also hold ``source`` (int64 ``(B,)``: each row's
        source, its index in the mixture) and ``source_index`` (int64 ``(B,)``: the row's sample in
        that source's view, what `guideloom.trace` calls ``sample_index``); a document batch is
        then ``{"documents": [records], "source": ..., "source_index": ...}``. Off by default, so
        batches keep their keys. `source_counts` works either way. See
        `guideloom.loading.mixture_sources` and docs/mixing.md.

        ``skip``, ``take``, ``holdout`` (one storage): read a deterministic subset of its samples
        (`guideloom.storage.subset`). ``holdout=f`` splits the samples by a split seeded by
        ``holdout_seed`` that is the same in every run, on every rank and at every world size:
        the loader reads the kept ``1 - f`` (``held_out=False``) or the held-out ``f``
        (``held_out=True``); then ``skip`` leaves out that part's first samples and ``take``
        keeps its next ones. The order, the ranks' shares and resume are the subset's, as for
        any view; a state saved on one subset is refused on another.

        ``sequence_length`` (tokens per window) is required for streams and refused for
        documents. ``shuffle``: ``False`` (sequential), ``True`` / ``"full"`` (a full random
        permutation per epoch), ``"block"`` (blocks of ``shuffle_block_bytes`` (default 1 MiB)
        of consecutive samples permuted, and the samples of each window of
        ``shuffle_window_bytes`` (default 512 MiB) permuted together; a rank reads a window's
        share as one group, one request per block: see `guideloom.loading.shuffling` and
        `guideloom.shuffle_report`) or a `guideloom.Shuffle` holding these settings. The block
        order in samples of earlier versions (``shuffle_block_size``, ``shuffle_buffer_blocks``,
        ``shuffle_run_size``; 64, 4 and 8 then) is built when those are given, so that its
        states resume; see `guideloom.loading.order`. ``rank`` and
        ``world_size`` default to torch.distributed's when it is initialized. ``read_ahead``
        (batches) lets each worker fetch its next
        batches together with the current one, in one round of concurrent range requests; it
        changes when bytes are fetched, never which samples a batch holds.
        ``read_ahead_bytes`` (default ``$GUIDELOOM_READ_AHEAD_BYTES`` or 4 MiB) sizes that read
        by bytes instead, on remote storage: groups of consecutive batches, grown from one
        batch to the most that fit, so a block-shuffled group fetches whole blocks of windows
        with one request each.

        ``parallel_method``: ``"process"`` (default: torchdata's worker processes; every batch
        is pickled through a pipe) or ``"thread"``: ``num_workers`` threads of the training
        process fetch and collate batches, handed over without a copy (see
        `guideloom.loading.threads`); ``prefetch_factor`` (default 2) batches, or groups of
        ``read_ahead + 1`` batches, per thread are in flight. Both give the same batches in the
        same order as ``num_workers=0``, and states move freely between them.

        ``pin_memory=True`` puts batches in pinned host memory (skipped, silently, without an
        accelerator); ``device`` (e.g. ``"cuda"``) copies every batch's tensors there with
        ``non_blocking=True``, one batch ahead of the training loop (see
        `guideloom.loading.placement`). Other keyword arguments (``prefetch_factor``,
        ``persistent_workers``, ``multiprocessing_context``, ``timeout``, ``worker_init_fn``, ...)
        go to torchdata.

        Args:
            storage: A `DocumentStorage`, `StreamStorage` or `StreamWithMetaStorage` holding a
                committed dataset, or a `Mixture` of them.
            sequence_length: Tokens per window: required for streams, refused for documents.
            batch_size: Samples (windows or documents) per batch on each rank.
            shuffle: `False`, `True` / `"full"`, `"block"` or a `guideloom.Shuffle` (see above).
            seed: The seed of the order; with the epoch number it decides every epoch's order.
            drop_last: Leave out the end-of-epoch remainder that does not fill a batch on every
                rank (else each rank gets one smaller last batch).
            rank: This process's rank; default: torch.distributed's, or 0.
            world_size: The number of ranks; default: torch.distributed's, or 1.
            num_workers: Worker processes (or threads, with `parallel_method="thread"`); 0
                fetches in the training loop's thread.
            collate_fn: Turns a batch's list of samples into what the loop receives.
            parallel_method: `"process"` or `"thread"` (see above).
            device: Copy every batch's tensors to this device (e.g. `"cuda"`), one batch ahead;
                None leaves them on the CPU.
            pin_memory: Put batches in pinned host memory (skipped without an accelerator).
            pack: `"whole"` or a `guideloom.loading.packing.Packing`: windows of whole records,
                padded (see above); None reads consecutive tokens.
            sources: Mixtures: add `source` and `source_index` (int64, one per row) to every
                batch (see above); off by default.
            follow: Move to the storage's current snapshot at every epoch boundary (not for a
                `Mixture`, nor with `persistent_workers=True`).
            skip: Leave out the first `skip` samples (of the held-out split's part, with
                `holdout`).
            take: Read at most `take` samples (after `skip`).
            holdout: The fraction of samples a seeded split holds out (in steps of 0.001); the
                loader reads the rest, or with `held_out=True` those.
            holdout_seed: The seed of the `holdout` split.
            held_out: With `holdout`: read the held-out samples instead of the kept ones.
            shuffle_block_size: The old block order (see above): samples per block.
            shuffle_buffer_blocks: The old block order: blocks per shuffle buffer.
            shuffle_run_size: The old block order: consecutive samples kept together inside a
                buffer; it must divide `shuffle_block_size`; default `gcd(8, shuffle_block_size)`.
            read_ahead: Batches each worker fetches together with the current one (a fixed
                group of `read_ahead + 1`); default: grouped by `read_ahead_bytes`.
            read_ahead_bytes: Remote storage, when `read_ahead` is not given: the most bytes
                of one read of consecutive batches (default `$GUIDELOOM_READ_AHEAD_BYTES` or
                4 MiB).
            read: A `ReadSettings` (read-ahead, block cache); the loose `read_ahead`,
                `read_ahead_bytes`, `cache_dir` and `cache_bytes` are shorthands for its fields
                (a field given both ways is refused).
            storage_options: fsspec options for a `storage` given as a URL (refused with a
                storage object, which has its own).
            cache_dir: For a `storage` given as a URL: a local folder for the opt-in block
                cache (see the storage classes' `cache_dir`; a storage object takes it when it
                is opened). Default: no cache.
            cache_bytes: For a `storage` given as a URL, with `cache_dir`: the cache's bound in
                bytes (default the smaller of 16 GiB and half the free space of `cache_dir`).
            **kwargs: The byte-sized block shuffle's `shuffle_block_bytes`,
                `shuffle_window_bytes` and `shuffle_window_blocks` (see the class), and
                torchdata's own options
                (`prefetch_factor` in batches per worker, `persistent_workers`,
                `multiprocessing_context`, `timeout` in seconds, `worker_init_fn`, ...).

        Returns:
            A `StatefulDataLoader` at the start of epoch 0 (`load_state_dict` moves it).

        Raises:
            DatasetNotFoundError: No dataset is committed at the storage's URL.
            ManifestError: The manifest is unreadable, of an unknown version or invalid.
            PluginError: A URL whose manifest records a format of a user's own that is not
                registered (see `guideloom.open`).
            MixtureError: A `Mixture` whose sources cannot be read together (sequence lengths,
                an empty source; the message names the source).
            ResumeStateError: A `Mixture` built with an `after=` state that does not fit it.
            StorageAccessError: The storage refused a request or could not be reached.
            TypeError: `storage` is not a GuideLoom storage or `Mixture`, or `sampler=`,
                `batch_sampler=` or `generator=` is passed (the order comes from `seed` and
                `shuffle`).
            ValueError: `sequence_length` missing for a stream, given for documents, not
                positive or longer than the stream; `in_order=False`; `sources=True` for one
                storage (not a `Mixture`); or another setting out
                of range (see the class).
        """
        recipe = ViewRecipe(  # the view's transforms, checked before any read
            sequence_length,
            skip,
            take,
            holdout,
            holdout_seed,
            held_out,
            boundaries,
            labels,
            eos_id,
            sources,
            pack=pack,
            pack_seed=seed,
            pack_shuffle=shuffle,
        )
        read = ReadSettings.merged(
            read,
            read_ahead=read_ahead,
            read_ahead_bytes=read_ahead_bytes,
            cache_dir=cache_dir,
            cache_bytes=cache_bytes,
        )
        storage = recipe.open(storage, read, storage_options)
        for name in ORDER_ARGUMENTS:
            if name in kwargs:
                raise TypeError(
                    f"{name}= is not accepted: the order comes from seed and shuffle, so that it "
                    "can be resumed exactly"
                )
        if kwargs.get("in_order", True) is not True:
            raise ValueError("in_order=False is not supported: it breaks exact resume")
        recipe.check(storage, follow, bool(kwargs.get("persistent_workers")), world_size)
        shuffle_blocks = {
            "shuffle_block_size": shuffle_block_size,
            "shuffle_buffer_blocks": shuffle_buffer_blocks,
            "shuffle_run_size": shuffle_run_size,
        }
        kwargs.update({name: value for name, value in shuffle_blocks.items() if value is not None})
        loader = cls(
            recipe.view_of(storage),
            batch_size=batch_size,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
            rank=rank,
            world_size=world_size,
            num_workers=num_workers,
            collate_fn=collate_fn,
            read=ReadSettings(read.read_ahead, read.read_ahead_bytes),  # the cache is the storage's
            parallel_method=parallel_method,
            device=device,
            pin_memory=pin_memory,
            **kwargs,
        )
        if isinstance(storage, Storage):
            loader._reopen = recipe.reopener(storage)
        else:
            loader._reopen_sources = recipe.sources_reopener(storage)
        loader._follow = bool(follow)
        return loader

    # -- epochs and positions --------------------------------------------------------------
    @property
    def epoch(self) -> int:
        """The epoch of the current pass (or of the next one, before it starts)."""
        if not self._guideloom:
            raise AttributeError("epoch is GuideLoom's: a loader over a plain torch dataset has none")
        return self._epoch

    @property
    def _epoch(self) -> int:
        return self._order.epoch

    @property
    def _schedule(self) -> EpochSchedule:
        return self._order._schedule

    def _prepare(self, epoch: int, position: int) -> None:
        """Set up the next pass to start at ``position`` of ``epoch`` (an empty pass if nothing
        of that epoch is left for this rank)."""
        self._rank_counts.update(self._live.received if self._live is not None else 0)
        self._order._configure(epoch, position)
        self._rank_counts.start(self._schedule)
        self._start_handed = position  # positions of the epoch handed out when the pass starts
        self._live = None

    def _epoch_ends(self) -> None:
        """The order moves to the next epoch: count the one that ends (and follow the storage)."""
        done = delivered(self.view, self._handed_out())
        self._samples_before = [a + b for a, b in zip(self._samples_before, done)]
        self._follow_current()  # follow=True: the epoch boundary is where it moves
        self._rank_counts.update(self._live.received if self._live is not None else 0)
        self._live = None
        self._start_handed = 0

    def __iter__(self) -> Any:
        if not self._guideloom:
            return _TorchdataLoader.__iter__(self)
        order = self._order
        # Lightning #20550, or ranks taken before torch.distributed was set up: raised at the first batch
        refused = iteration_before_restore() or ranks_refused(order)
        if not order._fresh:
            order._next_epoch()  # calls _epoch_ends first
            self._rank_counts.start(self._schedule)
        order._fresh = False
        previous = self._pass() if self._pass is not None else None
        if previous is not None and self._threads is not None:
            previous.close()  # a new pass stops the threads of an abandoned one
        progress = Progress()
        kind = TimedPass if self._meter.timed else Pass  # metrics(): the loop's waits, timed
        current = kind(lambda: self._open_pass(progress, refused), progress, order.pass_steps())
        self._live, self._pass = progress, weakref.ref(current)
        return current

    def _open_pass(
        self, progress: Progress, refused: Exception | None = None
    ) -> tuple[Iterator[Any], list[Any]]:
        """The batches of the pass `__iter__` set up, read from the order as it is now (a
        ``set_epoch`` since `__iter__` moved it), and what ends their workers (``refused``: an
        error `__iter__` found, raised now, at the first batch)."""
        if refused is not None:
            raise refused
        order = self._order
        if order._fresh:  # set_epoch moved the order since __iter__
            order._fresh = False
            self._rank_counts.start(self._schedule)
            self._live = progress
        closers: list[Any] = []
        batches: Iterator[Any]
        meter = self._meter  # metrics(): each batch's loss_mask tokens, counted by its worker
        meter.start_pass(progress)  # counts what the loop receives of this pass
        if self._schedule.num_steps == 0:
            batches = iter(())  # nothing of this epoch is left (a state at its last batch)
        elif self._threads is not None:
            batches = self._thread_batches()  # each group's loss_mask counts go to meter.group
            closers.append(batches)
        elif self.num_workers == 0:
            batches = self._inline_batches()
        else:
            assert self._workers is not None
            torch_batches = self._workers.__iter__()
            closers.append(torch_batches)  # it yields one list of collated batches per group
            batches = unrolled(torch_batches, self._worker_io.__setitem__, meter.expect)
        if not closers:
            closers.append(batches)
        if self._device is not None:
            batches = Placed(batches, self._device)
        return batches, closers

    # -- num_workers=0 and thread workers ----------------------------------------------------
    def _groups(self) -> Iterator[list[list[int]]]:
        return self._order.groups(self._grouping)

    def _inline_batches(self) -> Iterator[Any]:
        """``num_workers=0``: the same fetch-and-collate path as a thread, run in the loop's
        thread (torchdata's single-process iterator adds per-batch profiling and bookkeeping
        that our state does not use)."""
        source: BatchSource = self.dataset  # type: ignore[assignment]
        finish, meter = self._finish_batch, self._meter
        columns = keeps_columns(finish.collate)  # metrics(): masks counted once per group read
        for group in self._groups():
            meter.settle()  # the previous group's counted arrays go too (it is received whole)
            parts = source.read_group(group)
            if (columns and meter.parts(parts)) or (not columns and meter.unmasked(parts, finish.collate)):
                for part in parts:
                    yield finish(part)
            else:
                for part in parts:
                    yield meter.one(finish(part))
            # Let the group's arrays go before the next group is read: held across that read,
            # two groups are alive at once and the heap grows and shrinks by a group each time
            # (glibc returns the top of the heap to the system, and every page of the next
            # group is then faulted in again: +60 % time per batch with boundaries="records").
            del parts
            part = None  # (a part of a column group is a view of the whole group's arrays)

    def _thread_batches(self) -> ThreadBatches:
        threads, prefetch, timeout = self._threads  # type: ignore[misc]
        if self._copies is None:
            self._copies = SourceCopies(self.dataset)
        copies, finish = self._copies, self._finish_batch
        meter = self._meter  # metrics(): the loss_mask counts, made in the pool's threads
        count, columns = meter.counted_group, keeps_columns(finish.collate)
        documents = finish.collate is collate_documents

        def work(group: list[list[int]]) -> tuple[list[Any], list[Counted]]:
            source = copies.acquire()
            try:
                parts = source.read_group(group)
            finally:
                copies.release(source)
            return count(parts, finish, columns, documents)

        return ThreadBatches(
            self._groups(),
            work,
            threads=threads,
            depth=threads * prefetch,
            timeout=timeout,
            taken=meter.group,
        )

    # -- state -----------------------------------------------------------------------------
    def io_stats(self) -> IOStats:
        """Requests and bytes this loader has sent to object stores so far, per store:
        ``{store: {"requests": {"GET": n, "HEAD": n, ...}, "bytes_read": n, "bytes_written": n,
        "retries": n}}`` (`guideloom.io.stats`; a store is its protocol and endpoint).

        Counted: this process's requests since the loader was made (thread workers and
        ``num_workers=0`` read here; so does anything else this process reads meanwhile), plus
        what each worker process reports with its batches. Local disk sends no requests and is
        not counted. A storage opened with ``cache_dir=`` adds an entry ``"cache <dir>"`` with no
        requests and the cache's counters (``cache_hits``, ``cache_misses``, ``cache_bytes_read``,
        ...; `guideloom.io.cache`). Not part of the state: a resumed loader counts from zero."""
        if not self._guideloom:
            raise TypeError(
                "io_stats() counts the reads of a GuideLoom dataset view; this loader reads another dataset"
            )
        here = subtract_stats(io_stats(), self._io_base)
        return merge_stats([here, *self._worker_io.values()])

    def metrics(self) -> dict[str, Any]:
        """What the run's loader did, since the previous call and since training began.

        ``{"since_last": counts, "total": counts}`` where ``counts`` has ``batches`` (this
        rank's batches received), ``samples``, ``tokens`` and ``sources``
        (``{name: {"samples", "tokens"}}``, all ranks together: `source_counts`),
        ``loss_mask_tokens`` (tokens with a non-zero ``loss_mask`` in the batches received; None
        without that field), ``gets``, ``bytes_read``, ``retries``, ``throttled`` and
        ``cache_hits`` (this rank's requests to object stores: `io_stats`) and ``wait_s``
        (seconds the loop spent in ``next()`` waiting for a batch). The totals are kept in
        `state_dict` and continue after `load_state_dict` on the same rank and world size. See
        `guideloom.loading.metrics`; `guideloom.loading.metrics.flatten` makes logger keys.

        Raises:
            AttributeError: The loader is torchdata's (over a plain torch dataset).
        """
        if not self._guideloom:
            raise AttributeError(
                "metrics is GuideLoom's: build the loader with StatefulDataLoader.from_storage"
            )
        return self._meter.report(self._meter.totals(self.io_stats()), self.source_counts())

    def state_dict(self) -> dict[str, Any]:
        """Where the caller is: epoch and global position after the last *received* batch.

        May be called at any time: mid-epoch, between epochs, before the first batch. Batches
        prefetched by workers but not yet received do not count. (torchdata's state, for a
        loader over a plain torch dataset.)

        Returns:
            A small dict of ints and short strings (epoch, position in samples over all ranks,
            whether the pass ended, and what identifies the data and order: fingerprint,
            sequence length, seed, shuffle settings). Save it with the model's checkpoint;
            `load_state_dict` takes it back.
        """
        if not self._guideloom:
            return super().state_dict()
        live = self._live
        received, ended = (live.received, live.ended) if live is not None else (0, False)
        state = self._order.state_at(
            received, ended, samples_before=tuple(self._samples_before), handed_out=self._handed_out()
        )
        state[METRICS_KEY] = self._meter.state(self.io_stats())  # metrics() totals continue
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue from a saved state at O(1) cost: the next ``iter(loader)`` resumes there.

        Nothing is re-read or skipped through. `batch_size`, `num_workers`, `drop_last` and the
        world size may differ from the saving run (after a change of world size every rank
        loads the state rank 0 saved). A state at an epoch's last batch resumes into an empty
        pass, one saved after the loop ended into the next epoch (torchdata's rule; see
        `guideloom.loading.state` for states of older versions). (torchdata's, for a loader
        over a plain torch dataset.)

        Args:
            state_dict: What `state_dict()` returned, e.g. loaded from a checkpoint.

        Raises:
            ResumeStateError: The state is not a GuideLoom loader state, is of an unknown
                version, corrupt, or was saved over other data (another manifest fingerprint or
                layout, another mixture) or with another `sequence_length`, number of samples,
                `seed` or shuffle settings; the message names what differs.
        """
        if not self._guideloom:
            return super().load_state_dict(state_dict)
        saved = LoaderState.from_dict(state_dict)
        counters = checked(state_dict.get(METRICS_KEY))  # metrics(): this rank's totals
        self._pin_saved(
            saved.identity.snapshot, saved.identity.url
        )  # a dataset that grew: back to the saved snapshot
        self._pin_saved_sources(saved.identity.source_snapshots)  # a mixture's, per source
        saved.identity.check_continues(self._identity, self._source_names)
        num_samples = self._identity.num_samples
        epoch, position = self._order._next_pass(saved)
        before, handed = saved.delivered_before(
            lambda start: (
                EpochSchedule(
                    num_samples, saved.batch_size, saved.world_size, saved.drop_last, start
                ).consumed
            )
        )
        if before is None:  # saved before GuideLoom recorded it: whole epochs of the saver's settings
            full = EpochSchedule(num_samples, saved.batch_size, saved.world_size, saved.drop_last).consumed
            before = [saved.epoch * n for n in delivered(self.view, full)]
        if epoch != saved.epoch:  # the saved epoch is over: count it with the earlier ones
            before = [a + b for a, b in zip(before, delivered(self.view, handed))]
            handed = 0
        if position == 0 and epoch > saved.epoch:
            self._follow_current()  # the saved epoch ended: the next one may move (follow=True)
        self._order._skipped = saved.skipped
        self._prepare(epoch, position)
        self._samples_before = before
        self._start_handed = handed
        self.next_iter_state = None  # torchdata must never fast-forward: its own state stays empty
        self._meter.load(counters)
        # the source counts at the restored position, made if a report asks (no loader inside:
        # the meter must not keep its loader alive)
        self._meter.mark_start(partial(_counts_at, self.view, list(before), self._handed_out()))

    def skip_steps(self, steps: range) -> None:
        """Leave out global steps ``steps.start .. steps.stop - 1``: the next pass yields step
        ``start - 1``'s batch, then step ``stop``'s, and never reads the ones between (skip the
        batches around a loss spike, say). Call it after `load_state_dict`, before iterating.
        The range starts in the epoch of the next pass and may run on into later epochs (not
        with ``follow=True``, where a later epoch may hold more steps).

        Steps are numbered from the start of training at this loader's batch size and world
        size, as `guideloom.trace` numbers them; the range lies in the epoch the next pass is in,
        at or after where it starts. The skip is saved in `state_dict`: later resumes (any world
        size or number of workers) leave the same samples out, and `guideloom.trace` of a later
        state omits those steps. `source_counts` counts the skipped samples as passed over.

        Args:
            steps: ``range(A, B)``: the global steps to leave out.

        Raises:
            ValueError: Not a non-empty range, the pass already started, the range does not
                start in the next pass (the message names the steps it runs), or it runs past
                the epoch with ``follow=True``.
        """
        if not self._guideloom:
            raise AttributeError(
                "skip_steps is GuideLoom's: build the loader with StatefulDataLoader.from_storage"
            )
        if self._live is not None and self._live.received:
            raise ValueError(
                "skip_steps is for the pass about to start: call it after load_state_dict (or "
                "between epochs), before iterating the loader"
            )
        if self._follow and isinstance(steps, range) and steps.stop > (self._epoch + 1) * len(self._order):
            raise ValueError(
                f"skip_steps({steps!r}) runs past epoch {self._epoch}, but with follow=True a later "
                "epoch may read a grown dataset, whose steps are numbered otherwise: skip up to this "
                "epoch's end, and the rest once the loader is in the next epoch"
            )
        self._order.skip_steps(steps)

    def _handed_out(self) -> int:
        """Positions of the current epoch handed out up to the last batch the loop received (the
        state's ``position``, except at the epoch's end: not the remainder left out)."""
        live = self._live
        received = live.received if live is not None else 0
        if received == 0:
            return self._start_handed
        return self._order.handed_out(received)

    def source_counts(self, scope: str = "global") -> dict[str, dict[str, int | None]]:
        """Samples and tokens delivered per source: since training began over all ranks, or this rank's.

        Exact, and computed from the global position (the order is closed-form), not counted
        batch by batch: the figures are the same on every rank, need no ``sources=True``, and
        after ``load_state_dict`` into another world size, batch size or worker count they are
        those of an uninterrupted run at the same global position. They count what the loop
        has *received* (as ``state_dict`` does), on all ranks together: every rank reports the
        global figures, so log them from rank 0. A mixture built with ``after=`` counts from
        where its own run began.

        Args:
            scope: ``"global"`` (default: all ranks, since training began, as above) or
                ``"rank"``: the rows this rank's loader has received since it was built (closed
                form from its schedule too, but kept in memory only, not in the state: after a
                resume, and so after a change of world size, it counts from 0).

        Returns:
            ``{name: {"samples": n, "tokens": t}}``, one entry per source in the mixture's order
            (named as the mixture names them); a loader over one dataset has one entry, named by
            its URL. ``tokens`` is ``samples * sequence_length`` for streams (every window holds
            ``sequence_length`` tokens) and None for documents (their token counts are not stored
            per document).

        Raises:
            ValueError: ``scope`` is not ``"global"`` or ``"rank"``.
            AttributeError: The loader is torchdata's (over a plain torch dataset).
        """
        if not self._guideloom:
            raise AttributeError(
                "source_counts is GuideLoom's: a loader over a plain torch dataset has no sources; "
                "build it with StatefulDataLoader.from_storage"
            )
        if scope not in ("global", "rank"):
            raise ValueError(
                f"source_counts(scope={scope!r}): scope is 'global' (the samples of all ranks, "
                "since training began) or 'rank' (this rank's, since this loader was built)"
            )
        if scope == "rank":
            totals = self._rank_counts.update(self._live.received if self._live is not None else 0)
            return _named_counts(self.view, totals)
        return _counts_at(self.view, self._samples_before, self._handed_out())

    def __len__(self) -> int:
        """A whole epoch's batches of this rank, also after a resume (``len(iter(loader))`` is the
        rest of the pass; Lightning keeps ``len(loader)`` as the epoch length for the whole fit).
        (torchdata's length, for a loader over a plain torch dataset.)"""
        if not self._guideloom:
            return super().__len__()
        return len(self._order)
