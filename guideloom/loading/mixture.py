"""Weighted mixtures of several datasets, with the loader's exact, O(1), elastic resume (no torch).

A `Mixture` names several storages (or views) of one layout, each with a weight::

    mix = Mixture({"web": (web, 0.6), "code": (code, 0.3), "books": (books, 0.1)})
    loader = StatefulDataLoader.from_storage(mix, sequence_length=2048, batch_size=8, shuffle=True)

How a mixture epoch is ordered
------------------------------
The mixture has its own positions ``p = 0 .. L-1`` per epoch, handed out by the loader exactly
like a single dataset's (the same batch sampler, ranks, workers and state). Position ``p``:

1. `guideloom.loading.interleave.Interleave` gives its source ``i`` and the draw index
   ``k`` (source ``i``'s ``k``-th draw of this mixture epoch) in closed form, O(#sources);
2. source ``i``'s running draw number is ``g = start_i + epoch * D_i + k``, where ``D_i`` is the
   draws per mixture epoch and ``start_i`` the draws before this mixture began (0, or a
   curriculum switch, see ``after``);
3. the source's own order turns it into a sample: source epoch ``g // N_i``, position
   ``g % N_i`` of that epoch's `guideloom.loading.order.EpochOrder` (the loader's shuffle
   mode, keyed by ``(seed, source number)``).

So every source follows its own epoch order, nothing repeats inside a source epoch, and a source
that is repeated continues into its next epoch with a new order (up-sampling); a source that is
not used up in one mixture epoch continues where it stopped in the next.

Epoch length (``stopping_strategy``, named as in Hugging Face ``interleave_datasets``):

``"all_exhausted"`` (default)
    ``L`` is the first position at which every source has had at least ``N_i`` draws: the
    epoch lasts until the last source is used up; the others are repeated (up-sampled),
    ``D_i / N_i`` times each. ``L`` is about ``max_i N_i / w_i``.
``"first_exhausted"``
    ``L`` is the first position at which some source has had ``N_i`` draws: no source repeats
    within an epoch; the others are partly used, and continue next epoch. ``L`` is about
    ``min_i N_i / w_i``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import numpy as np

from guideloom.errors import MixtureError, ResumeStateError
from guideloom.loading.interleave import (
    Interleave,
    check_schedule,
    decimal_fraction,
    integer_weights,
)
from guideloom.loading.order import EpochOrder, ShuffleMode, derive_key, permute_many
from guideloom.storage.windows import StreamDataset
from guideloom.storage.windows import WindowReader as LocalWindows

__all__ = [
    "Mixture",
    "MixtureDataset",
    "MixtureOrder",
    "MixturePlan",
    "Schedule",
    "StoppingStrategy",
    "WeightBy",
    "document_tokens",
    "document_token_totals",
]

StoppingStrategy = Literal["all_exhausted", "first_exhausted"]
WeightBy = Literal["samples", "tokens"]
Schedule = Literal["auto", "tree", "quota"]
_STRATEGIES = ("all_exhausted", "first_exhausted")
_PURPOSE_SOURCE = 5  # keys each source's order apart from the others (see order.derive_key)
_GAP = 1024  # positions further apart than this are evaluated as separate ranges


@dataclass(frozen=True)
class MixturePlan:
    """The arithmetic of a mixture, from counts alone: what ``guideloom mix`` prints.

    ``sizes``: samples (windows or documents) per source; ``weights``: positive integers (see
    `guideloom.loading.interleave.integer_weights`); ``starts``: draws of each source
    before this mixture began (a curriculum switch), 0 otherwise; ``mean_tokens``: each
    source's mean tokens per sample, when the weights were given as shares of tokens (the
    table then shows each source's share of tokens too); ``schedule``: the interleave's
    schedule (``"auto"``, ``"tree"`` or ``"quota"``, see `guideloom.loading.interleave`).
    """

    names: tuple[str, ...]
    sizes: tuple[int, ...]
    weights: tuple[int, ...]
    stopping_strategy: str = "all_exhausted"
    starts: tuple[int, ...] = field(default=())
    mean_tokens: tuple[float, ...] = field(default=())
    schedule: str = "auto"

    def __post_init__(self) -> None:
        try:
            check_schedule(self.weights, self.schedule)
        except ValueError as err:
            raise MixtureError(f"{err} (sources: {', '.join(self.names)})") from None
        if self.stopping_strategy not in _STRATEGIES:
            raise MixtureError(
                f"stopping_strategy must be 'all_exhausted' (repeat smaller sources until every "
                f"source is used up) or 'first_exhausted' (end the epoch when the first source "
                f"is used up), got {self.stopping_strategy!r}"
            )
        if not self.starts:
            object.__setattr__(self, "starts", (0,) * len(self.sizes))
        for name, size in zip(self.names, self.sizes):
            if size < 1:
                raise MixtureError(f"source {name!r} has no samples: an empty source cannot be mixed")

    @cached_property
    def interleave(self) -> Interleave:
        return Interleave(self.weights, self.schedule)  # the schedule was checked at construction

    @cached_property
    def epoch_length(self) -> int:
        """Positions (samples) in one mixture epoch."""
        return self.interleave.first_reaching(self.sizes, every=self.stopping_strategy == "all_exhausted")

    @cached_property
    def draws(self) -> tuple[int, ...]:
        """Samples each source gives per mixture epoch."""
        return tuple(self.interleave.counts(self.epoch_length))

    @property
    def shares(self) -> tuple[float, ...]:
        return self.interleave.shares

    @property
    def token_shares(self) -> tuple[float, ...]:
        """Each source's expected share of the tokens (needs ``mean_tokens``; else empty)."""
        if not self.mean_tokens:
            return ()
        tokens = [share * m for share, m in zip(self.shares, self.mean_tokens)]
        return tuple(t / sum(tokens) for t in tokens)

    @property
    def repeats(self) -> tuple[float, ...]:
        """How many times each source is read per mixture epoch (``draws / size``)."""
        return tuple(d / n for d, n in zip(self.draws, self.sizes))

    def drawn_after(self, epoch: int, position: int) -> list[int]:
        """Running draw number of each source once ``position`` of ``epoch`` is reached."""
        counts = self.interleave.counts(position)
        return [s + epoch * d + c for s, d, c in zip(self.starts, self.draws, counts)]

    def identity(self) -> dict[str, Any]:
        """What a loader state records about the mixture (plain ints and strings).

        ``schedule`` is recorded only when it is not ``"tree"``, the one schedule of states saved
        before there was a choice, so those states still match their mixtures."""
        out: dict[str, Any] = {
            "stopping_strategy": self.stopping_strategy,
            "sources": [list(x) for x in zip(self.sizes, self.weights, self.starts)],
        }
        if self.interleave.schedule != "tree":
            out["schedule"] = self.interleave.schedule
        return out

    def lines(self, preview: int = 64) -> list[str]:
        """A human-readable table of the plan, plus the first ``preview`` positions' sources."""
        width = max(6, *(len(n) for n in self.names))
        out = [
            f"mixture epoch  {self.epoch_length:,} samples ({self.stopping_strategy})",
            f"max deviation  {self.interleave.max_deviation:.3f} samples per source over any prefix "
            f"({self.interleave.schedule} schedule)",
            "",
            f"  {'letter':6}  {'source':{width}}  {'share':>9}  {'samples':>12}  {'per epoch':>12}  repeats"
            + ("  token share" if self.mean_tokens else ""),
        ]
        for k, (name, share, size, draws, rep) in enumerate(
            zip(self.names, self.shares, self.sizes, self.draws, self.repeats)
        ):
            out.append(
                f"  {_letter(k):6}  {name:{width}}  {share:9.4%}  {size:12,d}  {draws:12,d}  {rep:.3f}x"
                + (f"  {self.token_shares[k]:11.4%}" if self.mean_tokens else "")
            )
        if preview:
            src, _ = self.interleave.sources(0, min(preview, self.epoch_length))
            out += ["", "first positions  " + "".join(_letter(int(i)) for i in src)]
        return out


