"""Row ``write``: writing a stream from memory with ``storage.writer()`` against raw ``tofile``.

Both sides write the same in-memory documents (the local corpus's lengths, ``uint16`` tokens) to
local disk: GuideLoom through its writer (validation and safe casting of each record, shard
roll-over at ``shard_size``, checksums, the manifest), the baseline as one ``ndarray.tofile`` per
document into a single open file. Figures are tokens per second; the design's target is 0.8x.
"""

from __future__ import annotations

import shutil
import time

import numpy as np

from benchmarks.corpus import DTYPE, VOCAB, document_lengths, stream_format
from benchmarks.harness import Config, Row, interleaved

__all__ = ["write_rows"]


def write_rows(cfg: Config) -> list[Row]:
    from guideloom import StreamStorage

    rng = np.random.default_rng(cfg.seed + 7)
    documents = [rng.integers(0, VOCAB, int(n), dtype=DTYPE) for n in document_lengths(cfg.tokens, cfg.seed)]
    total = sum(len(d) for d in documents)
    target = cfg.workdir / "write-guideloom"
    raw_path = cfg.workdir / "write-raw.bin"

    def ours() -> float:
        shutil.rmtree(target, ignore_errors=True)
        storage = StreamStorage(str(target), stream_format())
        t0 = time.perf_counter()
        with storage.writer(shard_size=cfg.shard_size) as writer:
            for doc in documents:
                writer.append({"tokens": doc})
        return total / (time.perf_counter() - t0)

    def raw() -> float:
        t0 = time.perf_counter()
        with open(raw_path, "wb") as f:
            for doc in documents:
                doc.tofile(f)
        return total / (time.perf_counter() - t0)

    g, b = interleaved(ours, raw, cfg.repeats, warmup=not cfg.quick)
    raw_path.unlink(missing_ok=True)
    shutil.rmtree(target, ignore_errors=True)
    return [
        Row(
            "write",
            f"local, {len(documents):,} documents from memory",
            "tokens/s",
            g,
            b,
            "raw ndarray.tofile",
            target=0.8,
            extra={"tokens": total},
        )
    ]
