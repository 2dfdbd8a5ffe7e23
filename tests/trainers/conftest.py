"""The trainer tests' dataset, written once per session (see trainer_setup.py)."""

from __future__ import annotations

from typing import Any

import pytest
from trainer_setup import write_stream


@pytest.fixture(scope="session")
def storage(tmp_path_factory: Any) -> Any:
    return write_stream(str(tmp_path_factory.mktemp("trainers") / "data"))
