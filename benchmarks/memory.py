"""Row ``memory``: peak RSS of a process that reads a whole epoch, for a dataset and one 4x its size.

Each reading runs in a fresh subprocess (``python -m benchmarks.memory``) that opens the dataset,
reads one epoch through the loader (``num_workers=0``, so every byte passes through this one
process) and reports its peak RSS: ``VmHWM`` from ``/proc/self/status``. (``ru_maxrss`` is not
used: Linux carries it across ``execve``, so a child forked from a large parent reports the
parent's size.) A reader whose memory is flat in dataset size gives a ratio of about 1. Peak RSS
counts file pages mapped into the process as well as its own memory; the child also reports
``RssAnon`` / ``RssFile`` at the end of the epoch to tell the two apart.

Local: the stream corpus and one ``memory_factor`` times larger. S3: the same for the S3 corpus
(read in order, to keep the pass short).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import Config, Row, stats

__all__ = ["memory_rows", "measure_child", "status_kib"]


def measure_child(url: str, options: dict[str, Any] | None, cfg: Config, shuffle: Any) -> dict[str, Any]:
    """Run the reading child for ``url``; returns its report."""
    request = {
        "url": url,
        "options": options,
        "sequence_length": cfg.sequence_length,
        "batch_size": cfg.batch_size,
        "shuffle": shuffle,
        "seed": cfg.seed,
    }
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.memory"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the memory child failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def memory_rows(cfg: Config, s3_endpoint: Any = None, include_s3: bool = True) -> list[Row]:
    from benchmarks.corpus import write_stream
    from benchmarks.local import local_stream

    storage, _ = local_stream(cfg)
    big_url = str(cfg.workdir / f"stream-x{cfg.memory_factor}")
    if not Path(big_url, "manifest.json").exists():
        write_stream(big_url, cfg.tokens * cfg.memory_factor, cfg.seed + 7, cfg.shard_size)
    rows = [_row("local", "shuffle=full workers=0", str(cfg.workdir / "stream"), big_url, None, cfg, True)]
    if include_s3:
        from benchmarks.s3env import fresh_bucket, running_endpoint

        with running_endpoint(s3_endpoint) as (ep, _note), fresh_bucket(ep.storage_options()) as bucket:
            options = ep.storage_options()
            small, big = f"s3://{bucket}/small", f"s3://{bucket}/big"
            write_stream(small, cfg.s3_tokens, cfg.seed, cfg.shard_size, storage_options=options)
            write_stream(
                big, cfg.s3_tokens * cfg.memory_factor, cfg.seed + 7, cfg.shard_size, storage_options=options
            )
            rows.append(_row("s3", "shuffle=off workers=0", small, big, options, cfg, False))
    return rows


def _row(where: str, case: str, small: str, big: str, options: Any, cfg: Config, shuffle: Any) -> Row:
    small_runs, big_runs = [], []
    for _ in range(max(1, min(cfg.repeats, 2))):  # interleaved; peak RSS hardly varies
        small_runs.append(measure_child(small, options, cfg, shuffle))
        big_runs.append(measure_child(big, options, cfg, shuffle))
    mib = 1 / 1024  # /proc/self/status is in KiB
    g = stats([r["peak_rss_kib"] * mib for r in big_runs])
    b = stats([r["peak_rss_kib"] * mib for r in small_runs])
    last_small, last_big = small_runs[-1], big_runs[-1]
    extra = {
        "tokens_small": last_small["tokens"],
        "tokens_large": last_big["tokens"],
        "rss_anon_mib_small": last_small["rss_anon_kib"] * mib,
        "rss_anon_mib_large": last_big["rss_anon_kib"] * mib,
        "rss_file_mib_small": last_small["rss_file_kib"] * mib,
        "rss_file_mib_large": last_big["rss_file_kib"] * mib,
    }
    return Row(
        "memory",
        f"{where} {case}",
        "MiB peak RSS",
        g,
        b,
        f"dataset 1/{cfg.memory_factor} the size",
        higher_is_better=False,
        target=1.1,
        extra=extra,
    )


def status_kib(field: str) -> int:
    """A ``/proc/self/status`` figure in KiB (``VmHWM``: peak RSS; ``RssAnon``, ``RssFile``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _child() -> None:
    request = json.loads(sys.stdin.read())
    from benchmarks.corpus import stream_format
    from guideloom import StatefulDataLoader, StreamStorage

    storage = StreamStorage(request["url"], stream_format(), storage_options=request["options"])
    loader = StatefulDataLoader.from_storage(
        storage,
        sequence_length=request["sequence_length"],
        batch_size=request["batch_size"],
        shuffle=request["shuffle"],
        seed=request["seed"],
        num_workers=0,
    )
    t0 = time.perf_counter()
    tokens = 0
    for batch in loader:
        tokens += int(batch["tokens"].numel())
    report = {
        "peak_rss_kib": status_kib("VmHWM"),
        "ru_maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "rss_anon_kib": status_kib("RssAnon"),
        "rss_file_kib": status_kib("RssFile"),
        "tokens": tokens,
        "seconds": time.perf_counter() - t0,
    }
    print(json.dumps(report))


if __name__ == "__main__":
    _child()
