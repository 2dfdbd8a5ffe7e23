"""Row ``cache``: the second epoch from the local block cache against the first, over S3.

Each repeat opens the stream on the S3 server on 127.0.0.1 with ``cache_dir=`` a fresh, empty
folder and reads two epochs with the same loader (full shuffle, 2 worker processes, as the
``s3`` row): the first fetches every block from the store and keeps it (the baseline), the second
is served from local disk. Requests are the loader's own ``io_stats`` (the same counts as the
counting proxy's, see tests/io/test_io_stats.py); the extras give GETs and bytes of each epoch,
the cache's hits and misses on the second. A second case sets the cached second epoch against an
epoch of the same loader without a cache (read each repeat too), what a run without the cache
pays every epoch.
"""

from __future__ import annotations

import tempfile
from typing import Any

from benchmarks.corpus import write_stream
from benchmarks.harness import Config, Row, stats
from benchmarks.loops import count_tokens, timed_pass
from benchmarks.remote import BLOCK_SIZE, BUFFER_BLOCKS, RUN_SIZE, WORKERS
from benchmarks.s3env import fresh_bucket, running_endpoint

__all__ = ["cache_rows"]


def _loader(url: str, options: dict[str, Any], cfg: Config, cache_dir: str | None) -> Any:
    from guideloom import StatefulDataLoader

    return StatefulDataLoader.from_storage(
        url,
        storage_options=options,
        cache_dir=cache_dir,
        sequence_length=cfg.sequence_length,
        batch_size=cfg.batch_size,
        shuffle="full",
        seed=cfg.seed,
        num_workers=WORKERS,
        shuffle_block_size=BLOCK_SIZE,
        shuffle_buffer_blocks=BUFFER_BLOCKS,
        shuffle_run_size=RUN_SIZE,
    )


def _store_counts(counts: dict[str, Any]) -> tuple[int, int]:
    """GETs and bytes read from the stores (the cache's own entry left out)."""
    stores = [e for s, e in counts.items() if not s.startswith("cache ")]
    return sum(e["requests"].get("GET", 0) for e in stores), sum(e["bytes_read"] for e in stores)


def _cache_counts(counts: dict[str, Any]) -> dict[str, int]:
    found = [e for s, e in counts.items() if s.startswith("cache ")]
    return {k: v for e in found for k, v in e.items() if k.startswith("cache_")}


def cache_rows(cfg: Config, endpoint: Any = None) -> list[Row]:
    from guideloom.io.stats import subtract_stats

    tokens = min(cfg.s3_tokens, 500_000) if cfg.quick else cfg.s3_tokens
    first: list[float] = []
    second: list[float] = []
    plain: list[float] = []
    figures: dict[str, Any] = {}
    with running_endpoint(endpoint) as (ep, _note), fresh_bucket(ep.storage_options()) as bucket:
        url = f"s3://{bucket}/stream"
        options = ep.storage_options()
        write_stream(url, tokens, cfg.seed, cfg.shard_size, storage_options=options)
        for _ in range(cfg.repeats):
            uncached = _loader(url, options, cfg, None)
            before = uncached.io_stats()
            plain.append(timed_pass(uncached, count_tokens).rate)
            gets0, bytes0 = _store_counts(subtract_stats(uncached.io_stats(), before))
            with tempfile.TemporaryDirectory(dir=cfg.workdir, prefix="cache-") as folder:
                loader = _loader(url, options, cfg, folder)
                start = loader.io_stats()
                first.append(timed_pass(loader, count_tokens).rate)
                middle = loader.io_stats()
                second.append(timed_pass(loader, count_tokens).rate)
                end = loader.io_stats()
            cold, warm = subtract_stats(middle, start), subtract_stats(end, middle)
            gets1, bytes1 = _store_counts(cold)
            gets2, bytes2 = _store_counts(warm)
            figures = {
                "gets_uncached_epoch": gets0,
                "bytes_uncached_epoch": bytes0,
                "gets_first_epoch": gets1,
                "bytes_first_epoch": bytes1,
                "gets_second_epoch": gets2,
                "bytes_second_epoch": bytes2,
                **{f"second_epoch_{k}": v for k, v in _cache_counts(warm).items()},
            }
    extra = {**figures, "tokens": tokens, "server": ep.backend}
    checks = {"no data GETs on epoch 2": figures.get("gets_second_epoch") == 0}
    return [
        Row(
            "cache",
            "shuffle=full workers=2, epoch 2 from cache_dir vs epoch 1",
            "tokens/s",
            stats(second),
            stats(first),
            "the first epoch (fetching and keeping every block)",
            extra=extra,
            checks=checks,
        ),
        Row(
            "cache",
            "shuffle=full workers=2, epoch 2 from cache_dir vs no cache",
            "tokens/s",
            stats(second),
            stats(plain),
            "an epoch without cache_dir (range requests every epoch)",
            extra=extra,
            checks=checks,
        ),
    ]
