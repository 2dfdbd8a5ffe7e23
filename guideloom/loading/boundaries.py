"""Document boundaries in stream batches: ``position_ids``, ``labels`` and ``cu_seqlens``.

``StatefulDataLoader.from_storage(..., boundaries=...)`` wraps the stream view in a
`BoundaryView`, whose ``read_batch`` adds two ``(rows, L)`` arrays to the windows it reads:

- ``position_ids`` (int64): 0 at every document start inside a window and at the window's first
  token (a document that began in an earlier window counts from 0 there, as a fresh segment),
  then 1, 2, ...;
- ``labels`` (int64, with ``labels=True``): token ``i + 1`` of the same document, ``-100`` at each
  document's last token, at the window's last token, and where the target's ``loss_mask`` is 0
  (when the stream has that field).

Both are computed with array operations over the whole read (no Python per token or per row),
so they survive every worker mode, groups read together (rows slice like the windows) and
resume. ``cu_seqlens`` and ``max_seqlen`` depend on the batch as the loop gets it, so
`with_cu_seqlens` adds them from ``position_ids`` after a batch is cut (`guideloom.loading.fetch`).

Where documents start is one of:

- ``"records"``: the stream's record starts (`StreamDataset.record_starts_batch`);
- ``"eos"``: after every end-of-document token ``eos_id`` (given, or the ingestion tokenizer's
  from the manifest's metadata);
- a field name (e.g. ``"doc_index"``): where that field's value changes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from guideloom.storage.wrapped import WrappedView
from guideloom.types import STREAM, STREAM_WITH_META, DatasetView, StreamView, stream_view

__all__ = [
    "IGNORE_INDEX",
    "BoundaryView",
    "MixtureMarks",
    "add_marks",
    "boundary_arrays",
    "cu_seqlens_of",
    "flat_starts",
    "with_cu_seqlens",
]

IGNORE_INDEX = -100
"""The label of a token no loss is taken on (what ``torch.nn.functional.cross_entropy`` ignores)."""

_INGEST_KEY = "ingest"  # the manifest metadata key ingestion writes (guideloom.workers.results)


def boundary_arrays(
    tokens: np.ndarray, starts: np.ndarray, loss_mask: np.ndarray | None, labels: bool
) -> dict[str, np.ndarray]:
    """``position_ids`` (and ``labels``) of windows ``tokens`` ``(rows, L)`` whose documents
    start at the flat positions ``starts`` (sorted, distinct, over the ``rows * L`` flattened
    tokens; each row's first token is a start whether listed or not). ``loss_mask``:
    ``(rows, L)``, 0 where no loss is taken. Sparse work only: one pass over the tokens per
    output array."""
    rows, length = tokens.shape
    total = rows * length
    # Every start and every row start, sorted and distinct (starts at a row start dropped).
    inner = starts[starts % length != 0]
    heads = np.concatenate((np.arange(0, total, length, dtype=np.int64), inner))
    heads.sort()  # (in place, by the method: np.sort copies, through a Python-level wrapper)
    sizes = np.empty(len(heads), np.int64)
    np.subtract(heads[1:], heads[:-1], out=sizes[:-1])
    sizes[-1] = total - heads[-1]
    if total <= _COUNTING_MAX:
        position_ids = np.subtract(_counting(total), heads.repeat(sizes))
    else:  # a whole group: one array less of that size
        position_ids = np.arange(total, dtype=np.int64)
        position_ids -= heads.repeat(sizes)
    out = {"position_ids": position_ids.reshape(rows, length)}
    if labels:
        lab = np.empty((rows, length), np.int64)
        lab[:, :-1] = tokens[:, 1:]
        if loss_mask is not None:
            np.copyto(lab[:, :-1], IGNORE_INDEX, where=loss_mask[:, 1:] == 0)
        flat = lab.reshape(-1)
        flat[heads[1:] - 1] = IGNORE_INDEX  # each document's last token (and each row's)
        flat[-1] = IGNORE_INDEX
        out["labels"] = lab
    return out


_COUNTING: list[np.ndarray] = [np.arange(0, dtype=np.int64)]
_COUNTING_MAX = 1 << 20  # longest 0, 1, 2, ... kept (8 MiB); longer windows count in place


def _counting(n: int) -> np.ndarray:
    """0 .. n - 1 as int64 (n <= `_COUNTING_MAX`), read-only and kept between calls: reading
    it is cheaper than making it, and a batch's worth stays in the CPU caches."""
    held = _COUNTING[0]
    if n > len(held):
        held = np.arange(n, dtype=np.int64)
        held.flags.writeable = False
        _COUNTING[0] = held
    return held[:n]


def cu_seqlens_of(position_ids: np.ndarray) -> tuple[np.ndarray, int]:
    """``(cu_seqlens, max_seqlen)`` of a batch from its ``(B, L)`` ``position_ids`` (NumPy)."""
    flat = position_ids.reshape(-1)
    heads = np.flatnonzero(flat == 0)
    cu = np.empty(len(heads) + 1, np.int32)  # (np.append and np.diff cost more in Python than here)
    cu[:-1] = heads
    cu[-1] = flat.size
    return cu, int((cu[1:] - cu[:-1]).max()) if len(cu) > 1 else 0


def with_cu_seqlens(batch: dict[str, Any]) -> dict[str, Any]:
    """``batch`` plus ``cu_seqlens`` (int32, 1-D: 0, every document start and row start over the
    batch flattened to ``B * L`` tokens, and ``B * L``) and ``max_seqlen`` (int), from its
    ``position_ids`` tensor; unchanged without one."""
    position_ids = batch.get("position_ids")
    if not isinstance(position_ids, torch.Tensor):
        return batch
    flat = position_ids.reshape(-1)
    starts = torch.nonzero(flat == 0, as_tuple=True)[0].to(torch.int32)
    cu = torch.cat([starts, torch.tensor([flat.numel()], dtype=torch.int32)])
    batch["cu_seqlens"] = cu
    batch["max_seqlen"] = int((cu[1:] - cu[:-1]).max()) if len(cu) > 1 else 0
    return batch


class BoundaryView(WrappedView):
    """A stream view whose batches also hold ``position_ids`` (and ``labels``); everything else
    (order, length, fingerprint: resume states move between it and the plain view) is the
    view's."""

    def __init__(
        self, view: Any, boundaries: str, *, labels: bool = False, eos_id: int | None = None
    ) -> None:
        """Check the settings against ``view``'s dataset; see `boundary_settings`."""
        super().__init__(view)
        self.boundaries, self.labels, self.eos_id = boundary_settings(view, boundaries, labels, eos_id)
        self._mask_field = _mask_field_of(view)

    # -- guideloom.types.DatasetView (the rest is forwarded by WrappedView) -------------------

    def __len__(self) -> int:
        return len(self.view)

    def __getitem__(self, index: int) -> Any:
        batch = self.read_batch([index])
        return {name: values[0] for name, values in batch.items()}

    def __getitems__(self, indexes: Sequence[int]) -> list[Any]:
        batch = self.read_batch(indexes)
        return [{name: values[row] for name, values in batch.items()} for row in range(len(indexes))]

    def read_batch(self, indexes: Sequence[int]) -> dict[str, np.ndarray]:
        """The windows ``indexes`` (`StreamDataset.read_windows`) plus ``position_ids`` and,
        with ``labels``, ``labels``: all ``(len(indexes), L)``."""
        return self._marked(*self._read_with_starts(indexes))

    def read_batches(self, batches: Sequence[Sequence[int]]) -> list[dict[str, np.ndarray]]:
        """`read_batch` of several batches with one read, marked batch by batch: arrays of one
        batch's size stay in the CPU caches, where one group's worth (hundreds of rows of
        int64) would not (measured: about 6x less time for the marking)."""
        flat = [i for batch in batches for i in batch]
        windows, starts = self._read_with_starts(flat)
        length = windows["tokens"].shape[1]
        bounds = np.cumsum([0, *(len(b) for b in batches)])
        cuts = np.searchsorted(starts, bounds * length).tolist()
        out = []
        for k, (lo, hi) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist())):
            part = {name: values[lo:hi] for name, values in windows.items()}
            out.append(self._marked(part, starts[cuts[k] : cuts[k + 1]] - lo * length))
        return out

    def _read_with_starts(self, indexes: Sequence[int]) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """The windows and the flat positions (over ``rows * L``) where documents start."""
        windows: dict[str, np.ndarray] = self.view.read_batch(indexes)
        return windows, flat_starts(
            windows, self.boundaries, self.eos_id, lambda: self.view.record_starts_batch(indexes)
        )

    def _marked(self, windows: dict[str, np.ndarray], starts: np.ndarray) -> dict[str, np.ndarray]:
        return add_marks(windows, starts, self._mask_field, self.labels)


