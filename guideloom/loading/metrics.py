"""What a run's loader did, as counters: `StatefulDataLoader.metrics` (training-side metrics).

``loader.metrics()`` answers, since its previous call and since training began: how many batches
the loop received, the samples and tokens each source delivered, the tokens with ``loss_mask``
set, the requests (GETs), bytes, retries and throttling answers of the object store, the block
cache's hits, and the seconds the training loop spent waiting for a batch. Nothing here is a new
source of truth; each figure is the one another part of GuideLoom already keeps:

- samples and tokens per source: `StatefulDataLoader.source_counts` (closed form from the global
  position: all ranks together, the same on every rank; it survives resume by construction);
- GETs, bytes, retries, throttling answers, cache hits: `StatefulDataLoader.io_stats` (this
  process's requests plus what worker processes report with each group of batches they send);
- batches, ``loss_mask`` tokens and waiting time: counted for every batch the loop *receives*
  (`LoaderMeter`). ``loss_mask`` tokens are counted by the worker that made the batch (a worker
  process sends the counts with its group of batches, a thread worker returns them with its
  group; with ``num_workers=0`` the loop's thread, which also reads the batch), before
  the batch is handed out or copied to a device, and credited when the loop receives that
  batch (the device stage runs one batch ahead), so the counts are those of the batches the
  loop holds, whatever the kind or number of workers. Stream batches of the default collate
  are counted on the NumPy arrays of the group read, once per group (`column_masks`: one
  ``count_nonzero`` per batch, no tensor calls); other batches (documents, a ``collate_fn``,
  streams with metadata) after their collate (`mask_tokens`).

Batches, ``loss_mask`` tokens, waiting time and the I/O counters are this rank's. They are
kept in the loader's state (key ``"metrics"`` beside the order's, with the rank and world size
that saved them), so totals continue across a resume on the same rank and world size; a rank
that loads another rank's state (after a change of world size every rank loads rank 0's)
starts them from zero, since another rank's requests are not its own.

Cost in the training loop's thread: per received batch two clock reads and a few additions (and,
with ``num_workers=0`` only, one ``count_nonzero`` of the batch's ``loss_mask`` array, made once
per group read); `metrics` itself adds up `io_stats` and `source_counts` (O(sources + stores)),
so call it at logging intervals, not every step (the callbacks in `guideloom.integrations` do).
``make bench`` (row ``metrics``) measures it against a loader that counts nothing.
"""

from __future__ import annotations

import operator
from collections import deque
from collections.abc import Callable, Mapping
from itertools import repeat
from typing import Any

import numpy as np
import torch

from guideloom.errors import ResumeStateError
from guideloom.loading.collate import collate_documents, collate_windows
from guideloom.loading.mixture_sources import SourcedCollate

__all__ = [
    "COUNTERS",
    "METRICS_KEY",
    "Counted",
    "LoaderMeter",
    "Parts",
    "Uncounted",
    "checked",
    "column_masks",
    "counted",
    "counted_group",
    "flatten",
    "io_counters",
    "keeps_columns",
    "mask_tokens",
]

METRICS_KEY = "metrics"  # the state's key for the meter's totals (beside the order's)

# This rank's counters, in the order `metrics()` lists them (``wait_s`` is a float).
COUNTERS = (
    "batches",
    "loss_mask_tokens",
    "gets",
    "bytes_read",
    "retries",
    "throttled",
    "cache_hits",
    "wait_s",
)
_IO = ("gets", "bytes_read", "retries", "throttled", "cache_hits")
_NO_MASK = -1


