"""One tokenizer per dataset: an append made with another tokenizer than the dataset's is refused.

Token ids mean something only with the vocabulary that made them, and a dataset keeps one: the
identity (`guideloom.manifest.tokenizers`) recorded by the ingestion that wrote it is compared
with the job's tokenizer's. A dataset that records none (written directly, or by an older
ingestion) is not refused. ``allow_other_tokenizer=True`` (``--allow-other-tokenizer``) appends
anyway, for those who mean it (a retokenized vocabulary that keeps the old ids, say).
"""

from __future__ import annotations

from typing import Any

from guideloom.errors import IngestError
from guideloom.manifest.tokenizers import identity_of, recorded_identity, tokenizer_conflict
from guideloom.types import Tokenizer
from guideloom.workers.config import IngestConfig

__all__ = ["check_append_tokenizer"]


def check_append_tokenizer(config: IngestConfig, storage: Any, tokenizer: Tokenizer) -> None:
    """Refuse an append whose tokenizer is not the one the dataset records.

    Args:
        config: The job.
        storage: The output storage.
        tokenizer: The job's tokenizer.

    Raises:
        IngestError: The dataset records another tokenizer (both are named) and
            `allow_other_tokenizer` is False; nothing is committed.
    """
    if not config.append or config.allow_other_tokenizer or not storage.exists():
        return
    held = recorded_identity(storage.manifest.metadata)
    mine = identity_of(tokenizer.describe())
    if tokenizer_conflict(held, mine):
        raise IngestError(
            f"cannot append to {storage.url}: its tokens were made by tokenizer {held}, and this "
            f"job's tokenizer is {mine}; their ids mean different things. Append with the "
            "dataset's tokenizer, or pass --allow-other-tokenizer (allow_other_tokenizer=True) if "
            "you mean to mix them; nothing was committed"
        )
