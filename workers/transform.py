"""A user's own step: ``transform(record) -> record | None``, run in the Ray tasks before tokenizing.

Given as a function (``ingest_dataset(transform=fn)``; Ray pickles it, by value when it is
defined in ``__main__`` or a notebook, else by module and name, so the module must be importable
on the workers), or as its import path ``"package.module:function"`` (``--transform``), imported
on each worker. Its ``transform_id`` (a name and version the user gives) is part of the job's
identity. A transform that raises, or returns something other than a dict or None, makes a bad
record named by file and line (see `guideloom.workers.part`).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

from guideloom.errors import IngestError

__all__ = ["Transform", "check_transform", "load_transform"]

Transform = Callable[[dict[str, Any]], "dict[str, Any] | None"]

_WORKING_DIR_HINT = (
    "install its package on every node, or ship it with the job: ray job submit --working-dir . "
    "-- guideloom ingest ... --transform package.module:function (the working directory is on "
    "the workers' import path)"
)


@functools.lru_cache(maxsize=8)
def _imported(path: str) -> Transform:
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise IngestError(
            f"the transform {path} is not importable on this node ({type(err).__name__}: {err}); "
            + _WORKING_DIR_HINT
        ) from err
    obj: Any = module
    for name in attr.split("."):
        obj = getattr(obj, name, None)
        if obj is None:
            raise IngestError(f"the transform {path}: module {module_name} has no {attr!r}")
    if not callable(obj):
        raise IngestError(f"the transform {path} is a {type(obj).__name__}, not a function")
    return obj  # type: ignore[no-any-return]


def load_transform(transform: str | Callable[..., Any]) -> Transform:
    """The function of ``transform`` (imported when it is a path)."""
    if isinstance(transform, str):
        return _imported(transform)
    return transform


def check_transform(transform: str | Callable[..., Any] | None) -> None:
    """On the driver, before any task: the path imports, or the function pickles.

    Raises:
        IngestError: Not importable (with how to make it importable on the workers), or not
            picklable (with what to do instead).
    """
    if transform is None:
        return
    if isinstance(transform, str):
        _imported(transform)
        return
    from ray import cloudpickle

    try:
        cloudpickle.dumps(transform)
    except Exception as err:  # pickling raises TypeError, PicklingError, AttributeError, ...
        raise IngestError(
            f"the transform {transform!r} cannot be pickled ({type(err).__name__}: {err}); Ray "
            "sends it to every task. Define it at module level without open files or locks, or "
            "give its import path: --transform package.module:function"
        ) from err
