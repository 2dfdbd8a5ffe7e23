"""The sources of a mixture as one indexed view, read with one batched read per source (no torch)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, Protocol, cast

import numpy as np

from guideloom.loading.mixture_order import MixtureOrder
from guideloom.loading.mixture_plan import MixturePlan
from guideloom.loading.order import ShuffleSettings
from guideloom.storage.windows import joined_reader
from guideloom.types import STREAM, DatasetView, Layout, StreamView

__all__ = ["MixtureDataset"]


class _Sources(Protocol):
    """What the dataset reads of its `guideloom.loading.mixture.Mixture` (named structurally,
    so that this module does not import the one that imports it)."""

    names: tuple[str, ...]
    storages: tuple[Any, ...]
    layout: Layout
    defaults: tuple[dict[str, Any], ...]  # per source: values of stream fields it lacks
    fields: dict[str, np.dtype] | None  # every source's stream fields, where defaults fill some


class MixtureDataset:
    """The sources of a `Mixture` as one indexed view (a `guideloom.types.DatasetView`): index
    ``offset_i + j`` is sample ``j`` of source ``i``. The loader orders it with `MixtureOrder`;
    a batch is read with one batched read per source (``read_batch`` / ``__getitems__``),
    reassembled in order.
    """

    sourced: bool = False  # a SourcedMixtureDataset's reads also say each row's source
    _ahead: Any = None  # no read-ahead for rebuilt loaders (guideloom.loading.read_ahead)

    def __init__(self, mixture: _Sources, views: Sequence[DatasetView], plan: MixturePlan) -> None:
        self.mixture = mixture
        self.views = list(views)
        self.plan = plan
        self.layout: Layout = mixture.layout
        self.storage = mixture.storages[0]  # the layout and format all sources share
        self.sequence_length: int | None = self.views[0].sequence_length
        self._starts = np.concatenate([[0], np.cumsum(plan.sizes)]).astype(np.int64)
        # local stream sources are read by one WindowReader, all in one pass into one array
        self._windows = joined_reader(self.views) if mixture.fields is None else None
        self.fingerprints = [str(s.manifest.fingerprint) for s in mixture.storages]
        ident = {**plan.identity(), "fingerprints": self.fingerprints}
        self.identity = ident
        self.fingerprint = hashlib.blake2b(
            json.dumps(ident, sort_keys=True).encode(), digest_size=8
        ).hexdigest()
        self.url = "mixture of " + ", ".join(f"{n!r}" for n in mixture.names)
        # boundaries= on a mixture: a guideloom.loading.boundaries.MixtureMarks that adds
        # position_ids (and labels) to every read of windows (from_storage sets it)
        self.marks: Any = None

    def __len__(self) -> int:
        return int(self._starts[-1])

    @property
    def sample_bytes(self) -> int:
        """Bytes one sample takes in storage: the sources' averages, weighted by their shares."""
        shares = self.plan.shares
        return max(1, round(sum(share * v.sample_bytes for share, v in zip(shares, self.views))))

    def read_batch(self, indexes: Sequence[int]) -> Any:
        """Samples ``indexes`` as the default collate takes them: streams ``{field: (batch,
        sequence_length) array}``; other layouts the list of samples (each source's own
        shape: records, or what its format's ``align`` builds)."""
        if self.layout == STREAM:
            return self.read_windows(indexes)
        return self.__getitems__(indexes)

    def epoch_order(self, shuffle: ShuffleSettings, seed: int, epoch: int) -> MixtureOrder:
        """The order of one mixture epoch."""
        return MixtureOrder(self.plan, shuffle=shuffle, seed=seed, epoch=epoch)

    def split(self, indexes: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """``(source, local)`` of mixture indexes: the source each is a sample of, and its index
        in that source's view (both int64)."""
        return self._split(indexes)

    def _split(self, indexes: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        idx = np.asarray(indexes, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= len(self)):
            raise IndexError(f"indexes must lie in [0, {len(self)}) for {self.url}")
        src = np.searchsorted(self._starts, idx, side="right") - 1
        return src, idx - self._starts[src]

    def read_windows(self, indexes: Sequence[int]) -> dict[str, np.ndarray]:
        """Stream windows ``indexes`` as ``{field: (len(indexes), sequence_length) array}``."""
        src, local = self._split(indexes)
        return self._marked(self._read_split(src, local), src, local)

    def _marked(
        self, windows: dict[str, np.ndarray], src: np.ndarray, local: np.ndarray
    ) -> dict[str, np.ndarray]:
        """``windows`` with the ``marks`` (document boundaries), where set."""
        if self.marks is None:
            return windows
        return self.marks.mark(windows, lambda: self._record_starts_split(src, local))  # type: ignore[no-any-return]

    def record_starts_batch(self, indexes: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """Where records start in windows ``indexes`` (each source's own; see
        `guideloom.StreamDataset.record_starts_batch`): ``(positions, counts)``, int64."""
        return self._record_starts_split(*self._split(indexes))

    def _record_starts_split(self, src: np.ndarray, local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        counts = np.zeros(src.size, dtype=np.int64)
        rows, positions = [], []
        for i in np.unique(src).tolist():
            sel = np.flatnonzero(src == i)
            pos, per = cast(StreamView, self.views[i]).record_starts_batch(local[sel])
            counts[sel] = per
            rows.append(np.repeat(sel, per))
            positions.append(pos)
        if not rows:
            return np.zeros(0, dtype=np.int64), counts
        row_of = np.concatenate(rows)
        order = np.argsort(row_of, kind="stable")  # each row's starts stay in their order
        return np.concatenate(positions)[order].astype(np.int64, copy=False), counts

    def _read_split(self, src: np.ndarray, local: np.ndarray) -> dict[str, np.ndarray]:
        """Windows ``local`` of sources ``src`` (what `_split` gives), in that order."""
        if self._windows is not None:
            return self._windows.views[0].stream_format.split_fields(self._windows.read(local, src))
        out: dict[str, np.ndarray] = {}
        fields = self.mixture.fields  # with defaults: every field, filled where a source lacks it
        if fields is not None and self.sequence_length is not None:
            out = {name: np.empty((src.size, self.sequence_length), dt) for name, dt in fields.items()}
        for i in np.unique(src).tolist():
            sel = np.flatnonzero(src == i)
            part = self.views[i].read_batch(local[sel].tolist())
            for name, values in part.items():
                if name not in out:
                    out[name] = np.empty((src.size, *values.shape[1:]), dtype=values.dtype)
                out[name][sel] = values
            for name, value in self.mixture.defaults[i].items():
                out[name][sel] = value
        return out

    def __getitems__(self, indexes: Sequence[int]) -> list[Any]:
        src, local = self._split(indexes)
        out: list[Any] = [None] * src.size
        for i in np.unique(src).tolist():
            sel = np.flatnonzero(src == i)
            for row, sample in zip(sel.tolist(), self.views[i].__getitems__(local[sel].tolist())):
                out[row] = sample
        return out

    def __getitem__(self, i: int) -> Any:
        return self.__getitems__([i])[0]

    def source_of(self, index: int) -> tuple[str, int]:
        """``(source name, sample index in that source)`` of a mixture index."""
        src, local = self._split([index])
        return self.mixture.names[int(src[0])], int(local[0])

    def __repr__(self) -> str:
        return f"MixtureDataset({self.url}, len={len(self)}, epoch_length={self.plan.epoch_length})"
