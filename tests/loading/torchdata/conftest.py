"""Run torchdata's own StatefulDataLoader tests (``test_state_dict.py``, vendored) against GuideLoom's.

The vendored file imports ``from torchdata.stateful_dataloader import Stateful, StatefulDataLoader``.
While pytest imports that one module (its collection), ``torchdata.stateful_dataloader.
StatefulDataLoader`` is `guideloom.StatefulDataLoader`; right after, torchdata's class is put
back, so no other test module (nor GuideLoom, which bound its base class when it was imported)
sees the swap. ``test_swap.py`` checks both.

``GUIDELOOM_TORCHDATA_TESTS=torchdata`` runs the same tests against torchdata's own class, to
compare (``GUIDELOOM_TORCHDATA_TESTS=torchdata pytest tests/loading/torchdata``); the default is
``guideloom`` (see ``torchdata_swap.py``).

The 89 tests take about a minute together here, each one at most ~2 s (most start worker
processes), so they are not marked ``slow``. Two warnings from torch's and torchdata's own code
are ignored here, for both classes (`_IGNORED` says which and why).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
from torchdata_swap import VENDORED, class_under_test, swapped

_IGNORED = (
    # torchdata 0.11's constructor calls the deprecated torch.set_vital (torchdata's own code;
    # GuideLoom's loader silences it, torchdata's class does not)
    "ignore:.*set_vital.*is deprecated:UserWarning",
    # torch's DataLoader, on a machine with fewer cores than the tests' 3-4 worker processes
    "ignore:This DataLoader will create .* worker processes in total:UserWarning",
)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, Any]:
    """Swap the class while the vendored module is imported (its collection), and only then."""
    if not (isinstance(collector, pytest.Module) and collector.path == VENDORED):
        return (yield)
    with swapped():
        return (yield)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path == VENDORED:
            for ignored in _IGNORED:
                item.add_marker(pytest.mark.filterwarnings(ignored))


def pytest_report_header() -> str:
    return f"torchdata's StatefulDataLoader tests run against: {class_under_test().__module__}"
