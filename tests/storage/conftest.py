"""Fixtures shared by the storage tests."""

from __future__ import annotations

import numpy as np
import pytest
from storage_helpers import ConceptsFormat

from guideloom import StreamNumpyFormat


@pytest.fixture
def concepts_format() -> ConceptsFormat:
    return ConceptsFormat(StreamNumpyFormat({"tokens": np.uint16}))


@pytest.fixture
def fault_s3(s3_endpoint):
    """A fault-injecting proxy (`tests/faultproxy.py`) in front of the session's S3 endpoint.

    Add rules with `.add(Fault(...))`; `.storage_options` point at the proxy with short client
    timeouts, no botocore retries beyond two attempts, and an 8 s GuideLoom deadline, so every
    fault test ends in seconds."""
    from faultproxy import FaultProxy

    with FaultProxy(s3_endpoint.url) as proxy:
        proxy.storage_options = {
            **s3_endpoint.storage_options(proxy.url),
            "skip_instance_cache": True,
            "config_kwargs": {"read_timeout": 0.5, "connect_timeout": 0.5, "retries": {"max_attempts": 2}},
            "guideloom_deadline_s": 8,
        }
        yield proxy
