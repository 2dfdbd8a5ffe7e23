"""``StatefulDataLoader``: torchdata's loader over a GuideLoom view, with exact, O(1), elastic resume.

How it works
------------
The main process decides everything about the order. A batch sampler turns the epoch's
`guideloom.loading.schedule.EpochSchedule` (which positions this rank takes at each step)
and `guideloom.loading.order.EpochOrder` (position -> sample index, from ``seed`` and the
epoch) into lists of sample indexes; the DataLoader hands each list to a worker, which fetches the
whole batch with one batched read (``view.read_windows`` / ``view.__getitems__``: concurrent,
coalesced range requests) and collates it. Workers never choose samples, so ``num_workers`` and
``prefetch_factor`` change nothing about which samples a rank sees or their order.

Who fetches: with ``num_workers=0`` the training loop's own thread; with worker processes
(``parallel_method="process"``, the default) torchdata's workers, each batch pickled back through
a pipe; with ``parallel_method="thread"`` a pool of threads in this process
(`guideloom.loading.threads`), which hands batches over by reference. All three run the
same batch path: sampler -> groups of consecutive batches -> one read per group
(``_BatchSource.read_group``) -> collate -> pin -> (one batch ahead) copy to ``device``
(`guideloom.loading.placement`). A second kind of batch source only has to provide
``read_group`` to use it.

Read-ahead: a group is the unit of fetching, on local disk as on remote storage. It is sized in bytes
(``read_ahead_bytes``, default `DEFAULT_READ_AHEAD_BYTES`, or ``$GUIDELOOM_READ_AHEAD_BYTES``):
the largest power of two of batches whose bytes fit, reached by doubling from one batch
(groups of 1, 1, 2, 4, ... batches), so the first batch costs one small round of requests and
every later group starts at a multiple of its own size. A group of whole shuffle buffers holds
whole blocks of consecutive windows, each of which its read fetches with one request (merged
ranges). Each worker, thread or process, is handed whole groups: the batches of a group are
consecutive, so a block is never split between workers (which would fetch it twice, or in
pieces). ``read_ahead=`` (batches) sets a fixed group of ``read_ahead + 1`` batches instead.
Memory: each worker holds at most ``prefetch_factor`` groups plus the one it is reading.

The state is ``(epoch, position)``: ``position`` counts the samples handed out in the epoch over
all ranks, up to the last batch the caller has *received* (not what was dispatched to workers
or prefetched). Loading a state configures the sampler to start there: no earlier batch is read,
replayed or skipped through, so resuming at 90 % of an epoch costs what resuming at 1 % does.
torchdata's own snapshot and fast-forward machinery is not used.

Resume semantics (the ``docs/training.md`` section)
---------------------------------------------------
- ``state_dict()`` may be called at any time, also between epochs and before the first batch; it
  describes the position after the last batch the loop has received. It is a small dict of ints
  and short strings (see `guideloom.loading.state`); save it next to the model's checkpoint.
- ``load_state_dict(state)`` on a freshly built loader (same dataset content, ``sequence_length``,
  ``seed`` and shuffle settings) makes the next ``iter(loader)`` continue exactly: mid-epoch it
  yields the rest of that epoch; if the state was saved after the epoch's last batch it starts
  the next epoch. Iterating the loader again (a new ``for`` loop) always starts the next epoch.
- ``num_workers``, ``prefetch_factor``, ``batch_size``, ``drop_last`` and the world size may
  differ on resume. After a change of world size every rank loads the state *rank 0* saved; the
  rest of the epoch is then split over the new ranks, every remaining sample exactly once (except
  the bounded end-of-epoch remainder below).
- Every rank gets the same number of batches per epoch. Step ``s`` takes ``world_size *
  batch_size`` consecutive positions, rank ``r`` the ``batch_size`` at offset ``r * batch_size``.
  At the end of an epoch, fewer than ``world_size * batch_size`` positions remain: with
  ``drop_last=True`` they are not handed out; with ``drop_last=False`` each rank gets one smaller
  last batch of ``remaining // world_size`` and at most ``world_size - 1`` samples are left out.
  Which samples are left out changes every epoch when shuffling.
- A state from another dataset content, ``sequence_length``, seed, shuffle setting or layout, or a
  corrupt or truncated one, raises `guideloom.errors.ResumeStateError`. The same dataset
  copied to another URL or bucket resumes (the check uses the manifest's content fingerprint).
- Ranks must save at the same step (the usual case: all ranks run the same number of steps).

In a training loop::

    loader = StatefulDataLoader.from_storage(storage, sequence_length=2048, batch_size=8,
                                             shuffle=True, seed=0, num_workers=2)
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model"])
        loader.load_state_dict(checkpoint["loader"])      # O(1): nothing is re-read
    while step < max_steps:
        for batch in loader:                                # one pass = (the rest of) one epoch
            loss = train_step(model, batch)
            step += 1
            if step % save_every == 0 and rank == 0:
                torch.save({"model": model.state_dict(),
                            "loader": loader.state_dict(), "step": step}, path)
"""

