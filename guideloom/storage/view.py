"""What the three dataset views share: the storage they read, its shard reader, and indexes.

A view (`DocumentDataset`, `StreamDataset`, `StreamWithMetaDataset`) is opened on a committed
dataset and implements `guideloom.types.DatasetView`. This base holds the storage, its manifest
and the one `guideloom.types.ShardReader` every read goes through (picked once, for the
storage's location, by `guideloom.io.shards.open_shard_reader`), and turns sample indexes into
checked, non-negative ones: negative indexes count from the end, anything else out of range is
an `IndexError` naming the view.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, cast

import numpy as np

from guideloom.io.shards import open_shard_reader
from guideloom.storage import subset
from guideloom.storage.base import Storage
from guideloom.storage.subset import Subset
from guideloom.types import LAYOUTS, Layout, ShardReader

__all__ = ["View", "run_lengths"]

_INT = {int}  # the one type of a batch of plain indexes


class View:
    """Base of the dataset views: see `DocumentDataset`, `StreamDataset`, `StreamWithMetaDataset`."""

    storage_type: ClassVar[type[Storage]]
    sequence_length: int | None  # tokens per window; None for documents
    mixture: ClassVar[None] = None  # one dataset's view (see guideloom.types.DatasetView.mixture)
    # Up to this many samples a batch is planned with Python ints, larger ones with whole-array
    # operations: an array call costs about a microsecond here, whatever its length, which is
    # more than a small batch's whole arithmetic (each view sets the crossover it measured).
    small_batch: ClassVar[int] = 64
    # A BatchOrder's read-ahead for loaders rebuilt from this view (guideloom.loading.read_ahead)
    _ahead: Any = None

    def __init__(self, storage: Storage) -> None:
        self._check_storage(storage)
        self.storage = storage
        self.manifest = storage.manifest
        self.reader: ShardReader = open_shard_reader(
            storage.location, self.manifest.shard_table, storage.block_cache
        )
        self._len = 0

    @classmethod
    def _check_storage(cls, storage: Any) -> None:
        if not isinstance(storage, cls.storage_type):
            raise TypeError(
                f"{cls.__name__} reads a {cls.storage_type.__name__}, got "
                f"{type(storage).__name__}; the three layouts are not interchangeable readers "
                "(DocumentDataset <- DocumentStorage, StreamDataset <- StreamStorage, "
                "StreamWithMetaDataset <- StreamWithMetaStorage)"
            )

    # -- guideloom.types.DatasetView -------------------------------------------------------------

    @property
    def layout(self) -> Layout:
        """The storage's layout (it picks the loader's default collate)."""
        layout = self.storage_type.layout
        if layout not in LAYOUTS:  # pragma: no cover - the three storage classes name theirs
            raise TypeError(f"{self.storage_type.__name__} has no known layout ({layout!r})")
        return cast(Layout, layout)

    @property
    def url(self) -> str:
        """The dataset's URL as messages name it (without credentials)."""
        return self.storage.url

    @property
    def fingerprint(self) -> str:
        """The manifest's fingerprint: the content's identity, whatever the URL."""
        return str(self.manifest.fingerprint)

    @property
    def sample_bytes(self) -> int:
        """Bytes one sample takes in storage, on average (sizes the loader's read-ahead)."""
        raise NotImplementedError

    def read_batch(self, indexes: Sequence[int]) -> Any:
        """Samples ``indexes`` as the layout's default collate takes them (see
        `guideloom.types.DatasetView.read_batch`)."""
        raise NotImplementedError

    def __len__(self) -> int:
        """The number of samples: documents (`DocumentDataset`) or complete windows of
        `sequence_length` tokens (the stream views; the final partial window is dropped).

        Returns:
            The number of samples; indexes run from `0` to `len(ds) - 1`.
        """
        return self._len

    # -- indexes ----------------------------------------------------------------------------------

    def _index(self, i: Any) -> int:
        """``i`` as a non-negative index (negatives count from the end); TypeError if it is not
        an integer, IndexError if it is out of range."""
        try:
            i = operator.index(i)
        except TypeError:
            raise TypeError(
                f"{type(self).__name__} indexes must be integers, got {type(i).__name__}"
            ) from None
        n = self._len
        if not -n <= i < n:
            raise IndexError(f"index {i} out of range for {type(self).__name__} of length {n}")
        return int(i) + n if i < 0 else int(i)

    def _indexes(self, indexes: Sequence[int]) -> np.ndarray:
        """``indexes`` as int64 with negatives counted from the end; IndexError if out of range."""
        idx = np.asarray(indexes)
        if idx.size == 0:
            return np.empty(0, np.int64)
        if idx.ndim != 1 or idx.dtype.kind not in "iu":
            return np.array([self._index(i) for i in indexes], dtype=np.int64)
        idx = idx.astype(np.int64, copy=False)
        n = self._len
        lo, hi = int(idx.min()), int(idx.max())
        if lo < -n or hi >= n:
            bad = next(int(i) for i in idx if not -n <= i < n)
            raise IndexError(f"index {bad} out of range for {type(self).__name__} of length {n}")
        return idx + n * (idx < 0) if lo < 0 else idx

    def _batch(self, indexes: Sequence[int]) -> list[int] | np.ndarray:
        """``indexes`` checked as `_indexes` does: a list of Python ints for a small batch (cheaper
        to plan with), an int64 array for a larger one."""
        if len(indexes) <= self.small_batch:
            if (
                type(indexes) is list
                and indexes
                and set(map(type, indexes)) == _INT  # what an order yields: Python ints
                and min(indexes) >= 0
                and max(indexes) < self._len
            ):
                return indexes  # already what the loop below would make (C-level checks only)
            index = self._index
            return [index(i) for i in indexes]
        return self._indexes(indexes)

    # -- samples ------------------------------------------------------------------------------

    def __getitem__(self, i: int) -> Any:
        """Sample `i`: `ds[i]`, read as a batch of one (see `__getitems__`).

        Args:
            i: A sample index in `-len(ds) .. len(ds) - 1`; a negative one counts from the end.

        Returns:
            One sample: the decoded document (`DocumentDataset`), `{field: array of
            sequence_length values}` (`StreamDataset`) or what the format's `align` returns
            (`StreamWithMetaDataset`).

        Raises:
            IndexError: `i` is out of range.
            TypeError: `i` is not an integer.
            ShardNotFoundError: A shard file the manifest lists is missing.
            ShardCorruptError: A shard file is shorter than the manifest records.
            StorageAccessError: The storage refused a request or could not be reached.
        """
        return self.__getitems__([i])[0]

    def __getitems__(self, indexes: Sequence[int]) -> list[Any]:
        """Samples `indexes`, read as one batch: one round of concurrent range requests.

        Args:
            indexes: Sample indexes, each in `-len(ds) .. len(ds) - 1`, in any order; repeats
                allowed.

        Returns:
            One sample per index, in the order of `indexes`.

        Raises:
            IndexError: An index is out of range.
            TypeError: An index is not an integer.
            ShardNotFoundError: A shard file the manifest lists is missing.
            ShardCorruptError: A shard file is shorter than the manifest records.
            StorageAccessError: The storage refused a request or could not be reached.
        """
        raise NotImplementedError

    def __iter__(self) -> Iterator[Any]:
        """Every sample in index order (`0 .. len(ds) - 1`, as `ds[i]` returns them), read 64
        at a time.

        Raises:
            ShardNotFoundError: A shard file the manifest lists is missing.
            ShardCorruptError: A shard file is shorter than the manifest records.
            StorageAccessError: The storage refused a request or could not be reached.
        """
        for start in range(0, self._len, 64):
            yield from self.__getitems__(range(start, min(self._len, start + 64)))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.storage.url!r}, len={self._len})"

    # -- subsets (guideloom.storage.subset) -------------------------------------------------------

    def skip(self, n: int) -> Subset:
        """This view without its first ``n`` samples.

        Args:
            n: Samples to leave out from the start.

        Returns:
            A `guideloom.storage.subset.Subset` view of the rest.
        """
        return subset.skip(self, n)

    def take(self, n: int) -> Subset:
        """This view's first ``n`` samples.

        Args:
            n: Samples to keep.

        Returns:
            A `guideloom.storage.subset.Subset` view of them.
        """
        return subset.take(self, n)

    def holdout(self, fraction: float, *, seed: int = 0) -> tuple[Subset, Subset]:
        """This view split into ``(kept, held_out)`` by a seeded split that is the same in
        every run, on every rank and at every world size.

        Args:
            fraction: The share held out, in steps of 0.001.
            seed: The split's seed.

        Returns:
            Two `guideloom.storage.subset.Subset` views that together hold each sample once.
        """
        return subset.holdout(self, fraction, seed=seed)


def run_lengths(heads: np.ndarray, n: int) -> np.ndarray:
    """Lengths of the runs that start at ``heads`` (ascending, the first 0) in ``n`` items:
    ``np.diff(heads, append=n)``, without its Python-level overhead (tens of microseconds,
    more than planning a small batch)."""
    out = np.empty(len(heads), dtype=np.int64)
    np.subtract(heads[1:], heads[:-1], out=out[:-1])
    out[-1] = n - heads[-1]
    return out
