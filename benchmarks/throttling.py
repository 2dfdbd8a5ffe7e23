"""Row ``throttle``: reading a stream from the S3 server while it throttles 10 % of the GETs.

The same loader (full shuffle, as the ``s3`` row) reads the same epoch through the fault proxy
(``tests/infra/faultproxy.py``) twice per repeat, interleaved: once with every tenth shard GET
answered ``503 SlowDown`` (the burst), once with no fault (the baseline). The ratio is what a 10 %
throttling burst costs in tokens/s; the extras say how many throttling answers the proxy sent,
what the loader's ``io_stats`` saw (``throttled``) and how low its requests in flight went
(``concurrency_min``, from 64).
"""

from __future__ import annotations

from typing import Any

from benchmarks.corpus import write_stream
from benchmarks.harness import Config, Row, interleaved
from benchmarks.loops import count_tokens, timed_pass
from benchmarks.remote import _ours
from benchmarks.s3env import fresh_bucket, running_endpoint

__all__ = ["throttle_rows"]

SHARD_GETS = r"/shard-"  # the shard files' GETs; the manifest and listings are left alone


def throttle_rows(cfg: Config, endpoint: Any = None) -> list[Row]:
    from faultproxy import Fault, FaultProxy  # tests/infra, on the path through benchmarks.s3env

    tokens = min(cfg.s3_tokens, 500_000) if cfg.quick else cfg.s3_tokens
    with running_endpoint(endpoint) as (ep, _note), fresh_bucket(ep.storage_options()) as bucket:
        url = f"s3://{bucket}/stream"
        write_stream(url, tokens, cfg.seed, cfg.shard_size, storage_options=ep.storage_options())
        with FaultProxy(ep.url) as proxy:
            options = {**ep.storage_options(proxy.url), "skip_instance_cache": True}
            fired = [0]
            seen: dict[str, Any] = {}

            def throttled() -> float:
                proxy.clear()
                rule = proxy.add(Fault("throttle", SHARD_GETS, method="GET", fraction=0.1))
                loader = _ours(url, options, "full", cfg)
                rate = timed_pass(loader, count_tokens).rate
                fired[0] += rule.fired
                for entry in loader.io_stats().values():
                    seen["throttled"] = seen.get("throttled", 0) + entry.get("throttled", 0)
                    if "concurrency_min" in entry:
                        seen["concurrency_min"] = min(
                            seen.get("concurrency_min", 10**9), entry["concurrency_min"]
                        )
                proxy.clear()
                return rate

            def clean() -> float:
                proxy.clear()
                return timed_pass(_ours(url, options, "full", cfg), count_tokens).rate

            g, b = interleaved(throttled, clean, cfg.repeats, warmup=not cfg.quick)
    extra = {
        "throttling_answers": fired[0],
        "io_stats_throttled": seen.get("throttled", 0),
        "concurrency_min": seen.get("concurrency_min"),
        "tokens": tokens,
        "server": ep.backend,
    }
    return [
        Row(
            "throttle",
            "shuffle=full, 10 % of GETs 503 SlowDown vs none",
            "tokens/s",
            g,
            b,
            "the same reads, no throttling",
            extra=extra,
            checks={"throttling seen in io_stats": seen.get("throttled", 0) > 0},
        )
    ]
