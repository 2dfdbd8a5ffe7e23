"""The S3 server and the counting proxy, shared with the test suite.

The tests' helpers (``tests/infra/s3server.py``: RGW, moto or an external endpoint, chosen the same way
as in the tests; ``tests/infra/s3proxy.py``: a counting reverse proxy) are imported from there, not
copied, so the benchmarks read from exactly the server the tests use.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_TESTS = Path(__file__).resolve().parent.parent / "tests" / "infra"
if str(_TESTS) not in sys.path:
    sys.path.insert(0, str(_TESTS))

import s3server  # noqa: E402
from s3proxy import CountingProxy  # noqa: E402

__all__ = ["CountingProxy", "S3Endpoint", "running_endpoint", "fresh_bucket"]

S3Endpoint = s3server.S3Endpoint


@contextmanager
def running_endpoint(endpoint: Any = None) -> Iterator[tuple[Any, str | None]]:
    """Yield ``(endpoint, note)``: the given one, or one started now (and stopped afterwards)."""
    if endpoint is not None:
        yield endpoint, None
        return
    os.environ.setdefault("AWS_DEFAULT_REGION", s3server.DEFAULT_REGION)
    # Ceph's admin sockets live in the work directory; a Unix socket path must stay short.
    workdir = Path(tempfile.mkdtemp(prefix="gl-bench-rgw-"))
    started, note = s3server.start(workdir)
    try:
        yield started, note
    finally:
        started.stop()


@contextmanager
def fresh_bucket(options: dict[str, Any]) -> Iterator[str]:
    """A new bucket for one benchmark, removed afterwards."""
    with s3server.fresh_bucket(options, prefix="gl-bench") as name:
        yield name
