"""Text for terminals: ``guideloom trace``'s tables and a quiet end on a closed pipe.

`trace_table` lays out trace rows (`guideloom.loading.trace.trace`) either compactly, every line
within `COMPACT_WIDTH` columns (shard as ``p<part>/s<shard>``, byte ranges and sizes with binary
unit suffixes, long sources and record lists shortened in the middle), or wide, with every field
in full. `quiet_broken_pipe` ends a command whose reader went away (``guideloom ... | head``)
without a traceback.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = [
    "COMPACT_WIDTH",
    "quiet_broken_pipe",
    "short_bytes",
    "short_records",
    "stdout_closed",
    "trace_table",
]

COMPACT_WIDTH = 120
_SHARD = re.compile(r"part (\d+) shard (\d+)")


def short_bytes(n: int) -> str:
    """``1536`` -> ``"1.5K"``: a byte count in at most 6 characters (binary units).

    Args:
        n: A number of bytes (>= 0).
    """
    if n < 1024:
        return str(n)
    value = float(n)
    for unit in "KMGTP":
        value /= 1024
        if value < 1024 or unit == "P":
            return f"{value:.0f}{unit}" if value >= 100 else f"{value:.1f}{unit}"
    return str(n)  # pragma: no cover


def short_records(records: list[int] | None, room: int = 16) -> str:
    """The records a sample belongs to, within ``room`` characters: ``7``, ``7-9`` for a run,
    ``7,12``; a list too long keeps its ends: ``3-5,9,…,40 (6)``.

    Args:
        records: Dataset-wide record indexes (None: not known).
        room: Characters available.
    """
    if not records:
        return "?" if records is None else "-"
    runs: list[str] = []
    first = prev = records[0]
    for r in records[1:] + [None]:  # type: ignore[list-item]
        if r is not None and r == prev + 1:
            prev = r
            continue
        runs.append(str(first) if first == prev else f"{first}-{prev}")
        if r is not None:
            first = prev = r
    text = ",".join(runs)
    if len(text) <= room:
        return text
    tail = f",…,{runs[-1]} ({len(records)})" if len(runs) > 1 else ""
    head = runs[0]
    text = head + tail
    return text if len(text) <= room else _middle(text, room)


def _middle(text: str, room: int) -> str:
    """``text`` within ``room`` characters, its middle replaced by ``…``."""
    if len(text) <= room:
        return text
    if room <= 1:
        return text[:room]
    left = (room - 1) // 2
    return text[:left] + "…" + text[len(text) - (room - 1 - left) :]


def _shard(row: dict[str, Any]) -> str:
    m = _SHARD.search(str(row.get("shard", "")))
    short = f"p{m.group(1)}/s{m.group(2)}" if m else str(row.get("shard", ""))
    pieces = row.get("pieces") or []
    return short + (f"+{len(pieces) - 1}" if len(pieces) > 1 else "")


def _where(row: dict[str, Any]) -> str:
    rng = row.get("byte_range")
    if not rng:
        return f"rec {row.get('record_in_shard')}"
    size = sum(p["byte_range"][1] - p["byte_range"][0] for p in row.get("pieces") or []) or rng[1] - rng[0]
    return f"@{short_bytes(rng[0])} {short_bytes(size)}"


# (header, width, right-aligned) of the compact table's columns before the source
_COLUMNS = (("step", 8, True), ("rank", 4, True), ("sample", 10, True), ("records", 16, False),
            ("shard", 12, False), ("bytes", 13, False))  # fmt: skip


def trace_table(rows: Iterable[dict[str, Any]], *, wide: bool = False, text: bool = False) -> Iterator[str]:
    """The lines of ``guideloom trace``'s table: a header, then one line per row.

    Args:
        rows: Trace rows (`guideloom.loading.trace.trace`), with ``text`` when decoded.
        wide: Every field in full (lines as long as they need); else within `COMPACT_WIDTH`.
        text: Add the decoded text column (rows carry ``text``).
    """
    if wide:
        yield f"{'step':>8} {'rank':>4} {'row':>4}  {'sample':>9}  records  shard  bytes  source" + (
            "  text" if text else ""
        )
        for row in rows:
            rng = row["byte_range"]
            where = f"{rng[0]}-{rng[1]}" if rng else f"record {row.get('record_in_shard')}"
            pieces = row.get("pieces") or []
            more = "".join(f" + {p['shard']} {p['byte_range'][0]}-{p['byte_range'][1]}" for p in pieces[1:])
            records = row.get("records")
            rec = ",".join(map(str, records)) if records else ("?" if records is None else "-")
            yield (
                f"{row['step']:>8} {row['rank']:>4} {row['row']:>4}  {row['sample_index']:>9}  {rec}  "
                f"{row['shard']}  {where}{more}  {row['source']}" + (f"  {row['text']!r}" if text else "")
            )
            origins = _origins(row)
            if origins:
                yield f"{'':>8} from {origins}"
        return
    fixed = sum(w for _, w, _ in _COLUMNS) + len(_COLUMNS)  # each column and one space after it
    room = COMPACT_WIDTH - fixed
    source_room = min(room, 30) if text else room
    head = " ".join(f"{h:>{w}}" if right else f"{h:<{w}}" for h, w, right in _COLUMNS)
    yield (head + " " + ("source" if not text else f"{'source':<{source_room}} text")).rstrip()
    for row in rows:
        cells = (
            str(row["step"]),
            str(row["rank"]),
            str(row["sample_index"]),
            short_records(row.get("records"), 16),
            _middle(_shard(row), 12),
            _middle(_where(row), 13),
        )
        line = " ".join(
            f"{_middle(c, w):>{w}}" if right else f"{_middle(c, w):<{w}}"
            for c, (_, w, right) in zip(cells, _COLUMNS)
        )
        source = _middle(str(row["source"]), source_room)
        if text:
            shown = _middle(repr(row["text"]), max(COMPACT_WIDTH - fixed - source_room - 1, 3))
            yield f"{line} {source:<{source_room}} {shown}"
        else:
            yield f"{line} {source}"
        origins = _origins(row)
        if origins:  # where the row's documents came from (datasets GuideLoom ingested)
            yield _middle(f"{'':>8} from {origins}", COMPACT_WIDTH)


def _origins(row: dict[str, Any]) -> str:
    """The input file, line and id of each of the row's documents (``; ``-joined), or ``""``
    where the dataset keeps none (`guideloom.storage.origins`)."""
    from guideloom.storage.origins import Origin

    return "; ".join(Origin(**o).describe() for o in row.get("origins") or [] if o)


def stdout_closed() -> bool:
    """Whether standard output is a pipe whose reader has gone (its write end reports an error
    when polled), e.g. after ``| head`` read its lines. False where that cannot be told."""
    try:
        import select

        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return False


def quiet_broken_pipe() -> None:
    """After stdout's reader went away: point stdout at the null device, so that the flush at
    exit raises nothing, and leave with status 0 as ``head`` expects of the command before it."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # pragma: no cover - stdout without a descriptor
        pass
    sys.exit(0)