def mask_tokens(batch: Any) -> int:
    """Tokens with a non-zero ``loss_mask`` in one CPU batch, or -1 when it has no ``loss_mask``.

    A dict batch (streams, streams with metadata, a ``collate_fn`` returning a dict) is read at
    its ``"loss_mask"`` key; a list of records (documents), or ``{"documents": [...]}``, at each
    record's ``"loss_mask"`` where records are mappings that have one.
    """
    if type(batch) is dict:  # the usual batch: one tensor per field (the fast path)
        mask = batch.get("loss_mask")
        if type(mask) is torch.Tensor:
            try:
                return int(np.count_nonzero(mask.numpy()))
            except TypeError:  # not on the CPU (a collate_fn that moved it)
                return int(torch.count_nonzero(mask))
        if mask is None and "documents" not in batch:  # a stream without a mask: nothing to count
            return _NO_MASK
    elif type(batch) is list and batch and type(batch[0]) is dict and "loss_mask" not in batch[0]:
        return _NO_MASK  # documents without a mask (the usual list of records): no ABC checks
    if isinstance(batch, Mapping):
        mask = batch.get("loss_mask")
        if mask is not None:
            return _count(mask)
        documents = batch.get("documents")
        return mask_tokens(documents) if isinstance(documents, list) else _NO_MASK
    if isinstance(batch, list) and batch and isinstance(batch[0], Mapping) and "loss_mask" in batch[0]:
        return sum(_count(r["loss_mask"]) for r in batch if isinstance(r, Mapping) and "loss_mask" in r)
    return _NO_MASK


_first = operator.itemgetter(0)
_has_mask = operator.methodcaller("__contains__", "loss_mask")


def records_unmasked(parts: list[Any]) -> bool:
    """Whether `mask_tokens` finds no ``loss_mask`` in any of these document batches (lists of
    records): each batch's first record is a dict without one. C loops, no frame per batch."""
    firsts = list(map(_first, filter(None, parts)))
    return set(map(type, firsts)) <= {dict} and not any(map(_has_mask, firsts))


class Parts(list):  # type: ignore[type-arg]
    """The parts of a group read as columns (``{field: ndarray}`` row slices of ``whole``, the
    group's own dict of arrays): `column_masks` counts ``whole``'s ``loss_mask`` in one call."""

    __slots__ = ("whole",)

    def __init__(self, parts: list[Any], whole: Any) -> None:
        super().__init__(parts)
        self.whole = whole


# What the meter queues per group of batches, in the order the loop receives them:
# ``(batches, loss_mask tokens of them all (-1: no such field), each batch's tokens or None,
# each batch's mask arrays or None, the group's whole mask array or None)``. When a `metrics`
# call falls inside a group, the part received is the whole less the batches not yet received:
# those are recounted (``masks``, in one call on the rest of the whole mask when there is one;
# never handed to the loop, so never changed by it) or read off ``counts``.
Counted = tuple[int, int, "list[int] | None", "list[np.ndarray] | None", "np.ndarray | None"]


def counted(batch: Any) -> Counted:
    """The count of one batch, made after its collate (`mask_tokens`)."""
    return (1, mask_tokens(batch), None, None, None)


def counted_group(
    parts: list[Any], finish: Any, columns: bool, documents: bool = False
) -> tuple[list[Any], list[Counted]]:
    """``(batches, counts)`` of a group (what a thread worker returns; the loop queues the counts
    with `LoaderMeter.group` as it takes the group): ``finish`` collates each part; the counts
    are one for the whole group when ``columns`` (the collate keeps the values of column parts,
    so their masks are counted once on the NumPy arrays, `column_masks`) or when the group's
    document batches (``documents``: ``finish`` is the default documents collate) have no
    ``loss_mask`` (`records_unmasked`), else one per batch."""
    group = column_masks(parts) if columns else None
    batches = [finish(part) for part in parts]
    if group is not None:
        return batches, [group]
    if documents and records_unmasked(parts):
        return batches, [(len(parts), _NO_MASK, None, None, None)]
    return batches, [counted(batch) for batch in batches]


