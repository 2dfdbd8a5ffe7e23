"""Row ``order``: does a shuffle train like a full shuffle? (issue 34)

A corpus whose documents are grouped by source (the realistic worst case: sources concatenated
one after the other) is written once: ``SOURCES`` sources, each its own first-order Markov chain
over a small vocabulary, so that a model that sees one source for long forgets the others. A tiny
causal transformer is trained for one epoch from the same initial weights, with the same batches
per step, under four orders of the same loader:

- ``none``: the stored order (source after source);
- ``old block``: the block order before #34 (blocks of 64 windows, buffers of 4, runs of 8);
- ``new block``: the byte-sized two-level block shuffle, scaled to the corpus as the defaults
  are to a large one (512 blocks per window, the epoch several windows long);
- ``full``: a full random permutation, the reference.

Each order's held-out loss is measured on a uniformly mixed set (fresh windows from every
source), and reported as a ratio to the full shuffle's, beside the order's `guideloom.shuffle_report`
figures (jump entropy and distinct regions per batch against a random permutation, GETs).
Held-out loss is noisy on a busy machine at this size: compare ratios within one run.
"""

from __future__ import annotations

import shutil
import time
from typing import Any

import numpy as np

from benchmarks.harness import Config, Row, stats

__all__ = ["order_rows"]

SOURCES = 8
VOCAB = 96
LENGTH = 32  # tokens per window
BATCH = 32
WINDOWS_PER_SOURCE = 2048  # 16,384 windows: 512 steps of 32
BLOCK_WINDOWS = 8  # the new block shuffle's block, in windows (512 blocks per window: 4 windows)


def _chains(rng: np.random.Generator) -> np.ndarray:
    """Per source, a peaked transition matrix: each token has a few likely successors."""
    out = np.full((SOURCES, VOCAB, VOCAB), 1e-3)
    for s in range(SOURCES):
        for t in range(VOCAB):
            nxt = rng.choice(VOCAB, 4, replace=False)
            out[s, t, nxt] += rng.dirichlet(np.ones(4)) * 4
    return out / out.sum(axis=2, keepdims=True)


def _walk(chain: np.ndarray, windows: int, rng: np.random.Generator) -> np.ndarray:
    """``windows`` windows of LENGTH tokens from one chain (vectorised over the windows)."""
    cum = np.cumsum(chain, axis=1)
    out = np.empty((windows, LENGTH), dtype=np.int64)
    out[:, 0] = rng.integers(0, VOCAB, windows)
    for k in range(1, LENGTH):
        u = rng.random(windows)[:, None]
        out[:, k] = np.minimum((u > cum[out[:, k - 1]]).sum(axis=1), VOCAB - 1)
    return out


def _model(seed: int) -> Any:
    import torch
    from torch import nn

    torch.manual_seed(seed)

    class Tiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(VOCAB, 64)
            self.pos = nn.Embedding(LENGTH, 64)
            layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True, norm_first=True)
            self.body = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = nn.Linear(64, VOCAB)
            self.mask = nn.Transformer.generate_square_subsequent_mask(LENGTH)

        def forward(self, x: Any) -> Any:
            n = x.shape[1]
            h = self.emb(x) + self.pos(torch.arange(n))
            return self.head(self.body(h, mask=self.mask[:n, :n], is_causal=True))

    return Tiny()


def _train(loader: Any, held_out: np.ndarray, seed: int) -> float:
    """Held-out loss (nats per token) after one epoch of ``loader``."""
    import torch
    import torch.nn.functional as F

    model = _model(seed)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for batch in loader:
        x = batch["tokens"].long()
        logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        x = torch.from_numpy(held_out)
        logits = model(x[:, :-1])
        return float(F.cross_entropy(logits.reshape(-1, VOCAB), x[:, 1:].reshape(-1)))


def order_rows(cfg: Config) -> list[Row]:
    import torch

    import guideloom
    from guideloom import Shuffle, StatefulDataLoader, StreamNumpyFormat, StreamStorage

    torch.set_num_threads(1)
    per_source = WINDOWS_PER_SOURCE // 4 if cfg.quick else WINDOWS_PER_SOURCE
    rng = np.random.default_rng(cfg.seed)
    chains = _chains(rng)
    target = cfg.workdir / "order-corpus"
    shutil.rmtree(target, ignore_errors=True)
    fmt = StreamNumpyFormat({"tokens": np.uint16})
    storage = StreamStorage(str(target), fmt)
    with storage.writer(shard_size=64 * 2**10) as writer:
        for s in range(SOURCES):  # sources one after the other: the worst case for order
            writer.append({"tokens": _walk(chains[s], per_source, rng).ravel().astype(np.uint16)})
    storage = StreamStorage(str(target), fmt)
    held_out = np.concatenate([_walk(chains[s], 128, rng) for s in range(SOURCES)])

    sample_bytes = LENGTH * 2
    orders: dict[str, dict[str, Any]] = {
        "none": {"shuffle": False},
        "old block": {
            "shuffle": "block",
            "shuffle_block_size": 64,
            "shuffle_buffer_blocks": 4,
            "shuffle_run_size": 8,
        },
        "new block": {"shuffle": Shuffle(block_bytes=BLOCK_WINDOWS * sample_bytes, window_blocks=512)},
        "full": {"shuffle": True},
    }
    losses: dict[str, float] = {}
    reports: dict[str, Any] = {}
    seconds: dict[str, float] = {}
    for name, settings in orders.items():
        loader = StatefulDataLoader.from_storage(
            storage, sequence_length=LENGTH, batch_size=BATCH, seed=cfg.seed, **settings
        )
        t = time.perf_counter()
        losses[name] = _train(loader, held_out, cfg.seed)
        seconds[name] = time.perf_counter() - t
        shuffle = settings.pop("shuffle")
        reports[name] = guideloom.shuffle_report(
            storage, shuffle, BATCH, sequence_length=LENGTH, seed=cfg.seed, **settings
        )
    shutil.rmtree(target, ignore_errors=True)
    rows = []
    for name in orders:
        r = reports[name]
        rows.append(
            Row(
                "order",
                f"shuffle={name} ({SOURCES} sources concatenated, {SOURCES * per_source:,} windows, 1 epoch)",
                "held-out loss",
                stats([losses[name]]),
                stats([losses["full"]]),
                "full shuffle",
                higher_is_better=False,
                target=1.01 if name == "new block" else None,
                extra={
                    "entropy_ratio": round(r.entropy_ratio, 3),
                    "regions_ratio": round(r.regions_ratio, 3),
                    "blocks_ratio": round(r.blocks_ratio, 3),
                    "spearman": round(r.spearman, 4),
                    "gets_per_epoch": r.gets,
                    "window_bytes": r.settings["window_bytes"],
                    "full_shuffle": r.full_shuffle,
                    "train_seconds": round(seconds[name], 2),
                },
            )
        )
    return rows
