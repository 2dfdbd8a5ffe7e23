"""Deterministic subsets of a view: ``skip``/``take`` of samples and a seeded held-out split.

A `Subset` reads the samples of another view (a `DocumentDataset`, `StreamDataset`,
`StreamWithMetaDataset`, or another subset) through an index map; it is itself a
`guideloom.types.DatasetView`, so the loader orders, shards over ranks, resumes and counts it as
it does any view. The map is closed form and holds no per-sample array, whatever the dataset's
size:

- ``skip(n)`` / ``take(n)``: samples ``n ..`` / ``.. n - 1`` of the view (a contiguous range).
- ``holdout(fraction, seed=0)``: the view's samples split in two, ``(kept, held_out)``. Samples
  are dealt in groups of `GROUP` consecutive indexes; in each group the same
  ``round(fraction * GROUP)`` offsets are held out, picked by a permutation seeded by ``seed``
  and the group's number. Membership is a function of (seed, sample index) only: it is the same
  in every run, on every rank and at every world size, and a dataset that grows by appends keeps
  every earlier sample on its side (a growing last group holds out the offsets it reaches).

A subset's fingerprint is its view's with the subset named, so that a loader state saved on one
subset is refused on another (or on the whole dataset) rather than resumed on other samples.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from guideloom.storage.wrapped import WrappedView

__all__ = ["GROUP", "Subset", "check_count", "check_holdout", "holdout", "skip", "take"]

GROUP = 1000  # samples per group of the held-out split: fractions in steps of 1 / GROUP


@lru_cache(maxsize=256)
def _held_offsets(seed: int, group: int, held: int) -> np.ndarray:
    """The offsets (sorted) held out in ``group``: ``held`` of ``0 .. GROUP - 1``."""
    rng = np.random.Generator(np.random.PCG64([seed, group, 0x5E1D]))
    return np.sort(rng.permutation(GROUP)[:held])


@lru_cache(maxsize=256)
def _side_offsets(seed: int, group: int, held: int, heldout: bool) -> np.ndarray:
    """The offsets of ``group`` on one side of the split (sorted, int64)."""
    mask = np.zeros(GROUP, dtype=bool)
    mask[_held_offsets(seed, group, held)] = True
    return np.flatnonzero(mask if heldout else ~mask).astype(np.int64)


class Subset(WrappedView):
    """A view's samples through an index map; built by `skip`, `take` and `holdout` (or the
    views' methods of the same names).

    Attributes:
        view: The view read (its samples, layout and format).
        description: The subset as its fingerprint and messages name it, e.g. ``skip=100``.
    """

    def __init__(
        self,
        view: Any,
        *,
        start: int = 0,
        stop: int | None = None,
        split: tuple[float, int, bool] | None = None,
    ) -> None:
        super().__init__(view)
        self._split = split
        if split is not None:
            fraction, seed, heldout = split
            self._held = round(fraction * GROUP)
            self._side = (GROUP - self._held) if not heldout else self._held
            self._base_len = self._split_len(len(view))
        else:
            self._held = self._side = 0
            self._base_len = len(view)
        stop = self._base_len if stop is None else min(stop, self._base_len)
        self._start = min(start, self._base_len)
        self._stop = max(stop, self._start)
        parts = []
        if split is not None:
            parts.append(f"holdout={split[0]:g},seed={split[1]},{'held_out' if split[2] else 'kept'}")
        if self._start:
            parts.append(f"skip={self._start}")
        if stop < self._base_len:
            parts.append(f"take={self._stop - self._start}")
        self.description = ",".join(parts) or "all"

    # -- the split's closed form ------------------------------------------------------------

    def _split_len(self, n: int) -> int:
        """Samples on this side among the view's ``n``."""
        assert self._split is not None
        _, seed, heldout = self._split
        full, tail = divmod(n, GROUP)
        in_tail = int(np.searchsorted(_side_offsets(seed, full, self._held, heldout), tail)) if tail else 0
        return full * self._side + in_tail

    def _split_map(self, k: np.ndarray) -> np.ndarray:
        """Indexes of this side's samples ``k`` in the view."""
        assert self._split is not None
        _, seed, heldout = self._split
        groups, offsets = np.divmod(k, self._side)
        out = np.empty_like(k)
        for g in np.unique(groups).tolist():
            at = groups == g
            out[at] = g * GROUP + _side_offsets(seed, g, self._held, heldout)[offsets[at]]
        return out

    def base_indexes(self, indexes: Sequence[int] | np.ndarray) -> np.ndarray:
        """The view's sample indexes of this subset's ``indexes``.

        Args:
            indexes: Sample indexes of this subset (negatives count from the end).

        Returns:
            The view's indexes (int64), in the same order.

        Raises:
            IndexError: An index is out of range.
        """
        idx = np.asarray(indexes, dtype=np.int64).reshape(-1)
        n = len(self)
        if idx.size:
            lo, hi = int(idx.min()), int(idx.max())
            if lo < -n or hi >= n:
                bad = next(int(i) for i in idx if not -n <= i < n)
                raise IndexError(f"index {bad} out of range for {self!r}")
            if lo < 0:
                idx = idx + n * (idx < 0)
        idx = idx + self._start
        return self._split_map(idx) if self._split is not None else idx

    # -- guideloom.types.DatasetView (the rest is forwarded by WrappedView) -------------------

    @property
    def url(self) -> str:
        return f"{self.view.url} [{self.description}]"

    @property
    def fingerprint(self) -> str:
        return f"{self.view.fingerprint}[{self.description}]"

    def __len__(self) -> int:
        return self._stop - self._start

    def __getitem__(self, index: int) -> Any:
        """Sample ``index`` of the subset.

        Args:
            index: A sample index of the subset (negative: from the end).

        Returns:
            The view's sample it maps to.
        """
        return self.__getitems__([index])[0]

    def __getitems__(self, indexes: Sequence[int]) -> list[Any]:
        """Samples ``indexes`` of the subset, read as one batch of the view.

        Args:
            indexes: Sample indexes of the subset.

        Returns:
            One sample per index, in order.
        """
        ahead = self._ahead  # a BatchOrder's read-ahead (guideloom.loading.read_ahead)
        if ahead is not None and ahead.active():
            return ahead.items(self, indexes)  # type: ignore[no-any-return]
        return self.view.__getitems__(self.base_indexes(indexes).tolist())  # type: ignore[no-any-return]

    def read_batch(self, indexes: Sequence[int]) -> Any:
        """The view's `read_batch` of the samples ``indexes`` map to.

        Args:
            indexes: Sample indexes of the subset.

        Returns:
            What the view's ``read_batch`` returns for them.
        """
        return self.view.read_batch(self.base_indexes(indexes).tolist())

    def __iter__(self) -> Iterator[Any]:
        for lo in range(0, len(self), 64):
            yield from self.__getitems__(range(lo, min(len(self), lo + 64)))

    def __repr__(self) -> str:
        return f"Subset({self.view!r}, {self.description}, len={len(self)})"

    # -- chaining -----------------------------------------------------------------------------

    def skip(self, n: int) -> Subset:
        """This subset without its first ``n`` samples (see `skip`).

        Args:
            n: Samples to leave out.

        Returns:
            A `Subset`.
        """
        return skip(self, n)

    def take(self, n: int) -> Subset:
        """This subset's first ``n`` samples (see `take`).

        Args:
            n: Samples to keep.

        Returns:
            A `Subset`.
        """
        return take(self, n)

    def holdout(self, fraction: float, *, seed: int = 0) -> tuple[Subset, Subset]:
        """This subset split in two (see `holdout`).

        Args:
            fraction: The share held out, in steps of 0.001.
            seed: The split's seed.

        Returns:
            ``(kept, held_out)``.
        """
        return holdout(self, fraction, seed=seed)


