"""Exact-duplicate hashes of documents and the per-snapshot hash index (models and bytes, no I/O).

A document's hash is the 128-bit BLAKE2b digest of its text's UTF-8 bytes (optionally
normalised first: Unicode NFC, runs of whitespace collapsed to one space and trimmed, case
folded). Hashes are spread over `BUCKETS` buckets by their first byte, so that a deduplication
pass can give each bucket to its own task and no process holds every hash.

A dataset ingested with ``dedup="exact"`` records, in its snapshot's metadata under
`INDEX_KEY`, a `HashIndex`: for each bucket a few *pieces*, files named by their content under
``snapshots/hashes/`` holding the sorted hashes of documents the snapshot holds. An append adds
pieces (and merges the small last ones of a bucket, as the shard table does), reusing the rest;
a rollback restores the metadata, so the index always belongs to the snapshot it is read with.

Why 128 bits is enough (`collision_probability`): with ``n`` distinct documents, the chance
that any two share a hash is at most ``n (n - 1) / 2 / 2**128`` (the birthday bound): for a
trillion documents, below 1.5e-15. A collision would drop one document that is not a duplicate.
"""

from __future__ import annotations

import hashlib
import re
import struct
import unicodedata
from typing import Literal

import numpy as np
from pydantic import Field, field_validator

from guideloom.errors import excerpt
from guideloom.manifest.models import Count, _Frozen

__all__ = [
    "BUCKETS",
    "HASH_DTYPE",
    "HASH_NAME",
    "HASHES_DIR",
    "INDEX_KEY",
    "HashIndex",
    "HashPiece",
    "bucket_of",
    "collision_probability",
    "hash_piece_path",
    "hash_texts",
    "normalize_text",
    "pack_piece",
    "unpack_piece",
]

INDEX_KEY = "hash_index"
"""The snapshot metadata key that holds the dataset's `HashIndex`."""
HASH_NAME = "blake2b-128"
HASH_BYTES = 16
HASH_DTYPE = np.dtype("S16")  # sorts and compares as bytes (a digest's trailing zeros included)
BUCKETS = 16  # by the first byte's high four bits
HASHES_DIR = "snapshots/hashes"
_MAGIC = b"GLHX"
_HEADER = struct.Struct("<4sII Q")  # magic, version, bucket, count
_PIECE_VERSION = 1
_SPACE = re.compile(r"\s+")


def normalize_text(text: str) -> str:
    """``text`` as ``--dedup-normalize`` compares it: NFC, whitespace runs as one space, trimmed,
    case folded.

    Args:
        text: A document's text.

    Returns:
        The normalised text.
    """
    return _SPACE.sub(" ", unicodedata.normalize("NFC", text)).strip().casefold()


def hash_texts(texts: list[str], normalize: bool = False) -> np.ndarray:
    """The 128-bit hash of each text, as an array of `HASH_DTYPE`.

    Args:
        texts: The documents' texts.
        normalize: Hash `normalize_text` of each instead of the text as it is.

    Returns:
        One 16-byte digest per text, in order.
    """
    blake = hashlib.blake2b
    if normalize:
        texts = [normalize_text(t) for t in texts]
    digests = b"".join(
        blake(t.encode("utf-8", "surrogatepass"), digest_size=HASH_BYTES).digest() for t in texts
    )
    return np.frombuffer(digests, dtype=HASH_DTYPE) if texts else np.empty(0, HASH_DTYPE)


def bucket_of(hashes: np.ndarray) -> np.ndarray:
    """The bucket (0 .. `BUCKETS` - 1) of each hash: its first byte's high four bits.

    Args:
        hashes: An array of `HASH_DTYPE`.

    Returns:
        An int array of buckets.
    """
    if not hashes.size:
        return np.empty(0, np.int64)
    first = np.ascontiguousarray(hashes, HASH_DTYPE).view(np.uint8).reshape(-1, HASH_BYTES)[:, 0]
    return (first >> 4).astype(np.int64)