from __future__ import annotations

import math
import os
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import Dataset, Sampler
from torchdata.stateful_dataloader import StatefulDataLoader as _TorchdataLoader

from guideloom.loading.collate import collate_aligned, collate_documents, collate_windows
from guideloom.loading.mixture import Mixture, MixtureDataset
from guideloom.loading.order import EpochOrder, ShuffleMode
from guideloom.loading.placement import Placed, accelerator_available, pin
from guideloom.loading.schedule import EpochSchedule
from guideloom.loading.state import LoaderState
from guideloom.loading.threads import SourceCopies, ThreadBatches

__all__ = ["StatefulDataLoader"]

_LAYOUTS = ("documents", "stream", "stream_with_meta")
_REFUSED_KWARGS = ("sampler", "batch_sampler", "generator")
_CHUNK_POSITIONS = 16384  # most positions evaluated in one call of the order
DEFAULT_READ_AHEAD_BYTES = 4 * 2**20  # bytes of batches one group fetches at most
READ_AHEAD_ENV = "GUIDELOOM_READ_AHEAD_BYTES"
_DEFAULT_RUN_SIZE = 8


class _Group(list):  # type: ignore[type-arg]
    """The sample indexes of consecutive batches, handed to one worker process as one item;
    ``sizes`` are the batches' lengths. Grouping changes when bytes are fetched, never which
    samples a batch holds."""

    sizes: list[int] = []


class _Whole(NamedTuple):
    """A stream group read as one ``{field: (rows, sequence_length)}`` dict, with its batch sizes."""

    data: Any
    sizes: list[int]


class _GroupCollate:
    """Worker processes: collate each batch of a group; the main process unrolls the list.

    A stream group with the default collate is collated whole, as one tensor per field, and
    split into its batches in the main process (views, no copy): one shared-memory handle per
    field crosses the pipe instead of one per batch (each is a file descriptor in transit, and a
    group may hold a thousand batches)."""

    def __init__(self, collate: Callable[[Any], Any]) -> None:
        self.collate = collate

    def __call__(self, parts: Any) -> Any:
        if isinstance(parts, _Whole):
            return _Whole(self.collate(parts.data), parts.sizes)
        return [self.collate(p) for p in parts]


def _unrolled(groups: Iterator[Any]) -> Iterator[Any]:
    for group in groups:
        if isinstance(group, _Whole):
            bounds = np.cumsum([0, *group.sizes]).tolist()
            for lo, hi in zip(bounds[:-1], bounds[1:]):
                yield {k: v[lo:hi] for k, v in group.data.items()}
        else:
            yield from group


def _grouped(batches: Iterator[list[int]], size: int, ramp: bool) -> Iterator[list[list[int]]]:
    """Consecutive batches in groups of ``size``, each fetched with one read; with ``ramp`` the
    groups grow 1, 1, 2, 4, ... (each as large as all before it) up to ``size``.

    A group's range requests run concurrently, so its first batch costs about one round trip,
    as a lone batch would.
    """
    group: list[list[int]] = []
    done, target = 0, 1 if ramp else size
    for batch in batches:
        group.append(list(batch))
        if len(group) >= target:
            yield group
            done += len(group)
            group = []
            target = min(size, max(1, done)) if ramp else size
    if group:
        yield group