def flat_starts(
    windows: dict[str, np.ndarray],
    boundaries: str,
    eos_id: int | None,
    record_starts: Callable[[], tuple[np.ndarray, np.ndarray]],
) -> np.ndarray:
    """The flat positions (over ``rows * L``) where documents start in ``windows``: from
    ``record_starts()`` (the windows' ``(positions, counts)``) for ``"records"``, else from the
    tokens."""
    tokens = windows["tokens"]
    rows, length = tokens.shape
    if boundaries == "records":
        positions, counts = record_starts()
        return positions + (np.arange(rows, dtype=np.int64) * length).repeat(counts)  # type: ignore[no-any-return]
    if boundaries == "eos":
        after = np.flatnonzero(tokens[:, :-1] == eos_id)
    else:
        values = windows[boundaries]
        after = np.flatnonzero(values[:, 1:] != values[:, :-1])
    # (rows, L - 1) coordinates of the token before a start -> flat start positions
    return after + after // (length - 1) + 1 if length > 1 else after  # type: ignore[no-any-return]


class MixtureMarks:
    """`BoundaryView`'s marking for the stream sources of a mixture (``from_storage(mixture,
    boundaries=...)``): set as a `guideloom.loading.mixture.MixtureDataset`'s ``marks``, it adds
    ``position_ids`` (and ``labels``) to every read, from each source's record starts, ``eos_id``
    or field. Every source is checked as `boundary_settings` checks one stream; with ``"eos"``
    every source must end documents with the same id (given, or each manifest's)."""

    def __init__(
        self, views: Sequence[Any], names: Sequence[str], boundaries: str, labels: bool, eos_id: int | None
    ) -> None:
        settings = []
        for name, view in zip(names, views):
            try:
                settings.append(boundary_settings(view, boundaries, labels, eos_id))
            except ValueError as err:
                raise ValueError(f"source {name!r} of the mixture: {err}") from None
        ids = {s[2] for s in settings}
        if len(ids) > 1:
            detail = ", ".join(f"{n!r}: {s[2]}" for n, s in zip(names, settings))
            raise ValueError(
                f"boundaries='eos': the mixture's sources end documents with different ids ({detail}); "
                "pass eos_id=<id> if they share a tokenizer, or use boundaries='records'"
            )
        self.boundaries, self.labels, self.eos_id = settings[0]
        # a source without a loss mask may be mixed with one that has it ('defaults')
        self._mask_field = next((f for f in map(_mask_field_of, views) if f), None)

    def mark(
        self, windows: dict[str, np.ndarray], record_starts: Callable[[], tuple[np.ndarray, np.ndarray]]
    ) -> dict[str, np.ndarray]:
        """``windows`` with ``position_ids`` (and ``labels``) added; ``record_starts()`` gives
        their record starts (used with ``"records"``)."""
        starts = flat_starts(windows, self.boundaries, self.eos_id, record_starts)
        return add_marks(windows, starts, self._mask_field, self.labels)


