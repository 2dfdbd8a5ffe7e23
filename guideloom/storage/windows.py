"""Streams cut into windows: `StreamDataset`, and the reader of windows every stream view uses.

A stream is every record of every shard joined end to end in manifest order; ``StreamDataset(
storage, L)`` cuts it into complete, non-overlapping windows of ``L`` elements: window ``i`` is
elements ``[i*L, (i+1)*L)``. Windows cross record and shard boundaries; only the final partial
window of the whole stream is dropped.

The window arithmetic is here; reading windows is `guideloom.storage.windowplan` (`WindowReader`)
and record starts `guideloom.storage.recordstarts`.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any

import numpy as np

from guideloom.formats import StreamNumpyFormat
from guideloom.storage.base import Storage, StreamStorage
from guideloom.storage.recordstarts import RecordStarts
from guideloom.storage.view import View
from guideloom.storage.windowplan import Piece, WindowReader, window_pieces

__all__ = ["StreamDataset", "WindowReader", "Windows", "joined_reader", "window_pieces"]


class Windows(RecordStarts, View):
    """Window arithmetic shared by the two stream views (`StreamDataset`, `StreamWithMetaDataset`).

    Public for the readers built on them: `shard_starts` (each shard's first token on the
    stream's token axis), `shard_tokens`, `total_tokens`, and the view's `reader`.
    """

    sequence_length: int
    small_batch = 128

    def __init__(self, storage: Storage, sequence_length: int, stream_format: StreamNumpyFormat) -> None:
        if isinstance(sequence_length, bool) or not isinstance(sequence_length, (int, np.integer)):
            raise TypeError(
                f"sequence_length must be a positive int (tokens per window), got {sequence_length!r}"
            )
        if sequence_length <= 0:
            raise ValueError(f"sequence_length must be a positive number of tokens, got {sequence_length}")
        super().__init__(storage)
        self.sequence_length = int(sequence_length)
        self.stream_format = stream_format
        tokens = np.array(self.manifest.shard_table.tokens, dtype=np.int64)
        self.shard_tokens = tokens
        self.shard_starts = np.concatenate([[0], np.cumsum(tokens)])[:-1] if len(tokens) else tokens
        self.total_tokens = int(tokens.sum())
        self._len = self.total_tokens // self.sequence_length
        self._itemsize = stream_format.itemsize

    @cached_property
    def _windows(self) -> WindowReader:
        """The reader of this view's windows, built on the first read (opening stays cheap)."""
        return WindowReader([self])

    @cached_property
    def _shard_lists(self) -> tuple[list[int], list[int]]:
        """Shard starts and token counts as Python ints, for `pieces` (bisection per call)."""
        return self.shard_starts.tolist(), self.shard_tokens.tolist()

    @property
    def _starts(self) -> np.ndarray:  # the name tests and older callers use for `shard_starts`
        return self.shard_starts

    @property
    def sample_bytes(self) -> int:
        """Bytes of one window in storage: ``sequence_length`` elements of the stream's fields."""
        return self.sequence_length * self.stream_format.itemsize

    def pieces(self, window: int) -> list[Piece]:
        """Where window ``window``'s tokens are: one piece per shard it touches.

        Args:
            window: A window number in `0 .. len(self) - 1`.

        Returns:
            `(shard, start, stop, offset)` per piece, in window order: tokens `[start, stop)` of
            shard `shard` (a row of the manifest's shard table) are the window's tokens from
            `offset` on.
        """
        starts, tokens = self._shard_lists
        return window_pieces(starts, tokens, window, self.sequence_length)

    def read_windows(self, indexes: Sequence[int]) -> dict[str, np.ndarray]:
        """Windows ``indexes`` as ``{field: array of shape (len(indexes), sequence_length)}``.

        One batch is one round of merged, concurrent range requests on remote storage (positioned
        reads on local disk).

        Args:
            indexes: Window numbers, each in `0 .. len(self) - 1` (negative numbers count from the
                end), in any order; repeats allowed.

        Returns:
            One array per stream field, row `j` holding window `indexes[j]`.

        Raises:
            IndexError: An index is out of range.
            TypeError: An index is not an integer.
            ShardNotFoundError: A shard file is missing.
            ShardCorruptError: A shard file is shorter than the manifest records.
            StorageAccessError: The storage refused a request or could not be reached.
        """
        return self.stream_format.split_fields(self._windows.read(self._batch(indexes)))


class StreamDataset(Windows):
    """Complete, non-overlapping windows of ``sequence_length`` stream elements.

    A sample is ``{field: array of sequence_length values}``.
    """

    storage_type = StreamStorage

    def __new__(cls, storage: StreamStorage | None = None, *args: object, **kwargs: object) -> StreamDataset:
        # A storage of files read in place (`guideloom.storage.foreign`) names the view that reads them.
        own = storage.view_class if cls is StreamDataset and isinstance(storage, StreamStorage) else None
        return super().__new__(own if own is not None and issubclass(own, cls) else cls)

    def __init__(self, storage: StreamStorage, sequence_length: int) -> None:
        """Open a view of the stream committed in `storage`, cut into windows.

        Args:
            storage: A `StreamStorage` holding a committed dataset.
            sequence_length: Tokens per window (a positive int). A stream of `n` tokens has
                `n // sequence_length` windows.

        Raises:
            DatasetNotFoundError: No dataset is committed at the storage's URL.
            ManifestError: The manifest is unreadable, of an unknown version or invalid.
            StorageAccessError: The storage refused a request or could not be reached.
            TypeError: `storage` is not a `StreamStorage`, or `sequence_length` is not an int.
            ValueError: `sequence_length` is not positive.
        """
        self._check_storage(storage)
        super().__init__(storage, sequence_length, storage.format)  # type: ignore[arg-type]

    def read_batch(self, indexes: Sequence[int]) -> dict[str, np.ndarray]:
        """The batch as the loader's default collate takes it: `read_windows`'s arrays.

        Args:
            indexes: Window indexes, as for `read_windows`.

        Returns:
            `{field: array of shape (len(indexes), sequence_length)}`.

        Raises:
            IndexError: An index is out of range.
            ShardNotFoundError: A shard file the manifest lists is missing.
            ShardCorruptError: A shard file is shorter than the manifest records.
            StorageAccessError: The storage refused a request or could not be reached.
        """
        return self.read_windows(indexes)

    def __getitems__(self, indexes: Sequence[int]) -> list[dict[str, np.ndarray]]:
        """Windows `indexes`, one dict per window (`read_windows` gives them as one array per
        field instead, without the split).

        Args:
            indexes: Window indexes, each in `-len(ds) .. len(ds) - 1`, in any order; repeats
                allowed.

        Returns:
            One `{field: array of sequence_length values}` per index, in the order of `indexes`.

        Raises:
            IndexError: An index is out of range.
            TypeError: An index is not an integer.
            ShardNotFoundError: A shard file the manifest lists is missing.
            ShardCorruptError: A shard file is shorter than the manifest records.
            StorageAccessError: The storage refused a request or could not be reached.
        """
        ahead = self._ahead  # a BatchOrder's read-ahead (guideloom.loading.read_ahead)
        if ahead is not None and ahead.active():
            return ahead.items(self, indexes)  # type: ignore[no-any-return]
        batch = self.read_windows(indexes)
        return [{name: arr[row] for name, arr in batch.items()} for row in range(len(indexes))]


def joined_reader(views: Sequence[Any]) -> WindowReader | None:
    """One `WindowReader` over ``views`` when they are all plain stream views of one element
    dtype whose files are on local disk (a mixture's sources, read in one pass into one array),
    else None. (Whether a file is local is its reader's answer: `guideloom.io` decides it.)"""
    streams = [v for v in views if isinstance(v, StreamDataset)]
    if not streams or len(streams) != len(views) or not all(v.reader.local for v in streams):
        return None
    if len({v.stream_format.dtype for v in streams}) != 1:
        return None
    return WindowReader(streams)
