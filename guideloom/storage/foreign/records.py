"""The records of a stream, in order, in batches: what `convert` and `export` copy.

`stream_records` reads any stream storage (a GuideLoom dataset, or files read in place) through
its public view: windows for the tokens, `record_starts_batch` (or an end-of-text id) for where
each record begins, and yields ``(fields, lengths)`` batches, the flat arrays of whole records
and each record's token count, as `guideloom.storage.writer.Writer.append_batch` takes them. A
record cut by a batch's edge is carried into the next batch, so memory holds one batch of tokens
plus the record in progress.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from guideloom.storage.base import StreamStorage
from guideloom.storage.windows import StreamDataset

__all__ = ["BATCH_TOKENS", "stream_records"]

BATCH_TOKENS = 1 << 22  # tokens read per batch (4 Mi: 8-16 MiB of uint16/uint32 tokens)
_WINDOW = 1 << 16  # tokens per window of the view the batches are read through


def stream_records(
    storage: StreamStorage, *, eos_id: int | None = None, batch_tokens: int = BATCH_TOKENS
) -> Iterator[tuple[dict[str, np.ndarray], np.ndarray]]:
    """``(fields, lengths)`` batches of every record of ``storage``'s stream, in order.

    Records begin where the stream's record starts say (a GuideLoom stream, a Megatron or
    datatrove index, a Dolma sidecar); where it has none, after each ``eos_id`` (the id ends its
    document, as ``boundaries="eos"`` reads it).

    Args:
        storage: A stream storage (``guideloom.open`` of a dataset or of token files).
        eos_id: The end-of-text id, for streams without record starts; ignored otherwise.
        batch_tokens: About how many tokens each batch reads (a record longer than that is
            yielded whole, in the batch where it ends).

    Yields:
        ``({field: flat 1-D array}, lengths)``: whole records joined end to end, and each
        one's tokens (``int64``, summing to the arrays' length).

    Raises:
        ValueError: The stream has no record starts and no ``eos_id`` was given.
    """
    length = max(1, min(_WINDOW, batch_tokens))
    view = StreamDataset(storage, length)
    if not view.has_record_starts and eos_id is None:
        raise ValueError(
            f"{storage.url} has no document index, so its documents are known only by their "
            "end-of-text id: pass eos_id= (--eos-id; GPT-2's is 50256), and each document ends "
            "after that id"
        )
    total = view.total_tokens
    names = list(view.stream_format.fields)
    per = max(1, batch_tokens // length)
    # Tokens past the last whole window (a view drops them) are read as windows of one token.
    tail = StreamDataset(storage, 1) if total % length else None
    pending: dict[str, list[np.ndarray]] = {n: [] for n in names}
    spans = [(view, w, min(w + per, len(view))) for w in range(0, len(view), per)]
    if tail is not None:
        first = len(view) * length
        spans += [(tail, w, min(w + batch_tokens, total)) for w in range(first, total, batch_tokens)]
    for source, a, b in spans:
        indexes = np.arange(a, b, dtype=np.int64)
        window = source.sequence_length
        read = source.read_windows(indexes)  # type: ignore[arg-type]
        chunk = {k: v.reshape(-1) for k, v in read.items()}
        n = (b - a) * window
        if source.has_record_starts:
            positions, counts = source.record_starts_batch(indexes)
            cuts = positions + np.repeat(np.arange(b - a, dtype=np.int64) * window, counts)
        else:
            cuts = np.flatnonzero(chunk["tokens" if "tokens" in chunk else names[0]] == eos_id) + 1
        yield from _cut(chunk, n, cuts, pending, names)
    rest = {k: np.concatenate(v) if v else np.empty(0) for k, v in pending.items()}
    size = len(rest[names[0]])
    if size:
        yield rest, np.asarray([size], dtype=np.int64)


def _cut(
    chunk: dict[str, np.ndarray],
    n: int,
    cuts: np.ndarray,
    pending: dict[str, list[np.ndarray]],
    names: list[str],
) -> Iterator[tuple[dict[str, np.ndarray], np.ndarray]]:
    """The records that end in ``chunk`` (``n`` elements; records begin at ``cuts``, sorted, in
    ``0 .. n``), the record carried from earlier chunks first; keeps the last, unfinished one in
    ``pending``."""
    carried = sum(len(p) for p in pending[names[0]])
    cuts = cuts[(cuts > 0) & (cuts <= n)] if carried == 0 else cuts[cuts <= n]
    if not len(cuts):
        for k in names:
            pending[k].append(chunk[k])
        return
    last = int(cuts[-1])
    bounds = np.concatenate([[0], cuts + carried])
    lengths = np.diff(bounds)
    fields = {k: np.concatenate([*pending[k], chunk[k][:last]]) for k in names}
    keep = lengths > 0
    if not keep.all():
        lengths = lengths[keep]
    for k in names:
        pending[k] = [chunk[k][last:]] if last < n else []
    if len(lengths):
        yield fields, lengths.astype(np.int64)
