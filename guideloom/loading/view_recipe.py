"""What `StatefulDataLoader.from_storage` reads: a storage (or URL, or `Mixture`) made a view.

``from_storage``'s view keywords are shorthands for the view's own transforms, applied in this
order: open the storage's view (`guideloom.storage.open_view`, or the mixture's
``dataset(sequence_length, sources=...)``), then its subset (``holdout`` -> ``skip`` -> ``take``,
as ``view.holdout(f, seed)[0 or 1].skip(n).take(m)``; `guideloom.storage.subset`), then document
boundaries and labels (`guideloom.loading.boundaries.BoundaryView`), or, with ``pack=``, whole
records per window (`guideloom.loading.packing`). A user who builds that view
and hands it to ``StatefulDataLoader(view, ...)`` gets the same batches.

`ViewRecipe` keeps the keywords, checks them before any read, opens the view, and reopens it at
another snapshot (``follow=True``, or a state saved on an older snapshot), so that a reopened view
is the same recipe over other data.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from guideloom.loading.mixture import Mixture
from guideloom.loading.read_settings import ReadSettings
from guideloom.storage import Storage, open_view
from guideloom.types import DatasetView, as_mixture

__all__ = ["ViewRecipe"]


@dataclass(frozen=True)
class ViewRecipe:
    """from_storage's view keywords (see the module docstring)."""

    sequence_length: int | None = None
    skip: int | None = None
    take: int | None = None
    holdout: float | None = None
    holdout_seed: int = 0
    held_out: bool = False
    boundaries: str | None = None
    labels: bool = False
    eos_id: int | None = None
    sources: bool = False
    pack: Any = None  # "whole" or a `guideloom.loading.packing.Packing`: windows of whole records
    pack_seed: int = 0  # the loader's seed and shuffle: the packing's record order
    pack_shuffle: Any = False

    def __post_init__(self) -> None:
        _subset_of(self)  # the subset's arguments, checked before any read

    @property
    def marks(self) -> bool:
        """Whether the view gets document boundaries (or labels) marked."""
        return self.boundaries is not None or self.labels or self.eos_id is not None

    def open(self, storage: Any, read: ReadSettings, storage_options: dict[str, Any] | None) -> Any:
        """``storage`` as a storage object or `Mixture`: a URL is opened with ``read``'s cache;
        TypeError for options that only a URL takes."""
        if isinstance(storage, (str, os.PathLike)):
            return read.open(storage, storage_options)
        if storage_options is not None:
            raise TypeError(
                "storage_options= is for a storage given as a URL; a storage object was opened "
                "with its own: pass the URL instead, or leave storage_options out"
            )
        if read.cache:
            raise TypeError(
                "cache_dir= and cache_bytes= are for a storage given as a URL; a storage object "
                "has its cache from when it was opened: open it with them "
                "(StreamStorage(url, format, cache_dir=...)) or pass the URL instead"
            )
        return storage

    def check(self, storage: Any, follow: bool, persistent_workers: bool, world_size: int | None) -> None:
        """ValueError / TypeError for keywords that do not fit ``storage`` (before any read)."""
        import torch.distributed as dist

        if follow and isinstance(storage, Mixture):
            views = [n for n, item in zip(storage.names, storage.items) if not isinstance(item, Storage)]
            if views:
                raise ValueError(
                    f"follow=True reopens a mixture's sources at their current snapshots, but "
                    f"source {views[0]!r} was given as a view, which cannot be reopened: give the "
                    "mixture that source's storage (a view's limits go in the source's third "
                    "item: {'samples': N})"
                )
        if follow and persistent_workers:
            raise ValueError(
                "follow=True needs workers that start anew each epoch (they receive the new "
                "snapshot's view): leave out persistent_workers=True"
            )
        if self.sources and not isinstance(storage, Mixture):
            raise ValueError(
                f"sources=True adds each row's source to the batches of a Mixture, but {storage.url if isinstance(storage, Storage) else storage!r} "
                "is one dataset (every row's source is 0, its sample index the row's index); leave "
                "sources out (loader.source_counts() works without it)"
            )
        if _subset_of(self) is not None and isinstance(storage, Mixture):
            raise ValueError(
                "skip=, take= and holdout= read a subset of one storage; for a Mixture give each "
                "source its limit (Mixture({name: (storage, weight, {'samples': N})})) or a "
                "subset view (storage's view .take(N), .skip(N), .holdout(f)[0])"
            )
        if not isinstance(storage, (Mixture, Storage)):
            raise TypeError(f"from_storage takes a GuideLoom storage, got {type(storage).__name__}")
        if follow and (world_size or 1) > 1 and not (dist.is_available() and dist.is_initialized()):
            raise ValueError(
                f"follow=True with world_size={world_size} needs torch.distributed initialized "
                "(rank 0 picks the snapshot each epoch and broadcasts it, so that every rank "
                "reads the same one): call torch.distributed.init_process_group first"
            )

    def view_of(self, storage: Any) -> DatasetView:
        """The view of a storage (a `Storage` or a `Mixture`), the recipe applied."""
        view: Any
        if isinstance(storage, Mixture):  # several storages, weighted: see docs/mixing.md
            view = storage.dataset(self.sequence_length, sources=bool(self.sources))
        else:
            view = open_view(storage, self.sequence_length)
            subset = _subset_of(self)
            view = subset(view) if subset is not None else view
        if self.pack is not None:  # whole records per window: guideloom.loading.packing
            return _packed(
                view, self.pack, self.pack_seed, self.pack_shuffle, self.marks or _subset_of(self) is not None
            )
        return _marked(view, self.boundaries, self.labels, self.eos_id) if self.marks else view

    def reopener(self, storage: Storage) -> Callable[[str | None], DatasetView]:
        """One storage: the view at a snapshot (None: the storage's current one, re-read)."""

        def reopen(snapshot: str | None) -> DatasetView:
            if snapshot is None:
                storage.refresh()
                return self.view_of(storage)
            return self.view_of(storage.at_snapshot(snapshot))

        return reopen

    def sources_reopener(self, mixture: Mixture) -> Callable[[Sequence[str | None]], DatasetView]:
        """A mixture: its view with each source at ``snapshots[i]`` (a saved state's)."""

        def reopen_sources(snapshots: Sequence[str | None]) -> DatasetView:
            return self.view_of(mixture.at_snapshots(snapshots))

        return reopen_sources


