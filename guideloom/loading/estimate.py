"""What reading a dataset will cost, before reading it: requests, bytes and a price.

`estimate` plays the loader's own order (the same sampler, groups of batches and range merging
a `StatefulDataLoader` over this dataset uses) for every rank and epoch, without reading any
data: the cost of a planned run is known from the manifest and the settings alone. The counts
are those `StatefulDataLoader.io_stats` reports for the same run on an object store (ranged
``GET``s and the bytes they bring), apart from the few requests of opening the dataset; the
tests compare the two through a counting proxy. A local dataset is estimated as if it were in a
bucket, which is what a team deciding whether to move it there wants to know.

Streams are planned from the manifest alone. Documents are planned from their index files: the
estimate reads the index pages the loaders would read (through the same page cache, one cache
per worker) to know where each document's bytes are, and counts those requests too; it reads no
document data. Streams with metadata are planned like streams for their tokens, plus their span
files: the span directory (span-table pages for datasets written without one) is read for real
(it says which span rows and annotation bytes a batch fetches); the batch's round of tokens,
span rows and annotations is only counted.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from guideloom.io.backends import BACKENDS, PRICES_TAKEN
from guideloom.io.ranges import DEFAULT_GAP_BUDGET, DEFAULT_MAX_GAP, merge_ranges
from guideloom.storage import Storage
from guideloom.storage.indexfiles import IndexFiles
from guideloom.types import DOCUMENTS, STREAM, STREAM_WITH_META

__all__ = ["PRICES", "PRICES_TAKEN", "Estimate", "estimate"]

# US dollars: per 1,000 GET-class requests, and per GB (10**9 bytes) sent to the internet, by
# store: each store's backend holds its list prices (`guideloom.io.backends`, `list_prices`, as
# of `PRICES_TAKEN`). Reading from a machine in the bucket's own region usually costs no
# transfer: pass 0.
PRICES: dict[str, dict[str, float]] = {
    str(b.key): dict(b.list_prices) for b in BACKENDS if b.key is not None and b.list_prices
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
    sequence_length: int | None = None,
    batch_size: int = 1,
    shuffle: Any = False,
    seed: int = 0,
    world_size: int = 1,
    epochs: int = 1,
    drop_last: bool = False,
    num_workers: int = 0,
    **loader_options: Any,
) -> Estimate:
    """The requests and bytes of reading ``storage`` (a stream, stream with metadata or document
    storage) for
    ``epochs`` epochs on ``world_size`` ranks with these loader settings (as
    `StatefulDataLoader.from_storage` takes them; ``read_ahead``, ``read_ahead_bytes`` and the
    ``shuffle_*`` options too), with no data read.

    Args:
        storage: A stream, stream-with-metadata or document storage, local or remote.
        sequence_length: Tokens per window; needed for streams, not used for documents.
        batch_size: Windows per batch, per rank.
        shuffle: ``False``, ``"block"`` or ``True`` (full), as for the loader.
        seed: The order's seed.
        world_size: Ranks reading the dataset; every rank's loader is played.
        epochs: Epochs to play, from epoch 0.
        drop_last: As for the loader.
        num_workers: Loader worker processes per rank. Streams cost the same with any number;
            documents' index pages are cached per worker (and per epoch, the workers being new
            each epoch), so more workers read more index pages.
        **loader_options: Other `StatefulDataLoader.from_storage` settings that change the
            reads: ``read_ahead``, ``read_ahead_bytes``, ``shuffle_block_size``, ...

    Returns:
        An `Estimate`: per epoch and in all, windows, GETs and bytes; ``.price()``.

    Raises:
        ValueError: ``storage`` is not a GuideLoom storage, or a setting the loader refuses.
    """
    from guideloom.loading.loader import StatefulDataLoader

    if not isinstance(storage, Storage):
        raise ValueError(f"estimate plays the reads of a Storage; got a {type(storage).__name__}")
    layout = storage.layout
    if layout not in (STREAM, DOCUMENTS, STREAM_WITH_META):
        raise ValueError(f"estimate plays stream and document reads; {storage.url} is a {layout} dataset")
    if layout != DOCUMENTS and sequence_length is None:
        raise ValueError(f"{storage.url} is a stream: give sequence_length= (tokens per window)")
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
        raise ValueError(f"num_workers must be an int >= 0, got {num_workers!r}")
    settings = dict(
        sequence_length=sequence_length, batch_size=batch_size, shuffle=shuffle, seed=seed,
        world_size=world_size, drop_last=drop_last, **loader_options,
    )  # fmt: skip
    if layout == DOCUMENTS:
        settings.pop("sequence_length")
    out = Estimate(storage.url, {**settings, "num_workers": num_workers})
    loaders = [
        StatefulDataLoader.from_storage(storage, rank=rank, num_workers=0, **settings)
        for rank in range(world_size)
    ]
    table = storage.manifest.shard_table
    planners: list[list[_Planner]] = [[] for _ in loaders]  # per rank: one per worker
    for epoch in range(epochs):
        # the loader's gap budget (lifted for the block shuffle's window reads, see fetch.py)
        rounds = _Rounds(table, loaders[0].dataset.gap_budget)
        windows = 0
        for rank, loader in enumerate(loaders):
            loader._prepare(epoch, 0)
            view = loader.view
            if layout != STREAM and (num_workers or not planners[rank]):
                # a worker's copy of the view starts with an empty index cache, each epoch
                kind = _Planner if layout == DOCUMENTS else _SpanPlanner
                planners[rank] = [kind(view, rounds) for _ in range(max(1, num_workers))]
            for k, group in enumerate(loader._groups()):
                flat = [i for batch in group for i in batch]
                windows += len(flat)
                if layout != STREAM:
                    planner = planners[rank][k % len(planners[rank])]  # groups go round robin
                    planner.rounds = rounds
                    planner.play(flat)
                    continue
                _, per_view, _ = view._windows.plan(view._batch(flat))
                rounds.add([r for reqs in per_view for r in reqs])
        out.epochs.append({"requests": rounds.requests, "bytes": rounds.bytes, "windows": windows})
    return out


class _Rounds:
    """Ranged GETs and bytes of rounds of reads, each merged as a remote reader merges one call."""

    def __init__(self, table: Any, gap_budget: float | None = DEFAULT_GAP_BUDGET) -> None:
        self.table = table
        self.gap_budget = gap_budget
        self.requests = 0
        self.bytes = 0

    def add(self, planned: Sequence[tuple[int, str, int, int]]) -> None:
        if not planned:
            return
        plan = merge_ranges(
            [self.table.path(shard, kind) for shard, kind, _, _ in planned],
            [r[2] for r in planned],
            [r[3] for r in planned],
            DEFAULT_MAX_GAP,
            self.gap_budget,
        )
        self.requests += len(plan.requests)
        self.bytes += sum(end - start for _, start, end in plan.requests)


class _Planner:
    """A document view's reads played for one loader worker: the index pages are read for real
    (they say where the documents are) through a page cache of the view's size, as a remote
    reader would read them; the documents' own bytes are only counted."""

    def __init__(self, view: Any, rounds: _Rounds) -> None:
        self.real = view.reader
        self.rounds = rounds
        self.view = copy.copy(view)
        self.view._access = IndexFiles(
            self, cache_bytes=view._access.cache.capacity, page_bytes=view._access.page_bytes
        )
        self.view._decode = self._documents

    # the shard-reader protocol, as far as IndexFiles uses it
    local = False

    @property
    def table(self) -> Any:
        return self.real.table

    def read(self, requests: Sequence[tuple[int, str, int, int]]) -> list[bytes]:
        self.rounds.add(requests)
        return self.real.read(requests)

    def read_iter(self, requests: Sequence[tuple[int, str, int, int]]) -> Iterator[bytes]:
        return iter(self.read(requests))

    def map_file(self, shard: int, file: str) -> memoryview | None:
        return None  # played as a remote reader: nothing mapped

    def read_into(
        self, requests: Sequence[tuple[int, str, int, int]], buffers: Sequence[Sequence[memoryview]]
    ) -> None:
        self.rounds.add(requests)
        self.real.read_into(requests, buffers)

    def close(self) -> None:
        """Nothing of its own to close (the view's reader is the loader's)."""

    def play(self, samples: list[int]) -> None:
        """The reads of one group of samples, counted."""
        self.view.__getitems__(samples)

    def _documents(
        self, requests: list[tuple[int, str, int, int]], several: dict[int, list[int]]
    ) -> list[Any]:
        self.rounds.add(requests)  # one round of data reads; nothing fetched, nothing decoded
        return []


class _SpanPlanner(_Planner):
    """A stream-with-metadata view's reads played for one loader worker: its span directory (or,
    for datasets written without one, span-table pages) is read for real, through a page cache
    of the view's size, as the view's batched read finds it; the round that then fetches the
    batch's tokens, span rows and annotation bytes is only counted."""

    def __init__(self, view: Any, rounds: _Rounds) -> None:
        self.real = view.reader
        self.rounds = rounds
        self.view = copy.copy(view)
        self.view.reader = self
        self.view._access = IndexFiles(
            self, cache_bytes=view._access.cache.capacity, page_bytes=view._access.page_bytes
        )

    def play(self, samples: list[int]) -> None:
        try:
            self.view._windows_and_spans(samples)
        except _Counted:
            pass  # the batch's one round of tokens, span rows and annotations: counted

    def read_into(
        self, requests: Sequence[tuple[int, str, int, int]], buffers: Sequence[Sequence[memoryview]]
    ) -> None:
        self.rounds.add(requests)
        raise _Counted  # nothing fetched: what comes after only decodes these bytes


class _Counted(Exception):
    """A stream-with-metadata batch's data round was counted; the view stops there."""
