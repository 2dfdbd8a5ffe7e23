"""Storage classes, writers, commit and dataset views: layout + format + io."""

from guideloom.storage.base import DocumentStorage, Storage, StreamStorage, StreamWithMetaStorage
from guideloom.storage.documents import DocumentDataset
from guideloom.storage.openview import open_view
from guideloom.storage.spans import StreamWithMetaDataset
from guideloom.storage.windows import StreamDataset, WindowReader
from guideloom.storage.writer import DEFAULT_SHARD_SIZE, Writer

__all__ = [
    "DEFAULT_SHARD_SIZE",
    "DocumentDataset",
    "DocumentStorage",
    "Storage",
    "StreamDataset",
    "StreamStorage",
    "StreamWithMetaDataset",
    "StreamWithMetaStorage",
    "WindowReader",
    "Writer",
    "open_view",
]
