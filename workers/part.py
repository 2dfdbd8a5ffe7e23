"""One part, end to end: read its segments, tokenize, write through ``storage.writer(part=k)``.

Plain Python with no Ray in it: a Ray task calls `write_part`, and so can a test or any
other engine. The output depends only on the plan, the part number and the identity options, so
a retry (or a re-run) rewrites the same shard bytes under the same names.

Memory stays bounded: records stream from the input and are tokenized and appended in batches of
at most ``BATCH_DOCS`` documents / ``BATCH_CHARS`` characters; the writer flushes shards as they
fill.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from guideloom.errors import IngestError
from guideloom.io import redact_url
from guideloom.storage.origins import OriginsBuilder, origins_path
from guideloom.types import (
    DOCUMENTS,
    STREAM_WITH_META,
    BadRecord,
    Document,
    InputRecord,
    ReadOptions,
    Tokenizer,
)
from guideloom.workers import decontam, hooks
from guideloom.workers.annotate import (
    CharSpan,
    SpanRecordError,
    char_spans,
    encode_with_spans,
    fill_gaps,
    meta_annotation,
)
from guideloom.workers.chat import (
    ChatError,
    ChatRecord,
    chat_renderer,
    check_conversation,
    check_no_specials,
    special_pattern,
    special_tokens_of,
    tokenize_chat,
)
from guideloom.workers.config import IngestConfig
from guideloom.workers.output import open_storage, part_metadata, reusable_result
from guideloom.workers.planning import Plan
from guideloom.workers.readers import input_reader
from guideloom.workers.rejects import PartRejects, failed
from guideloom.workers.sources import Bad, InputFile, Segment, document, line_number
from guideloom.workers.tokenizer import load_tokenizer, token_dtype
from guideloom.workers.transform import load_transform

__all__ = ["write_part", "run_name", "PartResult", "PartSpec", "part_spec", "tokenizer_of", "REPORT_EVERY_S"]

BATCH_DOCS = 512
BATCH_CHARS = 2**20
REPORT_EVERY_S = 1.0  # seconds between live progress reports from inside a part


@dataclass(frozen=True)
class PartSpec:
    """What one task needs to write part ``part``: only its own files and segments.

    ``segments[i].file`` indexes ``files`` (this part's files, not the plan's), so the size of a
    task's argument depends on its own part, never on the number of input files in the job.
    ``input_bytes`` is the input (as stored) the part reads.
    """

    part: int
    files: tuple[InputFile, ...]
    segments: tuple[Segment, ...]
    input_bytes: int


def part_spec(plan: Plan, part: int) -> PartSpec:
    """Part ``part`` of ``plan`` with its segments re-indexed into its own file list."""
    index: dict[int, int] = {}
    files: list[InputFile] = []
    segments: list[Segment] = []
    for seg in plan.parts[part]:
        if seg.file not in index:
            index[seg.file] = len(files)
            files.append(plan.files[seg.file])
        segments.append(Segment(index[seg.file], seg.start, seg.end, seg.whole))
    return PartSpec(part, tuple(files), tuple(segments), plan.part_bytes[part])


PartResult = dict[str, Any]
"""Counts of one part: part, documents, tokens, input_bytes, empty_documents{file: n},
bad_records{file: {reason: n}}, reused (True when a valid earlier part was kept)."""


def _where(f: InputFile, bad: Bad, options: dict[str, Any]) -> str:
    url = redact_url(f.url)
    if bad.row is not None:
        return f"{url} row {bad.row}"
    line = bad.line
    if line is None and bad.offset is not None:
        line = line_number(f, bad.offset, options)
    return f"{url} line {line}" if line is not None else url


# the loss_mask value of the end-of-document token: 1 with train_on="all", else 0
_MASK_AFTER = {True: np.ones(1, dtype=np.uint8), False: np.zeros(1, dtype=np.uint8)}


@dataclass(slots=True)
class _Pending:
    """One record waiting to be tokenized: its text, where it came from, and by mode: the
    passthrough fields (documents), the rendered chat (chat), the annotations (meta)."""

    url: str
    text: str
    fields: dict[str, Any]
    chat: ChatRecord | None = None
    meta: dict[str, Any] | None = None
    spans: list[CharSpan] | None = None
    where: tuple[int | None, int | None, int | None, Any] = (None, None, None, None)  # line, offset, row, id


class _PartWriter:
    """Batches documents, tokenizes them and appends them to the part's writer."""

    def __init__(self, config: IngestConfig, tokenizer: Tokenizer, writer: Any, part: int) -> None:
        self.config, self.tokenizer, self.writer, self.part = config, tokenizer, writer, part
        self.dtype = token_dtype(tokenizer.vocab_size)
        self.pending: list[_Pending] = []
        self.chars = 0
        self.documents = 0
        self.tokens = 0
        self.empty: Counter[str] = Counter()
        if config.eos and tokenizer.eos_id is None:
            raise IngestError(
                f"tokenizer {tokenizer.spec} has no end-of-document token: name one with "
                "--eos-token, or pass --no-eos"
            )
        self.bos_id: int | None = getattr(tokenizer, "bos_id", None) if config.bos else None
        if config.bos and self.bos_id is None:
            raise IngestError(_no_bos(tokenizer))
        self.specials = special_tokens_of(tokenizer) if config.chat else {}
        self.special_re = special_pattern(self.specials)
        self.piece_cache: dict[str, np.ndarray] = {}
        self.origins = OriginsBuilder()  # where each record came from (guideloom.storage.origins)

    def add(self, item: _Pending) -> None:
        self.pending.append(item)
        self.chars += len(item.text)
        if len(self.pending) >= BATCH_DOCS or self.chars >= BATCH_CHARS:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        pending, self.pending, self.chars = self.pending, [], 0
        eos = self.tokenizer.eos_id if self.config.eos else None
        eos_ids = np.array([0 if eos is None else eos], dtype=np.int64)
        masks: list[np.ndarray | None]
        spans: list[list[tuple[int, int, dict[str, Any]]] | None]
        if self.config.chat:
            chats = [p.chat or ChatRecord("", []) for p in pending]
            pairs = tokenize_chat(self.tokenizer, chats, self.specials, self.special_re, self.piece_cache)
            encoded = [ids for ids, _ in pairs]
            masks, spans = [m for _, m in pairs], [None] * len(pairs)
        elif self.config.spans_field is not None:
            found = encode_with_spans(
                self.tokenizer, [p.text for p in pending], [p.spans or [] for p in pending]
            )
            encoded = [ids for ids, _ in found]
            masks, spans = [None] * len(found), [s for _, s in found]
        else:
            encoded = self.tokenizer.encode_batch([p.text for p in pending])
            masks, spans = [None] * len(encoded), [None] * len(encoded)
        everything = self.config.train_on == "all"
        kept: list[tuple[np.ndarray, np.ndarray | None, Any, _Pending]] = []
        for ids, mask, record_spans, item in zip(encoded, masks, spans, pending):
            if ids.size == 0:  # "" or text the tokenizer maps to nothing: counted, not stored
                self.empty[item.url] += 1
                continue
            if self.bos_id is not None and int(ids[0]) != self.bos_id:
                ids = np.concatenate([[self.bos_id], ids])
                if mask is not None:
                    mask = np.concatenate([[1 if everything else 0], mask]).astype(np.uint8)
                if record_spans:
                    record_spans = [(a + 1, b + 1, ann) for a, b, ann in record_spans]
            if eos is not None:  # checked in __init__; one C call (np.append's wrapper costs 3x)
                ids = np.concatenate((ids, eos_ids))  # as np.append(ids, eos): int64 [eos]
                if mask is not None:
                    mask = np.concatenate((mask, _MASK_AFTER[everything]))
            kept.append((ids, mask, record_spans, item))
        if kept:
            self._append(kept)

    def _append(self, kept: list[tuple[np.ndarray, np.ndarray | None, Any, _Pending]]) -> None:
        self.origins.extend([k[3].url for k in kept], [k[3].where for k in kept])
        if self.config.layout == DOCUMENTS:
            for ids, _, _, item in kept:
                self.writer.append({"tokens": ids.tolist(), **item.fields})
                self.documents += 1
                self.tokens += int(ids.size)
            return
        tokens = np.concatenate([ids for ids, _, _, _ in kept])
        if tokens.size and int(tokens.max()) >= self.tokenizer.vocab_size:
            raise IngestError(f"tokenizer {self.tokenizer.spec} produced an id past its vocabulary")
        record = {"tokens": tokens.astype(self.dtype)}
        lengths = np.fromiter((ids.size for ids, _, _, _ in kept), np.int64, len(kept))
        if self.config.chat:
            record["loss_mask"] = np.concatenate([m for _, m, _, _ in kept if m is not None])
        if self.config.doc_index:
            first = (self.part << 32) + self.documents
            numbers = np.arange(first, first + len(kept), dtype=np.uint64)
            record["doc_index"] = np.repeat(numbers, lengths)
        # Each document is its own record (its start goes into the record-start file; trace,
        # records and windows name documents), with its own spans in its own tokens'
        # coordinates in a stream with metadata; the batch is appended at once.
        spans = self._spans(kept) if self.config.layout == STREAM_WITH_META else None
        self.writer.append_batch(record, lengths=lengths, spans=spans)
        self.documents += len(kept)
        self.tokens += int(tokens.size)

    def _spans(self, kept: list[tuple[np.ndarray, np.ndarray | None, Any, _Pending]]) -> list[list[Any]]:
        """Each document's spans, in its own tokens' coordinates."""
        out: list[list[Any]] = []
        for ids, _, record_spans, item in kept:
            if self.config.meta_fields:
                out.append(fill_gaps(record_spans or [], int(ids.size), item.meta or {}))
            else:
                out.append(list(record_spans or []))
        return out