def add_marks(
    windows: dict[str, np.ndarray], starts: np.ndarray, mask_field: str | None, labels: bool
) -> dict[str, np.ndarray]:
    """``windows`` with the `boundary_arrays` of documents starting at ``starts`` added."""
    mask = windows.get(mask_field) if mask_field else None
    windows.update(boundary_arrays(windows["tokens"], starts, mask, labels))
    return windows


def _mask_field_of(view: StreamView) -> str | None:
    """``"loss_mask"`` where ``view``'s stream has that field (labels honour it), else None."""
    return "loss_mask" if "loss_mask" in view.stream_format.fields else None


def _ingest_tokenizer(view: StreamView) -> dict[str, Any]:
    """What the manifest records of the ingestion tokenizer (empty when it records none)."""
    meta = view.manifest.metadata or {}
    tokenizer = (meta.get(_INGEST_KEY) or {}).get("tokenizer") if isinstance(meta, dict) else None
    return tokenizer if isinstance(tokenizer, dict) else {}


def _vocabulary(view: StreamView) -> tuple[int, str]:
    """The number of token ids and where it comes from: the ingestion tokenizer's vocabulary
    when the manifest records it, else what the ``tokens`` dtype holds."""
    tokenizer = _ingest_tokenizer(view)
    if isinstance(tokenizer, dict) and isinstance(tokenizer.get("vocab_size"), int):
        return tokenizer["vocab_size"], f"the vocabulary of the ingestion tokenizer {tokenizer.get('spec')}"
    dtype = np.dtype(view.stream_format.fields["tokens"])
    if dtype.kind in "iu":
        return int(np.iinfo(dtype).max) + 1, f"the ids a {dtype.name} tokens field holds"
    return 2**63, "the tokens field"


