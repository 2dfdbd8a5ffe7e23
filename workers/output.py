"""The output side of a job: storage class and format from the options, and the sidecar records.

Stream layout: ``StreamNumpyFormat({"tokens": smallest unsigned dtype for the vocabulary})``, plus
``doc_index`` (uint64: ``part << 32 | document number within the part``, unique and increasing in
stream order) with ``--doc-index``. Document layout: a record ``{"tokens": [...], **passthrough}``
per document in the JSON, MessagePack or pickle document format.

Each finished part also leaves a small *sidecar* JSON, ``<output>/_ingest/part-NNNNN.json``, with
its document, token and bad-record counts and the plan digest it was written under. It is written
inside the part's writer block, so a valid completion record implies a sidecar; a re-run reuses a
part only when the sidecar's digest is the current plan's. Sidecars are removed after the commit:
the manifest's metadata then holds everything they said.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from guideloom.errors import IngestError
from guideloom.workers.config import IngestConfig
from guideloom.workers.tokenizer import Tokenizer, token_dtype

__all__ = [
    "check_writable",
    "open_storage",
    "remove_foreign_manifest",
    "read_sidecar",
    "remove_sidecars",
    "write_sidecar",
]

SIDECAR_DIR = "_ingest"


def make_format(config: IngestConfig, tokenizer: Tokenizer) -> Any:
    """The GuideLoom format object for the job's layout and options."""
    import guideloom

    if config.layout == "stream":
        fields: dict[str, Any] = {"tokens": token_dtype(tokenizer.vocab_size)}
        if config.doc_index:
            fields["doc_index"] = np.dtype(np.uint64)
        return guideloom.StreamNumpyFormat(fields)
    formats = {
        "json": guideloom.DocumentJsonFormat,
        "msgpack": guideloom.DocumentMsgpackFormat,
        "pickle": guideloom.DocumentPickleFormat,
    }
    return formats[config.format]()


def open_storage(config: IngestConfig, tokenizer: Tokenizer) -> Any:
    """The storage object for the job's output (does not create anything yet)."""
    import guideloom

    cls = guideloom.StreamStorage if config.layout == "stream" else guideloom.DocumentStorage
    return cls(config.output, make_format(config, tokenizer), storage_options=config.storage_options)


def _sidecar_fs(config: IngestConfig) -> tuple[Any, str]:
    from fsspec.core import url_to_fs

    fs, root = url_to_fs(config.output, **config.storage_options)
    return fs, f"{root.rstrip('/')}/{SIDECAR_DIR}"


def _put(fs: Any, path: str, data: bytes) -> None:
    # Only a local directory needs creating; on object stores makedirs would create a *bucket*.
    if "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)):
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    fs.pipe_file(path, data)


def write_sidecar(config: IngestConfig, k: int, record: dict[str, Any]) -> None:
    """Write part ``k``'s sidecar record (one PUT; a retry overwrites it)."""
    fs, root = _sidecar_fs(config)
    _put(fs, f"{root}/part-{k:05d}.json", json.dumps(record, sort_keys=True).encode())


def read_sidecar(config: IngestConfig, k: int) -> dict[str, Any] | None:
    """Part ``k``'s sidecar record, or None when there is none (or it is unreadable)."""
    fs, root = _sidecar_fs(config)
    try:
        data = fs.cat_file(f"{root}/part-{k:05d}.json")
        record = json.loads(data)
    except (FileNotFoundError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def check_writable(config: IngestConfig, display_url: str) -> None:
    """Write and remove a probe under the sidecar folder, before any worker starts.

    Raises IngestError naming the output when the bucket is missing or the credentials may not
    write there, instead of every task failing later with a backend error.
    """
    fs, root = _sidecar_fs(config)
    probe = f"{root}/.probe"
    try:
        _put(fs, probe, b"")
        fs.rm(probe)
    except (OSError, ValueError) as err:
        raise IngestError(
            f"cannot write to the output {display_url}: {type(err).__name__}: {err}; check that "
            "the bucket exists and that the credentials may write there"
        ) from err


def remove_foreign_manifest(config: IngestConfig) -> None:
    """Remove the ``manifest.json`` of a dataset of another class or format (``--overwrite``)."""
    from fsspec.core import url_to_fs

    fs, root = url_to_fs(config.output, **config.storage_options)
    fs.rm(f"{root.rstrip('/')}/manifest.json")


def remove_sidecars(config: IngestConfig) -> None:
    """Remove every sidecar record (after a successful commit)."""
    fs, root = _sidecar_fs(config)
    try:
        fs.rm(root, recursive=True)
    except FileNotFoundError:
        pass
