"""GuideLoom: tokenized training data in object storage, read back by an exactly resumable loader.

``import guideloom`` loads neither torch nor ray, nor any of the modules its public names come
from: each name (`StreamStorage`, `StatefulDataLoader`, ...) is imported from its module on first
use, and Ray ingestion lives in the separate ``guideloom.workers`` package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from guideloom._version import __version__
from guideloom.errors import GuideLoomError

if TYPE_CHECKING:  # what a type checker sees; at run time each name is imported on first use
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
    from guideloom.loading import BatchOrder, StatefulDataLoader
    from guideloom.loading.blend import open_data as open  # noqa: A004, F401
    from guideloom.loading.estimate import estimate
    from guideloom.loading.interleave import Interleave
    from guideloom.loading.mixture import Mixture
    from guideloom.loading.mixture_plan import MixturePlan
    from guideloom.loading.read_settings import ReadSettings
    from guideloom.loading.shuffle_report import shuffle_report
    from guideloom.loading.shuffling import Shuffle
    from guideloom.loading.trace import trace, trace_arrays
    from guideloom.manifest import Manifest, ShardInfo
    from guideloom.reporting import report
    from guideloom.storage import (
        DocumentDataset,
        DocumentStorage,
        StreamDataset,
        StreamStorage,
        StreamWithMetaDataset,
        StreamWithMetaStorage,
    )

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


# Where each public name lives. ``import guideloom`` imports none of them (a few milliseconds, not
# the ~190 ms of the storage, manifest and loading modules with pydantic and NumPy): a name is
# imported on first use and then kept in this module, so a Ray ingestion worker loads only the
# writing side it uses, and torch only when the loader is asked for.
_WHERE = {
    **dict.fromkeys(
        (
            "DocumentJsonFormat",
            "DocumentMsgpackFormat",
            "DocumentPickleFormat",
            "DocumentStorageFormat",
            "StreamNumpyFormat",
            "StreamWithMetaJsonFormat",
            "StreamWithMetaMsgpackFormat",
            "StreamWithMetaStorageFormat",
        ),
        "guideloom.formats",
    ),
    **dict.fromkeys(
        (
            "DocumentDataset",
            "DocumentStorage",
            "StreamDataset",
            "StreamStorage",
            "StreamWithMetaDataset",
            "StreamWithMetaStorage",
        ),
        "guideloom.storage",
    ),
    "Manifest": "guideloom.manifest",
    "ShardInfo": "guideloom.manifest",
    "Interleave": "guideloom.loading.interleave",
    "Mixture": "guideloom.loading.mixture",
    "MixturePlan": "guideloom.loading.mixture_plan",
    "ReadSettings": "guideloom.loading.read_settings",
    "Shuffle": "guideloom.loading.shuffling",
    "StatefulDataLoader": "guideloom.loading",
    "BatchOrder": "guideloom.loading",
    "trace": "guideloom.loading.trace",
    "trace_arrays": "guideloom.loading.trace",
    "shuffle_report": "guideloom.loading.shuffle_report",
    "estimate": "guideloom.loading.estimate",
    "report": "guideloom.reporting",
}


def __getattr__(name: str) -> Any:
    if name == "open":  # guideloom.open; defined lazily so the builtin is never shadowed here
        from guideloom.loading.blend import open_data

        return open_data
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'guideloom' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value  # the next lookup finds it without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE, "open"})
