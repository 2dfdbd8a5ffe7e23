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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from guideloom.errors import IngestError
from guideloom.io import redact_url
from guideloom.types import Tokenizer
from guideloom.workers import hooks
from guideloom.workers.config import IngestConfig
from guideloom.workers.output import open_storage, part_metadata, reusable_result
from guideloom.workers.planning import Plan
from guideloom.workers.readers import input_reader
from guideloom.workers.sources import Bad, Doc, InputFile, Segment, line_number, read_segment
from guideloom.workers.tokenizer import load_tokenizer, token_dtype

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


class _PartWriter:
    """Batches documents, tokenizes them and appends them to the part's writer."""

    def __init__(self, config: IngestConfig, tokenizer: Tokenizer, writer: Any, part: int) -> None:
        self.config, self.tokenizer, self.writer, self.part = config, tokenizer, writer, part
        self.dtype = token_dtype(tokenizer.vocab_size)
        self.texts: list[str] = []
        self.fields: list[tuple[str, dict[str, Any]]] = []
        self.chars = 0
        self.documents = 0
        self.tokens = 0
        self.empty: Counter[str] = Counter()
        if config.eos and tokenizer.eos_id is None:
            raise IngestError(
                f"tokenizer {tokenizer.spec} has no end-of-document token: name one with "
                "--eos-token, or pass --no-eos"
            )

    def add(self, url: str, doc: Doc) -> None:
        self.texts.append(doc.text)
        self.fields.append((url, doc.fields))
        self.chars += len(doc.text)
        if len(self.texts) >= BATCH_DOCS or self.chars >= BATCH_CHARS:
            self.flush()

    def flush(self) -> None:
        if not self.texts:
            return
        encoded = self.tokenizer.encode_batch(self.texts)
        kept: list[tuple[np.ndarray, dict[str, Any]]] = []
        for ids, (url, fields) in zip(encoded, self.fields):
            if ids.size == 0:  # "" or text the tokenizer maps to nothing: counted, not stored
                self.empty[url] += 1
                continue
            if self.config.eos and self.tokenizer.eos_id is not None:  # checked in __init__
                ids = np.append(ids, self.tokenizer.eos_id)
            kept.append((ids, fields))
        self.texts, self.fields, self.chars = [], [], 0
        if kept:
            self._append(kept)

    def _append(self, kept: list[tuple[np.ndarray, dict[str, Any]]]) -> None:
        if self.config.layout == "document":
            for ids, fields in kept:
                self.writer.append({"tokens": ids.tolist(), **fields})
                self.documents += 1
                self.tokens += int(ids.size)
            return
        tokens = np.concatenate([ids for ids, _ in kept])
        if tokens.size and int(tokens.max()) >= self.tokenizer.vocab_size:
            raise IngestError(f"tokenizer {self.tokenizer.spec} produced an id past its vocabulary")
        record = {"tokens": tokens.astype(self.dtype)}
        lengths = np.fromiter((ids.size for ids, _ in kept), np.int64, len(kept))
        if self.config.doc_index:
            first = (self.part << 32) + self.documents
            numbers = np.arange(first, first + len(kept), dtype=np.uint64)
            record["doc_index"] = np.repeat(numbers, lengths)
        # Each document is its own record (its start goes into the record-start file); the batch
        # fills the shard as a whole, so the shards' token bytes are those of one big record.
        self.writer.append_batch(record, lengths=lengths)
        self.documents += len(kept)
        self.tokens += int(tokens.size)


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
) -> PartResult:
    """Write part ``spec.part`` unless a valid one (completion record + same plan digest) exists.

    ``report``, when given, is called about every `REPORT_EVERY_S` seconds while the part
    runs with ``{"part", "documents", "tokens", "input_bytes"}`` so far (``input_bytes`` is
    estimated from the text read, capped at the part's size, until the part ends). The part's
    counts and ``digest`` are kept in its completion record (`guideloom.workers.output`).
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
        return {**previous, "reused": True}

    bad: dict[str, Counter[str]] = {}
    options = config.input_storage_options
    on_record = hooks.hook("record_read")
    last_report = time.monotonic()
    text_bytes = 0
    with storage.writer(
        part=part, shard_size=config.shard_size, run=run, overwrite=config.overwrite
    ) as writer:
        out = _PartWriter(config, tokenizer, writer, part)
        for seg in spec.segments:
            f = spec.files[seg.file]
            shown = redact_url(f.url)
            for item in read_segment(
                f,
                seg,
                text_field=config.text_field,
                text_per_line=config.text_per_line,
                passthrough=config.passthrough,
                storage_options=options,
                reader=input_reader(f.kind),
            ):
                if isinstance(item, Doc):
                    out.add(shown, item)
                    text_bytes += len(item.text) + 1
                elif config.on_bad_record == "skip":
                    bad.setdefault(shown, Counter())[item.reason] += 1
                else:
                    raise IngestError(
                        f"{_where(f, item, options)}: {item.detail}. Fix the input, or pass "
                        "--on-bad-record skip to skip and count such records"
                    )
                if on_record is not None:
                    on_record(part)
                if report is not None and time.monotonic() - last_report >= REPORT_EVERY_S:
                    last_report = time.monotonic()
                    report(
                        {
                            "part": part,
                            "documents": out.documents + len(out.texts),
                            "tokens": out.tokens,
                            "input_bytes": min(text_bytes, spec.input_bytes),
                        }
                    )
        out.flush()
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
        # Kept in the completion record the writer writes as the block exits (one atomic write).
        writer.metadata.update(part_metadata(digest, result))
    return {**result, "reused": False}
