"""Errors raised by GuideLoom.

Every error derives from `GuideLoomError` and, where one fits, from the built-in
exception a caller would already catch, so ``except FileNotFoundError`` keeps working::

    GuideLoomError (Exception)
    ├── DatasetNotFoundError (FileNotFoundError)      no manifest at the URL
    ├── DatasetExistsError (FileExistsError)          writing where a dataset is already committed
    ├── ShardNotFoundError (FileNotFoundError)        a shard the manifest lists is missing
    ├── ShardCorruptError (ValueError)                a shard's size or checksum differs from the manifest
    ├── ManifestError (ValueError)                    a manifest that cannot be read or validated
    ├── SchemaMismatchError (TypeError)               reopened with another storage class or format
    ├── RecordError (ValueError)                      an appended record that the format refuses
    ├── SpanError (RecordError)                       spans that overlap, are unsorted or leave the record
    ├── IncompletePartsError (RuntimeError)           commit found parts without a completion record
    ├── CommitConflictError (RuntimeError)            another commit landed first (overwrite, rollback)
    ├── StorageAccessError (PermissionError)          credentials refused, endpoint unreachable or failing
    │   └── StorageTimeoutError (TimeoutError)        no complete answer within the I/O deadline
    ├── BucketNotFoundError (FileNotFoundError)       the bucket (or container) does not exist
    ├── UnknownProtocolError (ValueError)             a URL scheme that fsspec does not know
    ├── ResumeStateError (ValueError)                 a loader state that does not belong to this loader
    ├── MixtureError (ValueError)                     sources of a mixture that cannot be mixed (names the source)
    ├── OrderLostError (RuntimeError)                 a framework rebuilt the loader without GuideLoom's order or ranks
    ├── ShuffleSettingsError (ValueError)             shuffle blocks or windows that do not fit the samples
    ├── PluginError (LookupError)                     a plug-in name (tokenizer, input reader, format) not registered
    ├── HashIndexError (ValueError)                   a dataset's duplicate-hash index missing or damaged
    └── IngestError (RuntimeError)                    bad input in a Ray ingestion job

Messages say what failed, where (URL, shard, record, line) and how to fix it. They never contain
credentials: URLs are passed through `guideloom.io.redact_url` before they are shown.
"""

from __future__ import annotations

__all__ = [
    "BucketNotFoundError",
    "CommitConflictError",
    "DatasetExistsError",
    "DatasetNotFoundError",
    "GuideLoomError",
    "HashIndexError",
    "IncompletePartsError",
    "IngestError",
    "ManifestError",
    "MixtureError",
    "OrderLostError",
    "PluginError",
    "RecordError",
    "ResumeStateError",
    "SchemaMismatchError",
    "ShardCorruptError",
    "ShardNotFoundError",
    "ShuffleSettingsError",
    "SpanError",
    "StorageAccessError",
    "StorageTimeoutError",
    "UnknownProtocolError",
]


EXCERPT_CHARS = 40


def excerpt(value: object, limit: int = EXCERPT_CHARS) -> str:
    """``repr(value)`` cut to about ``limit`` characters: what a message may quote of a value
    read from a file (escaped, so control characters and odd bytes show as escapes; never the
    whole file).

    Args:
        value: What was read.
        limit: Characters of its ``repr`` to keep.

    Returns:
        The excerpt, with the full length said when it was cut.
    """
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}...({len(text)} chars)"


class GuideLoomError(Exception):
    """Root of every error GuideLoom raises on purpose."""


class DatasetNotFoundError(GuideLoomError, FileNotFoundError):
    """There is no committed dataset (no ``manifest.json``) at the URL."""


class DatasetExistsError(GuideLoomError, FileExistsError):
    """A writer was opened where a dataset is already committed, without ``overwrite=True``."""


class ShardNotFoundError(GuideLoomError, FileNotFoundError):
    """A shard file that the manifest lists does not exist."""


class ShardCorruptError(GuideLoomError, ValueError):
    """A shard file's size or checksum differs from what the manifest records."""


class ManifestError(GuideLoomError, ValueError):
    """A manifest or part completion record that is unreadable, of an unknown version or invalid."""


class SchemaMismatchError(GuideLoomError, TypeError):
    """A dataset was opened with another storage class or format than it was written with."""


class RecordError(GuideLoomError, ValueError):
    """An appended record that the format cannot store as it is."""


class SpanError(RecordError):
    """Spans passed with a stream record that overlap, are unsorted or reach past the record."""


class IncompletePartsError(GuideLoomError, RuntimeError):
    """``commit`` found parts that have no valid completion record."""


class CommitConflictError(GuideLoomError, RuntimeError):
    """An overwrite or rollback found that another commit landed since it started (both named)."""


class StorageAccessError(GuideLoomError, PermissionError):
    """The storage refused the request: wrong credentials, missing bucket, no permission."""


class StorageTimeoutError(StorageAccessError, TimeoutError):
    """A storage operation, retries included, did not finish within its deadline
    (`guideloom.io.location.DEFAULT_DEADLINE_S`; a knob: ``GUIDELOOM_IO_DEADLINE_S``)."""


class BucketNotFoundError(GuideLoomError, FileNotFoundError):
    """The bucket a URL names does not exist at the endpoint."""


class UnknownProtocolError(GuideLoomError, ValueError):
    """The URL's protocol is not known to fsspec (or its package is not installed)."""


class ResumeStateError(GuideLoomError, ValueError):
    """A loader state dict that is corrupt or was saved by a loader over other data or settings."""


class MixtureError(GuideLoomError, ValueError):
    """A mixture whose sources or weights cannot be mixed: the message names the source."""


class OrderLostError(GuideLoomError, RuntimeError):
    """A framework rebuilt or wrapped the loader so that GuideLoom's order would be lost, split
    over ranks twice, or read with the ranks of another process group (Lightning's sampler
    injection, accelerate's sharding, a loader built before ``init_process_group``); the message
    names the framework and the fix."""


class ShuffleSettingsError(GuideLoomError, ValueError):
    """Shuffle settings that cannot be laid over a dataset: a block smaller than one sample, a
    window of fewer than one block, or old and new block settings mixed; the message gives the fix."""


class PluginError(GuideLoomError, LookupError):
    """A plug-in asked for by name (a tokenizer, an input reader, a format) that is neither
    registered nor installed as an entry point, or whose entry point fails to import; see
    `guideloom.registry`."""


class HashIndexError(GuideLoomError, ValueError):
    """A dataset's exact-duplicate hash index is missing, damaged or of other settings than a
    deduplicated append asks for; the message says how to (re)build it."""


class IngestError(GuideLoomError, RuntimeError):
    """Bad input or configuration in an ingestion job."""
