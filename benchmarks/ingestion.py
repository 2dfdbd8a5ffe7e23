"""Row ``ingest``: ``guideloom ingest`` tokens/s with 1 and 2 Ray workers against the tokenizer alone.

The measurement itself is :func:`benchmarks.ingest_bench.measure_ingest` (owned with the
ingestion code); this module repeats it and turns its figures into rows:

- 1 Ray worker / the same tokenizer alone in one process (target >= 0.9, issue 25);
- 2 Ray workers / the tokenizer alone;
- 2 Ray workers / 1 Ray worker (target >= 1.7, issue 25).
"""

from __future__ import annotations

import os
from typing import Any

from benchmarks.harness import Config, Row, stats

__all__ = ["ingest_rows"]


def ingest_rows(cfg: Config, scale: int | None = None) -> list[Row]:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    from benchmarks.ingest_bench import measure_ingest

    # The shipped text (workers/data, 405 KB) is about 100k cl100k tokens per copy.
    scale = scale if scale is not None else max(1, round(cfg.ingest_tokens / 100_000))
    import ray

    # One Ray for all repeats, started here (measure_ingest then reuses it): a warm-up run first
    # lets both Ray worker processes import the tokenizer and GuideLoom, which would otherwise
    # be charged to whichever worker count happens to run first.
    started = not ray.is_initialized()
    if started:
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            object_store_memory=512 * 2**20,
            configure_logging=False,
        )
    try:
        if not cfg.quick:
            measure_ingest(scale=scale)
        runs: list[dict[str, Any]] = [measure_ingest(scale=scale) for _ in range(max(1, cfg.repeats))]
    finally:
        if started:
            ray.shutdown()
    tokenizer = stats([r["tokenizer_only_tokens_per_s"] for r in runs])
    one = stats([r["ingest_1_workers_tokens_per_s"] for r in runs])
    two = stats([r["ingest_2_workers_tokens_per_s"] for r in runs])
    extra = {
        "tokens": runs[-1]["tokens"],
        "input_bytes": runs[-1]["input_bytes"],
        "tokenizer": runs[-1]["tokenizer"],
        "parts": runs[-1].get("ingest_2_workers_parts"),
    }
    return [
        Row("ingest", "1 Ray worker", "tokens/s", one, tokenizer, "tokenizer alone", target=0.9, extra=extra),
        Row("ingest", "2 Ray workers", "tokens/s", two, tokenizer, "tokenizer alone"),
        Row("ingest", "2 Ray workers vs 1", "tokens/s", two, one, "1 Ray worker", target=1.7),
    ]