def collision_probability(documents: int, bits: int = 8 * HASH_BYTES) -> float:
    """The birthday bound: at most this chance that two of ``documents`` distinct texts share a
    hash of ``bits`` bits (so that one is dropped as a duplicate of the other).

    Args:
        documents: How many distinct documents are hashed.
        bits: The hash's width.

    Returns:
        ``documents * (documents - 1) / 2 / 2**bits``.
    """
    return documents * (documents - 1) / 2 / 2.0**bits


def pack_piece(bucket: int, hashes: np.ndarray) -> bytes:
    """A piece file's bytes: a header, then the sorted, distinct hashes of one bucket.

    Args:
        bucket: The bucket every hash belongs to.
        hashes: Sorted, distinct hashes (`HASH_DTYPE`).

    Returns:
        The bytes to write.
    """
    return _HEADER.pack(_MAGIC, _PIECE_VERSION, bucket, len(hashes)) + hashes.astype(HASH_DTYPE).tobytes()


def unpack_piece(data: bytes, where: str) -> tuple[int, np.ndarray]:
    """(bucket, hashes) of a piece's bytes; ``ValueError`` naming ``where`` if they are not one.

    Args:
        data: The piece file's bytes.
        where: The file, for messages.

    Returns:
        The bucket and the sorted hashes.
    """
    if len(data) < _HEADER.size:
        raise ValueError(f"{where} is {len(data)} bytes, shorter than a hash piece's header")
    magic, version, bucket, count = _HEADER.unpack_from(data)
    if magic != _MAGIC or version != _PIECE_VERSION:
        raise ValueError(f"{where} is not a version {_PIECE_VERSION} hash piece (starts {excerpt(data[:8])})")
    if len(data) != _HEADER.size + count * HASH_BYTES:
        raise ValueError(f"{where} holds {len(data) - _HEADER.size} bytes of hashes, its header says {count}")
    return int(bucket), np.frombuffer(data, HASH_DTYPE, count, _HEADER.size)


def hash_piece_path(data: bytes) -> str:
    """Where a piece with these bytes is stored: named by its content.

    Args:
        data: The piece's bytes (`pack_piece`).

    Returns:
        ``snapshots/hashes/<sha256>.bin``.
    """
    return f"{HASHES_DIR}/{hashlib.sha256(data).hexdigest()}.bin"


class HashPiece(_Frozen):
    """One file of a hash index: which bucket, how many hashes, its size and checksum."""

    path: str
    bucket: int = Field(ge=0)
    count: Count
    bytes: Count
    sha256: str

    @field_validator("path")
    @classmethod
    def _in_hashes(cls, path: str) -> str:
        if not path.startswith(f"{HASHES_DIR}/") or path.count("/") != 2 or ".." in path:
            raise ValueError(f"hash piece path {excerpt(path)} is not in {HASHES_DIR}/")
        return path


class HashIndex(_Frozen):
    """The exact-duplicate index of one snapshot: the hashes of every document it holds.

    Attributes:
        version: The index's format version.
        hash: The hash function (`HASH_NAME`).
        normalize: Whether texts were normalised before hashing (``--dedup-normalize``).
        buckets: How many buckets the hashes are spread over.
        documents: Distinct hashes held, over all pieces.
        pieces: The files, by bucket; a bucket's hashes are the union of its pieces'.
    """

    version: Literal[1] = 1
    hash: Literal["blake2b-128"] = "blake2b-128"
    normalize: bool
    buckets: int = BUCKETS
    documents: Count
    pieces: tuple[HashPiece, ...]

    def of_bucket(self, bucket: int) -> list[HashPiece]:
        """The pieces of one bucket, oldest first.

        Args:
            bucket: The bucket.

        Returns:
            Its pieces.
        """
        return [p for p in self.pieces if p.bucket == bucket]
