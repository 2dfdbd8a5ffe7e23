"""The one base of views that wrap another view: what a wrapper forwards, declared.

A wrapper (`guideloom.storage.subset.Subset`: ``skip``/``take``/``holdout``; the loader's
`guideloom.loading.boundaries.BoundaryView`: ``position_ids`` and ``labels``) reads another view's
samples and changes one thing about them. It forwards exactly the members that
`guideloom.types.DatasetView` and `guideloom.types.StreamView` declare, and nothing else: there
is no ``__getattr__``, so a caller that needs a member the contract does not name fails at once
(and mypy says so) instead of finding whatever the inner view happens to have.

A new wrapper subclasses `WrappedView`, sets ``self.view`` (through ``super().__init__``),
overrides what it changes, and, where its sample ``i`` is not the inner view's sample ``i``,
overrides `base_indexes` (`guideloom.loading.trace` follows it down to the stored view).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from guideloom.types import DatasetView, Layout

__all__ = ["WrappedView", "innermost"]


class WrappedView:
    """Forwards the `DatasetView` and `StreamView` members to ``view`` (see the module)."""

    mixture: ClassVar[None] = None  # a wrapper reads through its view; it is not a mixture's view
    _ahead: Any = None  # a BatchOrder's read-ahead (guideloom.loading.read_ahead)

    def __init__(self, view: DatasetView) -> None:
        self.view: Any = view

    def base_indexes(self, indexes: Sequence[int] | np.ndarray) -> np.ndarray:
        """The inner view's sample indexes of this wrapper's ``indexes``: the same indexes
        unless a subclass maps them.

        Args:
            indexes: Sample indexes of this wrapper.

        Returns:
            The inner view's indexes (int64), in the same order.
        """
        return np.asarray(indexes, dtype=np.int64).reshape(-1)

    # -- guideloom.types.DatasetView ----------------------------------------------------------

    @property
    def layout(self) -> Layout:
        return self.view.layout  # type: ignore[no-any-return]

    @property
    def url(self) -> str:
        return self.view.url  # type: ignore[no-any-return]

    @property
    def fingerprint(self) -> str:
        return self.view.fingerprint  # type: ignore[no-any-return]

    @property
    def sequence_length(self) -> int | None:
        return self.view.sequence_length  # type: ignore[no-any-return]

    @property
    def sample_bytes(self) -> int:
        return self.view.sample_bytes  # type: ignore[no-any-return]

    @property
    def storage(self) -> Any:
        """The storage of the view read (its snapshot is the wrapper's)."""
        return self.view.storage

    # -- guideloom.types.StreamView (an AttributeError where the inner view is not a stream) --

    @property
    def manifest(self) -> Any:
        return self.view.manifest

    @property
    def stream_format(self) -> Any:
        return self.view.stream_format

    @property
    def reader(self) -> Any:
        return self.view.reader

    @property
    def has_record_starts(self) -> bool:
        return bool(self.view.has_record_starts)

    def pieces(self, window: int) -> list[tuple[int, int, int, int]]:
        """Where window ``window`` is stored (see `guideloom.types.StreamView.pieces`).

        Args:
            window: A window of this wrapper.

        Returns:
            ``(shard, start, stop, offset)`` per shard the window touches.
        """
        return self.view.pieces(int(self.base_indexes([window])[0]))  # type: ignore[no-any-return]

    def record_starts_batch(self, indexes: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where records start in the windows ``indexes`` (see
        `guideloom.types.StreamView.record_starts_batch`), through `base_indexes`.

        Args:
            indexes: Windows of this wrapper.

        Returns:
            ``(positions, counts)``, int64: positions within each window, and how many each has.
        """
        return self.view.record_starts_batch(self.base_indexes(indexes))  # type: ignore[no-any-return]


def innermost(view: DatasetView, sample: int) -> tuple[DatasetView, int]:
    """The stored view under any wrappers, and the index ``sample`` has there."""
    while isinstance(view, WrappedView):
        sample, view = int(view.base_indexes([sample])[0]), view.view
    return view, sample
