"""torch.distributed.checkpoint (torchtitan's way): the loader as a ``Stateful`` in ``dcp.save`` /
``dcp.load``; world sizes 1 and 2 (ranks simulated in one process, each with its rank and
world_size): the global sequence of batches equals an uninterrupted run's."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp
from trainer_setup import BATCH, EPOCHS, STEPS, make_loader, quiet

GLOBAL_BATCH = BATCH  # STEPS global steps an epoch at every world size


def _ranks(storage: Any, world_size: int) -> list[Any]:
    size = GLOBAL_BATCH // world_size
    return [
        make_loader(storage, batch_size=size, seed=5, rank=r, world_size=world_size)
        for r in range(world_size)
    ]


def _steps(loaders: list[Any], count: int | None, iters: list[Any]) -> list[bytes]:
    """``count`` global steps (None: to the end of the epoch): each rank's batch, joined in rank order."""
    out = []
    while count is None or len(out) < count:
        try:
            parts = [next(it)["tokens"] for it in iters]
        except StopIteration:
            break
        out.append(torch.cat(parts).numpy().tobytes())
    return out


def _train(loaders: list[Any], start_epoch: int, stop: int | None, done: int = 0) -> tuple[list[bytes], int]:
    """Global steps from ``done`` until ``stop`` (or the end of the run)."""
    seen: list[bytes] = []
    for _ in range(start_epoch, EPOCHS):
        iters = [iter(x) for x in loaders]
        seen += _steps(loaders, None if stop is None else stop - done - len(seen), iters)
        if stop is not None and done + len(seen) == stop:
            return seen, done + len(seen)
    return seen, done + len(seen)


@pytest.mark.parametrize("sizes", [(1, 1), (2, 2), (2, 1), (1, 2)])
@pytest.mark.parametrize("stop", [5, 12])
@pytest.mark.parametrize("style", ["per-rank", "rank-0"])
def test_dcp_resumes_exactly(
    storage: Any, tmp_path: Any, sizes: tuple[int, int], stop: int, style: str
) -> None:
    whole, _ = _train(_ranks(storage, 1), 0, None)
    assert len(whole) == EPOCHS * STEPS
    before = _ranks(storage, sizes[0])
    seen, done = _train(before, 0, stop)
    with quiet():  # DCP warns that no process group is initialized
        if style == "per-rank" and sizes[0] == sizes[1]:
            for r, loader in enumerate(before):
                dcp.save({"loader": loader}, checkpoint_id=str(tmp_path / f"rank{r}"))
        else:  # rank 0's state: every rank of any world size loads it
            dcp.save({"loader": before[0]}, checkpoint_id=str(tmp_path / "rank0"))
        after = _ranks(storage, sizes[1])
        for r, loader in enumerate(after):
            name = f"rank{r}" if style == "per-rank" and sizes[0] == sizes[1] else "rank0"
            dcp.load({"loader": loader}, checkpoint_id=str(tmp_path / name))
    epoch = after[0].epoch
    rest, _ = _train(after, epoch, None, done)
    assert seen + rest == whole
