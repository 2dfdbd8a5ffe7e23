"""Row ``ingest-cluster``: ``guideloom ingest`` on a two-node local Ray cluster (one CPU per
node), 2 parts in flight against 1 (issue 25 item 4).

The cluster is started as docs/ingestion-with-ray.md starts one (``ray start --block`` for the
head and for a worker node, each in a process group of its own, free ports, a temp dir of its
own) and stopped by its own process groups, never with ``ray stop``. This process is the job's
driver (``ray.init(address=...)``); the parts run on both nodes. The measurement is
:func:`benchmarks.ingest_bench.measure_ingest`, as for the ``ingest`` row.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.harness import Config, Row, stats

__all__ = ["ingest_cluster_rows", "two_node_cluster"]

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def two_node_cluster() -> Iterator[str]:
    """A head and a worker node, one CPU each; yields the GCS address."""
    from guideloom.workers.ports import free_ports, wait_healthy

    ray = str(Path(sys.executable).with_name("ray"))
    tmp = Path(tempfile.mkdtemp(prefix="gl-bench-ray-"))
    gcs, dash, client, head_agent, worker_agent = free_ports(5)
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(ROOT)}
    env.pop("RAY_ADDRESS", None)
    common = ["--block", "--num-cpus=1", "--disable-usage-stats", "--object-store-memory=268435456"]
    head = [
        ray, "start", "--head", f"--port={gcs}", "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}",
        f"--ray-client-server-port={client}", f"--dashboard-agent-listen-port={head_agent}",
        f"--temp-dir={tmp / 'ray'}", *common,
    ]  # fmt: skip
    worker = [
        ray,
        "start",
        f"--address=127.0.0.1:{gcs}",
        f"--dashboard-agent-listen-port={worker_agent}",
        *common,
    ]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with open(tmp / "head.log", "wb") as log:
            procs.append(subprocess.Popen(head, env=env, stdout=log, stderr=log, start_new_session=True))
        problem = wait_healthy(f"http://127.0.0.1:{dash}/api/gcs_healthz")
        if problem:
            raise RuntimeError(f"the head did not start: {problem} ({tmp / 'head.log'})")
        with open(tmp / "worker.log", "wb") as log:
            procs.append(subprocess.Popen(worker, env=env, stdout=log, stderr=log, start_new_session=True))
        problem = wait_healthy(f"http://127.0.0.1:{worker_agent}/api/local_raylet_healthz")
        if problem:
            raise RuntimeError(f"the worker node did not start: {problem} ({tmp / 'worker.log'})")
        yield f"127.0.0.1:{gcs}"
    finally:
        for proc in reversed(procs):  # this cluster only: its own process groups
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(tmp, ignore_errors=True)


def ingest_cluster_rows(cfg: Config, scale: int | None = None) -> list[Row]:
    import ray

    from benchmarks.ingest_bench import measure_ingest

    scale = scale if scale is not None else max(1, round(cfg.ingest_tokens / 100_000))
    with two_node_cluster() as address:
        ray.init(address=address, log_to_driver=False, configure_logging=False)
        try:
            nodes = len([n for n in ray.nodes() if n.get("Alive")])
            if not cfg.quick:
                measure_ingest(scale=scale)  # both nodes' workers import the tokenizer first
            runs: list[dict[str, Any]] = [measure_ingest(scale=scale) for _ in range(max(1, cfg.repeats))]
        finally:
            ray.shutdown()
    one = stats([r["ingest_1_workers_tokens_per_s"] for r in runs])
    two = stats([r["ingest_2_workers_tokens_per_s"] for r in runs])
    extra = {"nodes": nodes, "tokens": runs[-1]["tokens"], "parts": runs[-1].get("ingest_2_workers_parts")}
    return [
        Row(
            "ingest-cluster",
            "2 parts in flight vs 1, two nodes of 1 CPU",
            "tokens/s",
            two,
            one,
            "1 part in flight",
            target=1.7,
            extra=extra,
        )
    ]