def keeps_columns(collate: Any) -> bool:
    """Whether ``collate`` is the default stream collate, alone or behind the mixture's
    ``sources=True`` collate (which hands column dicts straight to it): it wraps column parts as
    tensors without changing a value, so their masks may be counted before it (`column_masks`)."""
    if type(collate) is SourcedCollate:
        collate = collate.collate
    return collate is collate_windows


def column_masks(parts: list[Any]) -> Counted | None:
    """The count of a group read as columns (``{field: ndarray}`` parts, which the default stream
    collate wraps as tensors without changing a value), made on the NumPy arrays: one
    ``count_nonzero`` over the group's ``loss_mask`` when the parts come as `Parts`, else one
    per part; None when the parts are not column dicts (count the collated batches with
    `mask_tokens` instead)."""
    if not parts:
        return None
    first = parts[0]
    if type(first) is not dict:
        return None
    mask = first.get("loss_mask")
    if mask is None:
        return (len(parts), _NO_MASK, None, None, None)
    if type(mask) is not np.ndarray:
        return None
    masks = [part["loss_mask"] for part in parts]
    whole = parts.whole.get("loss_mask") if type(parts) is Parts else None
    if type(whole) is np.ndarray:
        return (len(parts), int(np.count_nonzero(whole)), None, masks, whole)
    return (len(parts), int(sum(map(np.count_nonzero, masks))), None, masks, None)  # no frame per part


def _count(mask: Any) -> int:
    if isinstance(mask, torch.Tensor):
        return (
            int(np.count_nonzero(mask.numpy()))
            if mask.device.type == "cpu"
            else int(torch.count_nonzero(mask))
        )
    return int(np.count_nonzero(np.asarray(mask)))


