"""``hf:ORG/NAME`` (a Hugging Face Hub model id) from the local Hugging Face cache, offline.

`guideloom.workers.tokenizer` reads ``hf:PATH`` as a tokenizer file or a folder. A Hub id is
neither, but the model is often in the local cache already (anything ``transformers`` or
``huggingface-cli download`` fetched). This module finds its tokenizer there the way
``HF_HUB_OFFLINE=1`` does, without importing ``huggingface_hub`` and without any network: the
cache folder is ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``;
a model lives in ``models--ORG--NAME``, whose ``refs/main`` names the snapshot (a commit
hash) under ``snapshots/``. Without that ref, the most recently written snapshot that holds a
``tokenizer.json`` is used.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["cache_folder", "is_hub_id", "snapshot_folder"]

# ORG/NAME as the Hub spells repository ids (letters, digits, '-', '_', '.'); no scheme, one '/'.
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*/[A-Za-z0-9][A-Za-z0-9_.\-]*$")


def is_hub_id(path: str) -> bool:
    """Whether ``path`` reads as a Hub model id (``ORG/NAME``) rather than a file or URL.

    Args:
        path: What followed ``hf:`` in the tokenizer spec.

    Returns:
        True for ``ORG/NAME`` (one slash, no scheme, not a ``.json`` file).
    """
    return bool(_HUB_ID.match(path)) and not path.endswith(".json")


def cache_folder() -> Path:
    """The Hugging Face hub cache folder, as ``huggingface_hub`` resolves it."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


def snapshot_folder(repo_id: str) -> Path | None:
    """The cached snapshot folder of model ``repo_id`` that holds a ``tokenizer.json``.

    Args:
        repo_id: The model's Hub id, ``ORG/NAME``.

    Returns:
        The snapshot folder, or None when the cache holds no tokenizer.json of the model.
    """
    repo = cache_folder() / f"models--{repo_id.replace('/', '--')}"
    snapshots = repo / "snapshots"
    ref = repo / "refs" / "main"
    if ref.is_file():
        folder = snapshots / ref.read_text().strip()
        if (folder / "tokenizer.json").is_file():
            return folder
    if not snapshots.is_dir():
        return None
    held = [d for d in snapshots.iterdir() if (d / "tokenizer.json").is_file()]
    return max(held, key=lambda d: (d.stat().st_mtime, d.name)) if held else None
