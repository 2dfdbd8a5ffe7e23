"""Reading and writing a dataset's exact-duplicate hash index (`guideloom.manifest.hashindex`).

Where a snapshot's index is found (`index_of`): in a side record ``snapshots/hashes/<id>.json``
that ``guideloom index-hashes`` writes for a snapshot committed without one (or to replace a
damaged one: a snapshot record is never rewritten, and building an index changes nothing
committed), else in its own metadata under ``hash_index`` (what a deduplicated ingestion
commits). A rollback snapshot restores
its source's metadata, and looks for its source's side record: the index it reads is always
the one of the content it holds.

Expiry (`remove_unused`) deletes the pieces and side records no kept snapshot uses, with the
same grace as shard files.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

from guideloom.errors import HashIndexError
from guideloom.io import Location
from guideloom.manifest.hashindex import (
    HASH_DTYPE,
    HASHES_DIR,
    INDEX_KEY,
    HashIndex,
    HashPiece,
    hash_piece_path,
    pack_piece,
    unpack_piece,
)
from guideloom.manifest.snapshots import Snapshot

__all__ = [
    "index_of",
    "load_bucket",
    "load_pieces",
    "remove_unused",
    "side_record_path",
    "write_piece",
    "write_side_record",
]


def side_record_path(snapshot_id: str) -> str:
    """Where ``guideloom index-hashes`` keeps the index of a snapshot committed without one.

    Args:
        snapshot_id: The snapshot's id.

    Returns:
        ``snapshots/hashes/<id>.json``.
    """
    return f"{HASHES_DIR}/{snapshot_id}.json"


def _fix(url: str) -> str:
    return f"build it again with `guideloom index-hashes {url} --rebuild`"


def index_of(location: Location, snap: Snapshot) -> HashIndex | None:
    """The hash index of ``snap`` (its metadata's, else its side record's); None when it has none.

    Args:
        location: The dataset's root.
        snap: The snapshot.

    Returns:
        The index, or None.

    Raises:
        HashIndexError: The recorded index is damaged (the message says how to rebuild it).
    """
    raw: Any = None
    where = ""
    # A rebuilt index (side record) wins over the one committed with the snapshot; a rollback
    # holds its source's content, so its source's side record describes it too.
    for sid in (snap.id, snap.source):
        if sid is None:
            continue
        rel = side_record_path(sid)
        try:
            data = location.read(rel, start=0)
        except FileNotFoundError:
            continue
        where = location.describe(rel)
        try:
            raw = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise HashIndexError(f"{where} is not JSON ({err}): {_fix(location.display_url)}") from None
        break
    if raw is None:
        raw = snap.metadata.get(INDEX_KEY)
        where = f"the metadata of snapshot {snap.id}"
    if raw is None:
        return None
    try:
        # strict, as JSON (the metadata's dict too): a count is an integer, never true or "1"
        return HashIndex.model_validate_json(json.dumps(raw), strict=True)
    except ValueError as err:
        first = str(err).splitlines()[:3]
        raise HashIndexError(
            f"the hash index in {where} is invalid ({' '.join(first)}): {_fix(location.display_url)}"
        ) from None


def load_pieces(location: Location, index: HashIndex, bucket: int) -> list[np.ndarray]:
    """The sorted hashes of each piece of one bucket, oldest first, each piece checked.

    Args:
        location: The dataset's root.
        index: The snapshot's index.
        bucket: The bucket.

    Returns:
        One array of `HASH_DTYPE` per piece.

    Raises:
        HashIndexError: A piece is missing, of another size or checksum, or not a piece.
    """
    found = []
    for piece in index.of_bucket(bucket):
        where = location.describe(piece.path)
        try:
            data = location.read(piece.path, start=0)
        except FileNotFoundError:
            raise HashIndexError(
                f"hash index piece {where} is missing: {_fix(location.display_url)}"
            ) from None
        if len(data) != piece.bytes or hashlib.sha256(data).hexdigest() != piece.sha256:
            raise HashIndexError(
                f"hash index piece {where} is damaged ({len(data)} bytes, the index records "
                f"{piece.bytes} and a checksum it does not match): {_fix(location.display_url)}"
            )
        try:
            got, hashes = unpack_piece(data, where)
        except ValueError as err:
            raise HashIndexError(f"{err}: {_fix(location.display_url)}") from None
        if got != bucket:
            raise HashIndexError(f"{where} holds bucket {got}, not {bucket}: {_fix(location.display_url)}")
        found.append(hashes)
    return found


def load_bucket(location: Location, index: HashIndex, bucket: int) -> np.ndarray:
    """The sorted, distinct hashes of one bucket: the union of its pieces (`load_pieces`).

    Args:
        location: The dataset's root.
        index: The snapshot's index.
        bucket: The bucket.

    Returns:
        An array of `HASH_DTYPE`.
    """
    found = load_pieces(location, index, bucket)
    if not found:
        return np.empty(0, HASH_DTYPE)
    return found[0] if len(found) == 1 else np.unique(np.concatenate(found))


def write_piece(location: Location, bucket: int, hashes: np.ndarray) -> HashPiece:
    """Write one bucket's sorted, distinct hashes as a piece named by its content.

    Args:
        location: The dataset's root.
        bucket: The bucket.
        hashes: Sorted, distinct hashes of the bucket.

    Returns:
        The piece, for the index.
    """
    data = pack_piece(bucket, hashes)
    rel = hash_piece_path(data)
    location.write(rel, data)
    return HashPiece(
        path=rel, bucket=bucket, count=len(hashes), bytes=len(data), sha256=hashlib.sha256(data).hexdigest()
    )


def write_side_record(location: Location, snap: Snapshot, index: HashIndex) -> str:
    """Record ``index`` as ``snap``'s (a snapshot committed without one); return where.

    Args:
        location: The dataset's root.
        snap: The snapshot the index describes.
        index: Its index.

    Returns:
        The side record's path.
    """
    rel = side_record_path(snap.id)
    location.write(rel, index.model_dump_json().encode())
    return rel


def remove_unused(location: Location, kept: list[Snapshot], limit: float) -> None:
    """Delete the pieces and side records that no snapshot of ``kept`` uses, modified before
    ``limit`` (seconds since the epoch).

    Args:
        location: The dataset's root.
        kept: The snapshots kept.
        limit: Files modified at or after this time are kept (writers may still need them).
    """
    ids = {s.id for s in kept} | {s.source for s in kept if s.source}
    used = {side_record_path(i) for i in ids}
    for snap in kept:
        try:
            index = index_of(location, snap)
        except HashIndexError:
            return  # a damaged index: delete nothing it might name
        if index is not None:
            used.update(p.path for p in index.pieces)
    for rel, when in location.modified_under(HASHES_DIR).items():
        if rel not in used and when < limit:
            location.delete(rel)
