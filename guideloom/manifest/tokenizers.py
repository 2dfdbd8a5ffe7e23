"""Which tokenizer made a dataset's tokens: its identity, as the manifest records it (no I/O).

Token ids mean something only with the vocabulary that made them: a dataset keeps one
tokenizer, and so does a mixture. Ingestion records the tokenizer's ``describe()`` in the
manifest's ``ingest`` metadata; its identity (`TokenizerIdentity`) is the spec it was named by
and a hash of what defines its vocabulary: ``files_sha256`` for the built-in ones (the
vocabulary files), or, for a tokenizer object of one's own, the hash of its whole declared
``describe()``. Two identities are the same tokenizer when those hashes agree (the same
``tokenizer.json`` at another path is the same tokenizer); a dataset that records none (written
directly, or by an older ingestion) is unknown and never refused.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

__all__ = ["TokenizerIdentity", "identity_of", "recorded_identity", "tokenizer_conflict"]

_INGEST_KEY = "ingest"


@dataclass(frozen=True)
class TokenizerIdentity:
    """A tokenizer's name (its spec) and the hash of what defines its vocabulary.

    Attributes:
        name: The spec (``hf:/models/x/tokenizer.json``, ``bytes``, a name of your own).
        sha256: The hash that decides whether two tokenizers are the same.
    """

    name: str
    sha256: str

    def __str__(self) -> str:
        return f"{self.name} (sha256 {self.sha256[:12]})"


def identity_of(described: dict[str, Any]) -> TokenizerIdentity:
    """The identity of a tokenizer from its ``describe()``.

    Args:
        described: What ``tokenizer.describe()`` returned (or the manifest recorded).

    Returns:
        Its name and hash: ``files_sha256`` where it has one, else the hash of the whole
        description (a custom tokenizer's declared identity).
    """
    name = str(described.get("spec", "?"))
    files = described.get("files_sha256")
    if isinstance(files, str) and files:
        return TokenizerIdentity(name, files)
    text = json.dumps(described, sort_keys=True, default=str).encode()
    return TokenizerIdentity(name, hashlib.sha256(text).hexdigest())


def recorded_identity(metadata: dict[str, Any] | None) -> TokenizerIdentity | None:
    """The identity of the tokenizer a dataset was ingested with; None when unknown.

    Args:
        metadata: The manifest's (snapshot's) metadata.

    Returns:
        The identity, or None when the metadata records no tokenizer.
    """
    recorded = (metadata or {}).get(_INGEST_KEY)
    described = recorded.get("tokenizer") if isinstance(recorded, dict) else None
    return identity_of(described) if isinstance(described, dict) else None


def tokenizer_conflict(a: TokenizerIdentity | None, b: TokenizerIdentity | None) -> bool:
    """Whether two identities name different tokenizers (False when either is unknown).

    Args:
        a: One identity, or None.
        b: The other, or None.

    Returns:
        True only when both are known and their hashes differ.
    """
    return a is not None and b is not None and a.sha256 != b.sha256
