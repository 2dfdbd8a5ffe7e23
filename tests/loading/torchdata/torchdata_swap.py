"""Which ``StatefulDataLoader`` the vendored torchdata tests run against, and the swap itself.

``GUIDELOOM_TORCHDATA_TESTS=guideloom`` (the default) runs them against
`guideloom.StatefulDataLoader`; ``GUIDELOOM_TORCHDATA_TESTS=torchdata`` against torchdata's own
class, to compare the two runs.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torchdata.stateful_dataloader as torchdata_package

from guideloom.loading.loader import StatefulDataLoader as GuideLoomLoader

ENV = "GUIDELOOM_TORCHDATA_TESTS"
VENDORED = Path(__file__).resolve().parent / "test_state_dict.py"
TORCHDATA_CLASS = torchdata_package.StatefulDataLoader


def class_under_test() -> type:
    which = os.environ.get(ENV, "guideloom")
    if which not in ("guideloom", "torchdata"):
        raise pytest.UsageError(f"{ENV}={which!r}: use guideloom (the default) or torchdata")
    return GuideLoomLoader if which == "guideloom" else TORCHDATA_CLASS


@contextlib.contextmanager
def swapped() -> Iterator[type]:
    """Inside, ``torchdata.stateful_dataloader.StatefulDataLoader`` is the class under test."""
    chosen = class_under_test()
    torchdata_package.StatefulDataLoader = chosen
    try:
        yield chosen
    finally:
        torchdata_package.StatefulDataLoader = TORCHDATA_CLASS
