"""Small datasets of every layout, written through the public API only, so that the same function
runs under an earlier GuideLoom (to make the fixtures under ``data/``) and under this one (to
compare what it writes with them).

The fixtures in ``data/v0.1.0`` were written by the code before the on-disk layout got its one
owner (``guideloom.layout``), with::

    cd <a checkout of that code> && .venv/bin/python <this repo>/tests/manifest/legacy_datasets.py \\
        <this repo>/tests/manifest/data/v0.1.0

Every value here is deterministic except what a write stamps on its own: ``created_at`` and the
attempt tokens in shard folder names (see `normalized`).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "infra"))

from storage_helpers import ConceptsFormat  # noqa: E402

from guideloom import (  # noqa: E402
    DocumentJsonFormat,
    DocumentStorage,
    StreamNumpyFormat,
    StreamStorage,
    StreamWithMetaStorage,
)

NAMES = ("documents", "stream", "stream_with_meta", "parts_default_run", "parts_named_run")
RUN = "legacy-run"


def documents() -> list[dict[str, Any]]:
    return [{"id": i, "text": "word " * (i % 7), "tags": ["t"] * (i % 3)} for i in range(23)]


def stream_records() -> list[dict[str, np.ndarray]]:
    return [
        {"tokens": (np.arange(n) * 7 + n) % 70_000, "loss_mask": np.arange(n) % 2}
        for n in (1, 5, 9, 3, 17, 2, 11, 8, 4, 13)
    ]


def meta_records() -> list[tuple[np.ndarray, list[tuple[int, int, list[str]]]]]:
    out = []
    for r, n in enumerate((6, 4, 9, 1, 12, 7, 3, 10)):
        spans = [(a, min(a + 2, n), [f"c{r}", str(a)]) for a in range(0, n, 3)] if r % 3 else []
        out.append((np.arange(n, dtype=np.uint16) + 100 * r, spans))
    return out


def stream_format() -> StreamNumpyFormat:
    return StreamNumpyFormat({"tokens": np.uint32, "loss_mask": np.uint8})


def meta_format() -> ConceptsFormat:
    return ConceptsFormat(StreamNumpyFormat({"tokens": np.uint16}))


def open_storage(root: Path, name: str) -> Any:
    """The storage of fixture ``name`` under ``root``, with the class and format it was written with."""
    url = str(root / name)
    if name in ("documents", "parts_default_run"):
        return DocumentStorage(url, DocumentJsonFormat())
    if name == "stream_with_meta":
        return StreamWithMetaStorage(url, meta_format())
    return StreamStorage(url, stream_format())


def write_datasets(root: Path) -> None:
    """Write every fixture dataset under ``root`` (one folder per name in `NAMES`)."""
    storage = open_storage(root, "documents")
    with storage.writer(shard_size=160, metadata={"source": "legacy", "n": 23}) as w:
        for doc in documents():
            w.append(doc)

    storage = open_storage(root, "stream")
    with storage.writer(shard_size=40) as w:
        for record in stream_records():
            w.append(record)

    storage = open_storage(root, "stream_with_meta")
    with storage.writer(shard_size=24) as w:
        for tokens, spans in meta_records():
            w.append({"tokens": tokens}, spans=spans)

    storage = open_storage(root, "parts_default_run")
    docs = documents()
    for k in (1, 0):
        with storage.writer(part=k, shard_size=200, metadata={"part": k}) as w:
            for doc in docs[k::2]:
                w.append(doc)
    storage.commit(num_parts=2)

    storage = open_storage(root, "parts_named_run")
    records = stream_records()
    for k in (2, 0, 1):
        with storage.writer(part=k, shard_size=30, run=RUN) as w:
            for record in records[k::3]:
                w.append(record)
    storage.commit(num_parts=3, metadata={"job": "legacy"}, run=RUN)


_STAMPS = [
    (re.compile(rb'"created_at": ?"[^"]*"'), b'"created_at":"<when>"'),
    (re.compile(rb'"guideloom_version": ?"[^"]*"'), b'"guideloom_version":"<version>"'),
    (re.compile(rb"/(w|a)-[0-9a-f]{12}(?=[/\"])"), rb"/\1-<attempt>"),
]


def normalized(data: bytes) -> bytes:
    """``data`` (a manifest or part record) with what each write stamps on its own replaced by
    placeholders: the commit time, the committing version and the attempt tokens of shard folders."""
    for pattern, placeholder in _STAMPS:
        data = pattern.sub(placeholder, data)
    return data


def written_json(root: Path) -> dict[str, bytes]:
    """Every manifest and part record under ``root``, normalized, by path relative to ``root``."""
    files = sorted([*root.glob("*/manifest.json"), *root.glob("*/parts/**/*.json")])
    return {str(p.relative_to(root)): normalized(_manifest_bytes(p)) for p in files}


def _manifest_bytes(path: Path) -> bytes:
    """A file's bytes; for a manifest.json that is a snapshot record, the manifest of that
    snapshot as a plain manifest.json would hold it (the shard table joined from its pieces)."""
    from guideloom.io import Location
    from guideloom.manifest.snapshots import is_snapshot_record
    from guideloom.storage.history import History

    data = path.read_bytes()
    if path.name != "manifest.json" or not is_snapshot_record(data):
        return data
    history = History(Location(str(path.parent)))
    current = history.current()
    assert current is not None
    return history.manifest(current).to_json()


if __name__ == "__main__":
    write_datasets(Path(sys.argv[1]))
