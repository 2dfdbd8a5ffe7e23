"""Fixtures shared by the storage tests."""

from __future__ import annotations

import numpy as np
import pytest
from storage_helpers import ConceptsFormat

from guideloom import StreamNumpyFormat


@pytest.fixture
def concepts_format() -> ConceptsFormat:
    return ConceptsFormat(StreamNumpyFormat({"tokens": np.uint16}))
