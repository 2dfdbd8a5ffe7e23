"""Fixtures of the foreign token-file tests (the writers live in `foreign_files.py`)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from foreign_files import documents  # noqa: E402

from guideloom.storage.foreign.export import write_megatron  # noqa: E402


@pytest.fixture
def megatron_pair(tmp_path: Any) -> Callable[..., tuple[str, list[np.ndarray]]]:
    """``megatron_pair(name, n=60, seed=0)`` -> (prefix, documents) of a pair under tmp_path."""

    def make(
        name: str = "text_document", n: int = 60, seed: int = 0, dtype: Any = np.uint16
    ) -> tuple[str, list[np.ndarray]]:
        docs = documents(n, seed)
        prefix = str(tmp_path / name)
        write_megatron(prefix, docs, dtype)
        return prefix, docs

    return make