def _letter(k: int) -> str:
    return chr(ord("A") + k) if k < 26 else f"[{k}]"


class MixtureOrder:
    """One mixture epoch's order: ``order(positions) -> indexes into the MixtureDataset``.

    The drop-in counterpart of `guideloom.loading.order.EpochOrder` for the loader's
    batch sampler: any positions, O(#sources) per range of consecutive positions.
    """

    def __init__(
        self,
        plan: MixturePlan,
        *,
        shuffle: ShuffleMode,
        seed: int,
        epoch: int,
        block_size: int = 1,
        buffer_blocks: int = 1,
        run_size: int = 1,
    ) -> None:
        self.plan = plan
        self.num_samples = plan.epoch_length
        self.epoch = int(epoch)
        self._settings = {"shuffle": shuffle, "block_size": block_size, "buffer_blocks": buffer_blocks}
        self._run_size = run_size
        self._seeds = [derive_key(seed, _PURPOSE_SOURCE, i) for i in range(len(plan.sizes))]
        self._offsets = np.concatenate([[0], np.cumsum(plan.sizes)[:-1]]).astype(np.int64)
        self._orders: dict[tuple[int, int], EpochOrder] = {}

    def _source_order(self, i: int, epoch: int) -> EpochOrder:
        key = (i, epoch)
        order = self._orders.get(key)
        if order is None:
            if len(self._orders) > 256:
                self._orders.clear()
            size = self.plan.sizes[i]
            run = self._run_size
            block = int(self._settings["block_size"])  # type: ignore[call-overload]
            order = self._orders[key] = EpochOrder(
                size,
                shuffle=self._settings["shuffle"],  # type: ignore[arg-type]
                seed=self._seeds[i],
                epoch=epoch,
                block_size=block,
                buffer_blocks=int(self._settings["buffer_blocks"]),  # type: ignore[call-overload]
                run_size=run,
            )
        return order

    def locate(self, positions: np.ndarray | Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """For each position: its source and that source's running draw number ``g``."""
        p = np.atleast_1d(np.asarray(positions, dtype=np.int64))
        if p.size and (p.min() < 0 or p.max() >= self.num_samples):
            raise IndexError(f"positions must lie in [0, {self.num_samples})")
        src = np.empty(p.size, dtype=np.int64)
        draw = np.empty(p.size, dtype=np.int64)
        if not p.size:
            return src, draw
        order = np.argsort(p, kind="stable")
        sp = p[order]
        cuts = np.flatnonzero(np.diff(sp) > _GAP) + 1
        for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), sp.size]):
            first, last = int(sp[lo]), int(sp[hi - 1])
            s, d = self.plan.interleave.sources(first, last + 1)
            src[order[lo:hi]], draw[order[lo:hi]] = s[sp[lo:hi] - first], d[sp[lo:hi] - first]
        plan = self.plan
        base = np.array([s + self.epoch * d for s, d in zip(plan.starts, plan.draws)], dtype=np.int64)
        return src, draw + base[src]

    def __call__(self, positions: np.ndarray | Sequence[int] | range) -> np.ndarray:
        """Indexes into the `MixtureDataset` (source offset + sample index) at ``positions``."""
        src, g = self.locate(np.asarray(positions, dtype=np.int64))
        sizes = np.asarray(self.plan.sizes, dtype=np.int64)
        epochs, pos = np.divmod(g, sizes[src])
        # one group per (source, source epoch): a small, much repeated source spans many epochs
        pairs, where = np.unique(epochs * len(sizes) + src, return_inverse=True)
        orders = [self._source_order(int(k % len(sizes)), int(k // len(sizes))) for k in pairs.tolist()]
        if self._settings["shuffle"] == "full":
            samples = permute_many(orders, where, pos)
        elif self._settings["shuffle"] == "none":
            samples = pos
        else:
            samples = np.empty(pos.size, dtype=np.int64)
            by_group = np.argsort(where, kind="stable")
            bounds = np.searchsorted(where[by_group], np.arange(len(orders) + 1)).tolist()
            for order, lo, hi in zip(orders, bounds[:-1], bounds[1:]):
                rows = by_group[lo:hi]
                samples[rows] = order(pos[rows])
        return samples + self._offsets[src]


def document_tokens(manifest: Any) -> int | None:
    """A document dataset's total tokens as its manifest records them, or None.

    Read from the manifest's metadata: ``"tokens"`` (what a writer records with
    ``storage.writer(metadata={"tokens": n})``), else ``"ingest"`` -> ``"tokens"`` (what
    ``guideloom ingest`` records).
    """
    meta = manifest.metadata or {}
    for value in (meta.get("tokens"), (meta.get("ingest") or {}).get("tokens")):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def document_token_totals(
    storages: Sequence[Any], names: Sequence[str], source_tokens: Mapping[str, int] | None = None
) -> list[int]:
    """Each document source's total tokens (its mean document length is that / its documents).

    Totals come from ``source_tokens[name]`` if given, else from the manifest (see
    `document_tokens`). Raises `MixtureError` naming a source whose total is unknown or not
    a positive integer, or a ``source_tokens`` name that is no source.
    """
    given = dict(source_tokens or {})
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise MixtureError(
            f"source_tokens names {unknown}, which are not sources of this mixture ({list(names)})"
        )
    out = []
    for name, storage in zip(names, storages):
        manifest = storage.manifest
        total = given.get(name, document_tokens(manifest))
        if total is None:
            raise MixtureError(
                f"source {name!r} ({storage.url}): weight_by='tokens' needs its number of tokens, and "
                "its manifest records none; write it with storage.writer(metadata={'tokens': N}) or "
                "pass Mixture(..., source_tokens={" + repr(name) + ": N})"
            )
        if isinstance(total, bool) or not isinstance(total, (int, np.integer)) or total < 1:
            raise MixtureError(
                f"source {name!r} ({storage.url}) has {total!r} tokens: a token count must be a positive integer"
            )
        if manifest.total_records < 1:
            raise MixtureError(
                f"source {name!r} ({storage.url}) has no documents: an empty source cannot be mixed"
            )
        out.append(int(total))
    return out


class Mixture:
    """Several datasets of one layout read as one, each in a given proportion of samples (or tokens).

    Args:
        sources: a mapping ``name -> (storage or view, weight)``, or a sequence of
            ``(storage or view, weight)`` pairs (then each source is named by its URL). All
            sources must have the same storage class and, for streams, the same stream fields
            and dtypes (streams with metadata: the same format); a view carries its own
            ``sequence_length``, which must match the loader's. Weights are positive numbers,
            proportions of *samples* (windows or documents); they need not sum to 1.
        stopping_strategy: ``"all_exhausted"`` (default; smaller sources are repeated, each
            repeat in a new order, until every source is used up) or ``"first_exhausted"``
            (the epoch ends when the first source is used up). See `guideloom.loading.mixture`.
        after: a loader state saved from a mixture of the same sources (same order), for a
            curriculum: this mixture, with new weights, starts each source where that state
            left it, so no sample already delivered in a source's current epoch is delivered
            again before that epoch ends. Build the mixture with the same ``after`` state when
            resuming the new run from its own checkpoints.
        weight_by: ``"samples"`` (default: weights are shares of samples) or ``"tokens"``:
            for document sources, weights are shares of *tokens*, turned into shares of
            documents by each source's mean document length (its total tokens over its
            documents), so a source of long documents gets proportionally fewer of them. The
            token shares are then exact in expectation over a shuffled order and exact over
            every complete pass over a source (docs/mixing.md states the bound). For streams,
            every window holds ``sequence_length`` tokens, so both mean the same.
        source_tokens: ``name -> total tokens`` of document sources, for ``weight_by="tokens"``
            where a source's manifest does not record its tokens (see `document_tokens`).
        schedule: How positions are dealt to sources: ``"auto"`` (default), ``"tree"`` or
            ``"quota"``; see `guideloom.loading.interleave` and docs/mixing.md. ``"auto"`` keeps
            every prefix within one sample of its weight wherever the weights allow it in closed
            form or in one tabulated period. Pass ``"tree"`` to continue a state saved before
            ``"quota"`` existed, for a mixture that ``"auto"`` now deals by quota (the loader's
            error says when).

    Raises:
        MixtureError: no sources, a weight that is not a positive finite number, sources of
            different layouts or schemas, an unknown ``stopping_strategy`` or ``weight_by``, or
            ``weight_by="tokens"`` for a document source whose tokens are not known (the
            message names the source and how to record them), an unknown ``schedule``, or
            ``"quota"`` for weights whose common denominator is above 65,536.

    Attributes:
        names: The sources' names, in the order given.
        items: The storages or views, as given.
        storages: Each source's storage.
        weights: The weights as coprime integers with the same proportions of samples
            (converted from shares of tokens with ``weight_by="tokens"``).
        weight_by: `"samples"` or `"tokens"`, as given.
        token_weights: The weights as given, for document sources weighted by tokens; else `()`.
        mean_tokens: Each source's mean tokens per document, for document sources weighted by
            tokens; else `()`.
        stopping_strategy: `"all_exhausted"` or `"first_exhausted"`.
        schedule: `"auto"`, `"tree"` or `"quota"`, as given.
        layout: The sources' layout: `"documents"`, `"stream"` or `"stream_with_meta"`.
        after: The curriculum state given as `after`, or None.
    """

    def __init__(
        self,
        sources: Mapping[str, tuple[Any, float]] | Sequence[tuple[Any, float]],
        *,
        stopping_strategy: StoppingStrategy = "all_exhausted",
        after: dict[str, Any] | None = None,
        weight_by: WeightBy = "samples",
        source_tokens: Mapping[str, int] | None = None,
        schedule: Schedule = "auto",
    ) -> None:
        pairs = list(sources.items()) if isinstance(sources, Mapping) else list(enumerate(sources))
        if not pairs:
            raise MixtureError("a Mixture needs at least one source: pass {name: (storage, weight)}")
        names: list[str] = []
        items: list[Any] = []
        weights: list[Any] = []
        for key, pair in pairs:
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise MixtureError(
                    f"source {key!r}: expected a (storage, weight) pair, got {type(pair).__name__}"
                )
            item, weight = pair
            storage = getattr(item, "storage", item)
            if getattr(storage, "layout", None) not in ("documents", "stream", "stream_with_meta"):
                raise MixtureError(
                    f"source {key!r}: expected a GuideLoom storage or dataset view, got {type(item).__name__}"
                )
            names.append(str(key) if isinstance(sources, Mapping) else storage.url)
            items.append(item)
            weights.append(weight)
        self.names = tuple(names)
        self.items = tuple(items)
        self.storages = tuple(getattr(x, "storage", x) for x in items)
        for name, w in zip(names, weights):
            if (
                isinstance(w, bool)
                or not isinstance(w, (int, float, np.integer, np.floating))
                or not (np.isfinite(float(w)) and w > 0)
            ):
                raise MixtureError(
                    f"source {name!r} has weight {w!r}: weights must be positive, finite numbers"
                )
        if stopping_strategy not in _STRATEGIES:
            raise MixtureError(
                f"stopping_strategy must be 'all_exhausted' or 'first_exhausted', got {stopping_strategy!r}"
            )
        self.stopping_strategy = stopping_strategy
        self.schedule = schedule  # checked with the weights below
        self.layout = self.storages[0].layout
        for name, storage in zip(names, self.storages):
            if storage.layout != self.layout:
                raise MixtureError(
                    f"source {name!r} ({storage.url}) is a {type(storage).__name__}, but source "
                    f"{names[0]!r} is a {type(self.storages[0]).__name__}: a mixture reads one layout"
                )
            self._check_schema(name, storage)
        self.after = after
        if weight_by not in ("samples", "tokens"):
            raise MixtureError(
                f"weight_by must be 'samples' (weights are shares of samples) or 'tokens' (shares "
                f"of tokens, for documents), got {weight_by!r}"
            )
        self.weight_by = weight_by
        self.token_weights: tuple[float, ...] = ()
        self.mean_tokens: tuple[float, ...] = ()
        if weight_by == "tokens" and self.layout == "documents":
            self.token_weights = tuple(float(w) for w in weights)
            totals = document_token_totals(self.storages, names, source_tokens)
            self.mean_tokens = tuple(t / s.manifest.total_records for t, s in zip(totals, self.storages))
            # exact: weight / (tokens / documents), as fractions
            weights = [
                decimal_fraction(w) * s.manifest.total_records / t
                for w, s, t in zip(weights, self.storages, totals)
            ]
        elif source_tokens is not None:
            raise MixtureError(
                "source_tokens is only read with weight_by='tokens' for document sources: "
                "stream windows all hold sequence_length tokens, so shares of windows are shares of tokens"
            )
        try:
            self.weights = integer_weights(weights)
            check_schedule(self.weights, schedule)  # before any source is opened
        except ValueError as err:
            raise MixtureError(f"{err} (sources: {', '.join(names)})") from None

    def _check_schema(self, name: str, storage: Any) -> None:
        first = self.storages[0]
        if self.layout == "documents":
            return  # documents are decoded whole by each source's own format
        if self.layout == "stream":
            mine, theirs = storage.format.dtype, first.format.dtype
        else:
            mine, theirs = storage.format.spec(), first.format.spec()
        if mine != theirs:
            raise MixtureError(
                f"source {name!r} ({storage.url}) has the schema {mine}, but source "
                f"{self.names[0]!r} has {theirs}: batches of one mixture need the same fields and dtypes"
            )

    def dataset(self, sequence_length: int | None = None) -> MixtureDataset:
        """The mixture as one view (``sequence_length`` tokens per window, for streams).

        `StatefulDataLoader.from_storage(mixture, ...)` calls it; call it yourself to index the
        mixture's samples directly.

        Args:
            sequence_length: Tokens per window: required for stream sources given as storages,
                refused for documents; a source given as a view keeps its own, which must agree.

        Returns:
            A `MixtureDataset`: index `offset_i + j` is sample `j` (window or document) of
            source `i`; it has `len`, `read_windows` / `__getitems__` and the `plan`.

        Raises:
            MixtureError: `sequence_length` missing for streams or given for documents, sources
                with different sequence lengths, or a source without a complete window or
                document (the message names the source).
            ResumeStateError: The `after` state is not a mixture's loader state, or was saved
                over other sources or with another `sequence_length`.
            DatasetNotFoundError: A source has no committed dataset.
            StorageAccessError: The storage refused a request or could not be reached.
        """
        from guideloom import DocumentDataset, StreamDataset, StreamWithMetaDataset

        if self.layout == "documents" and sequence_length is not None:
            raise MixtureError(
                f"sequence_length={sequence_length!r} has no meaning for a mixture of document "
                f"datasets (source {self.names[0]!r}, ...): documents are read whole; leave it out"
            )
        views = []
        for name, item in zip(self.names, self.items):
            if item is not getattr(item, "storage", item):  # a view: its window length must agree
                own = getattr(item, "sequence_length", None)
                if sequence_length is not None and own is not None and own != sequence_length:
                    raise MixtureError(
                        f"source {name!r} is a view with sequence_length={own}, but the mixture is "
                        f"read with sequence_length={sequence_length}; use one length for all sources"
                    )
                views.append(item)
            elif self.layout == "documents":
                views.append(DocumentDataset(item))
            else:
                if sequence_length is None:
                    raise MixtureError(
                        f"sequence_length is required to mix the stream source {name!r}: pass the "
                        "number of tokens per training window, e.g. sequence_length=2048"
                    )
                cls = StreamDataset if self.layout == "stream" else StreamWithMetaDataset
                views.append(cls(item, sequence_length=sequence_length))
        lengths = {getattr(v, "sequence_length", None) for v in views}
        if len(lengths) > 1:
            detail = ", ".join(
                f"{n!r}: {getattr(v, 'sequence_length', None)}" for n, v in zip(self.names, views)
            )
            raise MixtureError(f"the sources have different sequence lengths ({detail}); use one for all")
        for name, view, storage in zip(self.names, views, self.storages):
            if len(view) < 1:
                what = "documents" if self.layout == "documents" else "complete windows"
                raise MixtureError(
                    f"source {name!r} ({storage.url}) has no {what}: an empty source cannot be "
                    "mixed; leave it out"
                )
        sizes = tuple(len(v) for v in views)
        starts = self._starts(sizes, lengths.pop())
        plan = MixturePlan(
            self.names, sizes, self.weights, self.stopping_strategy, starts, self.mean_tokens, self.schedule
        )
        return MixtureDataset(self, views, plan)

    def _starts(self, sizes: tuple[int, ...], sequence_length: int | None) -> tuple[int, ...]:
        """Each source's running draw number where the ``after`` state stopped (curriculum)."""
        if self.after is None:
            return (0,) * len(sizes)
        from guideloom.loading.state import LoaderState

        saved = LoaderState.from_dict(self.after)
        if saved.mixture is None:
            raise ResumeStateError("after= must be a state saved by a loader over a Mixture")
        old = saved.mixture["sources"]
        fingerprints = [str(s.manifest.fingerprint) for s in self.storages]
        if len(old) != len(sizes) or saved.mixture.get("fingerprints") != fingerprints:
            raise ResumeStateError(
                "after= holds a state of a mixture of other sources: a curriculum keeps the same "
                "sources in the same order and changes only their weights"
            )
        if saved.sequence_length != sequence_length or [o[0] for o in old] != list(sizes):
            raise ResumeStateError(
                f"after= holds a state saved with sequence_length {saved.sequence_length}; this "
                f"mixture is read with {sequence_length}"
            )
        plan = MixturePlan(
            self.names,
            sizes,
            tuple(o[1] for o in old),
            saved.mixture["stopping_strategy"],
            tuple(o[2] for o in old),
            schedule=saved.mixture.get("schedule", "tree"),
        )
        return tuple(plan.drawn_after(saved.epoch, saved.position))

    def plan(self, sequence_length: int | None = None) -> MixturePlan:
        """Epoch length, per-source draws and repeats (opens each source's view).

        Args:
            sequence_length: Tokens per window, as for `dataset`.

        Returns:
            A `MixturePlan`: `epoch_length` (samples per mixture epoch), `draws` (samples of
            each source per epoch), `shares` and `repeats` (reads of each source per epoch);
            `lines()` is the table `guideloom mix` prints.

        Raises:
            MixtureError: As for `dataset`.
            ResumeStateError: As for `dataset`.
            DatasetNotFoundError: A source has no committed dataset.
        """
        return self.dataset(sequence_length).plan

    def __repr__(self) -> str:
        parts = ", ".join(f"{n!r}: {w}" for n, w in zip(self.names, self.weights))
        return (
            f"Mixture({{{parts}}}, stopping_strategy={self.stopping_strategy!r}, schedule={self.schedule!r})"
        )


class MixtureDataset:
    """The sources of a `Mixture` as one indexed view: index ``offset_i + j`` is sample
    ``j`` of source ``i``. The loader orders it with `MixtureOrder`; a batch is read
    with one batched read per source (``read_windows`` / ``__getitems__``), reassembled in order.
    """

    def __init__(self, mixture: Mixture, views: Sequence[Any], plan: MixturePlan) -> None:
        self.mixture = mixture
        self.views = list(views)
        self.plan = plan
        self.layout = mixture.layout
        self.storage = mixture.storages[0]  # the layout and format all sources share
        self.sequence_length = getattr(self.views[0], "sequence_length", None)
        self._starts = np.concatenate([[0], np.cumsum(plan.sizes)]).astype(np.int64)
        self.is_local = all(s.location.is_local for s in mixture.storages)
        # local stream sources are read by one LocalWindows, all in one pass into one array
        local_windows = (
            self.is_local
            and self.layout == "stream"
            and all(isinstance(v, StreamDataset) for v in self.views)
            and len({v.stream_format.dtype for v in self.views}) == 1
        )
        self._windows = LocalWindows(self.views) if local_windows else None
        self.fingerprints = [str(s.manifest.fingerprint) for s in mixture.storages]
        ident = {**plan.identity(), "fingerprints": self.fingerprints}
        self.identity = ident
        self.fingerprint = hashlib.blake2b(
            json.dumps(ident, sort_keys=True).encode(), digest_size=8
        ).hexdigest()
        self.url = "mixture of " + ", ".join(f"{n!r}" for n in mixture.names)

    def __len__(self) -> int:
        return int(self._starts[-1])

    def check_state(self, saved: dict[str, Any] | None) -> None:
        """Raise `ResumeStateError` naming the source if ``saved`` is another mixture's."""
        if saved != self.identity:
            raise ResumeStateError(mixture_difference(saved, self.identity, self.mixture.names))

    def epoch_order(self, **settings: Any) -> MixtureOrder:
        """The order of one mixture epoch (``seed``, ``epoch`` and shuffle settings)."""
        return MixtureOrder(self.plan, **settings)

    def _split(self, indexes: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        idx = np.asarray(indexes, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= len(self)):
            raise IndexError(f"indexes must lie in [0, {len(self)}) for {self.url}")
        src = np.searchsorted(self._starts, idx, side="right") - 1
        return src, idx - self._starts[src]

    def read_windows(self, indexes: Sequence[int]) -> dict[str, np.ndarray]:
        """Stream windows ``indexes`` as ``{field: (len(indexes), sequence_length) array}``."""
        src, local = self._split(indexes)
        if self._windows is not None:
            return self.views[0]._split(self._windows.read(local, src))
        out: dict[str, np.ndarray] = {}
        for i in np.unique(src).tolist():
            sel = np.flatnonzero(src == i)
            part = self.views[i].read_windows(local[sel].tolist())
            for name, values in part.items():
                if name not in out:
                    out[name] = np.empty((src.size, *values.shape[1:]), dtype=values.dtype)
                out[name][sel] = values
        return out

    def __getitems__(self, indexes: Sequence[int]) -> list[Any]:
        src, local = self._split(indexes)
        out: list[Any] = [None] * src.size
        for i in np.unique(src).tolist():
            sel = np.flatnonzero(src == i)
            for row, sample in zip(sel.tolist(), self.views[i].__getitems__(local[sel].tolist())):
                out[row] = sample
        return out

    def __getitem__(self, i: int) -> Any:
        return self.__getitems__([i])[0]

    def source_of(self, index: int) -> tuple[str, int]:
        """``(source name, sample index in that source)`` of a mixture index."""
        src, local = self._split([index])
        return self.mixture.names[int(src[0])], int(local[0])

    def __repr__(self) -> str:
        return f"MixtureDataset({self.url}, len={len(self)}, epoch_length={self.plan.epoch_length})"


def mixture_difference(
    saved: dict[str, Any] | None, current: dict[str, Any] | None, names: Sequence[str] = ()
) -> str:
    """The message of the ResumeStateError for a state whose mixture differs from the loader's."""
    fix = " Build the mixture as the run that saved the state did, or start without loading it."
    if saved is None:
        return (
            "the loader state was saved by a loader over a single dataset, but this loader reads a Mixture."
            + fix
        )
    if current is None:
        return (
            "the loader state was saved by a loader over a Mixture, but this loader reads a single dataset."
            + fix
        )
    if saved["stopping_strategy"] != current["stopping_strategy"]:
        return (
            f"the loader state was saved with stopping_strategy {saved['stopping_strategy']!r}, but this "
            f"mixture has {current['stopping_strategy']!r}." + fix
        )
    old, new = saved["sources"], current["sources"]
    then, now = saved.get("schedule", "tree"), current.get("schedule", "tree")
    if then != now and [s[:2] for s in old] == [s[:2] for s in new]:
        return (
            f"the loader state was saved with the {then!r} schedule, but this mixture deals its "
            f"positions by {now!r} (schedule='auto' takes 'quota' where the 'tree' is not within "
            f"one sample; states saved before GuideLoom had 'quota' are 'tree'). Build the "
            f"Mixture with schedule={then!r} to continue that run exactly."
        )
    if len(old) != len(new):
        return (
            f"the loader state was saved from a mixture of {len(old)} sources, but this one has {len(new)}."
            + fix
        )
    label = [f"source {names[i]!r}" if i < len(names) else f"source {i}" for i in range(len(new))]
    for i, (o, n, fo, fn) in enumerate(zip(old, new, saved["fingerprints"], current["fingerprints"])):
        if fo != fn:
            return (
                f"{label[i]} holds other data than when the state was saved (fingerprint {fo} vs {fn})." + fix
            )
        if o[0] != n[0]:
            return f"{label[i]} had {o[0]} samples when the state was saved, but has {n[0]} now." + fix
    old_total, new_total = sum(s[1] for s in old), sum(s[1] for s in new)
    if any(o[1] * new_total != n[1] * old_total for o, n in zip(old, new)):
        then = ", ".join(f"{label[i]} {o[1] / old_total:.6g}" for i, o in enumerate(old))
        now = ", ".join(f"{label[i]} {n[1] / new_total:.6g}" for i, n in enumerate(new))
        return (
            f"the weights differ: the state was saved with the shares {then}; this mixture has {now}. "
            "To change weights going forward, build the new Mixture with after=<that state> (a "
            "curriculum step, see docs/mixing.md)." + fix
        )
    for i, (o, n) in enumerate(zip(old, new)):
        if o[2] != n[2]:
            return (
                f"{label[i]} started at draw {o[2]} in the saved run, but at {n[2]} now (another "
                "after= state)." + fix
            )
    return "the loader state was saved from another mixture." + fix
