"""What ingestion drops, named and counted: the rejects file (``--rejects URL``) and the counts
per reason and input file that the manifest records.

The rejects file is JSON Lines, one line per rejected record, in input order (by part, then by
position in the part): ``file``, ``line`` (JSON Lines, text) or ``row`` (Parquet), ``offset``
(the byte where the line starts, when known), ``reason`` (the key the counts use) and
``message``; a document dropped as contaminated also has ``eval`` (the eval item's file, line or
row, and field) and ``ngram``. It is written under either bad-record policy: with ``skip`` it
lists every bad record; with ``fail`` the job stops at the first bad record and the file lists
that one (the error says where a ``skip`` run would list them all).

Parts run in parallel on Ray: each part writes its own piece (``URL.pieces/RUN/part-K.jsonl``,
only when it rejected something) and the driver combines the pieces in part order into ``URL``,
then removes them. A segment that starts mid-file knows a line's byte offset, not its number:
the driver turns offsets into line numbers with one read of each such file (up to its last
offset), not one per record. The combined file is written at once (atomically), so its lines
are held in the driver's memory while it is written.

Files go through `guideloom.io.Location` (any fsspec URL: local, S3, ...). The rejects URL's
storage options are the output's when it is on the output's store, else the inputs'.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from guideloom.errors import IngestError
from guideloom.io import Location, redact_url
from guideloom.types import BadRecord

__all__ = [
    "PIECES_SUFFIX",
    "PartRejects",
    "RejectedRecordError",
    "dropped_counts",
    "finish",
    "on_failure",
    "rejects_location",
]

PIECES_SUFFIX = ".pieces"
_INTERNAL = ("_segment_start", "_index")  # where a record with no line or offset is; resolved by the driver


class RejectedRecordError(IngestError):
    """A bad record stopped the job (``on_bad_record="fail"``); ``entry`` is its rejects line."""

    entry: dict[str, Any]


def _protocol(url: str) -> str:
    return url.partition("://")[0] if "://" in url else "file"


def rejects_location(config: Any) -> tuple[Location, str]:
    """(the folder that holds the rejects file, the file's name): with the output's storage
    options when it is on the output's store, else the inputs'."""
    url = str(config.rejects).rstrip("/")
    options = (
        config.storage_options
        if _protocol(url) == _protocol(config.output)
        else config.input_storage_options
        if config.inputs and _protocol(url) == _protocol(config.inputs[0])
        else {}
    )
    parent, _, name = url.rpartition("/")
    if not name or parent.endswith(":/"):
        raise IngestError(
            f"--rejects {redact_url(url)}: name a file, such as rejects.jsonl or s3://bucket/rejects.jsonl"
        )
    return Location(parent or ".", options), name


def _pieces(config: Any, run: str) -> tuple[Location, str]:
    location, name = rejects_location(config)
    return location, f"{name}{PIECES_SUFFIX}/{run[:16]}"


def entry_of(
    file: str, reason: str, message: str, *, line: int | None, offset: int | None, row: int | None
) -> dict[str, Any]:
    """One rejects line (before the driver resolves a missing line number)."""
    out: dict[str, Any] = {"file": file}
    if row is not None:
        out["row"] = row
    else:
        out["line"] = line
        if offset is not None:
            out["offset"] = offset
    out["reason"] = reason
    out["message"] = message
    return out


class PartRejects:
    """A part's rejected records: kept in memory (small entries, no record contents) and
    written as the part's piece when it ends."""

    def __init__(self, config: Any, part: int, run: str, segments: Sequence[Any] = ()) -> None:
        self.config = config
        self.part = part
        self.run = run
        self.enabled = config.rejects is not None
        self.entries: list[dict[str, Any]] = []
        # input order: (the segment's place in the part, the record's in the segment); a
        # contaminated document is added when its batch is checked, after later bad records
        self.order: list[tuple[int, int]] = []
        self.place = {seg: k for k, seg in enumerate(segments)}

    def add(
        self,
        file: Any,
        segment: Any,
        index: int,
        reason: str,
        message: str,
        where: Any,
        extra: dict[str, Any] | None = None,
    ) -> None:
        """Record one rejected record: the ``index``-th (1-based) record of ``segment`` of
        ``file``; ``where`` has its ``line``/``offset``/``row`` (an input record or a
        `BadRecord`), or None."""
        if not self.enabled:
            return
        line = getattr(where, "line", None)
        offset = getattr(where, "offset", None)
        row = getattr(where, "row", None)
        per_line = file.kind == "jsonl" or (file.kind == "text" and self.config.text_per_line)
        unknown = line is None and offset is None and row is None
        if unknown and per_line and (segment.whole or segment.start == 0):
            line = index  # a line reader yields one record per line
        e = entry_of(redact_url(file.url), reason, message, line=line, offset=offset, row=row)
        if line is None and offset is None and row is None and per_line:
            e["_segment_start"], e["_index"] = segment.start, index
        if extra:
            e.update(extra)
        self.entries.append(e)
        self.order.append((self.place.get(segment, 0), index))

    def write(self) -> int:
        """Write the piece (when anything was rejected); the number of entries."""
        if self.enabled and self.entries:
            location, folder = _pieces(self.config, self.run)
            ordered = [e for _, e in sorted(zip(self.order, self.entries), key=lambda pair: pair[0])]
            location.write(f"{folder}/part-{self.part:05d}.jsonl", [_line(e) for e in ordered])
        return len(self.entries)


def _line(e: dict[str, Any]) -> bytes:
    try:
        return (json.dumps(e, ensure_ascii=False) + "\n").encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate in a message: escaped, as JSON allows
        return (json.dumps(e) + "\n").encode("ascii")


def failed(config: Any, file: Any, bad: BadRecord, where: str, message: str) -> RejectedRecordError:
    """The error that stops a ``fail`` job at ``bad`` (its rejects line attached)."""
    line = None
    if bad.row is None:
        parts = where.rsplit(" line ", 1)
        line = int(parts[1]) if len(parts) == 2 and parts[1].isdigit() else bad.line
    e = entry_of(redact_url(file.url), bad.reason, bad.detail, line=line, offset=bad.offset, row=bad.row)
    if config.rejects is not None:
        shown = redact_url(str(config.rejects))
        message += (
            f". It is listed in {shown}; with the skip policy, {shown} would list every bad "
            "record of the job in one run"
        )
    else:
        message += "; add --rejects FILE (rejects='FILE' in Python) to list every one of them in one run"
    err = RejectedRecordError(message)
    err.entry = e
    return err


def on_failure(config: Any, err: BaseException) -> None:
    """In the driver, when a part stopped the job: write the rejects file with the record that
    stopped it (nothing when the job names no rejects file or another error stopped it)."""
    entry = getattr(err, "entry", None)
    if config.rejects is None or not isinstance(entry, dict):
        return
    location, name = rejects_location(config)
    location.write(name, [_line(entry)])


def _resolve_lines(entries: list[dict[str, Any]], files: dict[str, Any], options: dict[str, Any]) -> None:
    """Fill in ``line`` where only a byte offset (or a segment start and index) is known: one
    sequential read per file, up to the last position asked for."""
    from guideloom.workers.readers import READ_BLOCK, open_input

    wanted: dict[str, list[dict[str, Any]]] = {}
    for e in entries:
        if e.get("line") is None and "row" not in e and e["file"] in files:
            if "offset" in e or "_segment_start" in e:
                wanted.setdefault(e["file"], []).append(e)
    for shown, todo in wanted.items():
        # the newlines before each position: a line starting at ``o`` is line 1 + newlines in [0, o);
        # the first line a segment starting at ``s > 0`` owns is 2 + newlines in [0, s - 1)
        points = sorted({e["offset"] if "offset" in e else max(e["_segment_start"] - 1, 0) for e in todo})
        counts: dict[int, int] = {}
        seen, pos, k = 0, 0, 0
        with open_input(files[shown], options) as raw:
            while k < len(points):
                chunk = raw.read(READ_BLOCK)
                while k < len(points) and points[k] <= pos + len(chunk):
                    counts[points[k]] = seen + chunk.count(b"\n", 0, points[k] - pos)
                    k += 1
                if not chunk:
                    break
                seen += chunk.count(b"\n")
                pos += len(chunk)
        for e in todo:
            if "offset" in e:
                e["line"] = 1 + counts.get(e["offset"], 0)
            else:
                start = e["_segment_start"]
                first = 2 + counts.get(start - 1, 0) if start > 0 else 1
                e["line"] = first + e["_index"] - 1


def finish(
    config: Any, files: list[Any], results: list[dict[str, Any]], run: str, say: Callable[[str], None]
) -> None:
    """In the driver, after every part: combine the parts' pieces, in part order, into the
    rejects file (written even when empty, so that a file from an earlier job is not taken for
    this one's), then remove the pieces."""
    if config.rejects is None:
        return
    location, name = rejects_location(config)
    _, folder = _pieces(config, run)
    entries: list[dict[str, Any]] = []
    unlisted = 0
    for r in sorted(results, key=lambda r: r["part"]):
        expected = int(r.get("rejected", 0))
        listed = _dropped_in(r)
        if expected == 0:
            unlisted += listed
            continue
        rel = f"{folder}/part-{r['part']:05d}.jsonl"
        try:
            data = location.read(rel)
        except FileNotFoundError:
            unlisted += listed
            continue
        entries += [json.loads(line) for line in data.splitlines() if line.strip()]
    _resolve_lines(entries, {redact_url(f.url): f for f in files}, config.input_storage_options)
    for e in entries:
        for key in _INTERNAL:
            e.pop(key, None)
    location.write(name, [_line(e) for e in entries])
    location.delete(f"{name}{PIECES_SUFFIX}", recursive=True)
    shown = redact_url(str(config.rejects))
    if unlisted:
        say(
            f"note: {unlisted:,} dropped records are counted but not listed in {shown}: parts that "
            "an earlier run of this job wrote without --rejects were reused (pass --overwrite to "
            "redo them and list everything)"
        )


def _dropped_in(result: dict[str, Any]) -> int:
    """The records a part rejected that the rejects file lists (bad and contaminated)."""
    bad = sum(sum(c.values()) for c in result.get("bad_records", {}).values())
    return bad + sum(result.get("contaminated", {}).values())


def dropped_counts(results: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """``{input file: {reason: records}}`` of everything the parts dropped: each bad-record
    reason, ``empty`` (no tokens), ``filtered`` (the transform returned None) and
    ``contaminated`` (decontamination), files and reasons sorted."""
    out: dict[str, Counter[str]] = {}
    for r in results:
        for url, counts in r.get("bad_records", {}).items():
            out.setdefault(url, Counter()).update(counts)
        for key, reason in (
            ("empty_documents", "empty"),
            ("filtered", "filtered"),
            ("contaminated", "contaminated"),
        ):
            for url, n in r.get(key, {}).items():
                if n:
                    out.setdefault(url, Counter())[reason] += n
    return {url: dict(sorted(c.items())) for url, c in sorted(out.items()) if c}


def totals(dropped: dict[str, dict[str, int]]) -> dict[str, int]:
    """``{reason: records}`` over every file."""
    total: Counter[str] = Counter()
    for counts in dropped.values():
        total.update(counts)
    return dict(sorted(total.items()))


MAX_FILES_SHOWN = 10  # input files the summary lists by name under "dropped"


def summary_lines(meta: dict[str, Any]) -> list[str]:
    """The summary's lines on what was dropped (per reason, then per input file), the eval set
    and the rejects file; none for a job that dropped nothing and names neither."""
    lines = []
    total = meta.get("dropped_total") or {}
    if total:
        reasons = ", ".join(f"{n:,} {reason}" for reason, n in total.items())
        lines.append(f"dropped: {_count(sum(total.values()), 'record')} ({reasons})")
        dropped = meta.get("dropped") or {}
        for url, counts in list(dropped.items())[:MAX_FILES_SHOWN]:
            lines.append(f"  {url}: " + ", ".join(f"{n:,} {reason}" for reason, n in counts.items()))
        if len(dropped) > MAX_FILES_SHOWN:
            lines.append(
                f"  ... and {len(dropped) - MAX_FILES_SHOWN:,} more files (guideloom inspect --json)"
            )
    eval_set = meta.get("decontamination")
    if eval_set:
        lines.append(
            f"decontaminated against {_count(eval_set['items'], 'eval item')} ({eval_set['ngram']}-grams): "
            f"{_count(total.get('contaminated', 0), 'document')} dropped"
        )
    if meta.get("rejects"):
        listed = sum(n for reason, n in total.items() if reason not in ("empty", "filtered"))
        lines.append(f"rejected records ({listed:,}) listed in {meta['rejects']}")
    return lines


def _count(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


REPORTS_DIR = "rejects"  # a decontaminated job without --rejects reports here, in the dataset


def with_default(config: Any, digest: str) -> Any:
    """The config, with ``rejects`` set for a decontaminated job that names no rejects file:
    ``OUTPUT/rejects/JOB.jsonl`` (``JOB``: the start of the plan digest), so that every dropped
    document is named somewhere; the summary and ``ingest.rejects`` say where."""
    if config.rejects is not None or not config.decontaminate:
        return config
    # model_copy keeps the private attributes: the eval index the driver attached
    return config.model_copy(
        update={"rejects": f"{config.output.rstrip('/')}/{REPORTS_DIR}/{digest[:16]}.jsonl"}
    )
