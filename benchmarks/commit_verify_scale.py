"""Commit and verify cost against the number of parts / shards, on an S3 server on 127.0.0.1.

The `scale` row (`benchmarks/scale.py`) calls `commit_and_verify` at three sizes; run one size per
process for a clean peak RSS figure::

    python benchmarks/commit_verify_scale.py --endpoint http://127.0.0.1:PORT --parts 1000

It writes ``--parts`` parts of one tiny shard each through ``storage.writer(part=k)`` (16 threads;
not timed), then times ``storage.commit(num_parts=n)`` and ``list(storage.verify())`` and prints
one JSON line: seconds, and the growth of the peak RSS during commit (MiB). Growth exponents
come from fitting log(seconds) against log(n) over sizes two orders of magnitude apart.
Works with the code before and after the change of issue 10/11 (whatever ``guideloom`` imports).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import resource
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import s3fs

from guideloom import StreamNumpyFormat, StreamStorage


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def commit_and_verify(options: dict, parts: int, bucket: str | None = None) -> dict:
    """Write ``parts`` one-shard parts (16 threads, not timed) to a new bucket, then time
    ``commit`` and ``verify``: seconds, and the peak RSS growth during commit (MiB)."""
    bucket = bucket or f"scale-{uuid.uuid4().hex[:10]}"
    fs = s3fs.S3FileSystem(**options, skip_instance_cache=True)
    fs.mkdir(bucket)
    storage = StreamStorage(
        f"s3://{bucket}/ds", StreamNumpyFormat({"tokens": np.uint16}), storage_options=options
    )

    def write(k: int) -> None:
        with storage.writer(part=k) as w:
            w.append({"tokens": np.arange(64) + k})

    try:
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(write, range(parts)))
        before = _rss_mib()
        started = time.perf_counter()
        manifest = storage.commit(num_parts=parts)
        commit_s = time.perf_counter() - started
        commit_rss = _rss_mib() - before
        assert manifest.num_shards == parts
        started = time.perf_counter()
        results = list(storage.verify())
        verify_s = time.perf_counter() - started
        assert len(results) == parts and all(err is None for _, err in results)
    finally:
        fs.rm(bucket, recursive=True)
    return {
        "parts": parts,
        "commit_s": round(commit_s, 3),
        "commit_peak_rss_growth_mib": round(commit_rss, 1),
        "verify_s": round(verify_s, 3),
        "verify_concurrent": "concurrency" in inspect.signature(storage.verify).parameters,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--parts", type=int, required=True)
    args = parser.parse_args()
    key = os.environ.get("AWS_ACCESS_KEY_ID", "testing")
    secret = os.environ.get("AWS_SECRET_ACCESS_KEY", "testing")
    options = {"key": key, "secret": secret, "client_kwargs": {"endpoint_url": args.endpoint}}
    print(json.dumps(commit_and_verify(options, args.parts)))


if __name__ == "__main__":
    main()