def _sample_bytes(view: Any) -> int:
    """Bytes one sample of ``view`` takes in storage (a document: the average; a mixture: the
    average over its sources, each by its share of the samples)."""
    plan = getattr(view, "plan", None)
    if plan is not None and hasattr(view, "views"):
        return max(1, round(sum(share * _sample_bytes(v) for share, v in zip(plan.shares, view.views))))
    length = getattr(view, "sequence_length", None)
    if length is not None:
        return int(length) * int(view.stream_format.itemsize)
    return max(1, int(view.manifest.total_bytes) // max(1, len(view)))


def _read_ahead_bytes(value: Any) -> int:
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


class _BatchSource(Dataset):  # type: ignore[type-arg]
    """The view as the DataLoader sees it: ``__getitems__`` fetches one batch, or one group of
    consecutive batches (a `_Group`, from worker processes' sampler), in one read: on object
    storage one round of merged, concurrent range requests instead of one round trip per batch.
    """

    def __init__(self, view: Any, use_windows: bool, use_aligned: bool = False) -> None:
        self.view = view
        self.use_windows = use_windows  # stream fast path: dict of (B, L) arrays in one call
        # streams with metadata read for the default collate: a SpanBatch, no dict per row
        self.use_aligned = use_aligned and hasattr(view, "read_aligned")

    def __len__(self) -> int:
        return len(self.view)

    def __getitem__(self, index: int) -> Any:
        return self.view[index]

    def _read(self, indexes: list[int]) -> Any:
        if self.use_windows:
            return self.view.read_windows(indexes)
        if self.use_aligned:
            return self.view.read_aligned(indexes)
        return self.view.__getitems__(indexes)

    def read_group(self, batches: list[list[int]]) -> list[Any]:
        """Several batches fetched with one read; one uncollated result per batch, in order."""
        if len(batches) == 1:
            return [self._read(list(batches[0]))]
        data = self._read([i for b in batches for i in b])
        bounds = np.cumsum([0, *(len(b) for b in batches)]).tolist()
        return [
            {k: v[lo:hi] for k, v in data.items()} if self.use_windows else data[lo:hi]
            for lo, hi in zip(bounds[:-1], bounds[1:])
        ]

    def __getitems__(self, indexes: list[int]) -> Any:
        sizes = getattr(indexes, "sizes", None)
        if sizes is None:
            return self._read(list(indexes))
        if self.use_windows:
            return _Whole(self._read(list(indexes)), list(sizes))
        bounds = np.cumsum([0, *sizes]).tolist()
        flat = list(indexes)
        return self.read_group([flat[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:])])


class _Progress:
    """Batches the training loop has received in the current pass (what ``state_dict`` counts)."""

    def __init__(self) -> None:
        self.received = 0


class _Pass:
    """One pass as the training loop sees it: the batches of any worker kind, counted on delivery.

    ``batches`` is torchdata's iterator (``num_workers=0`` or processes) or a
    `guideloom.loading.threads.ThreadBatches`, optionally behind the device stage
    (`guideloom.loading.placement.Placed`). Only what the loop has received counts,
    never what was prefetched or already copied to the device.
    """

    def __init__(self, batches: Iterator[Any], progress: _Progress, closers: list[Any], length: int) -> None:
        self._batches = batches
        self._progress = progress
        self._closers = closers  # objects whose close/_shutdown_workers ends the pass's workers
        self._length = length

    def __iter__(self) -> _Pass:
        return self

    def __next__(self) -> Any:
        batch = next(self._batches)
        self._progress.received += 1
        return batch

    def __len__(self) -> int:
        return self._length

    def close(self) -> None:
        """End the pass now: stop its worker threads or processes."""
        for c in self._closers:
            stop = getattr(c, "close", None) or getattr(c, "_shutdown_workers", None)
            if stop is not None:
                stop()

    _shutdown_workers = close  # the name torch's iterators use


class _OrderedBatchSampler(Sampler[list[int]]):
    """Yields this rank's batches of sample indexes for the configured (rest of an) epoch."""

    def __init__(self, rank: int, grouping: tuple[int, bool] | None = None) -> None:
        """``grouping``: ``(size, ramp)`` to yield `_Group`s of consecutive batches (worker
        processes: the DataLoader hands item j to worker j % workers, so each worker gets whole
        groups); None yields single batches."""
        super().__init__()
        self.rank = rank
        self.grouping = grouping
        self.order: EpochOrder | None = None
        self.schedule: EpochSchedule | None = None

    def configure(self, order: EpochOrder, schedule: EpochSchedule) -> None:
        self.order, self.schedule = order, schedule

    def __iter__(self) -> Iterator[list[int]]:
        if self.grouping is None:
            yield from self._batches()
            return
        for group in _grouped(self._batches(), *self.grouping):
            item = _Group(i for b in group for i in b)
            item.sizes = [len(b) for b in group]
            yield item

    def _batches(self) -> Iterator[list[int]]:
        order, schedule = self.order, self.schedule
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
            yield from order((bases[:, None] + offsets).ravel()).reshape(steps, size).tolist()
            first += steps
            steps = min(steps * 4, max_steps)
        if schedule.last_batch_size:
            lo, hi = schedule.batch_range(full, self.rank)
            yield order(np.arange(lo, hi, dtype=np.int64)).tolist()

    def __len__(self) -> int:
        return self.schedule.num_steps if self.schedule is not None else 0


