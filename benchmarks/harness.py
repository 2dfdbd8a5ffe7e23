"""Timing, results and the printed table: what every benchmark row shares.

A *row* is one measurement of GuideLoom beside its baseline, both measured in the same run, each
repeated ``repeats`` times with the two interleaved (A B A B ...) so that a slow spell of the
shared machine hits both. A row reports the median and the min-max of each side and the ratio of
the medians. ``higher_is_better`` says which way the ratio should point: throughput rows compare
GuideLoom / baseline against a floor (">= 0.8"), cost rows (seconds, bytes of RSS) against a
ceiling ("<= 1.2").
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Config",
    "Row",
    "Stats",
    "interleaved",
    "machine_description",
    "print_table",
    "stats",
    "write_json",
]


@dataclass
class Config:
    """What one run measures and at which size (the command-line flags)."""

    workdir: Path  # corpora and raw baseline files live here
    tokens: int = 19_600_000  # the local stream corpus (the design's reference size)
    s3_tokens: int = 2_000_000  # the corpus written to the S3 server (each GET costs a request)
    documents: int = 20_000  # records of the document corpus
    repeats: int = 3
    seed: int = 0
    sequence_length: int = 2048
    batch_size: int = 8
    shard_size: int = 16 * 2**20  # bytes: several shards, so windows cross shard boundaries
    open_shards: int = 10_000  # the large dataset of the open row (the small one has 10)
    memory_factor: int = 4  # the larger dataset of the memory row, in multiples of `tokens`
    s3_shuffles: tuple[str, ...] = ("none", "block", "full")
    ingest_tokens: int = 2_000_000  # rough size of the ingestion row's input text, in tokens
    quick: bool = False  # smoke runs: no warm-up pass


@dataclass
class Stats:
    """Median and range of repeated measurements, in ``unit``."""

    median: float
    min: float
    max: float
    samples: list[float]

    def short(self) -> str:
        return f"{_num(self.median)} ({_num(self.min)}-{_num(self.max)})"


def stats(samples: Sequence[float]) -> Stats:
    values = [float(v) for v in samples]
    return Stats(statistics.median(values), min(values), max(values), values)


@dataclass
class Row:
    """One line of the table and one object of the JSON ``rows`` list."""

    row: str  # the row family: local, documents, s3, meta, resume, memory, ingest, open
    case: str  # which variant, e.g. "shuffle=full workers=2"
    unit: str  # e.g. "tokens/s", "s", "MiB"
    guideloom: Stats
    baseline: Stats
    baseline_name: str
    higher_is_better: bool = True
    target: float | None = None  # the ratio GuideLoom / baseline should reach (>=) or stay under (<=)
    extra: dict[str, Any] = field(default_factory=dict)  # secondary figures (bytes, requests, ...)
    checks: dict[str, bool] = field(default_factory=dict)  # absolute targets, e.g. amplification <= 1.1

    @property
    def ratio(self) -> float:
        return self.guideloom.median / self.baseline.median if self.baseline.median else float("inf")

    @property
    def met(self) -> bool | None:
        """The ratio target and every absolute check; None when the row has neither."""
        results = list(self.checks.values())
        if self.target is not None:
            results.append(self.ratio >= self.target if self.higher_is_better else self.ratio <= self.target)
        return all(results) if results else None

    def target_text(self) -> str:
        parts = (
            [f"{'>=' if self.higher_is_better else '<='} {self.target:g}"] if self.target is not None else []
        )
        parts += [f"{name}{'' if ok else ' (missed)'}" for name, ok in self.checks.items()]
        return "; ".join(parts) or "-"

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(ratio=self.ratio, met=self.met, target_text=self.target_text())
        return out


MIN_MEASURE_S = 0.25  # a measurement shorter than this is repeated, and its median taken


def _at_least(measure: Callable[[], float], seconds: float) -> Callable[[], float]:
    """``measure`` made one figure of at least ``seconds`` of wall time: called again while the
    calls so far took less, and the median of the calls' figures returned (as `timeit`'s
    autorange does). A pass over the default corpus can take 50 ms, where one slow spell of a
    shared 2-core machine moves a single figure by 20 %."""

    def run() -> float:
        began = time.perf_counter()
        figures = [measure()]
        while time.perf_counter() - began < seconds:
            figures.append(measure())
        return statistics.median(figures)

    return run


def interleaved(
    guideloom: Callable[[], float],
    baseline: Callable[[], float],
    repeats: int,
    warmup: bool = True,
    min_seconds: float = MIN_MEASURE_S,
) -> tuple[Stats, Stats]:
    """Run both measurements ``repeats`` times, alternating; each call returns one figure.

    With ``warmup`` each runs once first, unrecorded (page cache, imports, connection pools).
    With ``warmup``, a call that takes less than ``min_seconds`` is also repeated until they add
    up to that much, and counts as one measurement, the median of its calls' figures
    (`_at_least`). Without it each measurement is one call: ``--quick`` smoke runs, and rows
    whose calls change what they measure (an append grows the dataset) pass ``warmup=False``.
    """
    if warmup:
        guideloom()
        baseline()
        if min_seconds > 0:
            guideloom, baseline = _at_least(guideloom, min_seconds), _at_least(baseline, min_seconds)
    ours: list[float] = []
    theirs: list[float] = []
    for k in range(repeats):
        # Alternate who goes first, so neither side always follows the other's cache effects.
        if k % 2 == 0:
            ours.append(guideloom())
            theirs.append(baseline())
        else:
            theirs.append(baseline())
            ours.append(guideloom())
    return stats(ours), stats(theirs)


class Stopwatch:
    """``with Stopwatch() as sw: ...`` then ``sw.seconds``."""

    def __enter__(self) -> Stopwatch:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.seconds = time.perf_counter() - self.start


def _num(x: float) -> str:
    ax = abs(x)
    if ax >= 1e9:
        return f"{x / 1e9:.2f}G"
    if ax >= 1e6:
        return f"{x / 1e6:.2f}M"
    if ax >= 1e4:
        return f"{x / 1e3:.1f}k"
    if ax >= 100:
        return f"{x:.0f}"
    if ax >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def table_lines(rows: Sequence[Row]) -> list[str]:
    """The result table as Markdown (also readable in a terminal)."""
    header = [
        "row",
        "case",
        "unit",
        "GuideLoom median (min-max)",
        "baseline",
        "baseline median (min-max)",
        "ratio",
        "target",
        "met",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        met = {True: "yes", False: "**no**", None: "-"}[r.met]
        cells = [
            r.row,
            r.case,
            r.unit,
            r.guideloom.short(),
            r.baseline_name,
            r.baseline.short(),
            f"{r.ratio:.2f}x",
            r.target_text(),
            met,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def extra_lines(rows: Sequence[Row]) -> list[str]:
    """Secondary figures (bytes, requests, first batch ...) as a bullet list."""
    out = []
    for r in rows:
        if r.extra:
            figures = ", ".join(f"{k}={_fmt_extra(v)}" for k, v in r.extra.items())
            out.append(f"- {r.row} / {r.case}: {figures}")
    return out


def _fmt_extra(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def print_table(rows: Sequence[Row], file: Any = None) -> None:
    file = file or sys.stdout
    print("\n".join(table_lines(rows)), file=file)
    extras = extra_lines(rows)
    if extras:
        print("\n".join(["", "Secondary figures:", *extras]), file=file)


def machine_description() -> dict[str, Any]:
    """What the numbers were measured on: CPU, cores, memory, OS, library versions, load."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    versions = {}
    for name in ("numpy", "torch", "torchdata", "fsspec", "s3fs", "ray", "guideloom"):
        try:
            module = __import__(name)
            versions[name] = getattr(module, "__version__", "?")
        except ImportError:
            versions[name] = None
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": mem_gib,
        "os": platform.platform(),
        "python": platform.python_version(),
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "versions": versions,
    }


