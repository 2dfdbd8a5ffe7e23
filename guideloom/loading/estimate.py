"""What reading a dataset will cost, before reading it: requests, bytes and a price.

`estimate` plays the loader's own order (the same sampler, groups of batches and range merging
a `StatefulDataLoader` over this dataset uses) for every rank and epoch, without reading any
data: the cost of a planned run is known from the manifest and the settings alone. The counts
are those `StatefulDataLoader.io_stats` reports for the same run on an object store (ranged
``GET``s and the bytes they bring), apart from the few requests of opening the dataset; the
tests compare the two through a counting proxy. A local dataset is estimated as if it were in a
bucket, which is what a team deciding whether to move it there wants to know.

Stream datasets only: documents and streams with metadata read index and span files as well,
which this does not model yet.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from guideloom.io.ranges import DEFAULT_GAP_BUDGET, DEFAULT_MAX_GAP, merge_ranges

__all__ = ["PRICES", "PRICES_TAKEN", "Estimate", "estimate"]

PRICES_TAKEN = "2026-12"
"""When the list prices in `PRICES` were written down (check your provider's current ones)."""

PRICES: dict[str, dict[str, float]] = {
    # US dollars: per 1,000 GET-class requests, and per GB (10**9 bytes) sent to the internet.
    # Reading from a machine in the bucket's own region usually costs no transfer: pass 0.
    "s3": {"get_per_1000": 0.0004, "egress_per_gb": 0.09},  # S3 Standard, us-east-1
    "gcs": {"get_per_1000": 0.0004, "egress_per_gb": 0.12},  # Standard, class B operations
    "azure": {"get_per_1000": 0.00044, "egress_per_gb": 0.087},  # Hot tier read operations
}


@dataclass
class Estimate:
    """Requests and bytes of a planned run, per epoch and in all.

    Attributes:
        url: The dataset.
        settings: The loader settings the estimate plays.
        epochs: Per epoch: ``{"requests", "bytes", "windows"}`` over all ranks.
        requests: Ranged GETs in all (every rank, every epoch).
        bytes: Bytes those GETs bring (gaps read through included).
        windows: Windows delivered in all.
    """

    url: str
    settings: dict[str, Any]
    epochs: list[dict[str, int]] = field(default_factory=list)

    @property
    def requests(self) -> int:
        return sum(e["requests"] for e in self.epochs)

    @property
    def bytes(self) -> int:
        return sum(e["bytes"] for e in self.epochs)

    @property
    def windows(self) -> int:
        return sum(e["windows"] for e in self.epochs)

    def price(self, provider: str = "s3", prices: dict[str, dict[str, float]] | None = None) -> float:
        """US dollars for the requests and the bytes at ``provider``'s prices.

        Args:
            provider: A key of `PRICES` (``"s3"``, ``"gcs"``, ``"azure"``) or of ``prices``.
            prices: Prices of your own, ``{provider: {"get_per_1000": $, "egress_per_gb": $}}``;
                they replace the list prices of the providers they name.

        Raises:
            ValueError: No prices for ``provider``.
        """
        table = {**PRICES, **(prices or {})}
        if provider not in table:
            raise ValueError(f"no prices for provider {provider!r}; known: {sorted(table)} (or pass prices=)")
        p = table[provider]
        return self.requests / 1000 * p["get_per_1000"] + self.bytes / 1e9 * p["egress_per_gb"]


def estimate(
    storage: Any,
    *,
    sequence_length: int,
    batch_size: int = 1,
    shuffle: Any = False,
    seed: int = 0,
    world_size: int = 1,
    epochs: int = 1,
    drop_last: bool = False,
    **loader_options: Any,
) -> Estimate:
    """The requests and bytes of reading ``storage`` (a stream storage) for ``epochs`` epochs
    on ``world_size`` ranks with these loader settings (as `StatefulDataLoader.from_storage`
    takes them; ``read_ahead``, ``read_ahead_bytes`` and the ``shuffle_*`` options too), with
    no data read.

    Args:
        storage: A stream storage, local or remote.
        sequence_length: Tokens per window.
        batch_size: Windows per batch, per rank.
        shuffle: ``False``, ``"block"`` or ``True`` (full), as for the loader.
        seed: The order's seed.
        world_size: Ranks reading the dataset; every rank's loader is played.
        epochs: Epochs to play, from epoch 0.
        drop_last: As for the loader.
        **loader_options: Other `StatefulDataLoader.from_storage` settings that change the
            reads: ``read_ahead``, ``read_ahead_bytes``, ``shuffle_block_size``, ...

    Returns:
        An `Estimate`: per epoch and in all, windows, GETs and bytes; ``.price()``.

    Raises:
        ValueError: ``storage`` is not a stream, or a setting the loader refuses.
    """
    from guideloom.loading.loader import StatefulDataLoader

    if getattr(storage, "layout", None) != "stream":
        raise ValueError(
            f"estimate plays stream reads; {getattr(storage, 'url', storage)} is a "
            f"{getattr(storage, 'layout', type(storage).__name__)} dataset"
        )
    settings = dict(
        sequence_length=sequence_length, batch_size=batch_size, shuffle=shuffle, seed=seed,
        world_size=world_size, drop_last=drop_last, **loader_options,
    )  # fmt: skip
    out = Estimate(storage.url, settings)
    loaders = [
        StatefulDataLoader.from_storage(storage, rank=rank, num_workers=0, **settings)
        for rank in range(world_size)
    ]
    table = storage.manifest.shard_table
    for epoch in range(epochs):
        requests = size = windows = 0
        for loader in loaders:
            loader._prepare(epoch, 0)
            view = loader.view
            for group in loader._groups():
                flat = [i for batch in group for i in batch]
                windows += len(flat)
                _, per_view, _ = view._windows.plan(view._batch(flat))
                planned = [r for reqs in per_view for r in reqs]
                plan = merge_ranges(
                    [table.path(shard, kind) for shard, kind, _, _ in planned],
                    [r[2] for r in planned],
                    [r[3] for r in planned],
                    DEFAULT_MAX_GAP,
                    DEFAULT_GAP_BUDGET,
                )
                requests += len(plan.requests)
                size += sum(end - start for _, start, end in plan.requests)
        out.epochs.append({"requests": requests, "bytes": size, "windows": windows})
    return out