def _no_bos(tokenizer: Tokenizer) -> str:
    return (
        f"tokenizer {tokenizer.spec} has no beginning-of-sequence token, so --bos cannot add one: "
        "give an hf: tokenizer whose tokenizer_config.json names bos_token (or whose vocabulary "
        "has <s> or <|begin_of_text|>), or drop --bos"
    )


def _read_options(config: IngestConfig) -> ReadOptions:
    """What the readers are asked for: the text (or messages) field, the fields kept, and every
    field when a transform sees the whole record."""
    wanted = list(config.passthrough)
    if config.chat:
        wanted.append(config.messages_field)
    wanted += config.meta_fields
    if config.spans_field is not None:
        wanted.append(config.spans_field)
    if config.id_field is not None:  # kept in the part's origins file only
        wanted.append(config.id_field)
    return ReadOptions(
        config.text_field,
        config.text_per_line,
        tuple(dict.fromkeys(wanted)),
        config.input_storage_options,
        all_fields=config.transform is not None,
    )


class _Preparer:
    """An item as read -> what is tokenized (`_Pending`), a `Bad` record, or None (filtered
    out by the transform): the transform, then the document, chat or annotations of the record."""

    def __init__(self, config: IngestConfig, tokenizer: Tokenizer) -> None:
        self.config = config
        self.transform = load_transform(config.transform) if config.transform is not None else None
        self.renderer = chat_renderer(config.chat_template, tokenizer) if config.chat else None
        self.special_re = special_pattern(special_tokens_of(tokenizer)) if config.chat else None
        self.doc_options = ReadOptions(
            config.text_field,
            config.text_per_line,
            tuple(config.passthrough),
            passthrough_defaults=dict(config.passthrough_defaults),
        )
        self.plain = self.transform is None and not config.chat and config.layout != STREAM_WITH_META

    def __call__(self, raw: InputRecord | Document | BadRecord, url: str) -> _Pending | Bad | None:
        if self.plain:  # text into a stream or documents: the path every plain job takes
            if isinstance(raw, InputRecord):
                doc = document(raw, self.doc_options)
                if isinstance(doc, BadRecord):
                    return doc
                return _Pending(url, doc.text, doc.fields, where=self._where(raw, raw.data))
            return raw if isinstance(raw, BadRecord) else _Pending(url, raw.text, raw.fields)
        if isinstance(raw, BadRecord):
            return raw
        if isinstance(raw, Document):
            if not raw.text and self.transform is None:  # a blank line: an empty document
                return _Pending(url, "", raw.fields, chat=ChatRecord("", []))
            if self.transform is None and not self.config.chat and self.config.layout != STREAM_WITH_META:
                return _Pending(url, raw.text, raw.fields)
            raw = InputRecord({self.config.text_field: raw.text, **raw.fields})
        where = {"line": raw.line, "offset": raw.offset, "row": raw.row}
        origin = self._where(raw, raw.data)
        data = raw.data
        if self.transform is not None:
            try:
                changed = self.transform(data)
            except Exception as err:  # the user's code: any exception is this record's fault
                return Bad("transform_error", f"the transform raised {type(err).__name__}: {err}", **where)
            if changed is None:
                return None
            if not isinstance(changed, dict):
                return Bad(
                    "transform_result",
                    f"the transform returned {type(changed).__name__}, not a dict (return the "
                    "record, changed or not, or None to drop it)",
                    **where,
                )
            data = changed
            raw = InputRecord(data, raw.line, raw.offset, raw.row)
        if self.renderer is not None:
            try:
                messages = check_conversation(data, self.config.messages_field, self.config.train_on)
                check_no_specials(messages, self.special_re)
                chat = self.renderer.render(messages, self.config.train_on)
            except ChatError as err:
                return Bad(err.reason, err.detail, **where)
            return _Pending(url, chat.text, {}, chat=chat, where=origin)
        doc = document(raw, self.doc_options)
        if isinstance(doc, BadRecord):
            return doc
        if self.config.layout != STREAM_WITH_META:
            return _Pending(url, doc.text, doc.fields, where=origin)
        try:
            meta = meta_annotation(data, self.config.meta_fields) if self.config.meta_fields else None
            spans = (
                char_spans(data, self.config.spans_field, len(doc.text))
                if self.config.spans_field is not None
                else None
            )
        except SpanRecordError as err:
            return Bad(err.reason, err.detail, **where)
        return _Pending(url, doc.text, doc.fields, meta=meta, spans=spans, where=origin)

    def _where(
        self, raw: InputRecord, data: dict[str, Any]
    ) -> tuple[int | None, int | None, int | None, Any]:
        """Where ``raw`` is in its file, and its ``id_field`` value (the input's own id)."""
        ident = data.get(self.config.id_field) if self.config.id_field else None
        return raw.line, raw.offset if raw.line is None else None, raw.row, ident


