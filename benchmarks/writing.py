"""Row ``write``: writing a stream from memory with ``storage.writer()`` against raw ``tofile``.

Both sides write the same 20,000 in-memory documents (the local corpus's lengths: a few hundred
to a few thousand ``uint16`` tokens each, what ingestion appends) to local disk: GuideLoom through
its writer, one ``append`` per document (validation and safe casting of each record, 4 MiB shards,
checksums, record starts, the manifest), the baseline as their ``np.concatenate`` and one
``tofile`` (issue 25's setup); one ``tofile`` per document into one open file is reported beside.
Beside them, the same documents through ``append_batch``: as a list of records (one
concatenate), and as one flat array with ``lengths`` (what ingestion hands the writer; the
array is already joined, so that side copies it once where the baseline concatenates).
Figures are tokens per second; the target is 0.9x.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable

import numpy as np

from benchmarks.corpus import DTYPE, VOCAB, document_lengths, stream_format
from benchmarks.harness import Config, Row, interleaved

__all__ = ["write_rows"]

DOCUMENTS = 20_000
SHARD_SIZE = 4 << 20


def write_rows(cfg: Config) -> list[Row]:
    from guideloom import StreamStorage

    rng = np.random.default_rng(cfg.seed + 7)
    lengths = document_lengths(max(cfg.tokens, 40_000_000), cfg.seed)[:DOCUMENTS]
    documents = [rng.integers(0, VOCAB, int(n), dtype=DTYPE) for n in lengths]
    total = sum(len(d) for d in documents)
    target = cfg.workdir / "write-guideloom"
    raw_path = cfg.workdir / "write-raw.bin"

    def ours() -> float:
        shutil.rmtree(target, ignore_errors=True)
        storage = StreamStorage(str(target), stream_format())
        t0 = time.perf_counter()
        with storage.writer(shard_size=SHARD_SIZE) as writer:
            for doc in documents:
                writer.append({"tokens": doc})
        return total / (time.perf_counter() - t0)

    records = [{"tokens": d} for d in documents]
    joined = {"tokens": np.concatenate(documents)}
    per_record = np.array([len(d) for d in documents], np.int64)

    def batch(flat: bool) -> Callable[[], float]:
        def run() -> float:
            shutil.rmtree(target, ignore_errors=True)
            storage = StreamStorage(str(target), stream_format())
            t0 = time.perf_counter()
            with storage.writer(shard_size=SHARD_SIZE) as writer:
                if flat:
                    writer.append_batch(joined, per_record)
                else:
                    writer.append_batch(records)
            return total / (time.perf_counter() - t0)

        return run

    def raw() -> float:
        t0 = time.perf_counter()
        np.concatenate(documents).tofile(raw_path)
        return total / (time.perf_counter() - t0)

    def per_document() -> float:
        t0 = time.perf_counter()
        with open(raw_path, "wb") as f:
            for doc in documents:
                doc.tofile(f)
        return total / (time.perf_counter() - t0)

    g, b = interleaved(ours, raw, cfg.repeats, warmup=not cfg.quick)
    _, each = interleaved(ours, per_document, 1, warmup=False)
    as_list, raw_list = interleaved(batch(False), raw, cfg.repeats, warmup=False)
    as_flat, raw_flat = interleaved(batch(True), raw, cfg.repeats, warmup=False)
    raw_path.unlink(missing_ok=True)
    shutil.rmtree(target, ignore_errors=True)
    return [
        Row(
            "write",
            f"local, {len(documents):,} documents from memory",
            "tokens/s",
            g,
            b,
            "np.concatenate + tofile",
            target=0.9,
            extra={
                "tokens": total,
                "shard_size": SHARD_SIZE,
                "per_document_tofile_tokens_per_s": each.median,
                "append_batch_list_tokens_per_s": as_list.median,
                "append_batch_list_ratio": round(as_list.median / raw_list.median, 3),
                "append_batch_flat_tokens_per_s": as_flat.median,
                "append_batch_flat_ratio": round(as_flat.median / raw_flat.median, 3),
            },
        )
    ]
