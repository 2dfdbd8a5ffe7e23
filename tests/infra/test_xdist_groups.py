"""The suite's xdist groups reach xdist's scheduler (``make test`` runs ``--dist loadgroup``).

A group is only honoured when the item's node id ends in ``@group``: pytest >= 9 ignores the
attribute pytest-xdist 3.8 sets for it, and the groups fell apart without a word (tests/conftest.py
`_GroupSuffix` sets it again). Run alone (no xdist) the id is left as it is.
"""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.xdist_group("probe")


def test_a_grouped_test_carries_its_group_in_its_node_id(request: pytest.FixtureRequest) -> None:
    grouped = bool(os.environ.get("PYTEST_XDIST_WORKER")) and request.config.getvalue("loadgroup")
    assert request.node.nodeid.endswith("@probe") == bool(grouped), request.node.nodeid
    assert request.node.nodeid.count("@probe") <= 1
