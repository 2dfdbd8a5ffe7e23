"""Streams with metadata from ingestion: a record's annotations, and character spans to token spans.

``meta_fields``: one span over all of a record's tokens (its end-of-document token included),
annotated with ``{field: record[field]}`` for those fields.

``spans_field``: character-offset annotations ``[{"start": 0, "end": 120, ...}, ...]``; the keys
other than ``start`` and ``end`` form the annotation. Offsets count Unicode code points of the
record's text (Python string indexes: what the JSON string holds once decoded), half-open,
sorted by start and non-overlapping. The rule that maps them onto tokens: **a token overlapping
a character span belongs to it**, where a token covers the characters its offsets give (an
``hf:`` tokenizer's offset mapping; for ``bytes``, the character each byte is part of; for
``tiktoken``, the characters its decoded bytes are part of, so a token holding part of a
multi-byte character covers that character). So a span's tokens decode to a superset of its
text, and no other token overlaps it. Where one token would overlap two spans (adjacent spans,
or spans that meet inside a token), the text is tokenized in two pieces at the first span's
end, so that each token belongs to at most one span. A span that no token covers (text the
tokenizer's normalizer drops) is left out.

With both, every token of a record is in exactly one span: the character spans carry the meta
fields and their own keys, and the gaps between them carry the meta fields alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from guideloom.errors import IngestError
from guideloom.types import Tokenizer

__all__ = ["CharSpan", "SpanRecordError", "char_spans", "encode_with_spans", "has_offsets"]

CharSpan = tuple[int, int, dict[str, Any]]


class SpanRecordError(ValueError):
    """A record whose annotations cannot be used; ``reason`` is the key counted under skip."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def has_offsets(tokenizer: Tokenizer) -> bool:
    """Whether the tokenizer can say which characters each token covers."""
    return callable(getattr(tokenizer, "encode_batch_with_offsets", None))


def meta_annotation(record: dict[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    """``{field: record[field]}``; a missing field is a SpanRecordError naming it."""
    missing = [f for f in fields if f not in record]
    if missing:
        have = ", ".join(sorted(map(str, record))[:8]) or "none"
        raise SpanRecordError(
            "missing_field",
            f"no meta field {missing[0]!r} (fields: {have}); fix the input, or drop it from --meta-field",
        )
    return {f: record[f] for f in fields}


def char_spans(record: dict[str, Any], field: str, length: int) -> list[CharSpan]:
    """The record's character spans, checked: integer code-point offsets, ``0 <= start < end <=
    length``, sorted by start and non-overlapping.

    A record without the field has no spans. Raises SpanRecordError naming the span and the rule.
    """
    raw = record.get(field)
    if raw is None:
        return []
    if not isinstance(raw, (list, tuple)):
        raise SpanRecordError(
            "bad_spans", f"spans field {field!r} is {type(raw).__name__}, not a list of spans"
        )
    out: list[CharSpan] = []
    prev = 0
    for j, span in enumerate(raw):
        if not isinstance(span, dict) or "start" not in span or "end" not in span:
            raise SpanRecordError("bad_spans", f"span {j} of {field!r} is not an object with start and end")
        start, end = span["start"], span["end"]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)):
            raise SpanRecordError(
                "bad_spans",
                f"span {j} of {field!r} has start {start!r}, end {end!r}: offsets are whole "
                "characters (integer Unicode code-point indexes into the text)",
            )
        if not 0 <= start < end <= length:
            raise SpanRecordError(
                "span_out_of_range",
                f"span {j} of {field!r} [{start}, {end}) is out of range: it needs 0 <= start < end "
                f"<= {length} (the text's length in characters)",
            )
        if start < prev:
            raise SpanRecordError(
                "spans_unsorted",
                f"span {j} of {field!r} [{start}, {end}) starts before the previous span ends "
                f"({prev}): spans must be sorted by start and must not overlap",
            )
        prev = end
        out.append((start, end, {k: v for k, v in span.items() if k not in ("start", "end")}))
    return out


def _token_spans(offsets: np.ndarray, spans: list[CharSpan]) -> list[tuple[int, int]]:
    """Token ``[a, b)`` of each span (``a == b``: no token covers it)."""
    if not spans:
        return []
    if offsets.size == 0:
        return [(0, 0) for _ in spans]
    bounds = np.asarray([(s, e) for s, e, _ in spans], dtype=np.int64)
    # Tokens are in text order. A token overlaps [s, e) when its end > s and its start < e: the
    # first is the first whose end (running maximum) passes s, the stop the first starting at e.
    first = np.searchsorted(np.maximum.accumulate(offsets[:, 1]), bounds[:, 0], side="right")
    stop = np.searchsorted(np.maximum.accumulate(offsets[:, 0]), bounds[:, 1], side="left")
    stop = np.maximum(first, stop)
    return list(zip(first.tolist(), stop.tolist()))


def encode_with_spans(
    tokenizer: Tokenizer, texts: Sequence[str], spans: Sequence[list[CharSpan]]
) -> list[tuple[np.ndarray, list[tuple[int, int, dict[str, Any]]]]]:
    """Each text's ids and its spans in tokens (record-relative, sorted, disjoint)."""
    if not has_offsets(tokenizer):
        raise IngestError(
            f"tokenizer {tokenizer.spec} cannot give token offsets (no encode_batch_with_offsets), "
            "so --spans-field cannot map character spans to tokens: use a built-in tokenizer "
            "(bytes, hf:, tiktoken:) or add the method to yours"
        )
    encode = tokenizer.encode_batch_with_offsets  # type: ignore[attr-defined]
    out = []
    for (ids, offsets), text, record_spans in zip(encode(list(texts)), texts, spans):
        cuts: set[int] = set()
        while True:
            token_spans = _token_spans(offsets, record_spans)
            clash = {
                record_spans[j][1]
                for j in range(len(token_spans) - 1)
                if token_spans[j][1] > token_spans[j + 1][0] and token_spans[j + 1][1] > token_spans[j + 1][0]
            } - cuts
            if not clash:
                break
            cuts |= clash
            ids, offsets = _encode_pieces(encode, text, sorted(cuts))
        kept = [(a, b, ann) for (a, b), (_, _, ann) in zip(token_spans, record_spans) if b > a]
        out.append((np.asarray(ids, dtype=np.int64), kept))
    return out


def _encode_pieces(encode: Any, text: str, cuts: list[int]) -> tuple[np.ndarray, np.ndarray]:
    bounds = [0, *cuts, len(text)]
    pieces = [text[a:b] for a, b in zip(bounds, bounds[1:])]
    ids, offsets = [], []
    for base, (piece_ids, piece_offsets) in zip(bounds, encode(pieces)):
        ids.append(np.asarray(piece_ids, dtype=np.int64))
        offsets.append(np.asarray(piece_offsets, dtype=np.int64).reshape(-1, 2) + base)
    return np.concatenate(ids), np.concatenate(offsets)


def fill_gaps(
    spans: list[tuple[int, int, dict[str, Any]]], length: int, meta: dict[str, Any]
) -> list[tuple[int, int, dict[str, Any]]]:
    """Spans that cover ``[0, length)``: each given span with ``meta`` added, the gaps with ``meta``."""
    out = []
    pos = 0
    for a, b, ann in spans:
        if a > pos:
            out.append((pos, a, dict(meta)))
        out.append((a, b, {**meta, **ann}))
        pos = b
    if pos < length:
        out.append((pos, length, dict(meta)))
    return out
