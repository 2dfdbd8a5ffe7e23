"""GuideLoom: tokenized training data in object storage, read back by an exactly resumable loader.

``import guideloom`` loads neither torch nor ray: `StatefulDataLoader` is imported from
`guideloom.loading` on first use, and Ray ingestion lives in the separate ``guideloom.workers``
package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from guideloom._version import __version__
from guideloom.errors import GuideLoomError
from guideloom.formats import (
    DocumentJsonFormat,
    DocumentMsgpackFormat,
    DocumentPickleFormat,
    DocumentStorageFormat,
    StreamNumpyFormat,
    StreamWithMetaJsonFormat,
    StreamWithMetaMsgpackFormat,
    StreamWithMetaStorageFormat,
)
from guideloom.loading.interleave import Interleave
from guideloom.loading.mixture import Mixture
from guideloom.loading.mixture_plan import MixturePlan
from guideloom.loading.read_settings import ReadSettings
from guideloom.loading.shuffling import Shuffle
from guideloom.manifest import Manifest, ShardInfo
from guideloom.storage import (
    DocumentDataset,
    DocumentStorage,
    StreamDataset,
    StreamStorage,
    StreamWithMetaDataset,
    StreamWithMetaStorage,
)

if TYPE_CHECKING:
    from guideloom.loading import BatchOrder, StatefulDataLoader
    from guideloom.loading.blend import open_data as open  # noqa: A004, F401

__all__ = [
    "BatchOrder",
    "DocumentDataset",
    "DocumentJsonFormat",
    "DocumentMsgpackFormat",
    "DocumentPickleFormat",
    "DocumentStorage",
    "DocumentStorageFormat",
    "GuideLoomError",
    "Interleave",
    "Manifest",
    "Mixture",
    "MixturePlan",
    "ReadSettings",
    "ShardInfo",
    "Shuffle",
    "StatefulDataLoader",
    "StreamDataset",
    "StreamNumpyFormat",
    "StreamStorage",
    "StreamWithMetaDataset",
    "StreamWithMetaJsonFormat",
    "StreamWithMetaMsgpackFormat",
    "StreamWithMetaStorage",
    "StreamWithMetaStorageFormat",
    "__version__",
    "estimate",
    "report",
    "shuffle_report",
    "trace",
    "trace_arrays",
]
# guideloom.open is public but not in __all__: `from guideloom import *` must not shadow the
# builtin open in the importer's namespace.


def __getattr__(name: str) -> Any:
    # torch is heavy and a Ray ingestion worker never needs it: load the loader on first use.
    if name == "StatefulDataLoader":
        from guideloom.loading import StatefulDataLoader

        return StatefulDataLoader
    if name == "BatchOrder":
        from guideloom.loading import BatchOrder

        return BatchOrder
    if name == "open":  # guideloom.open; defined lazily so the builtin is never shadowed here
        from guideloom.loading.blend import open_data

        return open_data
    if name in ("trace", "trace_arrays"):
        from guideloom.loading import trace

        return getattr(trace, name)
    if name == "shuffle_report":
        from guideloom.loading.shuffle_report import shuffle_report

        return shuffle_report
    if name == "estimate":
        from guideloom.loading.estimate import estimate

        return estimate
    if name == "report":
        from guideloom.reporting import report

        return report
    raise AttributeError(f"module 'guideloom' has no attribute {name!r}")
