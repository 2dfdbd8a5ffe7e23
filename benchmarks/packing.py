"""Row ``pack``: ``from_storage(pack="whole")`` against the plain loader (``pack=None``) on a
chat-like corpus, and its packing efficiency against TRL's best fit decreasing.

The corpus: records of lognormal lengths (median about 330 tokens, long tail, clipped to
8 .. 8192; chat conversations look like this), ``cfg.tokens // 4`` tokens with a loss mask,
written once under the work folder. Both loaders shuffle fully with ``num_workers=0`` and the
same batches of ``cfg.sequence_length`` windows, interleaved in one run. Throughput counts
*real* tokens per second (padding excluded), so the ratio is what packing costs per useful token:
one positioned read (or range) per record instead of per run of windows, plus ``labels``,
``position_ids`` and ``cu_seqlens``, which the plain loader does not make. The row has no ratio
target; its check is the efficiency against TRL's.

Efficiency is real tokens over window tokens. TRL's figure is computed here on the same record
lengths (records longer than the window split into window-sized pieces, as ``too_long="split"``
does): ``trl.pack_dataset(strategy="bfd")`` packs the whole dataset at once by best fit
decreasing, which is `guideloom.loading.packing.packing_efficiency` with no buffer; ours packs
runs of ``Packing.buffer`` records. No TRL install is needed for that arithmetic.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from benchmarks.harness import Config, Row, interleaved
from benchmarks.loops import count_tokens, timed_pass

__all__ = ["pack_rows"]

VOCAB = 32_000


def chat_lengths(total_tokens: int, seed: int) -> np.ndarray:
    """Record lengths (tokens) adding up to about ``total_tokens``: lognormal, median ~330."""
    rng = np.random.default_rng(seed + 37)
    out = np.clip(rng.lognormal(mean=5.8, sigma=0.9, size=max(1, total_tokens // 200)), 8, 8192)
    out = out.astype(np.int64)
    ends = np.cumsum(out)
    return out[: max(1, int(np.searchsorted(ends, total_tokens)))]


def _corpus(cfg: Config) -> tuple[Any, np.ndarray]:
    from guideloom import StreamNumpyFormat, StreamStorage

    fmt = StreamNumpyFormat({"tokens": np.uint16, "loss_mask": np.uint8})
    url = str(cfg.workdir / "pack-chat")
    lengths = chat_lengths(max(cfg.tokens // 4, 50_000), cfg.seed)
    storage = StreamStorage(url, fmt)
    if not storage.exists():
        rng = np.random.default_rng(cfg.seed + 38)
        with storage.writer(shard_size=cfg.shard_size) as writer:
            for n in lengths.tolist():
                tokens = rng.integers(1, VOCAB, n, dtype=np.uint16)  # 0 is the pad id
                mask = np.ones(n, np.uint8)
                mask[: n // 3] = 0  # the prompt: no loss
                writer.append({"tokens": tokens, "loss_mask": mask})
    return StreamStorage(url, fmt), lengths


def _real_tokens(batch: Any) -> int:
    return int((batch["tokens"] != 0).sum())


def _pieces(lengths: np.ndarray, window: int) -> list[int]:
    """The lengths packed: a record longer than ``window`` as its window-sized pieces."""
    out: list[int] = []
    for n in lengths.tolist():
        full, rest = divmod(n, window)
        out.extend([window] * full + ([rest] if rest else []))
    return out


def pack_rows(cfg: Config) -> list[Row]:
    from guideloom import StatefulDataLoader
    from guideloom.loading.packing import Packing, packing_efficiency

    storage, lengths = _corpus(cfg)
    settings: dict[str, Any] = dict(
        sequence_length=cfg.sequence_length, batch_size=cfg.batch_size, shuffle=True, seed=cfg.seed
    )
    t0 = time.perf_counter()
    packing = Packing()
    packed = StatefulDataLoader.from_storage(storage, pack=packing, **settings)
    plan_s = time.perf_counter() - t0
    plain = StatefulDataLoader.from_storage(storage, **settings)
    g, b = interleaved(
        lambda: timed_pass(packed, _real_tokens).rate,
        lambda: timed_pass(plain, count_tokens).rate,
        cfg.repeats,
        warmup=not cfg.quick,
    )
    stats = packed.view.stats
    pieces = _pieces(lengths, cfg.sequence_length)
    trl = packing_efficiency(pieces, cfg.sequence_length)
    return [
        Row(
            "pack",
            f"pack='whole' buffer={packing.buffer} shuffle=full workers=0, lognormal chat lengths",
            "real tokens/s",
            g,
            b,
            "pack=None (windows cut every L tokens)",
            target=None,  # reported: packing reads per record and adds labels and position ids
            extra={
                "records": int(len(lengths)),
                "median_record_tokens": int(np.median(lengths)),
                "efficiency": round(stats.efficiency, 4),
                "trl_bfd_efficiency": round(trl, 4),
                "efficiency_vs_trl": round(stats.efficiency / trl, 4) if trl else None,
                "windows_packed": stats.windows,
                "windows_plain": len(plain.view),
                "split_records": stats.split,
                "plan_seconds": round(plan_s, 3),
            },
            checks={"efficiency >= 0.97x TRL bfd": stats.efficiency >= 0.97 * trl},
        )
    ]
