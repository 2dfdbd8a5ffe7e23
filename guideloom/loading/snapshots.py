"""The loader's snapshots: resuming the one a state was saved on, following the current one.

A mixin of `guideloom.loading.loader.StatefulDataLoader`: ``follow=True`` moves the loader to the
storage's current snapshot at each epoch boundary (rank 0 picks it and broadcasts it), and
``load_state_dict`` reopens the view at the snapshot a state was saved on, so that a dataset that
grew by appends resumes exactly (`docs/datasets-that-grow.md`). The views are reopened by
`guideloom.loading.view_recipe.ViewRecipe` (what ``from_storage`` made of its keywords).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch.distributed as dist

from guideloom.errors import DatasetNotFoundError, ResumeStateError
from guideloom.loading.batch_order import BatchOrder
from guideloom.loading.fetch import BatchSource
from guideloom.loading.state import OrderIdentity, expired_cause, snapshot_of
from guideloom.types import DatasetView, as_mixture

__all__ = ["SnapshotMoves"]


class SnapshotMoves:
    """Moves between snapshots of the loader's dataset (see the module docstring)."""

    dataset: Any
    batch_sampler: Any
    view: Any  # the loader's view (a concrete view class; DatasetView is its protocol)
    rank: int
    world_size: int
    _workers: Any
    _copies: Any
    _mixture: Any
    _follow: bool
    _reopen: Callable[[str | None], DatasetView] | None
    _reopen_sources: Callable[[Sequence[str | None]], DatasetView] | None

    # The order and where the next pass starts live in the batch sampler (`BatchOrder`).
    @property
    def _order(self) -> BatchOrder:
        return self.batch_sampler  # type: ignore[no-any-return]

    @property
    def _identity(self) -> OrderIdentity:
        return self._order.identity

    @_identity.setter
    def _identity(self, identity: OrderIdentity) -> None:
        self._order.identity = identity

    def _switch(self, view: DatasetView) -> None:
        """Read ``view`` (the same dataset at another snapshot) from the next pass on."""
        source: BatchSource = self.dataset
        fresh = BatchSource(view, source.batched)
        fresh.gap_budget = source.gap_budget  # a block shuffle's window reads keep their budget
        object.__setattr__(self, "dataset", fresh)
        self.view = view
        self._order.view = view  # the order reads the new view's plan (a mixture's) from now on
        self._copies = None  # thread workers' private copies were of the old view
        if self._workers is not None:  # worker processes receive the new view when they start
            object.__setattr__(self._workers, "dataset", self.dataset)
            self._workers._iterator = None
        mixture = as_mixture(view)
        if mixture is not None:  # its sources at other snapshots: a new plan
            self._mixture = view = mixture
            ident = self._identity
            self._identity = OrderIdentity.of_view(
                view, view, num_samples=view.plan.epoch_length, seed=ident.seed, shuffle=ident.shuffle
            )
            return
        num_samples = len(view)
        self._identity = replace(
            self._identity,
            fingerprint=view.fingerprint,
            num_samples=num_samples,
            snapshot=snapshot_of(view),
        )

    def _follow_current(self) -> None:
        """``follow=True`` at an epoch boundary: move to the storage's current snapshot (a
        mixture: each source's)."""
        if self._follow and self._reopen_sources is not None:
            self._follow_sources()
            return
        if not self._follow or self._reopen is None:
            return
        if self.world_size == 1:
            view = self._reopen(None)
            if snapshot_of(view) != self._identity.snapshot or view.fingerprint != self._identity.fingerprint:
                self._switch(view)
            return
        # Every rank must read the same snapshot: rank 0 picks it, the others open that one.
        picked: list[str | None] = [snapshot_of(self._reopen(None)) if self.rank == 0 else None]
        dist.broadcast_object_list(picked, src=0)
        if picked[0] is not None and picked[0] != self._identity.snapshot:
            self._switch(self._reopen(picked[0]))

    def _follow_sources(self) -> None:
        """A mixture's ``follow=True``: rebuild it on its sources' current snapshots (rank 0
        reads them and broadcasts the ids, so every rank reads the same ones)."""
        assert self._mixture is not None and self._reopen_sources is not None
        picked: list[Any] = [None]
        if self.rank == 0 or self.world_size == 1:
            for storage in self._mixture.mixture.storages:
                storage.refresh()
            picked = [[s.current_snapshot.id for s in self._mixture.mixture.storages]]
        if self.world_size > 1:
            dist.broadcast_object_list(picked, src=0)
        current = self._identity.source_snapshots
        if picked[0] is not None and tuple(picked[0]) != tuple(current or ()):
            self._switch(self._reopen_sources(picked[0]))

    def _pin_saved_sources(self, snapshots: tuple[str | None, ...] | None) -> None:
        """A mixture's state: reopen each source at the snapshot the state was saved on, where
        it has moved since (a source that grew by appends resumes exactly)."""
        current = self._identity.source_snapshots
        if snapshots is None or current is None or self._reopen_sources is None:
            return
        if len(snapshots) != len(current) or tuple(snapshots) == tuple(current):
            return  # another mixture, or the same snapshots: check_continues decides
        self._switch(self._reopen_sources(snapshots))

    def _pin_saved(self, snapshot: str | None, url: str | None) -> None:
        """Reopen the view at the snapshot a state was saved on, when it is another one of this
        dataset (a state of another dataset is left to the identity check, which names it)."""
        if snapshot is None or self._reopen is None or snapshot == self._identity.snapshot:
            return
        try:
            view = self._reopen(snapshot)
        except DatasetNotFoundError as err:
            if url != self.view.url or "has expired" not in str(err):
                return  # not a snapshot of this dataset: check_continues says what differs
            raise ResumeStateError(
                f"the loader state was saved on snapshot {snapshot} of {self.view.url}, which is "
                f"no longer kept: {expired_cause(err)}. The saved order cannot be resumed exactly. Start the "
                "loader without loading the state (a new run on the current snapshot), or keep "
                "the snapshots that running jobs read: expire(keep_last=N) with a larger N, or "
                "a larger older_than"
            ) from err
        self._switch(view)