def io_counters(stats: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """The I/O counters of `metrics` from an `guideloom.io.stats.IOStats` (summed over stores)."""
    out = dict.fromkeys(_IO, 0)
    for entry in stats.values():
        out["gets"] += int(entry.get("requests", {}).get("GET", 0))
        out["bytes_read"] += int(entry.get("bytes_read", 0))
        out["retries"] += int(entry.get("retries", 0))
        out["throttled"] += int(entry.get("throttled", 0))
        out["cache_hits"] += int(entry.get("cache_hits", 0))
    return out


class LoaderMeter:
    """This rank's counters of one loader: batches received, ``loss_mask`` tokens, waiting time,
    and the totals a restored state brought (`load`); `report` makes what `metrics` returns.

    Nothing runs per batch: the pass (`guideloom.loading.passes.Pass`) counts the batches the
    loop receives and the seconds it waits in its `Progress`, which the meter reads when asked.
    Counted groups are queued with the position in the pass of their first batch, and credited
    once the pass has received them whole (`settle`: before each read with ``num_workers=0``,
    when a group is added, when a total is asked)."""

    timed = True  # the passes read the clock around each ``next`` (`Uncounted`: no)

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank, self.world_size = rank, world_size
        self.mask = 0  # loss_mask tokens of the groups received whole
        self.has_mask = False
        self._queue: deque[tuple[int, Counted]] = deque()  # (first batch's position, group), in order
        self._live: Any = None  # the current pass's Progress (batches received, seconds waited)
        self._batches_before = 0  # of the passes before it
        self._wait_before = 0.0
        self._base: dict[str, float] = dict.fromkeys(COUNTERS, 0)  # from a restored state
        self._base_has_mask = False
        self._last: dict[str, Any] | None = None  # the totals at the previous `report`
        # the source counts when counting began (made when a report first needs them)
        self._start_sources: Callable[[], Mapping[str, Mapping[str, int | None]]] = dict

    @property
    def batches(self) -> int:
        """Batches the loop received from this loader (since it was built or restored)."""
        live = self._live
        return self._batches_before + (live.received if live is not None else 0)

    @property
    def wait_s(self) -> float:
        """Seconds the loop waited in ``next()`` for them (and for each pass's end)."""
        live = self._live
        return self._wait_before + (live.wait_s if live is not None else 0.0)

    # -- per group (the training loop's thread) -----------------------------------------------
    def start_pass(self, progress: Any = None) -> None:
        """A new pass, counted in ``progress``: the one before is settled (the groups it received
        whole are credited, and the part it received of the next one) and its counts kept;
        counts of groups an abandoned pass prefetched and never handed out are dropped."""
        live = self._live
        if live is not None:
            self.settle()
            mask, has = self._partial()
            self.mask, self.has_mask = mask, has
            self._batches_before += live.received
            self._wait_before += live.wait_s
        self._queue.clear()
        self._live = progress

    def _received(self) -> int:
        live = self._live
        return live.received if live is not None else 0

    def settle(self) -> None:
        """Credit the queued groups the pass has received whole, and let go of their arrays
        (``num_workers=0`` settles before each read, so a group's masks are not held across the
        next one)."""
        queue, received = self._queue, self._received()
        while queue and queue[0][0] + queue[0][1][0] <= received:
            total = queue.popleft()[1][1]
            if total >= 0:
                self.mask += total
                self.has_mask = True

    def _add(self, group: Counted) -> None:
        """Queue a group whose batches are handed out next: after the queued ones, or, with none
        queued, at the next batch the loop receives (batches handed out while nothing was queued
        had nothing to count). A group with nothing to count (no ``loss_mask``) needs no entry
        when nothing is queued before it."""
        self.settle()
        queue = self._queue
        if queue:
            start, last = queue[-1]
            queue.append((start + last[0], group))
        elif group[1] != _NO_MASK:
            queue.append((self._received(), group))

    counted_group = staticmethod(counted_group)  # what a thread worker runs (Uncounted: no count)

    def parts(self, parts: list[Any]) -> bool:
        """Queue the count of a group's parts, read as columns and about to be collated by the
        default collate (``num_workers=0``: `column_masks`, once per group);
        False when they are not columns (`one` counts each collated batch instead)."""
        group = column_masks(parts)
        if group is None:
            return False
        self._add(group)
        return True

    def unmasked(self, parts: list[Any], collate: Any) -> bool:
        """Whether a group's batches have nothing to count: documents for the default collate
        whose records have no ``loss_mask`` (what `mask_tokens` says of such a batch). Then the
        group needs one entry at most (`_add`), and `one` need not run for each batch."""
        if collate is not collate_documents or not records_unmasked(parts):
            return False
        self._add((len(parts), _NO_MASK, None, None, None))
        return True

    def one(self, batch: Any) -> Any:
        """``batch``, its ``loss_mask`` tokens queued until the loop has received it (a collated CPU batch)."""
        count = mask_tokens(batch)
        if count != _NO_MASK or self._queue:  # (`_add`'s rule, checked before making the entry)
            self._add((1, count, None, None, None))
        return batch

    def group(self, counts: list[Counted]) -> None:
        """Queue the counts a thread worker made of a group (`counted_group`), as the loop takes
        the group, before its first batch."""
        for entry in counts:
            self._add(entry)

    def expect(self, counts: list[int]) -> None:
        """Queue the counts of a group's batches (made by a worker process)."""
        if counts:
            total = int(sum(n for n in counts if n >= 0)) if counts[0] >= 0 else _NO_MASK
            self._add((len(counts), total, counts, None, None))

    def _partial(self) -> tuple[int, bool]:
        """``loss_mask`` tokens of every batch received, and whether batches had the field: the
        groups received whole (settled), plus the part received of the group in progress."""
        mask, has = self.mask, self.has_mask
        if self._queue:
            start, (_, total, counts, masks, whole) = self._queue[0]
            taken = self._received() - start
            if taken > 0 and total >= 0:
                has = True
                if counts is not None:
                    mask += sum(n for n in counts[:taken] if n >= 0)
                elif whole is not None and masks is not None:  # the rows not yet received
                    rows = sum(len(m) for m in masks[:taken])
                    mask += total - int(np.count_nonzero(whole[rows:]))
                elif masks is not None:
                    mask += total - sum(int(np.count_nonzero(m)) for m in masks[taken:])
        return mask, has

    def _mask_now(self) -> tuple[int, bool]:
        self.settle()
        return self._partial()

    # -- totals ------------------------------------------------------------------------------
    def totals(self, io: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        """This rank's counters since training began: the restored state's plus this loader's
        (``io``: `StatefulDataLoader.io_stats`)."""
        base = self._base
        mask, has_mask = self._mask_now()
        now: dict[str, Any] = {
            "batches": int(base["batches"]) + self.batches,
            "loss_mask_tokens": int(base["loss_mask_tokens"]) + mask
            if (has_mask or self._base_has_mask)
            else None,
        }
        for key, n in io_counters(io).items():
            now[key] = int(base[key]) + n
        now["wait_s"] = float(base["wait_s"]) + self.wait_s
        return now

    def report(
        self, totals: dict[str, Any], sources: Mapping[str, Mapping[str, int | None]]
    ) -> dict[str, Any]:
        """``{"since_last": ..., "total": ...}`` (see `StatefulDataLoader.metrics`); the next
        report's ``since_last`` starts here."""
        total = _with_sources(totals, sources)
        last = self._last if self._last is not None else self._start()
        since = _difference(total, last)
        self._last = total
        return {"since_last": since, "total": total}

    def _start(self) -> dict[str, Any]:
        """The totals when this loader began counting (a fresh one: zero; a restored one: the
        state's own counters and the source counts at the restored position)."""
        return _with_sources({k: self._base[k] for k in COUNTERS}, self._start_sources())

    def mark_start(self, sources: Callable[[], Mapping[str, Mapping[str, int | None]]]) -> None:
        """Where counting starts for the first report's ``since_last``: ``sources()`` gives the
        restored position's source counts (called when a report first needs them: most resumed
        runs never ask, and a resume should cost what it did before counting existed)."""
        self._start_sources = sources
        self._last = None

    # -- state -------------------------------------------------------------------------------
    def state(self, io: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        """The totals to save with the loader's state: plain ints, one float and one bool, the same
        keys every time (`torch.distributed.checkpoint` loads into the keys a fresh loader has)."""
        totals = self.totals(io)
        out: dict[str, Any] = {"rank": self.rank, "world_size": self.world_size}
        for key in COUNTERS:
            out[key] = totals[key] if totals[key] is not None else 0
        out["wait_s"] = round(out["wait_s"], 6)  # microseconds are plenty
        out["loss_mask"] = totals["loss_mask_tokens"] is not None  # whether batches had the field
        return out

    def load(self, saved: dict[str, Any] | None) -> None:
        """Continue from ``saved`` (`checked` `state`, or None for a state without one): the
        totals continue when this rank at this world size saved it, else they start from zero.
        What this loader counted before (a pass abandoned before the restore) is left out,
        except its requests (`StatefulDataLoader.io_stats` counts from the loader's
        construction)."""
        self._base = dict.fromkeys(COUNTERS, 0)
        self._base_has_mask = False
        self.mask, self.has_mask = 0, False
        self._queue.clear()
        self._live, self._batches_before, self._wait_before = None, 0, 0.0
        if saved is None:
            return
        if saved.get("rank") != self.rank or saved.get("world_size") != self.world_size:
            return  # another rank's requests and waits are not this rank's
        self._base.update(zip(COUNTERS, map(saved.get, COUNTERS, repeat(0))))  # saved.get(key, 0)
        self._base_has_mask = bool(saved.get("loss_mask", False))


class Uncounted(LoaderMeter):
    """A meter that counts nothing (no clock reads, no ``loss_mask`` counts, no queue): the
    baseline of the benchmark that measures what counting costs (``make bench``, row
    ``metrics``). Thread workers do not count either; worker processes still do."""

    timed = False  # its passes read no clock

    def parts(self, parts: list[Any]) -> bool:
        return True

    def unmasked(self, parts: list[Any], collate: Any) -> bool:
        return True

    def one(self, batch: Any) -> Any:
        return batch

    def group(self, counts: list[Counted]) -> None:
        return None

    def expect(self, counts: list[int]) -> None:
        return None

    @staticmethod
    def counted_group(
        parts: list[Any], finish: Any, columns: bool, documents: bool = False
    ) -> tuple[list[Any], list[Counted]]:
        return [finish(part) for part in parts], []


_NUMBERS = (int, float)
_NUMBER_TYPES = frozenset(_NUMBERS)
_SAVED_NUMBERS = (*COUNTERS, "rank", "world_size")


def checked(saved: Any) -> dict[str, Any] | None:
    """A state's ``"metrics"`` section (None: a state saved without one), checked before the
    loader changes anything.

    Raises:
        ResumeStateError: It is not a dict of numbers; the message says how to resume anyway.
    """
    if saved is None:
        return None
    # (map and set calls: once per resume, without a Python frame per counter)
    values = list(map(saved.get, _SAVED_NUMBERS, repeat(0))) if isinstance(saved, dict) else None
    if values is None or not (
        _NUMBER_TYPES.issuperset(map(type, values))  # plain ints and floats (a bool's type is bool)
        or all(isinstance(v, _NUMBERS) and not isinstance(v, bool) for v in values)
    ):
        raise ResumeStateError(
            f"corrupt loader state: {METRICS_KEY!r} should be a dict of counters "
            f"({', '.join(COUNTERS)}), got {saved!r}; delete that key to resume with the "
            "metrics() counters from zero"
        )
    return saved


def _with_sources(totals: dict[str, Any], sources: Mapping[str, Mapping[str, int | None]]) -> dict[str, Any]:
    samples = sum(int(v["samples"] or 0) for v in sources.values())
    tokens = [v["tokens"] for v in sources.values()]
    return {
        "samples": samples,
        "tokens": None if any(t is None for t in tokens) else sum(int(t or 0) for t in tokens),
        "sources": {k: dict(v) for k, v in sources.items()},
        **totals,
    }


def _difference(now: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in now.items():
        old = before.get(key)
        if key == "sources":
            out[key] = {
                name: {
                    k: (None if v is None else v - int((old or {}).get(name, {}).get(k) or 0))
                    for k, v in counts.items()
                }
                for name, counts in value.items()
            }
        elif value is None:
            out[key] = None
        else:
            out[key] = value - (old or 0)
    return out


def flatten(metrics: Mapping[str, Any], prefix: str = "guideloom") -> dict[str, float]:
    """`StatefulDataLoader.metrics` as flat ``{name: number}`` for a logger.

    Names are ``{prefix}/{scope}/{counter}`` with scope ``since_last`` or ``total``; each source of
    a mixture adds ``{prefix}/{scope}/{source}/samples`` and ``.../tokens`` (a loader over one
    dataset has only the totals). Counters that do not apply (``tokens`` of documents,
    ``loss_mask_tokens`` without that field) are left out.

    Args:
        metrics: What `StatefulDataLoader.metrics` returned.
        prefix: The first part of every name (e.g. ``"train/data"``); "" for none.

    Returns:
        ``{name: value}`` with int or float values.
    """
    lead = f"{prefix}/" if prefix else ""
    out: dict[str, float] = {}
    for scope in ("since_last", "total"):
        values = metrics[scope]
        for key, value in values.items():
            if key == "sources":
                if len(value) > 1:
                    for name, counts in value.items():
                        for k, v in counts.items():
                            if v is not None:
                                out[f"{lead}{scope}/{name}/{k}"] = v
            elif value is not None:
                out[f"{lead}{scope}/{key}"] = value
    return out