def write_json(path: str | Path, payload: dict[str, Any]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1, default=str) + "\n")


@contextlib.contextmanager
def workdir(path: str | None, prefix: str = "guideloom-bench-") -> Iterator[Path]:
    """``path`` (created if missing, kept), or a temporary directory removed afterwards."""
    if path:
        Path(path).mkdir(parents=True, exist_ok=True)
        yield Path(path)
        return
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def results_payload(
    cfg: Any, results: Sequence[Row], failures: dict[str, str], **extra: Any
) -> dict[str, Any]:
    """The JSON document of a run: machine, ``extra`` fields, config, rows and failures
    (``_rows`` keeps the `Row` objects for printing; `write_json` writes them as JSON too)."""
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(cfg).items()}
    return {
        "machine": machine_description(),
        **extra,
        "config": config,
        "rows": [r.to_json() for r in results],
        "failures": failures,
        "_rows": list(results),
    }


def timed_run(
    run: Callable[[Callable[[str], None]], dict[str, Any]], json_path: str | Path
) -> dict[str, Any]:
    """Call ``run(log)`` (progress on stderr), time it, write its payload to ``json_path`` and
    print its table; the payload, with ``total_seconds``."""
    t0 = time.perf_counter()
    payload = run(lambda m: print(m, file=sys.stderr, flush=True))
    payload["total_seconds"] = round(time.perf_counter() - t0, 1)
    results = payload.pop("_rows")
    write_json(json_path, payload)
    print()
    print_table(results)
    return payload
