"""One mixture epoch's order: position -> (source, draw) -> that source's own epoch order (NumPy only).

See `guideloom.loading.mixture` for the three steps. `MixtureOrder` is the drop-in counterpart
of `guideloom.loading.order.EpochOrder` for the loader's batch sampler.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from guideloom.loading.mixture_plan import MixturePlan
from guideloom.loading.order import EpochOrder, ShuffleMode, ShuffleSettings, derive_key, permute_many

__all__ = ["MixtureOrder"]

_PURPOSE_SOURCE = 5  # keys each source's order apart from the others (see order.derive_key)
_GAP = 1024  # positions further apart than this are evaluated as separate ranges


class MixtureOrder:
    """One mixture epoch's order: ``order(positions) -> indexes into the MixtureDataset``.

    The drop-in counterpart of `guideloom.loading.order.EpochOrder` for the loader's
    batch sampler: any positions, O(#sources) per range of consecutive positions.
    """

    def __init__(
        self,
        plan: MixturePlan,
        *,
        shuffle: ShuffleMode | ShuffleSettings,
        seed: int,
        epoch: int,
        block_size: int = 1,
        buffer_blocks: int = 1,
        run_size: int = 1,
    ) -> None:
        """``shuffle``: a `guideloom.loading.order.ShuffleSettings`, or a mode with the block
        sizes (the keyword form of `guideloom.loading.order.EpochOrder`)."""
        self.plan = plan
        self.num_samples = plan.epoch_length
        self.epoch = int(epoch)
        self.settings = (
            shuffle
            if isinstance(shuffle, ShuffleSettings)
            else ShuffleSettings.of(shuffle, block_size, buffer_blocks, run_size)
        )
        self._seeds = [derive_key(seed, _PURPOSE_SOURCE, i) for i in range(len(plan.sizes))]
        self._offsets = np.concatenate([[0], np.cumsum(plan.sizes)[:-1]]).astype(np.int64)
        self._orders: dict[tuple[int, int], EpochOrder] = {}

    def _source_order(self, i: int, epoch: int) -> EpochOrder:
        key = (i, epoch)
        order = self._orders.get(key)
        if order is None:
            if len(self._orders) > 256:
                self._orders.clear()
            order = self._orders[key] = EpochOrder(
                self.plan.sizes[i], shuffle=self.settings, seed=self._seeds[i], epoch=epoch
            )
        return order

    def locate(self, positions: np.ndarray | Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """For each position: its source and that source's running draw number ``g``."""
        p = np.atleast_1d(np.asarray(positions, dtype=np.int64))
        if p.size and (p.min() < 0 or p.max() >= self.num_samples):
            raise IndexError(f"positions must lie in [0, {self.num_samples})")
        src = np.empty(p.size, dtype=np.int64)
        draw = np.empty(p.size, dtype=np.int64)
        if not p.size:
            return src, draw
        order = np.argsort(p, kind="stable")
        sp = p[order]
        cuts = np.flatnonzero(np.diff(sp) > _GAP) + 1
        for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), sp.size]):
            first, last = int(sp[lo]), int(sp[hi - 1])
            s, d = self.plan.interleave.sources(first, last + 1)
            src[order[lo:hi]], draw[order[lo:hi]] = s[sp[lo:hi] - first], d[sp[lo:hi] - first]
        plan = self.plan
        base = np.array([s + self.epoch * d for s, d in zip(plan.starts, plan.draws)], dtype=np.int64)
        return src, draw + base[src]

    def __call__(self, positions: np.ndarray | Sequence[int] | range) -> np.ndarray:
        """Indexes into the `MixtureDataset` (source offset + sample index) at ``positions``."""
        src, g = self.locate(np.asarray(positions, dtype=np.int64))
        sizes = np.asarray(self.plan.sizes, dtype=np.int64)
        epochs, pos = np.divmod(g, sizes[src])
        # one group per (source, source epoch): a small, much repeated source spans many epochs
        pairs, where = np.unique(epochs * len(sizes) + src, return_inverse=True)
        orders = [self._source_order(int(k % len(sizes)), int(k // len(sizes))) for k in pairs.tolist()]
        mode = self.settings.mode
        if mode == "full":
            samples = permute_many(orders, where, pos)
        elif mode == "none":
            samples = pos
        else:
            samples = np.empty(pos.size, dtype=np.int64)
            by_group = np.argsort(where, kind="stable")
            bounds = np.searchsorted(where[by_group], np.arange(len(orders) + 1)).tolist()
            for order, lo, hi in zip(orders, bounds[:-1], bounds[1:]):
                rows = by_group[lo:hi]
                samples[rows] = order(pos[rows])
        return samples + self._offsets[src]
