"""Storage classes, writers, commit and dataset views: layout + format + io."""

from guideloom.storage.base import DocumentStorage, Storage, StreamStorage, StreamWithMetaStorage
from guideloom.storage.views import DocumentDataset, StreamDataset, StreamWithMetaDataset
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
    "Writer",
]
