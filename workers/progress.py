"""Progress of an ingestion job: a live rich display, plain log lines, or nothing.

Progress advances per part (a part is ``part_size`` input bytes, 32 MiB by default), with
documents, tokens, input bytes, parts done of total, token throughput and an ETA from the input
bytes still to read. Output goes to stderr so stdout stays clean for scripts.
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
        self.reused = 0
        self.started = time.monotonic()

    def part_done(self, result: dict[str, Any]) -> None:
        self.parts += 1
        self.documents += result["documents"]
        self.tokens += result["tokens"]
        self.bytes += result["input_bytes"]
        self.reused += bool(result.get("reused"))
        self.show()

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = self.bytes / elapsed
        eta = (self.total_bytes - self.bytes) / rate if rate > 0 else float("nan")
        return (
            f"parts {self.parts}/{self.total_parts}  docs {_si(self.documents)}  "
            f"tokens {_si(self.tokens)}  input {_si(self.bytes)}B/{_si(self.total_bytes)}B  "
            f"{_si(self.tokens / elapsed)} tokens/s  ETA {eta:.0f}s"
        )

    def show(self) -> None:
        """Called after every finished part."""

    def close(self) -> None:
        """Called once, when the job ends (committed or failed)."""

    def message(self, text: str) -> None:
        """A one-off line (the final summary, a note about reused parts)."""


class PlainProgress(Progress):
    """One log line per finished part: for logs and ``--quiet``."""

    def show(self) -> None:
        print(f"[guideloom ingest] {self.line()}", file=sys.stderr, flush=True)

    def message(self, text: str) -> None:
        print(f"[guideloom ingest] {text}", file=sys.stderr, flush=True)


class RichProgress(Progress):
    """A live bar with the same numbers, redrawn in place."""

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
        stats = (
            f"parts {self.parts}/{self.total_parts} · docs {_si(self.documents)} · "
            f"tokens {_si(self.tokens)} · "
            f"{_si(self.tokens / max(time.monotonic() - self.started, 1e-9))} tokens/s"
        )
        self._bar.update(self._task, completed=self.bytes, stats=stats)

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
