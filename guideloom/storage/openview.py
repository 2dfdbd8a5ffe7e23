"""`open_view`: the dataset view a storage's layout is read through, opened with its checks.

One function picks the view for a storage (`DocumentDataset`, `StreamDataset` or
`StreamWithMetaDataset`, by the storage's layout) and checks the window length the way the
loader states it: required for streams, refused for documents, a positive whole number, and not
longer than the stream.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from guideloom.storage.base import Storage
from guideloom.storage.documents import DocumentDataset
from guideloom.storage.spans import StreamWithMetaDataset
from guideloom.storage.view import View
from guideloom.storage.windows import StreamDataset
from guideloom.types import DatasetView

__all__ = ["VIEWS", "open_view"]

VIEWS: dict[str, type[View]] = {
    cls.storage_type.layout: cls for cls in (DocumentDataset, StreamDataset, StreamWithMetaDataset)
}
"""The view class of each layout (`guideloom.types.LAYOUTS`)."""


def open_view(storage: Storage, sequence_length: int | None = None) -> DatasetView:
    """The view of ``storage``'s committed dataset that its layout is read through.

    Args:
        storage: A `DocumentStorage`, `StreamStorage` or `StreamWithMetaStorage`.
        sequence_length: Tokens per window: required for streams, refused for documents.

    Returns:
        A `DocumentDataset`, `StreamDataset` or `StreamWithMetaDataset` (each a
        `guideloom.types.DatasetView`).

    Raises:
        TypeError: `storage` is not a GuideLoom storage.
        ValueError: `sequence_length` missing for a stream, given for documents, not a positive
            integer, or longer than the stream.
        DatasetNotFoundError: No dataset is committed at the storage's URL.
        ManifestError: The manifest is unreadable, of an unknown version or invalid.
        StorageAccessError: The storage refused a request or could not be reached.
    """
    view_cls: type[Any] | None = (
        (storage.view_class or VIEWS.get(storage.layout)) if isinstance(storage, Storage) else None
    )
    if view_cls is None:
        raise TypeError(
            "open_view takes a GuideLoom storage (DocumentStorage, StreamStorage or "
            f"StreamWithMetaStorage), got {type(storage).__name__}"
        )
    if issubclass(view_cls, DocumentDataset):
        if sequence_length is not None:
            raise ValueError(
                f"sequence_length={sequence_length!r} has no meaning for the document dataset "
                f"at {storage.url}: documents are read whole; leave it out"
            )
        return DocumentDataset(storage)  # type: ignore[arg-type]
    if sequence_length is None:
        raise ValueError(
            f"sequence_length is required for the stream dataset at {storage.url}: pass "
            "the number of tokens per training window, e.g. sequence_length=2048"
        )
    length = _positive_int("sequence_length", sequence_length)
    total = int(storage.manifest.total_tokens)
    if length > total:
        raise ValueError(
            f"sequence_length={length} is larger than the whole stream at "
            f"{storage.url} ({total} tokens): no complete window fits"
        )
    return view_cls(storage, sequence_length=length)  # type: ignore[no-any-return]


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)
