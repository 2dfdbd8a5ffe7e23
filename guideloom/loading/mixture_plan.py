"""The arithmetic of a mixture from counts alone: epoch length, draws, shares (no I/O, no torch).

`MixturePlan` is what ``guideloom mix`` prints and what a `guideloom.loading.mixture.Mixture`
reads by: each source's samples and integer weight give the epoch length (by the stopping
strategy), the draws of each source per mixture epoch and its repeats. `sample_weights` turns
the weights a user gives into the plan's integer weights, also for ``weight_by="tokens"``
(document sources weighted by shares of tokens), for the `Mixture` and for the CLI alike.
See `guideloom.loading.mixture` for how a mixture epoch is ordered.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from typing import Any, Literal

import numpy as np

from guideloom.errors import MixtureError
from guideloom.loading.interleave import Interleave, check_schedule, decimal_fraction, integer_weights
from guideloom.manifest.totals import INGEST_KEY, ingest_totals
from guideloom.types import DOCUMENTS

__all__ = [
    "MixturePlan",
    "Schedule",
    "check_same_schema",
    "StoppingStrategy",
    "WeightBy",
    "document_token_totals",
    "document_tokens",
    "sample_weights",
]

StoppingStrategy = Literal["all_exhausted", "first_exhausted"]
WeightBy = Literal["samples", "tokens"]
Schedule = Literal["auto", "tree", "quota"]
STRATEGIES = ("all_exhausted", "first_exhausted")


@dataclass(frozen=True)
class MixturePlan:
    """The arithmetic of a mixture, from counts alone: what ``guideloom mix`` prints.

    `Mixture.plan()` returns it; build one yourself to plan a mixture from counts.

    Args:
        names: The sources' names.
        sizes: Samples (windows or documents) per source.
        weights: Positive integers (see `guideloom.loading.interleave.integer_weights`).
        stopping_strategy: ``"all_exhausted"`` or ``"first_exhausted"``.
        starts: Draws of each source before this mixture began (a curriculum switch); 0s
            when empty.
        mean_tokens: Each source's mean tokens per sample, when the weights were given as
            shares of tokens (the table then shows each source's share of tokens too).
        schedule: The interleave's schedule: ``"auto"``, ``"tree"`` or ``"quota"`` (see
            `guideloom.loading.interleave`).
        repeat: Passes over each source that count as using it up (the sources' ``repeat``
            limits; 1 each when empty): the epoch ends when every source (``"all_exhausted"``)
            or the first (``"first_exhausted"``) has given ``ceil(repeat * size)`` samples.

    Raises:
        MixtureError: An unknown strategy or schedule, or a source with no samples.
    """

    names: tuple[str, ...]
    sizes: tuple[int, ...]
    weights: tuple[int, ...]
    stopping_strategy: str = "all_exhausted"
    starts: tuple[int, ...] = field(default=())
    mean_tokens: tuple[float, ...] = field(default=())
    schedule: str = "auto"
    repeat: tuple[float, ...] = field(default=())

    def __post_init__(self) -> None:
        try:
            check_schedule(self.weights, self.schedule)
        except ValueError as err:
            raise MixtureError(f"{err} (sources: {', '.join(self.names)})") from None
        if self.stopping_strategy not in STRATEGIES:
            raise MixtureError(
                f"stopping_strategy must be 'all_exhausted' (repeat smaller sources until every "
                f"source is used up) or 'first_exhausted' (end the epoch when the first source "
                f"is used up), got {self.stopping_strategy!r}"
            )
        if not self.starts:
            object.__setattr__(self, "starts", (0,) * len(self.sizes))
        if not self.repeat:
            object.__setattr__(self, "repeat", (1.0,) * len(self.sizes))
        for name, size in zip(self.names, self.sizes):
            if size < 1:
                raise MixtureError(f"source {name!r} has no samples: an empty source cannot be mixed")

    @cached_property
    def interleave(self) -> Interleave:
        return Interleave(self.weights, self.schedule)  # the schedule was checked at construction

    @cached_property
    def epoch_length(self) -> int:
        """Positions (samples) in one mixture epoch."""
        targets = tuple(max(1, math.ceil(r * n)) for r, n in zip(self.repeat, self.sizes))
        return self.interleave.first_reaching(targets, every=self.stopping_strategy == "all_exhausted")

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
        """Running draw number of each source once ``position`` of ``epoch`` is reached.

        Args:
            epoch: The epoch.
            position: The position in that epoch.

        Returns:
            One draw count per source, counted from the start of training.
        """
        counts = self.interleave.counts(position)
        return [s + epoch * d + c for s, d, c in zip(self.starts, self.draws, counts)]

    def identity(self) -> dict[str, Any]:
        """What a loader state records about the mixture (plain ints and strings).

        ``schedule`` is recorded only when it is not ``"tree"``, the one schedule of states saved
        before there was a choice, so those states still match their mixtures.

        Returns:
            ``{"stopping_strategy", "sources": [[size, weight, start], ...]}`` (and ``schedule``).
        """
        out: dict[str, Any] = {
            "stopping_strategy": self.stopping_strategy,
            "sources": [list(x) for x in zip(self.sizes, self.weights, self.starts)],
        }
        if self.interleave.schedule != "tree":
            out["schedule"] = self.interleave.schedule
        if any(r != 1 for r in self.repeat):  # recorded only when set: older states still match
            out["repeat"] = [float(r) for r in self.repeat]
        return out

    def lines(self, preview: int = 64) -> list[str]:
        """A human-readable table of the plan, plus the first ``preview`` positions' sources.

        Args:
            preview: How many first positions to show as source letters.

        Returns:
            The table's lines (what ``guideloom mix`` prints).
        """
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


def source_schema(format_name: str, config: Mapping[str, Any]) -> Any:
    """What must agree between two sources of one stream mixture, from the manifest's format
    record: the fields and their dtypes for ``StreamNumpyFormat``, else the format's name and
    config (the comparison `Mixture` and ``guideloom mix`` both make)."""
    if format_name == "StreamNumpyFormat":
        return [list(f) for f in config.get("fields", [])]
    return {"name": format_name, "config": dict(config)}


def check_same_schema(layout: str, sources: Sequence[tuple[str, str, str, Mapping[str, Any]]]) -> None:
    """Raise when the sources of a stream mixture differ in fields or dtypes.

    Args:
        layout: The sources' layout; documents are decoded whole by each source's own format,
            so they need not agree.
        sources: ``(name, url, format name, format config)`` per source, the first one the
            reference.

    Raises:
        ValueError: A source whose schema differs from the first one's (both named, and both
            schemas).
    """
    if layout == DOCUMENTS or not sources:
        return
    first_name, _, first_format, first_config = sources[0]
    theirs = source_schema(first_format, first_config)
    for name, url, fmt, config in sources[1:]:
        mine = source_schema(fmt, config)
        if mine != theirs:
            raise ValueError(
                f"source {name!r} ({url}) has the schema {mine}, but source {first_name!r} has "
                f"{theirs}: batches of one mixture need the same fields and dtypes; mix sources "
                f"written with the same format (rewrite one, or drop it from the mixture){_defaults_hint(mine, theirs, name, first_name)}"
            )


def _defaults_hint(mine: Any, theirs: Any, name: str, first_name: str) -> str:
    """Where two stream schemas differ only by fields one lacks: how a `Mixture` fills them
    (`guideloom.loading.mixture_fields`)."""
    if not (isinstance(mine, list) and isinstance(theirs, list)):
        return ""
    a, b = {f[0]: f[1] for f in mine}, {f[0]: f[1] for f in theirs}
    if any(a[k] != b[k] for k in a.keys() & b.keys()):
        return ""
    lacking, missing = (
        (name, sorted(b.keys() - a.keys()))
        if b.keys() - a.keys()
        else (first_name, sorted(a.keys() - b.keys()))
    )
    values = ", ".join(f"{f!r}: {1 if f == 'loss_mask' else 0}" for f in missing)
    return (
        f"; or, in a Python Mixture, give source {lacking!r} the values its rows hold there: "
        f"{lacking!r}: (storage, weight, {{'defaults': {{{values}}}}})"
    )


def sample_weights(
    weights: Sequence[float], documents: Sequence[int] = (), tokens: Sequence[int] = ()
) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """The plan's weights: coprime integers with the proportions of samples ``weights`` ask for.

    Without ``tokens``, ``weights`` are shares of samples. With ``tokens`` (``weight_by="tokens"``
    for document sources: each source's total tokens, with ``documents`` its documents) they are
    shares of tokens, turned into shares of documents by each source's mean document length
    (exactly: ``weight / (tokens / documents)`` as fractions). Returns the integer weights and,
    with ``tokens``, each source's mean tokens per document (else ``()``).

    Raises ``ValueError`` as `guideloom.loading.interleave.integer_weights` does.
    """
    if not tokens:
        return integer_weights(weights), ()
    means = tuple(t / d for t, d in zip(tokens, documents))
    per_document: list[float | Fraction] = [
        decimal_fraction(w) * d / t for w, d, t in zip(weights, documents, tokens)
    ]
    return integer_weights(per_document), means


def document_tokens(
    manifest: Any, snapshots: Callable[[], Sequence[Any]] | None = None, snapshot_id: str | None = None
) -> int | None:
    """A document dataset's total tokens as its manifest records them, or None.

    Read from the manifest's metadata: ``"tokens"`` (what a writer records with
    ``storage.writer(metadata={"tokens": n})``), else what ``guideloom ingest`` records under
    ``"ingest"``, for the whole dataset after appends (`guideloom.manifest.totals.ingest_totals`;
    ``snapshots`` reads the snapshot log, which datasets ingested by earlier versions need).
    """
    meta = manifest.metadata or {}
    value = meta.get("tokens")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if not isinstance(meta.get(INGEST_KEY), dict):
        return None
    return ingest_totals(manifest, snapshots, snapshot_id).tokens


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
        total = (
            given[name]
            if name in given
            else document_tokens(manifest, storage.snapshots, storage.current_snapshot.id)
        )
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