def _shuffle_mode(shuffle: bool | str | None) -> ShuffleMode:
    if shuffle is None or shuffle is False or shuffle == "none":
        return "none"
    if shuffle is True or shuffle == "full":
        return "full"
    if shuffle == "block":
        return "block"
    raise ValueError(f"shuffle must be False, True, 'full' or 'block', got {shuffle!r}")


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _run_size(run_size: Any, block_size: int) -> int:
    """``shuffle_run_size``: given, it must divide the block size; by default gcd(8, block size)."""
    if run_size is None:
        return math.gcd(_DEFAULT_RUN_SIZE, block_size)
    run_size = _positive_int("shuffle_run_size", run_size)
    if block_size % run_size:
        raise ValueError(
            f"shuffle_block_size={block_size} must be a multiple of shuffle_run_size={run_size}: "
            "blocks are made of whole runs"
        )
    return run_size


def _distributed_default(rank: int | None, world_size: int | None) -> tuple[int, int]:
    initialized = dist.is_available() and dist.is_initialized()
    if world_size is None:
        world_size = dist.get_world_size() if initialized else 1
    if rank is None:
        rank = dist.get_rank() if initialized else 0
    world_size = _positive_int("world_size", world_size)
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be an integer in [0, world_size={world_size}), got {rank!r}")
    return int(rank), world_size


_PROCESS_ONLY_KWARGS = ("multiprocessing_context", "worker_init_fn")


def _thread_settings(method: Any, num_workers: int, kwargs: dict[str, Any]) -> tuple[int, int, float] | None:
    """``(threads, prefetch_factor, timeout)`` for thread workers, None for torchdata's workers.

    With threads, ``prefetch_factor`` and ``timeout`` are ours (torchdata accepts them only with
    worker processes) and ``persistent_workers`` has nothing to keep: they are taken out of
    ``kwargs``.
    """
    if method not in ("process", "thread"):
        raise ValueError(f"parallel_method must be 'process' or 'thread', got {method!r}")
    if method == "process" or num_workers == 0:
        return None
    for name in _PROCESS_ONLY_KWARGS:
        if kwargs.get(name) is not None:
            raise ValueError(
                f"{name}= applies to worker processes; with parallel_method='thread' the workers "
                "are threads of this process: leave it out, or use parallel_method='process'"
            )
        kwargs.pop(name, None)
    kwargs.pop("persistent_workers", None)
    prefetch = kwargs.pop("prefetch_factor", None)
    prefetch = 2 if prefetch is None else _positive_int("prefetch_factor", prefetch)
    timeout = kwargs.pop("timeout", 0) or 0
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
        raise ValueError(f"timeout must be a non-negative number of seconds, got {timeout!r}")
    return num_workers, prefetch, float(timeout)


