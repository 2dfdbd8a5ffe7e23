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

from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np

from guideloom.errors import DatasetNotFoundError, MixtureError, ResumeStateError
from guideloom.formats import StreamNumpyFormat
from guideloom.loading.interleave import check_schedule
from guideloom.loading.mixture_dataset import MixtureDataset
from guideloom.loading.mixture_fields import check_defaults, merged_fields
from guideloom.loading.mixture_order import MixtureOrder
from guideloom.loading.mixture_plan import (
    STRATEGIES,
    MixturePlan,
    Schedule,
    StoppingStrategy,
    WeightBy,
    check_same_schema,
    document_token_totals,
    document_tokens,
    sample_weights,
)
from guideloom.loading.state import LoaderState, expired_cause
from guideloom.storage import Storage, open_view
from guideloom.storage.subset import take
from guideloom.types import DOCUMENTS, STREAM, DatasetView

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


def _schema_name(fmt: Any) -> str:
    """A format's name for the schema check: a ``StreamNumpyFormat`` (subclasses included) is
    compared by its fields, whatever its class is called."""
    return "StreamNumpyFormat" if isinstance(fmt, StreamNumpyFormat) else str(fmt.spec()["name"])


class Mixture:
    """Several datasets of one layout read as one, each in a given proportion of samples (or tokens).

    Args:
        sources: a mapping ``name -> (storage or view, weight)``, or a sequence of
            ``(storage or view, weight)`` pairs (then each source is named by its URL). All
            sources must have the same storage class and, for streams, the same stream fields
            and dtypes (streams with metadata: the same format); a view carries its own
            ``sequence_length``, which must match the loader's. A stream source that lacks a
            field the others have says what its rows hold there in its third item:
            ``(storage, weight, {"defaults": {"loss_mask": 1}})`` (see
            `guideloom.loading.mixture_fields`). Weights are positive numbers,
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
        self._given: tuple[Any, dict[str, Any]] = (sources, dict(
            stopping_strategy=stopping_strategy, after=after, weight_by=weight_by,
            source_tokens=source_tokens, schedule=schedule,
        ))  # fmt: skip
        pairs = list(sources.items()) if isinstance(sources, Mapping) else list(enumerate(sources))
        if not pairs:
            raise MixtureError("a Mixture needs at least one source: pass {name: (storage, weight)}")
        names: list[str] = []
        items: list[Any] = []
        storages: list[Storage] = []
        weights: list[Any] = []
        limits: list[tuple[int | None, float]] = []
        defaults: list[dict[str, Any]] = []  # per source: values of stream fields it lacks
        for key, pair in pairs:
            if not isinstance(pair, (tuple, list)) or len(pair) not in (2, 3):
                raise MixtureError(
                    f"source {key!r}: expected a (storage, weight) pair or a (storage, weight, "
                    f"{{'samples': N, 'repeat': R}}) triple, got {type(pair).__name__}"
                )
            item, weight = pair[0], pair[1]
            limits.append(_limits(key, pair[2] if len(pair) == 3 else {}))
            if len(pair) == 3 and "defaults" in pair[2]:  # guideloom.loading.mixture_fields
                try:
                    defaults.append(check_defaults(str(key), pair[2]["defaults"]))
                except ValueError as err:
                    raise MixtureError(str(err)) from None
            else:
                defaults.append({})
            storage = _storage_of(item)
            if storage is None:
                raise MixtureError(
                    f"source {key!r}: expected a GuideLoom storage or dataset view, got {type(item).__name__}"
                )
            names.append(str(key) if isinstance(sources, Mapping) else storage.url)
            items.append(item)
            storages.append(storage)
            weights.append(weight)
        self.names = tuple(names)
        self.items = tuple(items)
        self.samples: tuple[int | None, ...] = tuple(n for n, _ in limits)
        self.repeat: tuple[float, ...] = tuple(r for _, r in limits)
        self.storages = tuple(storages)
        for name, w in zip(names, weights):
            if not _positive_number(w):
                raise MixtureError(
                    f"source {name!r} has weight {w!r}: weights must be positive, finite numbers"
                )
        if stopping_strategy not in STRATEGIES:
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
            if not any(defaults):
                self._check_schema(name, storage)
        self.defaults: tuple[dict[str, Any], ...] = tuple(defaults)
        self.fields = self._merged_fields() if any(defaults) else None
        self.after = after
        if weight_by not in ("samples", "tokens"):
            raise MixtureError(
                f"weight_by must be 'samples' (weights are shares of samples) or 'tokens' (shares "
                f"of tokens, for documents), got {weight_by!r}"
            )
        self.weight_by = weight_by
        self.token_weights: tuple[float, ...] = ()
        self.mean_tokens: tuple[float, ...] = ()
        documents: tuple[int, ...] = ()
        totals: list[int] = []
        if weight_by == "tokens" and self.layout == DOCUMENTS:
            self.token_weights = tuple(float(w) for w in weights)
            totals = document_token_totals(self.storages, names, source_tokens)
            documents = tuple(s.manifest.total_records for s in self.storages)
        elif source_tokens is not None:
            raise MixtureError(
                "source_tokens is only read with weight_by='tokens' for document sources: "
                "stream windows all hold sequence_length tokens, so shares of windows are shares of tokens"
            )
        try:
            self.weights, means = sample_weights(weights, documents, totals)
            check_schedule(self.weights, schedule)  # before any source is opened
        except ValueError as err:
            raise MixtureError(f"{err} (sources: {', '.join(names)})") from None
        if totals:
            self.mean_tokens = means

    def at_snapshots(self, snapshots: Sequence[str | None]) -> Mixture:
        """The same mixture with each source read at ``snapshots[i]`` (None, or the snapshot it
        reads already: as it is), with the same names, weights and options: what a loader state
        saved on a mixture whose sources have grown since resumes on (its ``source_snapshots``).

        Args:
            snapshots: One snapshot id (or None) per source, in source order.

        Raises:
            ResumeStateError: A source's snapshot is no longer kept (naming the source, the
                snapshot and the oldest kept), or a source given as a view must move to
                another snapshot (give its storage instead, which can be reopened).
        """
        if len(snapshots) != len(self.items):
            raise ValueError(f"{len(snapshots)} snapshots for the {len(self.items)} sources of a mixture")
        given, options = self._given
        pairs = list(given.items()) if isinstance(given, Mapping) else list(enumerate(given))
        moved: list[tuple[Any, tuple[Any, ...]]] = []
        for (key, pair), name, storage, pin in zip(pairs, self.names, self.storages, snapshots):
            item, rest = pair[0], tuple(pair[1:])
            now = storage.current_snapshot.id
            if pin is None or pin == now:
                moved.append((key, (item, *rest)))
                continue
            if not isinstance(item, Storage):
                raise ResumeStateError(
                    f"source {name!r} of the mixture was read at snapshot {pin} and is now at {now}; "
                    f"it was given as a {type(item).__name__}, which cannot be reopened there: give "
                    "the mixture its storage, or build the view on the pinned snapshot "
                    f"({type(storage).__name__}(url, fmt, snapshot={pin!r}))"
                )
            try:
                moved.append((key, (item.at_snapshot(pin), *rest)))
            except DatasetNotFoundError as err:
                if not _expired(item, pin):  # not a snapshot of this source's dataset:
                    moved.append((key, (item, *rest)))  # the identity check names what differs
                    continue
                raise ResumeStateError(
                    f"the loader state was saved with source {name!r} of the mixture at snapshot "
                    f"{pin}, which is no longer kept: {expired_cause(err)}. The saved order cannot be resumed "
                    "exactly: start without loading the state, or keep the snapshots that running "
                    "jobs read (expire(keep_last=N) with a larger N)"
                ) from err
        return Mixture(dict(moved) if isinstance(given, Mapping) else [p for _, p in moved], **options)

    def _merged_fields(self) -> dict[str, np.dtype]:
        """Every stream field of the sources, checked with their ``defaults``
        (`guideloom.loading.mixture_fields`)."""
        if self.layout != STREAM or not all(isinstance(s.format, StreamNumpyFormat) for s in self.storages):
            raise MixtureError(
                f"'defaults' fill stream fields a source lacks, but the sources are {self.layout} "
                "datasets: give defaults only to plain stream sources (StreamNumpyFormat)"
            )
        schemas = [
            (n, s.url, dict(cast(StreamNumpyFormat, s.format).fields))
            for n, s in zip(self.names, self.storages)
        ]
        try:
            return merged_fields(schemas, self.defaults)
        except ValueError as err:
            raise MixtureError(str(err)) from None

    def _check_schema(self, name: str, storage: Storage) -> None:
        first = self.storages[0]
        try:
            check_same_schema(
                self.layout,
                [
                    (self.names[0], first.url, _schema_name(first.format), first.format.config()),
                    (name, storage.url, _schema_name(storage.format), storage.format.config()),
                ],
            )
        except ValueError as err:
            raise MixtureError(str(err)) from None

    def dataset(self, sequence_length: int | None = None, *, sources: bool = False) -> MixtureDataset:
        """The mixture as one view (``sequence_length`` tokens per window, for streams).

        `StatefulDataLoader.from_storage(mixture, ...)` calls it; call it yourself to index the
        mixture's samples directly.

        Args:
            sequence_length: Tokens per window: required for stream sources given as storages,
                refused for documents; a source given as a view keeps its own, which must agree.
            sources: Read through a `guideloom.loading.mixture_sources.SourcedMixtureDataset`,
                whose batches also hold ``source`` and ``source_index`` (what
                ``from_storage(mixture, sources=True)`` does); the order and the state are the same.

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
        if self.layout == DOCUMENTS and sequence_length is not None:
            raise MixtureError(
                f"sequence_length={sequence_length!r} has no meaning for a mixture of document "
                f"datasets (source {self.names[0]!r}, ...): documents are read whole; leave it out"
            )
        views: list[DatasetView] = []
        for name, item in zip(self.names, self.items):
            if not isinstance(item, Storage):  # a view: its window length must agree
                own = item.sequence_length
                if sequence_length is not None and own is not None and own != sequence_length:
                    raise MixtureError(
                        f"source {name!r} is a view with sequence_length={own}, but the mixture is "
                        f"read with sequence_length={sequence_length}; use one length for all sources"
                    )
                views.append(item)
                continue
            if self.layout != DOCUMENTS:
                if sequence_length is None:
                    raise MixtureError(
                        f"sequence_length is required to mix the stream source {name!r}: pass the "
                        "number of tokens per training window, e.g. sequence_length=2048"
                    )
                if item.manifest.total_tokens < sequence_length:
                    raise MixtureError(
                        f"source {name!r} ({item.url}) has no complete windows: an empty source "
                        "cannot be mixed; leave it out"
                    )
            try:
                views.append(open_view(item, sequence_length))
            except ValueError as err:
                raise MixtureError(f"source {name!r}: {err}") from None
        views = [v if n is None else take(v, n) for v, n in zip(views, self.samples)]
        lengths = {v.sequence_length for v in views}
        if len(lengths) > 1:
            detail = ", ".join(f"{n!r}: {v.sequence_length}" for n, v in zip(self.names, views))
            raise MixtureError(f"the sources have different sequence lengths ({detail}); use one for all")
        for name, view, storage in zip(self.names, views, self.storages):
            if len(view) < 1:
                what = "documents" if self.layout == DOCUMENTS else "complete windows"
                raise MixtureError(
                    f"source {name!r} ({storage.url}) has no {what}: an empty source cannot be "
                    "mixed; leave it out"
                )
        sizes = tuple(len(v) for v in views)
        starts = self._starts(sizes, lengths.pop())
        plan = MixturePlan(
            self.names,
            sizes,
            self.weights,
            self.stopping_strategy,
            starts,
            self.mean_tokens,
            self.schedule,
            self.repeat,
        )
        if sources:
            from guideloom.loading.mixture_sources import SourcedMixtureDataset

            return SourcedMixtureDataset(self, views, plan)
        return MixtureDataset(self, views, plan)

    def _starts(self, sizes: tuple[int, ...], sequence_length: int | None) -> tuple[int, ...]:
        """Each source's running draw number where the ``after`` state stopped (curriculum)."""
        if self.after is None:
            return (0,) * len(sizes)
        saved = LoaderState.from_dict(self.after)
        mixed = saved.identity.mixture
        if mixed is None:
            raise ResumeStateError("after= must be a state saved by a loader over a Mixture")
        old = mixed["sources"]
        fingerprints = [str(s.manifest.fingerprint) for s in self.storages]
        if len(old) != len(sizes) or mixed.get("fingerprints") != fingerprints:
            raise ResumeStateError(
                "after= holds a state of a mixture of other sources: a curriculum keeps the same "
                "sources in the same order and changes only their weights"
            )
        if saved.identity.sequence_length != sequence_length or [o[0] for o in old] != list(sizes):
            raise ResumeStateError(
                f"after= holds a state saved with sequence_length {saved.identity.sequence_length}; this "
                f"mixture is read with {sequence_length}"
            )
        plan = MixturePlan(
            self.names,
            sizes,
            tuple(o[1] for o in old),
            mixed["stopping_strategy"],
            tuple(o[2] for o in old),
            schedule=mixed.get("schedule", "tree"),
            repeat=tuple(mixed.get("repeat", ())),
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


def _storage_of(item: Any) -> Storage | None:
    """The storage of a mixture source given as a storage or as a view of one (None: neither)."""
    if isinstance(item, Storage):
        return item
    if isinstance(item, DatasetView) and item.mixture is None:
        return item.storage  # type: ignore[no-any-return]
    return None


def _positive_number(value: Any) -> bool:
    """Whether ``value`` is a positive, finite int or float (a weight, a repeat; not a bool)."""
    return (
        not isinstance(value, bool)
        and isinstance(value, (int, float, np.integer, np.floating))
        and bool(np.isfinite(float(value)) and value > 0)
    )


def _limits(key: Any, given: Any) -> tuple[int | None, float]:
    """A source's ``{"samples": N, "repeat": R}`` limits, checked: (samples or None, repeat)."""
    if not isinstance(given, Mapping) or set(given) - {"samples", "repeat", "defaults"}:
        raise MixtureError(
            f"source {key!r}: the third item of a source holds its limits, a dict with 'samples' "
            f"(read at most its first N samples), 'repeat' (passes over it that use it up) "
            f"and/or 'defaults' (values of stream fields it lacks), got {given!r}"
        )
    samples, repeat = given.get("samples"), given.get("repeat", 1.0)
    if samples is not None and (
        isinstance(samples, bool) or not isinstance(samples, (int, np.integer)) or samples < 1
    ):
        raise MixtureError(
            f"source {key!r}: 'samples' must be a whole number of samples >= 1, got {samples!r}"
        )
    if not _positive_number(repeat):
        raise MixtureError(
            f"source {key!r}: 'repeat' must be a positive number of passes (e.g. 2 or 0.5), got {repeat!r}"
        )
    return (None if samples is None else int(samples)), float(repeat)


def _expired(storage: Storage, snapshot: str) -> bool:
    """Whether ``snapshot`` (not found in ``storage``) is older than every snapshot it keeps: it
    has expired, rather than being another dataset's."""
    head = snapshot.split("-", 1)[0]
    kept = storage.snapshots()
    return head.isdigit() and bool(kept) and int(head) < kept[0].sequence