def check_count(name: str, n: Any) -> int:
    """``n`` as a number of samples for ``name=`` (`skip`, `take`); ValueError if it is not one."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"{name}= takes a number of samples (an integer >= 0), got {n!r}")
    return int(n)


def skip(view: Any, n: int) -> Subset:
    """``view`` without its first ``n`` samples (all of them when ``n >= len(view)``).

    Args:
        view: A dataset view (or a `Subset`).
        n: Samples to leave out from the start.

    Returns:
        A `Subset` of ``len(view) - n`` samples (0 if ``n`` is larger).

    Raises:
        ValueError: ``n`` is not an integer >= 0.
    """
    n = check_count("skip", n)
    if isinstance(view, Subset) and view._split is None:
        return Subset(view.view, start=view._start + n, stop=view._stop)
    return Subset(view, start=n)


def take(view: Any, n: int) -> Subset:
    """``view``'s first ``n`` samples (all of them when ``n >= len(view)``).

    Args:
        view: A dataset view (or a `Subset`).
        n: Samples to keep from the start.

    Returns:
        A `Subset` of ``min(n, len(view))`` samples.

    Raises:
        ValueError: ``n`` is not an integer >= 0.
    """
    n = check_count("take", n)
    if isinstance(view, Subset) and view._split is None:
        return Subset(view.view, start=view._start, stop=min(view._stop, view._start + n))
    return Subset(view, stop=n)


def holdout(view: Any, fraction: float, *, seed: int = 0) -> tuple[Subset, Subset]:
    """``view`` split in two by a seeded split stable across runs, ranks and world sizes.

    Args:
        view: A dataset view (or a `Subset`).
        fraction: The share of samples held out, in steps of 1 / `GROUP` (0.001), above 0 and
            below 1.
        seed: The split's seed: another seed holds out other samples.

    Returns:
        ``(kept, held_out)``: two `Subset` views whose samples together are the view's, each once.

    Raises:
        ValueError: ``fraction`` is not in (0, 1) or not a multiple of 1 / GROUP.
    """
    frac, seed = check_holdout(fraction, seed)
    return (
        Subset(view, split=(frac, seed, False)),
        Subset(view, split=(frac, seed, True)),
    )


def check_holdout(fraction: Any, seed: Any) -> tuple[float, int]:
    """``(fraction, seed)`` of a `holdout` split, checked (before any dataset is read).

    Args:
        fraction: The share held out: above 0, below 1, in steps of 1 / `GROUP`.
        seed: The split's seed, an integer >= 0.

    Returns:
        The fraction as a whole number of samples per group over `GROUP`, and the seed.

    Raises:
        ValueError: Either is out of range (the message gives a value that works).
    """
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction < 1:
        raise ValueError(
            f"holdout= takes the fraction of samples held out, above 0 and below 1, got {fraction!r}"
        )
    held = round(fraction * GROUP)
    if held == 0 or held == GROUP or abs(held - fraction * GROUP) > 1e-6:
        raise ValueError(
            f"holdout={fraction!r}: the split holds out whole samples per group of {GROUP}, so the "
            f"fraction goes in steps of {1 / GROUP:g}; use holdout={max(1, min(GROUP - 1, held)) / GROUP:g}"
        )
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"holdout seed= takes an integer >= 0, got {seed!r}")
    return held / GROUP, int(seed)
