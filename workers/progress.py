"""Progress of an ingestion job: a live rich display, plain log lines, or nothing.

Progress shows documents, tokens, input bytes, parts done of total, token throughput and an ETA
from the input bytes still to read. Finished parts count exactly; parts still running report
their counts from inside the task about every second (``running``), so the numbers move while a
large part runs, not only when it ends. Output goes to stderr so stdout stays clean for scripts.
"""

from __future__ import annotations

import sys
import time
from typing import Any

__all__ = ["Progress", "make_progress"]


def _si(n: float) -> str:
    for unit in ("", "k", "M", "G", "T"):
        if abs(n) < 1000:
            return f"{n:.1f}{unit}" if unit else f"{n:.0f}"
        n /= 1000
    return f"{n:.1f}P"


class Progress:
    """Counts parts as they finish; subclasses decide how to show them."""

    def __init__(self, total_parts: int, total_bytes: int) -> None:
        self.total_parts, self.total_bytes = total_parts, total_bytes
        self.parts = self.documents = self.tokens = self.bytes = 0
        self.reused = self.recorded = self.reused_tokens = self.reused_bytes = 0
        self.started = time.monotonic()
        self.partial = {"documents": 0, "tokens": 0, "input_bytes": 0}

    live = False
    """Whether this display shows anything (the driver collects live counts only then)."""

    def running(self, counts: list[dict[str, int]]) -> None:
        """The counts so far of the parts still running (replaces the previous report)."""
        self.partial = {key: sum(c[key] for c in counts) for key in self.partial}
        self.show()

    def start(self, recorded: int) -> None:
        """The job starts; ``recorded`` parts have completion records from an earlier run (they
        are checked first, and counted as reused once their tasks confirm them)."""
        self.recorded = recorded
        self.show()

    def part_done(self, result: dict[str, Any]) -> None:
        self.partial = {key: 0 for key in self.partial}  # the next report re-sends the rest
        self.parts += 1
        self.documents += result["documents"]
        self.tokens += result["tokens"]
        self.bytes += result["input_bytes"]
        if result.get("reused"):
            self.reused += 1
            self.reused_tokens += result["tokens"]
            self.reused_bytes += result["input_bytes"]
        self.show()

    def reuse_note(self) -> str:
        """`` (12 reused)``, `` (3 reused, 9 more to check)`` or nothing."""
        left = self.recorded - self.reused
        if left > 0 and self.parts < self.total_parts:
            return f" ({self.reused} reused, {left} more to check)"
        return f" ({self.reused} reused)" if self.reused else ""

    def rate(self) -> float:
        """Tokens per second written by this run (a reused part's tokens were written before)."""
        documents, tokens, read = self.totals()
        return (tokens - self.reused_tokens) / max(time.monotonic() - self.started, 1e-9)

    def totals(self) -> tuple[int, int, int]:
        """(documents, tokens, input bytes): finished parts plus what running parts reported."""
        p = self.partial
        return (
            self.documents + p["documents"],
            self.tokens + p["tokens"],
            self.bytes + p["input_bytes"],
        )

    def line(self) -> str:
        documents, tokens, read = self.totals()
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = (read - self.reused_bytes) / elapsed  # reused parts were read by an earlier run
        # No input read yet: no rate to estimate from, so no ETA (not "nan s").
        eta = f"{(self.total_bytes - read) / rate:.0f}s" if rate > 0 else "-"
        return (
            f"parts {self.parts}/{self.total_parts}{self.reuse_note()}  docs {_si(documents)}  "
            f"tokens {_si(tokens)}  input {_si(read)}B/{_si(self.total_bytes)}B  "
            f"{_si(self.rate())} tokens/s  ETA {eta}"
        )

    def show(self) -> None:
        """Called after every finished part."""

    def close(self) -> None:
        """Called once, when the job ends (committed or failed)."""

    def message(self, text: str) -> None:
        """A one-off line (the final summary, a note about reused parts)."""


class PlainProgress(Progress):
    """A log line per finished part, and one every ``EVERY_S`` seconds while parts run: for logs
    and ``--quiet``."""

    live = True
    EVERY_S = 5.0

    def __init__(self, total_parts: int, total_bytes: int) -> None:
        super().__init__(total_parts, total_bytes)
        self._last = 0.0
        self._parts_shown = -1

    def show(self) -> None:
        now = time.monotonic()
        if self.parts == self._parts_shown and now - self._last < self.EVERY_S:
            return
        self._last, self._parts_shown = now, self.parts
        print(f"[guideloom ingest] {self.line()}", file=sys.stderr, flush=True)

    def message(self, text: str) -> None:
        print(f"[guideloom ingest] {text}", file=sys.stderr, flush=True)


class RichProgress(Progress):
    """A live bar with the same numbers, redrawn in place."""

    live = True

    def __init__(self, total_parts: int, total_bytes: int) -> None:
        super().__init__(total_parts, total_bytes)
        from rich.console import Console
        from rich.progress import BarColumn, TextColumn, TimeRemainingColumn
        from rich.progress import Progress as _Bar

        self.console = Console(stderr=True)
        self._bar = _Bar(
            TextColumn("ingest"),
            BarColumn(),
            TextColumn("{task.fields[stats]}"),
            TimeRemainingColumn(),
            console=self.console,
        )
        self._task = self._bar.add_task("ingest", total=max(total_bytes, 1), stats="")
        self._bar.start()

    def show(self) -> None:
        documents, tokens, read = self.totals()
        stats = (
            f"parts {self.parts}/{self.total_parts}{self.reuse_note()} · docs {_si(documents)} · "
            f"tokens {_si(tokens)} · {_si(self.rate())} tokens/s"
        )
        self._bar.update(self._task, completed=read, stats=stats)

    def close(self) -> None:
        self._bar.stop()

    def message(self, text: str) -> None:
        self.console.print(text)


def make_progress(mode: str, total_parts: int, total_bytes: int) -> Progress:
    """``auto`` is rich on a terminal and plain lines otherwise; ``none`` shows nothing."""
    if mode == "auto":
        mode = "rich" if sys.stderr.isatty() else "plain"
    cls = {"rich": RichProgress, "plain": PlainProgress}.get(mode, Progress)
    return cls(total_parts, total_bytes)