def boundary_settings(
    view: Any, boundaries: str, labels: bool, eos_id: int | None
) -> tuple[str, bool, int | None]:
    """``(boundaries, labels, eos_id)`` checked against ``view``.

    Raises:
        ValueError: ``boundaries`` is not ``"records"``, ``"eos"`` or a field of the stream;
            ``"records"`` on a dataset without record starts; ``"eos"`` without an id (none
            given, none in the manifest) or with one outside the vocabulary; ``labels`` or
            ``boundaries`` on documents or streams with metadata (no token windows to mark).
    """
    stream = stream_view(view) if isinstance(view, DatasetView) else None
    if stream is None or view.layout != STREAM:
        kind = view.layout if isinstance(view, DatasetView) else type(view).__name__
        url = view.url if isinstance(view, DatasetView) else repr(view)
        if kind == STREAM_WITH_META:
            raise ValueError(
                f"boundaries= and labels= are not supported on streams with metadata yet: {url} "
                "is read in windows whose documents are records (each window's 'spans' name "
                "what each document's tokens are); load it without them, or ingest it as a "
                "plain stream (--layout stream) to get position_ids, labels and cu_seqlens"
            )
        raise ValueError(
            f"boundaries= and labels= mark documents inside stream windows, but {url} "
            f"is a {kind} dataset (documents are read whole, with no windows); load it without them, "
            "or ingest it as a stream (--layout stream)"
        )
    view = stream
    fields = list(view.stream_format.fields)
    if "tokens" not in fields:
        raise ValueError(
            f"{view.url}: boundaries= needs a 'tokens' field to shift labels from; this stream has {fields}"
        )
    alternatives = "boundaries='eos' with eos_id=<the end-of-document id>, or a field such as 'doc_index'"
    if boundaries == "records":
        if not view.has_record_starts:
            raise ValueError(
                f"boundaries='records': {view.url} has no record starts (written before GuideLoom "
                f"stored them); use {alternatives}, or rewrite the dataset with this GuideLoom"
            )
        return boundaries, bool(labels), None
    if boundaries == "eos":
        if eos_id is None:
            eos_id = _ingest_tokenizer(view).get("eos_id")
            if eos_id is None:
                raise ValueError(
                    f"boundaries='eos': {view.url} records no end-of-document id (it was not "
                    "ingested with one); pass eos_id=<id>, or use boundaries='records' or a field"
                )
        vocab, source = _vocabulary(view)
        if isinstance(eos_id, bool) or not isinstance(eos_id, (int, np.integer)) or not 0 <= eos_id < vocab:
            raise ValueError(
                f"boundaries='eos': eos_id={eos_id!r} is outside {source} (0 .. {vocab - 1}) of "
                f"{view.url}; pass the tokenizer's end-of-document id"
            )
        return boundaries, bool(labels), int(eos_id)
    if isinstance(boundaries, str) and boundaries in fields and boundaries != "tokens":
        return boundaries, bool(labels), None
    raise ValueError(
        f"boundaries={boundaries!r}: not 'records', 'eos' or a field of {view.url} (its fields: "
        f"{[f for f in fields if f != 'tokens']}); use 'records', {alternatives}"
    )
