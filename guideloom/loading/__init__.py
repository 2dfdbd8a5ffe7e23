"""Feeding GuideLoom datasets to PyTorch: the only package that imports torch and torchdata.

``StatefulDataLoader`` (in `guideloom.loading.loader`) is loaded lazily, so that the pure
order arithmetic (`guideloom.loading.order`, `guideloom.loading.schedule`,
`guideloom.loading.state`) can be used and tested without torch.

The modules, by layer (each imports only modules listed before it):

- no torch: ``order`` (each epoch's order; `ShuffleSettings`), ``schedule`` (positions per
  rank and step), ``state`` (the persisted state and its checks), ``interleave``,
  ``mixture_plan``, ``mixture_fields``, ``mixture_order``, ``mixture_dataset`` and ``mixture``
  (weighted mixtures), ``passes`` (what the loop has received of a pass), ``threads`` (thread
  workers), ``blend`` (``guideloom.open``: Megatron-style weighted lists as a mixture),
  ``read_settings`` (`ReadSettings`: how a loader reads);
- torch: ``collate``, ``placement`` (pinning, the copy to a device), ``sampler`` (batches and
  read-ahead groups), ``batch_order`` (`BatchOrder`), ``metrics`` (what ``loader.metrics()``
  counts), ``fetch`` (what a worker runs), ``packing`` (whole records per window),
  ``view_recipe`` (what ``from_storage`` makes a view of), ``snapshots`` (following and pinning
  snapshots), ``loader_args`` (which path the arguments pick), ``loader`` (the loader itself).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from guideloom.loading.batch_order import BatchOrder
    from guideloom.loading.loader import StatefulDataLoader

__all__ = ["BatchOrder", "StatefulDataLoader"]


def __getattr__(name: str) -> Any:
    if name == "StatefulDataLoader":
        from guideloom.loading.loader import StatefulDataLoader

        return StatefulDataLoader
    if name == "BatchOrder":
        from guideloom.loading.batch_order import BatchOrder

        return BatchOrder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
