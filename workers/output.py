"""The output side of a job: storage class and format from the options, and what a part keeps.

Stream layout: ``StreamNumpyFormat({"tokens": smallest unsigned dtype for the vocabulary})``, plus
``doc_index`` (uint64: ``part << 32 | document number within the part``, unique and increasing in
stream order) with ``--doc-index``. Document layout: a record ``{"tokens": [...], **passthrough}``
per document in the JSON, MessagePack or pickle document format.

Each finished part keeps its document, token and bad-record counts and the plan digest it was
written under in its own completion record (``storage.writer(part=k, metadata=...)``, under
`PART_METADATA_KEY`), written atomically with the record itself: a re-run reuses a part only
when its record names the current plan and its shards pass the checksum check
(`reusable_result`). Everything here goes through GuideLoom's storage and `guideloom.io.Location`
(deadlines, retries, error translation), never through raw fsspec.
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np

import guideloom.layout as layout
from guideloom.errors import (
    BucketNotFoundError,
    GuideLoomError,
    IngestError,
    ManifestError,
    ShardCorruptError,
    StorageAccessError,
)
from guideloom.io import Location
from guideloom.types import DOCUMENTS, STREAM, STREAM_WITH_META, Tokenizer
from guideloom.workers.config import IngestConfig
from guideloom.workers.tokenizer import token_dtype

__all__ = [
    "PART_METADATA_KEY",
    "check_writable",
    "make_format",
    "open_storage",
    "part_metadata",
    "remove_foreign_manifest",
    "reusable_result",
]

PART_METADATA_KEY = "ingest"
"""The key of a part's completion-record metadata that holds ``{"version", "plan", "result"}``."""
PART_METADATA_VERSION = 1
PROBE_PREFIX = ".guideloom-ingest-probe-"  # written and removed at the output root before any task


def make_format(config: IngestConfig, tokenizer: Tokenizer) -> Any:
    """The GuideLoom format object for the job's layout and options."""
    import guideloom

    if config.layout in (STREAM, STREAM_WITH_META):
        fields: dict[str, Any] = {"tokens": token_dtype(tokenizer.vocab_size)}
        if config.chat:
            fields["loss_mask"] = np.dtype(np.uint8)
        if config.doc_index:
            fields["doc_index"] = np.dtype(np.uint64)
        stream = guideloom.StreamNumpyFormat(fields)
        if config.layout == STREAM:
            return stream
        meta = {"json": guideloom.StreamWithMetaJsonFormat, "msgpack": guideloom.StreamWithMetaMsgpackFormat}
        return meta[config.meta_format](stream)
    formats = {
        "json": guideloom.DocumentJsonFormat,
        "msgpack": guideloom.DocumentMsgpackFormat,
        "pickle": guideloom.DocumentPickleFormat,
    }
    return formats[config.format]()


def open_storage(config: IngestConfig, tokenizer: Tokenizer) -> Any:
    """The storage object for the job's output (does not create anything yet)."""
    import guideloom

    classes = {
        STREAM: guideloom.StreamStorage,
        DOCUMENTS: guideloom.DocumentStorage,
        STREAM_WITH_META: guideloom.StreamWithMetaStorage,
    }
    cls = classes[config.layout]
    return cls(config.output, make_format(config, tokenizer), storage_options=config.storage_options)


def _location(config: IngestConfig) -> Location:
    return Location(config.output, config.storage_options)


def recorded_parts(config: IngestConfig, run: str) -> set[int]:
    """The parts of run ``run`` that have a completion record at the output (one listing; the
    records are not read: whether each is this plan's and intact is its task's check)."""
    folder = layout.part_record_path(0, run).rsplit("/", 1)[0]
    found = set()
    for name in _location(config).list(folder):
        stem = name.removeprefix("part-").removesuffix(".json")
        if name.startswith("part-") and name.endswith(".json") and stem.isdigit():
            found.add(int(stem))
    return found


def part_metadata(digest: str, result: dict[str, Any]) -> dict[str, Any]:
    """What part ``result["part"]``'s completion record keeps (its writer's ``metadata``)."""
    return {PART_METADATA_KEY: {"version": PART_METADATA_VERSION, "plan": digest, "result": result}}


def reusable_result(storage: Any, part: int, digest: str, run: str) -> dict[str, Any] | None:
    """The counts of part ``part`` of run ``run`` when an earlier attempt of this very plan
    completed it and every shard it names still has its recorded size and checksum; None when
    the part must be written (no record, another plan's record, a damaged or missing shard)."""
    try:
        record = storage.read_part_record(part, run=run)
    except (FileNotFoundError, ManifestError):
        return None
    kept = record.metadata.get(PART_METADATA_KEY)
    if not (isinstance(kept, dict) and kept.get("plan") == digest and isinstance(kept.get("result"), dict)):
        return None
    try:
        for shard in record.shards:
            storage.check_shard(shard, "checksum")
    except (FileNotFoundError, ShardCorruptError):  # a missing shard is a ShardNotFoundError
        return None
    return dict(kept["result"])


def check_writable(config: IngestConfig, display_url: str) -> None:
    """Write and remove a probe file at the output root, before any worker starts.

    Raises IngestError naming the output when the bucket is missing or the credentials may not
    write there, instead of every task failing later with a backend error.
    """
    location = _location(config)
    probe = f"{PROBE_PREFIX}{uuid.uuid4().hex[:12]}"
    try:
        location.write(probe, b"")
        location.delete(probe)
    except (BucketNotFoundError, StorageAccessError) as err:
        # Already names the cause, the endpoint and the fix (guideloom.io.failures).
        raise IngestError(f"cannot write to the output {display_url}: {err}") from err
    except (GuideLoomError, OSError, ValueError) as err:
        at = location.endpoint
        where = f" at the endpoint {at}" if at else ""
        raise IngestError(
            f"cannot write to the output {display_url}: {type(err).__name__}: {err}; check that "
            f"the bucket exists{where} and that the credentials may write there"
        ) from err


def remove_foreign_manifest(config: IngestConfig) -> None:
    """Remove the manifest of a dataset of another class or format (``--overwrite``), so that
    readers stop seeing it (and its snapshot log, which readers would follow otherwise); the
    storage's ``delete()`` removes the rest."""
    location = _location(config)
    location.delete(layout.manifest_path())
    location.delete(layout.SNAPSHOTS_DIR, recursive=True)
