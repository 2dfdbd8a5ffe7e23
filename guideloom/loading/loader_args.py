"""The loader's two paths, told apart by its arguments: GuideLoom's over a view, torchdata's else.

`guideloom.loading.loader.StatefulDataLoader` takes torchdata's arguments in torchdata's
positions plus GuideLoom's keyword-only ones. Over a GuideLoom view (without ``sampler=``,
``generator=``, ``in_order=False``, or a ``batch_sampler=`` that is not a `BatchOrder` of that
view) it is GuideLoom's loader; otherwise it is torchdata's, and GuideLoom's keywords are refused
by name (`refuse_guideloom_only`).
"""

from __future__ import annotations

import warnings
from typing import Any

from torchdata.stateful_dataloader import StatefulDataLoader as _TorchdataLoader

from guideloom.loading.mixture import Mixture
from guideloom.storage import Storage
from guideloom.types import DatasetView

__all__ = [
    "DEFAULT",
    "ORDER_ARGUMENTS",
    "given",
    "is_view",
    "or_default",
    "refuse_guideloom_only",
    "torchdata_init",
]

ORDER_ARGUMENTS = ("sampler", "batch_sampler", "generator")  # they take over the order


class _Default:
    """The default of a GuideLoom-only argument whose default is not None (so that an argument
    given with a plain torch dataset can be told from one left out)."""

    def __repr__(self) -> str:
        return "<default>"


DEFAULT: Any = _Default()


def given(value: Any) -> bool:
    """Whether a GuideLoom-only argument was given (not None, not its default)."""
    return value is not None and value is not DEFAULT


def or_default(value: Any, default: Any) -> Any:
    """``value``, or ``default`` where it was left out."""
    return default if value is DEFAULT else value


def is_view(dataset: Any) -> bool:
    """A GuideLoom dataset view (or a mixture's): a `guideloom.types.DatasetView`."""
    return isinstance(dataset, DatasetView)


def torchdata_init(loader: _TorchdataLoader, *args: Any, **kwargs: Any) -> None:
    """torchdata's constructor on ``loader``."""
    with warnings.catch_warnings():
        # torchdata 0.11 calls the deprecated torch.set_vital in its constructor; the warning
        # is about torchdata's own code and says nothing a user can act on.
        warnings.filterwarnings("ignore", message=".*set_vital.*is deprecated", category=UserWarning)
        _TorchdataLoader.__init__(loader, *args, **kwargs)


def refuse_guideloom_only(
    dataset: Any, takes_order: list[str], shuffle: Any, options: dict[str, Any]
) -> None:
    """TypeError for what only GuideLoom's own path reads, on torchdata's path."""
    if isinstance(dataset, (Mixture, Storage)):
        raise TypeError(
            "StatefulDataLoader reads a GuideLoom dataset view (DocumentDataset, StreamDataset, "
            f"StreamWithMetaDataset), got {type(dataset).__name__}; build it with "
            "StatefulDataLoader.from_storage(storage, ...)"
        )
    names = [name for name, value in options.items() if given(value)]
    if shuffle is not None and not isinstance(shuffle, bool):  # "block", a guideloom.Shuffle
        names.insert(0, f"shuffle={shuffle!r}")
    if not names:
        return
    listed = ", ".join(n if "=" in n else f"{n}=" for n in names)
    if takes_order:
        why = (
            f"with {', '.join(takes_order)} the order is torchdata's, not GuideLoom's, and this "
            "loader is torchdata's StatefulDataLoader"
        )
    else:
        why = (
            f"{type(dataset).__name__} is not a GuideLoom view, so this loader is torchdata's "
            "StatefulDataLoader"
        )
    raise TypeError(
        f"{listed} apply to GuideLoom dataset views (StatefulDataLoader.from_storage, or a "
        f"DocumentDataset, StreamDataset or StreamWithMetaDataset without sampler=, "
        f"batch_sampler=, generator= or in_order=False); {why}: leave them out "
        "(shuffle takes True or False there)"
    )


def refuse_order_settings(
    order: Any, batch_size: Any, shuffle: Any, drop_last: Any, options: dict[str, Any]
) -> None:
    """TypeError for order settings given beside ``batch_sampler=BatchOrder(...)``: the order's own."""
    names = [
        n
        for n in (
            "seed",
            "rank",
            "world_size",
            "shuffle_block_size",
            "shuffle_buffer_blocks",
            "shuffle_run_size",
        )
        if given(options.get(n))
    ]
    if shuffle not in (None, False):
        names.insert(0, "shuffle")
    if batch_size not in (None, 1):
        names.insert(0, "batch_size")
    if drop_last:
        names.append("drop_last")
    if names:
        listed = ", ".join(f"{n}=" for n in names)
        raise TypeError(
            f"{listed} given with batch_sampler=BatchOrder(...): the order's batch size, shuffle, "
            f"seed, drop_last and ranks are the BatchOrder's ({order!r}); set them when making it "
            "(BatchOrder(view, batch_size, shuffle=..., seed=...)) and leave them out here"
        )
