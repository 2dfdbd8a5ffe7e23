"""Row ``s3``: reading a stream from the S3 server on 127.0.0.1.

GuideLoom's loader against a raw baseline that fetches the same windows' byte ranges, batch by
batch, with one ``fs.cat_ranges`` call per batch (s3fs runs a call's ranges concurrently) in the
same number of DataLoader workers. Both read the same windows in the same batches: the baseline's
batches come from GuideLoom's own epoch order (:class:`guideloom.loading.order.EpochOrder`, pure
arithmetic), so ``block`` shuffling gives the baseline the same locality.

A second baseline fetches every window with its own ranged GET (``one ranged GET per window``:
the same ``cat_ranges`` call per batch, without merging touching ranges), the cost model of a
reader without locality; issue 14 asks full shuffle for >= 4x of it.

Throughput passes go straight to the server. One more pass of each goes through the counting proxy
(``tests/infra/s3proxy.py``) to count requests and response bytes: bytes transferred / bytes delivered
(read amplification), GET requests per window and per shuffle block, and the largest single
response (a whole-shard download would show as one as large as a shard).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from benchmarks.corpus import stream_format, write_stream
from benchmarks.harness import Config, Row, interleaved
from benchmarks.loops import RawS3Windows, count_tokens, timed_pass
from benchmarks.s3env import CountingProxy, fresh_bucket, running_endpoint

__all__ = ["s3_rows", "s3_thread_rows"]

WORKERS = 2
BLOCK_SIZE = 64  # the loader's default shuffle_block_size
BUFFER_BLOCKS = 4  # and shuffle_buffer_blocks
RUN_SIZE = 8  # and shuffle_run_size (gcd(8, block size)): a batch of 8 is one run of 8 windows


def _batches(num_samples: int, mode: str, cfg: Config) -> list[list[int]]:
    from guideloom.loading.order import EpochOrder

    order = EpochOrder(
        num_samples,
        shuffle=mode,  # type: ignore[arg-type]
        seed=cfg.seed,
        epoch=0,
        block_size=BLOCK_SIZE,
        buffer_blocks=BUFFER_BLOCKS,
        run_size=RUN_SIZE,
    )
    return [
        order(np.arange(lo, min(lo + cfg.batch_size, num_samples), dtype=np.int64)).tolist()
        for lo in range(0, num_samples, cfg.batch_size)
    ]


def _ours(url: str, options: dict[str, Any], mode: str, cfg: Config, **kwargs: Any) -> Any:
    from guideloom import StatefulDataLoader, StreamStorage

    storage = StreamStorage(url, stream_format(), storage_options=options)
    return StatefulDataLoader.from_storage(
        storage,
        sequence_length=cfg.sequence_length,
        batch_size=cfg.batch_size,
        shuffle=False if mode == "none" else mode,
        seed=cfg.seed,
        num_workers=WORKERS,
        shuffle_block_size=BLOCK_SIZE,
        shuffle_buffer_blocks=BUFFER_BLOCKS,
        shuffle_run_size=RUN_SIZE,
        **kwargs,
    )


def _windowed(url: str, options: dict[str, Any], cfg: Config) -> Any:
    """Our loader with the byte-sized block shuffle at its defaults (1 MiB blocks, 512 MiB windows)."""
    from guideloom import StatefulDataLoader, StreamStorage

    storage = StreamStorage(url, stream_format(), storage_options=options)
    return StatefulDataLoader.from_storage(
        storage, sequence_length=cfg.sequence_length, batch_size=cfg.batch_size, shuffle="block",
        seed=cfg.seed, num_workers=WORKERS,
    )  # fmt: skip


class OneGetPerWindow(RawS3Windows):
    """Baseline: every window piece of a batch is its own ranged GET (one ``cat_ranges`` call per
    batch, nothing merged)."""

    def __getitems__(self, indexes: Any) -> Any:
        import torch

        pieces = self.ranges(indexes)
        blobs = self.fs().cat_ranges(
            [self.paths[s] for s, _, _, _, _ in pieces],
            [a for _, a, _, _, _ in pieces],
            [b for _, _, b, _, _ in pieces],
        )
        out = np.empty((len(indexes), self.sequence_length), dtype=self.out_dtype)
        for (_shard, _a, _b, row, off), blob in zip(pieces, blobs):
            tokens = np.frombuffer(blob, dtype=self.dtype)
            out[row, off : off + len(tokens)] = tokens
        return torch.from_numpy(out)


def _theirs(
    storage: Any, bucket_root: str, options: dict[str, Any], mode: str, cfg: Config, merge: bool = True
) -> Any:
    from torch.utils.data import DataLoader

    import guideloom.layout as layout
    from benchmarks.loops import _identity

    shards = storage.manifest.shards
    dataset = (RawS3Windows if merge else OneGetPerWindow)(
        options,
        [f"{bucket_root}/{s.files['data'].path}" for s in shards],
        np.array([s.tokens for s in shards]),
        layout.HEADER_SIZE,
        2,
        cfg.sequence_length,
        np.int32,
        np.uint16,
    )
    return DataLoader(
        dataset, batch_sampler=_batches(len(dataset), mode, cfg), num_workers=WORKERS, collate_fn=_identity
    )


def _counted_pass(loader: Any, proxy: CountingProxy) -> dict[str, Any]:
    """Requests and bytes of one pass at the proxy; ``gets_per_block`` counts GETs per
    ``BLOCK_SIZE`` windows delivered (one whole-block request each would be 1)."""
    proxy.reset()
    tokens = 0
    windows = 0
    for batch in loader:
        tokens += count_tokens(batch)
        windows += len(batch["tokens"] if isinstance(batch, dict) else batch)
    gets = [e for e in proxy.log if e.method == "GET"]
    counted: dict[str, int] = {}  # what the loader's own io_stats says it sent (ours only)
    for entry in (loader.io_stats() if hasattr(loader, "io_stats") else {}).values():
        for kind, n in entry["requests"].items():
            counted[kind] = counted.get(kind, 0) + n
        counted["bytes_read"] = counted.get("bytes_read", 0) + entry["bytes_read"]
    return {
        "io_stats": counted,
        "gets": len(gets),
        "amplification": proxy.bytes_out / (tokens * 2),
        "gets_per_window": len(gets) / windows,
        "gets_per_block": len(gets) / (windows / BLOCK_SIZE),
        "requests": proxy.request_count,
        "max_get_bytes": max((e.bytes for e in gets), default=0),
    }


def s3_rows(cfg: Config, endpoint: Any = None) -> list[Row]:
    from guideloom import StreamStorage

    rows = []
    with running_endpoint(endpoint) as (ep, note), fresh_bucket(ep.storage_options()) as bucket:
        options = ep.storage_options()
        url = f"s3://{bucket}/stream"
        storage = write_stream(url, cfg.s3_tokens, cfg.seed, cfg.shard_size, storage_options=options)
        shard_bytes = max(s.files["data"].size for s in storage.manifest.shards)
        for mode in cfg.s3_shuffles:
            ours_loader = _ours(url, options, mode, cfg)
            theirs_loader = _theirs(storage, f"{bucket}/stream", options, mode, cfg)
            first: dict[str, list[float]] = {"guideloom": [], "baseline": []}

            def ours() -> float:
                p = timed_pass(ours_loader, count_tokens)  # noqa: B023 - called inside this iteration
                first["guideloom"].append(p.first_batch_s)  # noqa: B023
                return p.rate

            def theirs() -> float:
                p = timed_pass(theirs_loader, count_tokens)  # noqa: B023
                first["baseline"].append(p.first_batch_s)  # noqa: B023
                return p.rate

            g, b = interleaved(ours, theirs, cfg.repeats, warmup=not cfg.quick)
            single_loader = _theirs(storage, f"{bucket}/stream", options, mode, cfg, merge=False)
            g2, single = interleaved(
                lambda: timed_pass(ours_loader, count_tokens).rate,  # noqa: B023 - called right here
                lambda: timed_pass(single_loader, count_tokens).rate,  # noqa: B023
                cfg.repeats,
                warmup=False,
            )
            with CountingProxy(ep.url) as proxy:
                proxied = {**ep.storage_options(proxy.url), "skip_instance_cache": True}
                ours_counts = _counted_pass(_ours(url, proxied, mode, cfg), proxy)
                # the byte-sized two-level block shuffle (#34) on the same corpus: GETs per epoch
                windowed = _counted_pass(_windowed(url, proxied, cfg), proxy) if mode == "block" else None
                theirs_counts = _counted_pass(
                    _theirs(
                        StreamStorage(url, stream_format(), storage_options=options),
                        f"{bucket}/stream",
                        proxied,
                        mode,
                        cfg,
                    ),
                    proxy,
                )
            extra = {
                "first_batch_s": float(np.median(first["guideloom"])),
                "baseline_first_batch_s": float(np.median(first["baseline"])),
                "bytes_transferred_per_delivered": ours_counts["amplification"],
                "baseline_bytes_transferred_per_delivered": theirs_counts["amplification"],
                "gets_per_window": ours_counts["gets_per_window"],
                "gets_per_block": ours_counts["gets_per_block"],
                "baseline_gets_per_window": theirs_counts["gets_per_window"],
                "max_get_bytes": ours_counts["max_get_bytes"],
                "io_stats_requests": ours_counts["io_stats"],  # the loader's count, beside the proxy's
                "proxy_gets": ours_counts["gets"],
                "shard_bytes": shard_bytes,
                "tokens": storage.manifest.total_tokens,
                "server": ep.backend,
            }
            if windowed is not None:
                extra["byte_block_gets_per_epoch"] = windowed["gets"]
                extra["byte_block_bytes_per_get"] = (
                    windowed["amplification"] * cfg.s3_tokens * 2 / max(1, windowed["gets"])
                )
                extra["byte_block_amplification"] = windowed["amplification"]
            if note:
                extra["server_note"] = note
            checks = {
                "amplification <= 1.1": ours_counts["amplification"] <= 1.1,
                "no whole-shard GET": ours_counts["max_get_bytes"] < shard_bytes,
                "first batch <= 0.5 s": extra["first_batch_s"] <= 0.5,
            }
            name = {"none": "off"}.get(mode, mode)
            rows.append(
                Row(
                    "s3",
                    f"shuffle={name} workers={WORKERS}",
                    "tokens/s",
                    g,
                    b,
                    "raw fs.cat_ranges, same ranges",
                    target=0.8,
                    extra=extra,
                    checks=checks,
                )
            )
            rows.append(
                Row(
                    "s3",
                    f"shuffle={name} workers={WORKERS} vs one GET per window",
                    "tokens/s",
                    g2,
                    single,
                    "one ranged GET per window",
                    target=4.0 if mode == "full" else None,
                    extra={"server": ep.backend},
                )
            )
    return rows


def s3_thread_rows(cfg: Config, endpoint: Any = None) -> list[Row]:
    """Row ``s3-threads``: 2 thread workers against 2 process workers, same S3 server and corpus.

    Both are GuideLoom's loader with the same settings (read-ahead sized in bytes, 4 MiB per
    group by default); threads hand batches over without pickling. Target (issue 14): >= 1.3x on RGW.
    """
    rows = []
    with running_endpoint(endpoint) as (ep, note), fresh_bucket(ep.storage_options()) as bucket:
        options = ep.storage_options()
        url = f"s3://{bucket}/stream"
        storage = write_stream(url, cfg.s3_tokens, cfg.seed, cfg.shard_size, storage_options=options)
        for mode in cfg.s3_shuffles:
            threads = _ours(url, options, mode, cfg, parallel_method="thread")
            processes = _ours(url, options, mode, cfg)
            firsts: list[float] = []

            def ours() -> float:
                p = timed_pass(threads, count_tokens)  # noqa: B023 - called inside this iteration
                firsts.append(p.first_batch_s)  # noqa: B023
                return p.rate

            g, b = interleaved(
                ours,
                lambda: timed_pass(processes, count_tokens).rate,  # noqa: B023 - called right here
                cfg.repeats,
                warmup=not cfg.quick,
            )
            extra: dict[str, Any] = {
                "first_batch_s": float(np.median(firsts)),
                "tokens": storage.manifest.total_tokens,
                "server": ep.backend,
            }
            if note:
                extra["server_note"] = note
            name = {"none": "off"}.get(mode, mode)
            rows.append(
                Row(
                    "s3-threads",
                    f"shuffle={name} 2 threads vs 2 processes",
                    "tokens/s",
                    g,
                    b,
                    "GuideLoom, 2 process workers",
                    target=1.3,
                    extra=extra,
                )
            )
    return rows
