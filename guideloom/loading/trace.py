"""Which samples a training step read, without reading them: `trace`.

A GuideLoom loader's order is closed-form: epoch ``e``'s sample at position ``p`` is a function
of the seed, the shuffle settings and ``e`` (`guideloom.loading.order`). So the samples of any
step, on any rank, follow from a loader state and the dataset's manifest alone. `trace_arrays`
computes them for a whole range of steps at once with array operations; `trace` yields one
record per row, with where the row's bytes are.

Steps are numbered from the start of training (epoch 0, step 0) at the state's batch size and
world size: step ``s`` is step ``s % steps_per_epoch`` of epoch ``s // steps_per_epoch``. A run
that changed its world size or batch size part-way numbers its later steps differently: trace
those with a state saved after the change and ``first_step=`` the step it was saved at. Steps a
run left out with ``loader.skip_steps`` (recorded in its later states) have no rows.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

import guideloom.layout as layout
from guideloom.loading.mixture import Mixture
from guideloom.loading.order import EpochOrder
from guideloom.loading.schedule import EpochSchedule
from guideloom.loading.state import LoaderState, OrderIdentity
from guideloom.storage import Storage
from guideloom.storage.openview import open_view
from guideloom.storage.origins import RecordOrigins
from guideloom.storage.wrapped import innermost
from guideloom.types import DatasetView, StreamView, as_mixture, stream_view

__all__ = ["TraceArrays", "trace", "trace_arrays"]


@dataclass(frozen=True)
class TraceArrays:
    """Every row of a range of steps, as parallel int64 arrays (one entry per row of every rank).

    Args:
        step: The training step.
        epoch: The epoch it belongs to.
        rank: The rank that read the row.
        row: The row in that rank's batch.
        position: The position in the epoch's order, over all ranks.
        index: The sample in the loader's view (for a mixture, the mixture's index).
        source: The source's number in the mixture (0 for one dataset).
        sample_index: The sample in that source's own view.
    """

    step: np.ndarray
    epoch: np.ndarray
    rank: np.ndarray
    row: np.ndarray
    position: np.ndarray
    index: np.ndarray
    source: np.ndarray
    sample_index: np.ndarray

    def __len__(self) -> int:
        return int(self.step.size)


def _view_of(data: Any, sequence_length: int | None) -> Any:
    if isinstance(data, Mixture):
        return data.dataset(sequence_length)
    if isinstance(data, Storage):
        return open_view(data, sequence_length)
    if isinstance(data, DatasetView):
        return data  # a view already
    raise TypeError(
        f"trace reads a Storage, a Mixture or a dataset view (what the loader was built from), "
        f"got {type(data).__name__}"
    )


class _Tracer:
    """The loader's order for a saved state over the data it was saved over."""

    def __init__(self, state: Any, data: Any) -> None:
        self.state = saved = LoaderState.from_dict(state)
        ident = saved.identity
        self.view = view = _view_of(data, ident.sequence_length)
        mixture = as_mixture(view)
        self.mixture = mixture
        num_samples = mixture.plan.epoch_length if mixture else len(view)
        current = OrderIdentity.of_view(
            view, mixture, num_samples=num_samples, seed=ident.seed, shuffle=ident.shuffle
        )
        names = tuple(mixture.mixture.names) if mixture else ()
        ident.check_continues(current, names)  # another dataset or order: named and refused
        self.identity = ident
        self.schedule = EpochSchedule(num_samples, saved.batch_size, saved.world_size, saved.drop_last)
        self.steps_per_epoch = self.schedule.num_steps
        self._orders: dict[int, Any] = {}
        self._record_base: dict[int, np.ndarray] = {}
        self._shard_starts: dict[tuple[int, int], np.ndarray] = {}
        self._origins: dict[int, RecordOrigins] = {}

    def order(self, epoch: int) -> Any:
        order = self._orders.get(epoch)
        if order is None:
            ident = self.identity
            if self.mixture is not None:
                order = self.mixture.epoch_order(ident.shuffle, ident.seed, epoch)
            else:
                order = EpochOrder(ident.num_samples, shuffle=ident.shuffle, seed=ident.seed, epoch=epoch)
            self._orders = {epoch: order}  # one epoch at a time: orders are cheap to rebuild
        return order

    def arrays(self, start: int, stop: int) -> TraceArrays:
        sched, per_epoch = self.schedule, self.steps_per_epoch
        world, size = sched.world_size, sched.batch_size
        cols: dict[str, list[np.ndarray]] = {k: [] for k in TraceArrays.__dataclass_fields__}
        step = start
        while step < stop:
            epoch, first = divmod(step, per_epoch)
            last = min(per_epoch, first + (stop - step))  # steps [first, last) of this epoch
            full = max(0, min(last, sched.full_steps) - first)
            steps = np.arange(first, first + full, dtype=np.int64)
            # full steps: rank r takes positions base + r*size .. base + (r+1)*size
            rows = np.arange(world * size, dtype=np.int64)
            positions = [(steps[:, None] * sched.step_size + rows).ravel()]
            step_of = [np.repeat(steps, world * size)]
            rank_of = [np.tile(rows // size, full)]
            row_of = [np.tile(rows % size, full)]
            if last > sched.full_steps and sched.last_batch_size:  # the short last step
                small = sched.last_batch_size
                lo = sched.full_steps * sched.step_size
                positions.append(lo + np.arange(world * small, dtype=np.int64))
                step_of.append(np.full(world * small, sched.full_steps, dtype=np.int64))
                rank_of.append(np.arange(world * small, dtype=np.int64) // small)
                row_of.append(np.arange(world * small, dtype=np.int64) % small)
            pos = np.concatenate(positions)
            index = np.asarray(self.order(epoch)(pos), dtype=np.int64)
            if self.mixture is not None:
                source, local = self.mixture.split(cast(Sequence[int], index))
            else:
                source, local = np.zeros_like(index), index
            cols["step"].append(np.concatenate(step_of) + epoch * per_epoch)
            cols["epoch"].append(np.full(pos.size, epoch, dtype=np.int64))
            cols["rank"].append(np.concatenate(rank_of))
            cols["row"].append(np.concatenate(row_of))
            cols["position"].append(pos)
            cols["index"].append(index)
            cols["source"].append(np.asarray(source, dtype=np.int64))
            cols["sample_index"].append(np.asarray(local, dtype=np.int64))
            step += last - first
        empty = np.zeros(0, dtype=np.int64)
        out = {k: np.concatenate(v) if v else empty for k, v in cols.items()}
        if self.state.skipped:  # steps left out with skip_steps were never trained
            kept = np.ones(out["step"].size, dtype=bool)
            for epoch, lo, hi in self.state.skipped:
                kept &= ~((out["epoch"] == epoch) & (out["position"] >= lo) & (out["position"] < hi))
            out = {k: v[kept] for k, v in out.items()}
        return TraceArrays(**out)

    def where(self, source: int, sample: int) -> dict[str, Any]:
        """The shard(s) and byte ranges of one sample of one source's view."""
        view, sample = innermost(
            self.mixture.views[source] if self.mixture is not None else self.view, sample
        )
        storage = view.storage
        found = self._where(source, view, sample)
        if found.get("records"):  # where each record came from (guideloom.storage.origins)
            if source not in self._origins:
                self._origins[source] = RecordOrigins(storage)
            found["origins"] = self._origins[source](found["records"])
        return found

    def _where(self, source: int, view: Any, sample: int) -> dict[str, Any]:
        storage = view.storage
        table = storage.manifest.shard_table
        stream = stream_view(view)
        if stream is None:
            # records per shard: the shard holding document `sample`, no index read
            counts = np.cumsum(np.asarray(table.records, dtype=np.int64))
            shard = int(np.searchsorted(counts, sample, side="right"))
            first = int(counts[shard - 1]) if shard else 0
            return {
                "url": storage.url,
                "shard": table.shard_name(shard),
                "byte_range": None,
                "pieces": [],
                "records": [sample],
                "record_in_shard": sample - first,
            }
        itemsize = stream.stream_format.itemsize
        pieces = []
        for shard, start, stop, _ in stream.pieces(sample):
            pieces.append(
                {
                    "shard": table.shard_name(shard),
                    "path": table.path(shard, "data"),
                    "byte_range": list(table.token_bytes(shard, start, stop, itemsize)),
                }
            )
        return {
            "url": storage.url,
            "shard": pieces[0]["shard"],
            "byte_range": pieces[0]["byte_range"],
            "pieces": pieces,
            "records": self._records(source, stream, stream.pieces(sample)),
        }

    def _records(self, source: int, view: StreamView, pieces: list[Any]) -> list[int] | None:
        """The dataset-wide indexes of the records a window's tokens belong to, from the
        record-start files of the shards it touches (read whole, once each); None for a
        stream written without record starts."""
        if not view.has_record_starts:
            return None
        table = view.storage.manifest.shard_table
        if source not in self._record_base:
            self._record_base[source] = np.concatenate([[0], np.cumsum(np.asarray(table.records, np.int64))])
        base = self._record_base[source]
        records: list[int] = []
        for shard, start, stop, _ in pieces:
            key = (source, shard)
            starts = self._shard_starts.get(key)
            if starts is None:
                size = table.size(shard, "starts")
                raw = view.reader.read([(shard, "starts", layout.HEADER_SIZE, size)])[0]
                starts = np.frombuffer(raw, layout.RECORD_START_DTYPE).astype(np.int64)
                starts = self._shard_starts[key] = starts // table.start_unit(shard)
            # the record holding token t is the last one starting at or before t
            first = int(np.searchsorted(starts, start, side="right")) - 1
            last = int(np.searchsorted(starts, stop - 1, side="right")) - 1
            lo = int(base[shard]) + max(first, 0)
            hi = int(base[shard]) + max(last, 0)
            records.extend(r for r in range(lo, hi + 1) if not records or r > records[-1])
        return records


def _steps(steps: Any, first_step: int) -> tuple[int, int]:
    if isinstance(steps, int) and not isinstance(steps, bool):
        steps = range(steps, steps + 1)
    if not isinstance(steps, range) or steps.step != 1:
        raise TypeError(f"steps must be an int or a range of consecutive steps, got {steps!r}")
    start, stop = steps.start - first_step, steps.stop - first_step
    if start < 0:
        raise ValueError(
            f"steps {steps.start}..{steps.stop - 1} start before step {first_step}, where this "
            "state's numbering begins (first_step): trace them with the state of that part of the run"
        )
    return start, max(start, stop)


def trace_arrays(state: Any, data: Any, steps: Any, *, first_step: int = 0) -> TraceArrays:
    """Every row of ``steps`` on every rank, as arrays; reads no data (only manifests).

    Args:
        state: A `StatefulDataLoader.state_dict()` of a loader over ``data`` (any rank's, any
            point of the run): it gives the order (seed, shuffle), the batch size and the world size.
        data: What the loader was built from: a storage, a `Mixture` or a dataset view.
        steps: A range of steps (or one step), numbered from the start of training.
        first_step: The step number of epoch 0's first step in this numbering (see the module).

    Returns:
        A `TraceArrays`, rows in step, rank, row order.

    Raises:
        ResumeStateError: ``state`` was saved over other data, another sequence length or
            another order (the message names what differs).
        ValueError: ``steps`` start before ``first_step``.
    """
    tracer = _Tracer(state, data)
    start, stop = _steps(steps, first_step)
    arrays = tracer.arrays(start, stop)
    if first_step:
        return TraceArrays(**{**arrays.__dict__, "step": arrays.step + first_step})
    return arrays


def trace(state: Any, data: Any, steps: Any, *, first_step: int = 0) -> Iterator[dict[str, Any]]:
    """For every row of every step in ``steps``, on every rank, what it read; reads no data.

    Each record has ``step``, ``epoch``, ``rank``, ``row``, ``source`` (the source's name in a
    mixture, else the dataset's URL), ``url``, ``sample_index`` (the sample in that source's
    own view), ``shard`` and ``byte_range`` (the first shard file the sample's bytes are in,
    and their range in it; ``pieces`` lists every shard of a window that crosses shards) and
    ``records`` (the record indexes the sample covers, where the dataset stores them; a
    document's own index) and, for datasets ingested by GuideLoom, ``origins``: per record, the
    input ``file`` and its ``line`` (``offset``, a byte offset, where the line was not known),
    or ``row``, and ``id`` (with ``--id-field``); None for a record whose part kept none
    (`guideloom.storage.origins`).

    Args:
        state: A `StatefulDataLoader.state_dict()` of a loader over ``data``.
        data: What the loader was built from: a storage, a `Mixture` or a dataset view.
        steps: A range of steps (or one step), numbered from the start of training.
        first_step: The step number of epoch 0's first step in this numbering.

    Yields:
        One dict per row, in step, rank, row order.

    Raises:
        ResumeStateError: ``state`` was saved over other data or another order.
        ValueError: ``steps`` start before ``first_step``.

    Example:
        >>> for row in guideloom.trace(state, storage, steps=range(1200, 1202)):  # doctest: +SKIP
        ...     print(row["step"], row["rank"], row["sample_index"], row["shard"], row["byte_range"])
    """
    tracer = _Tracer(state, data)
    start, stop = _steps(steps, first_step)
    names = tuple(tracer.mixture.mixture.names) if tracer.mixture is not None else ()
    chunk = max(1, 65536 // max(1, tracer.schedule.step_size))
    for lo in range(start, stop, chunk):
        arrays = tracer.arrays(lo, min(stop, lo + chunk))
        for i in range(len(arrays)):
            source, sample = int(arrays.source[i]), int(arrays.sample_index[i])
            where = tracer.where(source, sample)
            yield {
                "step": int(arrays.step[i]) + first_step,
                "epoch": int(arrays.epoch[i]),
                "rank": int(arrays.rank[i]),
                "row": int(arrays.row[i]),
                "source": names[source] if names else where["url"],
                "sample_index": sample,
                **where,
            }
