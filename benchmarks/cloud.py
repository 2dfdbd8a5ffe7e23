"""Rows ``gs`` and ``az``: the ``s3`` row's loader measurement on GCS and Azure Blob, against
their emulators on 127.0.0.1 (issue 23's benchmarks).

The emulators are started as the test suite starts them (``tests/infra/objectstores.py``: the
pure-Python ``gcp-storage-emulator``, npm's ``azurite`` with ``--disableTelemetry``); a row whose
emulator is missing is reported as failed with the reason. Each row: GuideLoom's loader
(block shuffle, 2 workers) against raw ``fs.cat_ranges`` of the same byte ranges through the same
fsspec filesystem (``gcsfs``, ``adlfs``), and the loader's own request count per window
(``io_stats``). Both sides are bound by the emulator, which is far slower than the real stores:
the ratio is what the row is for.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.corpus import write_stream
from benchmarks.harness import Config, Row, interleaved
from benchmarks.loops import count_tokens, timed_pass

__all__ = ["cloud_rows"]

ROOT = Path(__file__).resolve().parents[1]
PROTOCOL = {"gcs": "gs", "azure": "az"}
ROW = {"gcs": "gs", "azure": "az"}


def _emulators() -> Any:
    sys.path.insert(0, str(ROOT / "tests" / "infra"))
    import objectstores

    return objectstores


def cloud_rows(cfg: Config, store: str) -> list[Row]:
    from benchmarks import remote

    objectstores = _emulators()
    workdir = Path(tempfile.mkdtemp(prefix=f"gl-bench-{store}-"))
    endpoint = objectstores.STARTERS[store](workdir)
    try:
        with objectstores.fresh_bucket(endpoint) as bucket:
            options = endpoint.storage_options()
            protocol = PROTOCOL[store]
            url = f"{protocol}://{bucket}/stream"
            tokens = min(cfg.s3_tokens, 1_000_000)  # the emulators are slow: a smaller corpus
            storage = write_stream(url, tokens, cfg.seed, 1 << 20, storage_options=options)
            ours = remote._ours(url, options, "block", cfg)
            theirs = remote._theirs(storage, f"{bucket}/stream", options, "block", cfg)
            theirs.dataset.protocol = protocol
            g, b = interleaved(
                lambda: timed_pass(ours, count_tokens).rate,
                lambda: timed_pass(theirs, count_tokens).rate,
                max(1, cfg.repeats),
                warmup=not cfg.quick,
            )
            counted = _requests(ours)
    finally:
        endpoint.stop()
    windows = storage.manifest.total_tokens // cfg.sequence_length
    return [
        Row(
            ROW[store],
            f"shuffle=block workers={remote.WORKERS} ({endpoint.description})",
            "tokens/s",
            g,
            b,
            "raw fs.cat_ranges, same ranges",
            target=0.8,
            extra={"tokens": storage.manifest.total_tokens, "gets_per_window": counted / max(1, windows)},
        )
    ]


def _requests(loader: Any) -> float:
    """GETs of one more pass, from the loader's own io_stats."""
    before = sum(e["requests"].get("GET", 0) for e in loader.io_stats().values())
    for _ in loader:
        pass
    return float(sum(e["requests"].get("GET", 0) for e in loader.io_stats().values()) - before)