def run_name(digest: str) -> str:
    """The storage run of a job: its plan digest (a re-run of the same job reuses finished parts,
    another job's parts are never taken for its own; see ``Storage.writer(run=)``)."""
    return digest[:64]


def tokenizer_of(config: IngestConfig) -> Tokenizer:
    """The job's tokenizer: the object it was given, or the one its spec names (loaded once per
    process, so a Ray worker reuses it across parts)."""
    return load_tokenizer(
        config.tokenizer, eos_token=config.eos_token, storage_options=config.input_storage_options
    )


def write_part(
    config: IngestConfig,
    spec: PartSpec,
    digest: str,
    report: Callable[[dict[str, int]], None] | None = None,
    drop: Any = None,
) -> PartResult:
    """Write part ``spec.part`` unless a valid one (completion record + same plan digest) exists.

    ``report``, when given, is called about every `REPORT_EVERY_S` seconds while the part
    runs with ``{"part", "documents", "tokens", "input_bytes"}`` so far (``input_bytes`` is
    estimated from the text read, capped at the part's size, until the part ends). The part's
    counts and ``digest`` are kept in its completion record (`guideloom.workers.output`).
    ``drop`` (`guideloom.workers.dedup.PartDedup`), when given, hashes the part's prepared
    records before any is written, then is asked about each document in order and skips the
    exact duplicates it names.
    """
    part = spec.part
    started = hooks.hook("part_started")
    if started is not None:
        started(part)
    tokenizer = tokenizer_of(config)
    storage = open_storage(config, tokenizer)
    run = run_name(digest)
    previous = reusable_result(storage, part, digest, run)
    if previous is not None:
        if drop is not None:  # the deciders still need its hashes, in part order
            drop.reused(spec)
        return {**previous, "reused": True}

    bad: dict[str, Counter[str]] = {}
    filtered: Counter[str] = Counter()
    contaminated: Counter[str] = Counter()
    rejected = PartRejects(config, part, run, spec.segments)  # --rejects: this part's piece
    options = config.input_storage_options
    on_record = hooks.hook("record_read")
    last_report = time.monotonic()
    text_bytes = 0
    # A --commit-every job's parts are written while its earlier snapshots are committed.
    after = config.append or config.commit_every is not None
    with storage.writer(
        part=part, shard_size=config.shard_size, run=run, overwrite=config.overwrite, append=after
    ) as writer:
        out = _PartWriter(config, tokenizer, writer, part)
        screen = decontam.screen(config, out.add, rejected, contaminated)  # None: no eval set
        prepare = _Preparer(config, tokenizer)
        read_options = _read_options(config)

        def records() -> Iterator[tuple[InputFile, Segment, str, int, Any, Any]]:
            for seg in spec.segments:
                f = spec.files[seg.file]
                shown = redact_url(f.url)
                for index, raw in enumerate(input_reader(f.kind).read(f, seg, read_options), start=1):
                    yield f, seg, shown, index, raw, prepare(raw, shown)

        # Dedup: the part's records are read, prepared and hashed once, then written when the
        # part's decisions arrive (guideloom.workers.dedup.PartDedup).
        found = records() if drop is None else drop.prepared(records())
        for f, seg, shown, index, raw, item in found:
            if isinstance(item, _Pending):
                # (an exact duplicate, guideloom.workers.dedup, is skipped: counted by `drop`)
                if drop is None or not drop(shown):
                    if screen is None:
                        out.add(item)
                    else:
                        screen.add(item, (f, seg, index, raw))
                    text_bytes += len(item.text) + 1
            elif item is None:
                filtered[shown] += 1
            elif config.on_bad_record == "skip":
                bad.setdefault(shown, Counter())[item.reason] += 1
                rejected.add(f, seg, index, item.reason, item.detail, item)
            else:
                where = _where(f, item, options)
                raise failed(
                    config,
                    f,
                    item,
                    where,
                    f"{where}: {item.detail}. Fix the input, or pass "
                    "--on-bad-record skip (on_bad_record='skip' in Python or a job file) to "
                    "skip and count such records",
                )
            if on_record is not None:
                on_record(part)
            if report is not None and time.monotonic() - last_report >= REPORT_EVERY_S:
                last_report = time.monotonic()
                report(
                    {
                        "part": part,
                        "documents": out.documents + len(out.pending),
                        "tokens": out.tokens,
                        "input_bytes": min(text_bytes, spec.input_bytes),
                    }
                )
        if screen is not None:
            screen.flush()
        out.flush()
        if len(out.origins):  # beside the part's shards, before its completion record
            storage.location.write(origins_path(writer.shard_prefix, part), out.origins.encode())
        written = hooks.hook("part_written")
        if written is not None:
            written(part)
        result: PartResult = {
            "part": part,
            "documents": out.documents,
            "tokens": out.tokens,
            "input_bytes": spec.input_bytes,
            "empty_documents": dict(sorted(out.empty.items())),
            "bad_records": {url: dict(sorted(c.items())) for url, c in sorted(bad.items())},
        }
        if config.transform is not None:
            result["filtered"] = dict(sorted(filtered.items()))
        if screen is not None:
            result["contaminated"] = dict(sorted(contaminated.items()))
        if config.rejects is not None:
            result["rejected"] = rejected.write()  # before the completion record names the part done
        if drop is not None:
            result.update(drop.counts())
        # Kept in the completion record the writer writes as the block exits (one atomic write).
        writer.metadata.update(part_metadata(digest, result))
    return {**result, "reused": False}
