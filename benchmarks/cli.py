"""``python -m benchmarks``: build the corpora, run the rows, print the table, write JSON.

Examples::

    python -m benchmarks                                  # every row, default sizes (a few minutes)
    python -m benchmarks --rows local,s3 --repeats 5
    python -m benchmarks --tokens 2000000 --json out.json
    GUIDELOOM_TEST_S3=moto python -m benchmarks --rows s3 # moto instead of Ceph RGW

The S3 server is chosen as in the tests (``tests/infra/s3server.py``): ``GUIDELOOM_TEST_S3_ENDPOINT``
if set, else Ceph RGW when ``radosgw`` is installed, else moto. It is started once for the run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    Config,
    Row,
    results_payload,
    timed_run,
    workdir,
)

__all__ = ["ROWS", "main", "run"]

ROWS = (
    "local",
    "threads",
    "documents",
    "s3",
    "s3-threads",
    "gs",
    "az",
    "meta",
    "resume",
    "memory",
    "ingest",
    "ingest-cluster",
    "ingest-kinds",
    "decontaminate",
    "dedup",
    "open",
    "write",
    "mix",
    "scale",
    "snapshots",
    "boundaries",
    "throttle",
    "cache",
    "trace",
    "foreign",
    "pack",
    "rebuilt",
    "report",
    "metrics",
    "order",
)
S3_ROWS = ("s3", "s3-threads", "memory", "scale", "throttle", "cache", "foreign", "rebuilt")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    d = Config(workdir=Path("."))
    p.add_argument(
        "--rows", default=",".join(ROWS), help=f"comma-separated rows to run; any of {','.join(ROWS)}"
    )
    p.add_argument("--tokens", type=int, default=d.tokens, help="local stream corpus size in tokens")
    p.add_argument("--s3-tokens", type=int, default=d.s3_tokens, help="S3 corpus size in tokens")
    p.add_argument("--documents", type=int, default=d.documents, help="document corpus size in records")
    p.add_argument(
        "--open-shards", type=int, default=d.open_shards, help="shards of the open row's large dataset"
    )
    p.add_argument(
        "--ingest-tokens", type=int, default=d.ingest_tokens, help="ingestion input size, about, in tokens"
    )
    p.add_argument("--s3-shuffles", default=",".join(d.s3_shuffles), help="S3 orders: none,block,full")
    p.add_argument("--repeats", type=int, default=d.repeats, help="timed repeats per measurement")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--shard-size", type=int, default=d.shard_size, help="shard size in bytes")
    p.add_argument("--json", default="bench-results/results.json", help="where to write the results")
    p.add_argument("--workdir", default=None, help="keep corpora here (default: a temporary directory)")
    p.add_argument("--quick", action="store_true", help="no warm-up passes (smoke runs)")
    args = p.parse_args(argv)
    unknown = set(args.rows.split(",")) - set(ROWS)
    if unknown:
        p.error(f"unknown rows {sorted(unknown)}; choose from {','.join(ROWS)}")
    return args


def run(
    cfg: Config, rows: list[str], s3_endpoint: Any = None, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Run ``rows``; returns the JSON payload (rows, failures, machine, config)."""
    from benchmarks import (
        caching,
        cloud,
        decontamination,
        dedup_bench,
        foreign,
        ingest_cluster,
        ingest_kinds,
        ingestion,
        loader_metrics,
        local,
        memory,
        mixing,
        opening,
        ordering,
        packing,
        rebuilt,
        remote,
        reporting,
        resume,
        scale,
        snapshots,
        throttling,
        tracing,
        writing,
    )
    from benchmarks.s3env import running_endpoint

    results: list[Row] = []
    failures: dict[str, str] = {}
    durations: dict[str, float] = {}
    server: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        if s3_endpoint is None and any(r in S3_ROWS for r in rows):
            log("starting the S3 server ...")
            s3_endpoint, note = stack.enter_context(running_endpoint())
            if note:
                log(f"NOTE: {note}")
                server["note"] = note
        if s3_endpoint is not None:
            server.update(backend=s3_endpoint.backend, description=s3_endpoint.description)
        runners: dict[str, Callable[[], list[Row]]] = {
            "local": lambda: local.local_rows(cfg),
            "threads": lambda: local.thread_rows(cfg),
            "documents": lambda: local.documents_rows(cfg),
            "s3": lambda: remote.s3_rows(cfg, s3_endpoint),
            "s3-threads": lambda: remote.s3_thread_rows(cfg, s3_endpoint),
            "gs": lambda: cloud.cloud_rows(cfg, "gcs"),
            "az": lambda: cloud.cloud_rows(cfg, "azure"),
            "meta": lambda: local.meta_rows(cfg),
            "resume": lambda: resume.resume_rows(cfg),
            "memory": lambda: memory.memory_rows(cfg, s3_endpoint),
            "ingest": lambda: ingestion.ingest_rows(cfg),
            "ingest-cluster": lambda: ingest_cluster.ingest_cluster_rows(cfg),
            "ingest-kinds": lambda: ingest_kinds.ingest_kind_rows(cfg),
            "decontaminate": lambda: decontamination.decontamination_rows(cfg),
            "dedup": lambda: dedup_bench.dedup_rows(cfg),
            "open": lambda: opening.open_rows(cfg),
            "write": lambda: writing.write_rows(cfg),
            "mix": lambda: mixing.mix_rows(cfg),
            "scale": lambda: scale.scale_rows(cfg, s3_endpoint),
            "snapshots": lambda: snapshots.snapshot_rows(cfg),
            "boundaries": lambda: local.boundaries_rows(cfg),
            "throttle": lambda: throttling.throttle_rows(cfg, s3_endpoint),
            "cache": lambda: caching.cache_rows(cfg, s3_endpoint),
            "trace": lambda: tracing.trace_rows(cfg),
            "foreign": lambda: foreign.foreign_rows(cfg, s3_endpoint),
            "pack": lambda: packing.pack_rows(cfg),
            "rebuilt": lambda: rebuilt.rebuilt_rows(cfg, s3_endpoint),
            "report": lambda: reporting.report_rows(cfg),
            "metrics": lambda: loader_metrics.metrics_rows(cfg),
            "order": lambda: ordering.order_rows(cfg),
        }
        for name in ROWS:
            if name not in rows:
                continue
            log(f"row {name} ...")
            t0 = time.perf_counter()
            try:
                results.extend(runners[name]())
            except Exception as err:  # noqa: BLE001 - one broken row must not lose the others
                failures[name] = f"{type(err).__name__}: {err}"
                log(f"row {name} FAILED:\n{traceback.format_exc()}")
            durations[name] = round(time.perf_counter() - t0, 1)
    return results_payload(cfg, results, failures, s3_server=server, row_seconds=durations)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    rows = [r for r in args.rows.split(",") if r]
    with workdir(args.workdir) as work:
        cfg = Config(
            workdir=work,
            tokens=args.tokens,
            s3_tokens=args.s3_tokens,
            documents=args.documents,
            repeats=args.repeats,
            seed=args.seed,
            shard_size=args.shard_size,
            open_shards=args.open_shards,
            ingest_tokens=args.ingest_tokens,
            s3_shuffles=tuple(args.s3_shuffles.split(",")),
            quick=args.quick,
        )
        payload = timed_run(lambda log: run(cfg, rows, log=log), args.json)
    m = payload["machine"]
    print(
        f"\n{m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; S3: "
        f"{payload['s3_server'].get('description', 'not used')}; {payload['total_seconds']} s; "
        f"JSON: {args.json}"
    )
    for name, why in payload["failures"].items():
        print(f"row {name} FAILED: {why}", file=sys.stderr)
    return 1 if payload["failures"] else 0