class StatefulDataLoader(_TorchdataLoader):
    """A torchdata ``StatefulDataLoader`` over a GuideLoom view, resumable exactly and in O(1).

    Build it with `from_storage`. Batches: streams give a dict of tensors of shape
    ``(batch, sequence_length)``; streams with metadata give the format's aligned samples
    collated per field (see `guideloom.loading.collate`); documents give a list of records.
    ``collate_fn``, when given, receives the list of samples instead.

    Iterating it (``for batch in loader``) yields the rest of the current epoch, then a new
    ``for`` loop starts the next epoch; ``len(loader)`` is the number of batches of that pass.
    Reading errors of a batch (`ShardNotFoundError`, `ShardCorruptError`,
    `StorageAccessError`) reach the loop with their type and message, also from worker
    processes.
    """

    def __init__(
        self,
        dataset: Any,
        *,
        batch_size: int = 1,
        shuffle: bool | str = False,
        seed: int = 0,
        drop_last: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
        num_workers: int = 0,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        shuffle_block_size: int = 64,
        shuffle_buffer_blocks: int = 4,
        shuffle_run_size: int | None = None,
        read_ahead: int | None = None,
        read_ahead_bytes: int | None = None,
        parallel_method: str = "process",
        device: str | torch.device | None = None,
        pin_memory: bool = False,
        **kwargs: Any,
    ) -> None:
        """A loader over a view; `from_storage` builds the view from a storage for you.

        Args:
            dataset: A `DocumentDataset`, `StreamDataset` or `StreamWithMetaDataset` (or the view
                of a `Mixture`, `mixture.dataset(...)`).
            batch_size: Samples (windows or documents) per batch on each rank.
            shuffle: `False` (sequential), `True` or `"full"` (a random permutation per epoch)
                or `"block"` (random blocks of `shuffle_block_size` consecutive samples; see
                `from_storage`).
            seed: The seed of the order; with the epoch number it decides every epoch's order.
            drop_last: Leave out the end-of-epoch remainder that does not fill a batch on every
                rank.
            rank: This process's rank; default: torch.distributed's, or 0.
            world_size: The number of ranks; default: torch.distributed's, or 1.
            num_workers: Worker processes (or threads, with `parallel_method="thread"`) that
                fetch and collate batches; 0 fetches in the training loop's thread.
            collate_fn: Turns a batch's list of samples into what the loop receives; default:
                tensors per field (streams) or the list of records (documents).
            shuffle_block_size: `shuffle="block"`: samples per block (default 64).
            shuffle_buffer_blocks: `shuffle="block"`: blocks per shuffle buffer (default 4).
            shuffle_run_size: `shuffle="block"`: consecutive samples kept together inside a
                buffer; it must divide `shuffle_block_size`; default `gcd(8, shuffle_block_size)`.
            read_ahead: Batches a worker fetches together with the current one, in one round of
                concurrent range requests (a fixed group of `read_ahead + 1` batches); default:
                sized by `read_ahead_bytes`. It changes when bytes are fetched, never which
                samples a batch holds.
            read_ahead_bytes: When `read_ahead` is not given: the most bytes of
                batches one read fetches (a group of a power of two of batches, grown from one
                batch; see the module docstring); default `$GUIDELOOM_READ_AHEAD_BYTES`, or
                4 MiB. Each worker holds at most `prefetch_factor + 1` such groups.
            parallel_method: `"process"` (torchdata's worker processes) or `"thread"` (threads
                of this process, batches handed over without a copy).
            device: Copy every batch's tensors to this device (e.g. `"cuda"`) with
                `non_blocking=True`, one batch ahead; None leaves them on the CPU.
            pin_memory: Put batches in pinned host memory (skipped without an accelerator).
            **kwargs: Passed to torchdata's `StatefulDataLoader` (`prefetch_factor`,
                `persistent_workers`, `multiprocessing_context`, `timeout` in seconds,
                `worker_init_fn`, ...).

        Raises:
            TypeError: `dataset` is not a GuideLoom view, or `sampler=`, `batch_sampler=` or
                `generator=` is passed (the order comes from `seed` and `shuffle`).
            ValueError: A setting out of range: a non-positive `batch_size` or block setting,
                a `shuffle_run_size` that does not divide the block size, a `rank` outside
                `0 .. world_size - 1`, more ranks than samples, no full batch with `drop_last`,
                an empty dataset, `in_order=False`, an unknown `shuffle` or `parallel_method`,
                or a process-only option with thread workers.
        """
        storage: Any = getattr(dataset, "storage", None)
        layout = getattr(storage, "layout", None)
        if layout not in _LAYOUTS:
            raise TypeError(
                "StatefulDataLoader reads a GuideLoom dataset view (DocumentDataset, StreamDataset, "
                f"StreamWithMetaDataset), got {type(dataset).__name__}; build it with "
                "StatefulDataLoader.from_storage(storage, ...)"
            )
        for name in _REFUSED_KWARGS:
            if name in kwargs:
                raise TypeError(
                    f"{name}= is not accepted: the order comes from seed and shuffle, so that it "
                    "can be resumed exactly"
                )
        if kwargs.get("in_order", True) is not True:
            raise ValueError("in_order=False is not supported: it breaks exact resume")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        batch_size = _positive_int("batch_size", batch_size)
        rank, world_size = _distributed_default(rank, world_size)
        mode = _shuffle_mode(shuffle)
        if mode == "block":
            shuffle_block_size = _positive_int("shuffle_block_size", shuffle_block_size)
            shuffle_buffer_blocks = _positive_int("shuffle_buffer_blocks", shuffle_buffer_blocks)
            shuffle_run_size = _run_size(shuffle_run_size, shuffle_block_size)

        mixture = dataset if isinstance(dataset, MixtureDataset) else None  # see loading/mixture.py
        num_samples = mixture.plan.epoch_length if mixture else len(dataset)
        what = "documents" if layout == "documents" else "windows"
        where = mixture.url if mixture else storage.url
        if num_samples < 1:
            raise ValueError(f"the dataset at {where} has no {what} to load")
        if world_size > num_samples:
            raise ValueError(
                f"world_size={world_size} is larger than the {num_samples} {what} of "
                f"{where}: some ranks would get no batch"
            )
        schedule = EpochSchedule(num_samples, batch_size, world_size, bool(drop_last))
        if schedule.num_steps == 0:
            raise ValueError(
                f"with drop_last=True, batch_size={batch_size} and world_size={world_size} an "
                f"epoch of {num_samples} {what} ({where}) has no full batch; use a smaller batch_size or "
                "drop_last=False"
            )

        collate: Callable[[Any], Any]
        if collate_fn is not None:
            source, collate = _BatchSource(dataset, use_windows=False), collate_fn
        elif layout == "stream":
            source, collate = _BatchSource(dataset, use_windows=True), collate_windows
        elif layout == "stream_with_meta":
            source, collate = _BatchSource(dataset, use_windows=False, use_aligned=True), collate_aligned
        else:
            source, collate = _BatchSource(dataset, use_windows=False), collate_documents

        kwargs.setdefault("snapshot_every_n_steps", None)  # our state needs no torchdata snapshots
        grouping = self._grouping(read_ahead, read_ahead_bytes, dataset, batch_size)
        if isinstance(num_workers, bool) or not isinstance(num_workers, (int, np.integer)) or num_workers < 0:
            raise ValueError(f"num_workers must be a non-negative integer, got {num_workers!r}")
        threads = _thread_settings(parallel_method, int(num_workers), kwargs)
        self._threads = threads
        self._device = None if device is None else torch.device(device)
        self._pin = bool(pin_memory)
        torch_workers = 0 if threads is not None else int(num_workers)
        if self._pin and torch_workers and accelerator_available():
            kwargs["pin_memory"] = True  # torch's pin-memory thread serves its worker processes
        # torchdata's worker processes get whole groups from the sampler (one item each); thread
        # workers and num_workers=0 group consecutive batches themselves (see _groups).
        sampler = _OrderedBatchSampler(rank, grouping if torch_workers else None)
        self._grouping_setting = grouping
        self._collate = collate
        with warnings.catch_warnings():
            # torchdata 0.11 calls the deprecated torch.set_vital in its constructor; the warning
            # is about torchdata's own code and says nothing a user can act on.
            warnings.filterwarnings("ignore", message=".*set_vital.*is deprecated", category=UserWarning)
            super().__init__(
                source,
                batch_sampler=sampler,
                num_workers=torch_workers,
                collate_fn=_GroupCollate(collate) if torch_workers else collate,
                **kwargs,
            )
        # DataLoader sets these to None/False for a batch_sampler; report the real settings.
        object.__setattr__(self, "batch_size", batch_size)
        object.__setattr__(self, "drop_last", bool(drop_last))
        if threads is not None:  # torchdata was given 0 (it starts no processes); report the threads
            object.__setattr__(self, "num_workers", int(num_workers))
        self.parallel_method = "thread" if threads is not None else "process"
        self.device = self._device

        self.view = dataset
        self._mixture = mixture
        self.rank = rank
        self.world_size = world_size
        self._identity = LoaderState(
            layout=layout,
            fingerprint=mixture.fingerprint if mixture else str(storage.manifest.fingerprint),
            num_samples=num_samples,
            sequence_length=getattr(dataset, "sequence_length", None) if layout != "documents" else None,
            seed=int(seed),
            shuffle=mode,
            shuffle_block_size=shuffle_block_size if mode == "block" else None,
            shuffle_buffer_blocks=shuffle_buffer_blocks if mode == "block" else None,
            shuffle_run_size=shuffle_run_size if mode == "block" else None,
            epoch=0,
            position=0,
            batch_size=batch_size,
            world_size=world_size,
            drop_last=bool(drop_last),
            mixture=mixture.identity if mixture else None,
        )
        self._sampler = sampler
        self._live: _Progress | None = None  # what the current pass has delivered
        self._pass: weakref.ref[_Pass] | None = None  # the current pass, not kept alive by us
        self._copies: SourceCopies | None = None  # thread workers' private views, made lazily
        self._prepare(epoch=0, position=0)

    @staticmethod
    def _grouping(read_ahead: Any, read_ahead_bytes: Any, view: Any, batch_size: int) -> tuple[int, bool]:
        """``(batches per group, ramp)`` from the read-ahead settings (see the module docstring)."""
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
            return int(read_ahead) + 1, False
        # Local disk too: a group is one pass of the order, one positioned read per run of
        # windows and one collate, and one item through a worker's pipe, instead of one per batch
        # (2-4x the batches/s of lone batches with num_workers=0, 10-18x with worker processes).
        budget = _read_ahead_bytes(read_ahead_bytes)
        batch_bytes = batch_size * _sample_bytes(view)
        fit = max(1, budget // batch_bytes)
        return 1 << (fit.bit_length() - 1), fit > 1

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
        **kwargs: Any,
    ) -> StatefulDataLoader:
        """A loader over ``storage`` wrapped in its matching view.

        ``sequence_length`` (tokens per window) is required for streams and refused for
        documents. ``shuffle``: ``False`` (sequential), ``True`` / ``"full"`` (a full random
        permutation per epoch) or ``"block"`` (random blocks of ``shuffle_block_size``
        consecutive samples (default 64); inside buffers of ``shuffle_buffer_blocks`` blocks
        (default 4) runs of ``shuffle_run_size`` consecutive samples (default 8; it must divide
        the block size, and defaults to ``gcd(8, shuffle_block_size)``) are shuffled: with a
        ``batch_size`` that is a multiple of the run size, a remote batch costs one range request
        per run instead of one per sample, for less mixing; see `guideloom.loading.order`). ``rank`` and
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
            shuffle: `False`, `True` / `"full"` or `"block"` (see above).
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
            **kwargs: `shuffle_block_size` (samples per block, default 64),
                `shuffle_buffer_blocks` (blocks per buffer, default 4), `shuffle_run_size`
                (samples; default `gcd(8, shuffle_block_size)`), `read_ahead` (batches; a
                fixed group of `read_ahead + 1`), `read_ahead_bytes` (remote storage: bytes per
                read, default 4 MiB), and torchdata's own options
                (`prefetch_factor` in batches per worker, `persistent_workers`,
                `multiprocessing_context`, `timeout` in seconds, `worker_init_fn`, ...).

        Returns:
            A `StatefulDataLoader` at the start of epoch 0 (`load_state_dict` moves it).

        Raises:
            DatasetNotFoundError: No dataset is committed at the storage's URL.
            ManifestError: The manifest is unreadable, of an unknown version or invalid.
            MixtureError: A `Mixture` whose sources cannot be read together (sequence lengths,
                an empty source; the message names the source).
            ResumeStateError: A `Mixture` built with an `after=` state that does not fit it.
            StorageAccessError: The storage refused a request or could not be reached.
            TypeError: `storage` is not a GuideLoom storage or `Mixture`, or `sampler=`,
                `batch_sampler=` or `generator=` is passed (the order comes from `seed` and
                `shuffle`).
            ValueError: `sequence_length` missing for a stream, given for documents, not
                positive or longer than the stream; or another setting out of range (see the
                class).
        """
        from guideloom import DocumentDataset, StreamDataset, StreamWithMetaDataset

        layout = getattr(storage, "layout", None)
        view: Any
        if isinstance(storage, Mixture):  # several storages, weighted: see docs/mixing.md
            view = storage.dataset(sequence_length)
        elif layout == "documents":
            if sequence_length is not None:
                raise ValueError(
                    f"sequence_length={sequence_length!r} has no meaning for the document dataset "
                    f"at {storage.url}: documents are read whole; leave it out"
                )
            view = DocumentDataset(storage)
        elif layout in ("stream", "stream_with_meta"):
            if sequence_length is None:
                raise ValueError(
                    f"sequence_length is required for the stream dataset at {storage.url}: pass "
                    "the number of tokens per training window, e.g. sequence_length=2048"
                )
            sequence_length = _positive_int("sequence_length", sequence_length)
            total = int(storage.manifest.total_tokens)
            if sequence_length > total:
                raise ValueError(
                    f"sequence_length={sequence_length} is larger than the whole stream at "
                    f"{storage.url} ({total} tokens): no complete window fits"
                )
            view_cls = StreamDataset if layout == "stream" else StreamWithMetaDataset
            view = view_cls(storage, sequence_length=sequence_length)
        else:
            raise TypeError(f"from_storage takes a GuideLoom storage, got {type(storage).__name__}")
        return cls(
            view,
            batch_size=batch_size,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
            rank=rank,
            world_size=world_size,
            num_workers=num_workers,
            collate_fn=collate_fn,
            parallel_method=parallel_method,
            device=device,
            pin_memory=pin_memory,
            **kwargs,
        )

    # -- epochs and positions --------------------------------------------------------------
    @property
    def epoch(self) -> int:
        """The epoch of the current pass (or of the next one, before it starts)."""
        return self._epoch

    def _prepare(self, epoch: int, position: int) -> None:
        """Set up the next pass to start at ``position`` of ``epoch`` (or the next epoch if done)."""
        ident = self._identity
        schedule = EpochSchedule(
            ident.num_samples, self.batch_size, self.world_size, self.drop_last, position
        )
        if schedule.num_steps == 0 and position > 0:  # nothing of this epoch left for us
            epoch += 1
            schedule = EpochSchedule(ident.num_samples, self.batch_size, self.world_size, self.drop_last)
        settings: dict[str, Any] = dict(
            shuffle=ident.shuffle,
            seed=ident.seed,
            epoch=epoch,
            block_size=ident.shuffle_block_size or 1,
            buffer_blocks=ident.shuffle_buffer_blocks or 1,
            run_size=ident.shuffle_run_size or 1,
        )
        order: Any
        if self._mixture is not None:
            order = self._mixture.epoch_order(**settings)
        else:
            order = EpochOrder(ident.num_samples, **settings)
        self._sampler.configure(order, schedule)
        self._epoch = epoch
        self._schedule = schedule
        self._fresh = True  # the next __iter__ starts here instead of moving to the next epoch
        self._live = None

    def __iter__(self) -> Any:
        if not self._fresh:
            self._prepare(self._epoch + 1, 0)
        self._fresh = False
        previous = self._pass() if self._pass is not None else None
        if previous is not None and self._threads is not None:
            previous.close()  # a new pass stops the threads of an abandoned one
        closers: list[Any] = []
        batches: Iterator[Any]
        if self._threads is not None:
            batches = self._thread_batches()
        elif self.num_workers == 0:
            batches = self._inline_batches()
        else:
            torch_batches = super().__iter__()
            closers.append(torch_batches)  # it yields one list of collated batches per group
            batches = _unrolled(torch_batches)
        if not closers:
            closers.append(batches)
        if self._device is not None:
            batches = Placed(batches, self._device)
        progress = _Progress()
        current = _Pass(batches, progress, closers, len(self))
        self._live, self._pass = progress, weakref.ref(current)
        return current

    # -- thread workers ----------------------------------------------------------------------
    def _finish(self, part: Any) -> Any:
        """One fetched batch -> what the loop receives: collated, and pinned when asked."""
        batch = self._collate(part)
        return pin(batch) if self._pin else batch

    def _groups(self) -> Iterator[list[list[int]]]:
        return _grouped(iter(self._sampler), *self._grouping_setting)

    def _inline_batches(self) -> Iterator[Any]:
        """``num_workers=0``: the same fetch-and-collate path as a thread, run in the loop's
        thread (torchdata's single-process iterator adds per-batch profiling and bookkeeping
        that our state does not use)."""
        source = self.dataset
        for group in self._groups():
            for part in source.read_group(group):  # type: ignore[attr-defined]
                yield self._finish(part)

    def _thread_batches(self) -> ThreadBatches:
        threads, prefetch, timeout = self._threads  # type: ignore[misc]
        if self._copies is None:
            self._copies = SourceCopies(self.dataset)
        copies, finish = self._copies, self._finish

        def work(group: list[list[int]]) -> list[Any]:
            source = copies.acquire()
            try:
                parts = source.read_group(group)
            finally:
                copies.release(source)
            return [finish(p) for p in parts]

        return ThreadBatches(
            self._groups(),
            work,
            threads=threads,
            depth=threads * prefetch,
            timeout=timeout,
        )

    # -- state -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Where the caller is: epoch and global position after the last *received* batch.

        May be called at any time: mid-epoch, between epochs, before the first batch. Batches
        prefetched by workers but not yet received do not count.

        Returns:
            A small dict of ints and short strings (epoch, position in samples over all ranks,
            and what identifies the data and order: fingerprint, sequence length, seed, shuffle
            settings). Save it with the model's checkpoint; `load_state_dict` takes it back.
        """
        if self._live is None:
            position = self._schedule.start
        else:
            position = self._schedule.position_after(self._live.received)
        state = LoaderState(
            **{
                **self._identity.__dict__,
                "epoch": self._epoch,
                "position": position,
            }
        )
        return state.to_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue from a saved state at O(1) cost: the next ``iter(loader)`` resumes there.

        Nothing is re-read or skipped through. `batch_size`, `num_workers`, `drop_last` and the
        world size may differ from the saving run (after a change of world size every rank
        loads the state rank 0 saved).

        Args:
            state_dict: What `state_dict()` returned, e.g. loaded from a checkpoint.

        Raises:
            ResumeStateError: The state is not a GuideLoom loader state, is of an unknown
                version, corrupt, or was saved over other data (another manifest fingerprint or
                layout, another mixture) or with another `sequence_length`, number of samples,
                `seed` or shuffle settings; the message names what differs.
        """
        saved = LoaderState.from_dict(state_dict)
        if self._mixture is not None:
            self._mixture.check_state(saved.mixture)  # names the source that differs
        saved.check_compatible(self._identity)
        self._prepare(saved.epoch, saved.position)
        self.next_iter_state = None  # torchdata must never fast-forward: its own state stays empty

    def __len__(self) -> int:
        """Batches in the current (or next) pass: a whole epoch, or its rest after a resume."""
        return self._schedule.num_steps