def _subset_of(recipe: ViewRecipe) -> Callable[[Any], Any] | None:
    """What the recipe's ``skip``, ``take`` and ``holdout`` make of a view (None: all of it)."""
    from guideloom.storage import subset

    skip, take, holdout, seed, held_out = (
        recipe.skip,
        recipe.take,
        recipe.holdout,
        recipe.holdout_seed,
        recipe.held_out,
    )
    if holdout is None and held_out:
        raise ValueError("held_out=True reads a holdout split's held-out part: give holdout=FRACTION too")
    if skip is None and take is None and holdout is None:
        return None
    if holdout is not None:
        subset.check_holdout(holdout, seed)  # the arguments, before any read
    for name, n in (("skip", skip), ("take", take)):
        if n is not None:
            subset.check_count(name, n)

    def apply(view: Any) -> Any:
        if holdout is not None:
            view = subset.holdout(view, holdout, seed=seed)[1 if held_out else 0]
        if skip:
            view = subset.skip(view, skip)
        if take is not None:
            view = subset.take(view, take)
        return view

    return apply


def _packed(view: Any, pack: Any, seed: int, shuffle: Any, refused: bool) -> Any:
    """``view`` packed with whole records (`from_storage`'s ``pack=``); ``refused``: options
    that do not go with it were given."""
    from guideloom.loading.packing import pack_view

    if refused:
        raise ValueError(
            "pack= already adds position_ids, labels and cu_seqlens per record, and packs a whole "
            "stream: leave out boundaries=, labels=, eos_id=, skip=, take= and holdout= with it"
        )
    return pack_view(view, pack, seed=seed, shuffle=shuffle)


def _marked(view: Any, boundaries: str | None, labels: bool, eos_id: int | None) -> Any:
    """``view`` with document boundaries (and labels) marked (`from_storage`'s options); a
    mixture's view is marked in place (its ``marks``), so that it stays the loader's mixture."""
    from guideloom.loading.boundaries import BoundaryView, MixtureMarks

    mixture = as_mixture(view)
    if mixture is not None:
        view = mixture
        settings = ("records" if boundaries is None else boundaries, labels, eos_id)
        view.marks = MixtureMarks(view.views, view.mixture.names, *settings)
        return view

    return BoundaryView(view, "records" if boundaries is None else boundaries, labels=labels, eos_id=eos_id)
