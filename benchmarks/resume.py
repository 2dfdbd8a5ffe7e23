"""Row ``resume``: from ``load_state_dict`` to the first batch, at 1 % and at 90 % of an epoch.

The states are real ones: a loader is iterated to 1 % and to 90 % of a shuffled epoch and its
``state_dict()`` saved. Each timed repeat builds a fresh loader (untimed, as a training script
does before it loads a checkpoint), then times ``load_state_dict`` + ``iter`` + the first batch.
Resuming is O(1) by design, so the ratio 90 % / 1 % should be about 1.
"""

from __future__ import annotations

import time
from typing import Any

from benchmarks.harness import Config, Row, interleaved
from benchmarks.local import _loader, local_stream

__all__ = ["resume_rows"]


def _state_at(storage: Any, cfg: Config, fraction: float, workers: int) -> dict[str, Any]:
    loader = _loader(storage, cfg, True, workers)
    steps = max(1, int(len(loader) * fraction))
    it = iter(loader)
    for _ in range(steps):
        next(it)
    state = loader.state_dict()
    del it
    return state


def _resume_seconds(storage: Any, cfg: Config, state: dict[str, Any], workers: int) -> float:
    loader = _loader(storage, cfg, True, workers)
    t0 = time.perf_counter()
    loader.load_state_dict(state)
    it = iter(loader)
    next(it)
    seconds = time.perf_counter() - t0
    del it
    return seconds


def _position(state: dict[str, Any]) -> Any:
    inner = next(iter(state.values())) if len(state) == 1 else state
    return inner.get("position") if isinstance(inner, dict) else None


def resume_rows(cfg: Config) -> list[Row]:
    storage, _ = local_stream(cfg)
    rows = []
    for workers in (0, 2):
        early = _state_at(storage, cfg, 0.01, workers)
        late = _state_at(storage, cfg, 0.90, workers)
        g, b = interleaved(
            lambda: _resume_seconds(storage, cfg, late, workers),  # noqa: B023 - called in this iteration
            lambda: _resume_seconds(storage, cfg, early, workers),  # noqa: B023
            cfg.repeats,
            warmup=not cfg.quick,
        )
        rows.append(
            Row(
                "resume",
                f"shuffle=full workers={workers}",
                "s",
                g,
                b,
                "resume at 1 %",
                higher_is_better=False,
                target=1.2,
                extra={"position_1pct": _position(early), "position_90pct": _position(late)},
            )
        )
    return rows
