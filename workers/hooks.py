"""The one testing seam of ingestion: named points inside a part where a test's own code runs.

A test that must act inside a Ray worker process (kill the worker in the middle of a part, slow
a part down so that it can be interrupted) cannot monkeypatch that process. Instead it sets

``GUIDELOOM_INGEST_HOOKS``
    a Python file (``/path/to/hooks.py``) or an importable module name (``package.hooks``)

in the environment of the driver (a test's own process, a driver subprocess, or a ``ray job
submit`` runtime environment). The driver passes that variable, and every variable whose name
starts with it (``GUIDELOOM_INGEST_HOOKS_SETTINGS``: the hook module's own settings), to its Ray
tasks through the tasks' ``runtime_env`` (`forwarded_env`), so the hooks run in worker
processes that existed before the variable was set, on every node. Where the workers have the
variables already (a local Ray the driver started inherits its environment; a job submitted with
them in its runtime environment has them), nothing is added.

Inside a part, `hook` loads the module once per process and returns its function for a
point, or None when the variable is unset or the module has no such function (a part then pays
one ``is None`` test per point). The points, each called with the part number:

==================  ==========================================================================
``part_started``    a task begins a part, before anything is read or written
``record_read``     after each item (document or bad record) is read from the input
``part_written``    every shard is written, the completion record not yet (a crash here is a
                    worker killed in the middle of a part: the retry must redo it)
==================  ==========================================================================

Nothing else in ingestion knows about tests; without the variable the seam does nothing. The
hooks GuideLoom's own tests use are in ``tests/workers/ingest_hooks.py``.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
from collections.abc import Callable, Mapping
from types import ModuleType

__all__ = ["HOOKS_ENV", "POINTS", "forwarded_env", "hook"]

HOOKS_ENV = "GUIDELOOM_INGEST_HOOKS"
POINTS = ("part_started", "record_read", "part_written")

Hook = Callable[[int], None]


def forwarded_env(present: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of the seam set in this (the driver's) process that the workers lack:
    what the tasks' runtime environment gets; empty when no hook module is named.

    ``present`` is what the workers already have (the job's runtime environment); None means
    they inherit this process's environment (a Ray this process started), so nothing is needed.
    """
    if not os.environ.get(HOOKS_ENV) or present is None:
        return {}
    mine = {k: v for k, v in os.environ.items() if k.startswith(HOOKS_ENV)}
    return {k: v for k, v in mine.items() if present.get(k) != v}


def hook(point: str) -> Hook | None:
    """The hook module's function for ``point`` (one of `POINTS`), or None."""
    if point not in POINTS:
        raise ValueError(f"unknown hook point {point!r}; the points are {', '.join(POINTS)}")
    name = os.environ.get(HOOKS_ENV)
    if not name:
        return None
    found = getattr(_load(name), point, None)
    return found if callable(found) else None


@functools.lru_cache(maxsize=4)
def _load(name: str) -> ModuleType:
    if not name.endswith(".py"):
        return importlib.import_module(name)
    spec = importlib.util.spec_from_file_location("guideloom_ingest_hooks", name)
    if spec is None or spec.loader is None:
        raise ImportError(f"{HOOKS_ENV}={name}: not a Python file that can be loaded")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
