"""accelerate with 2 processes (CPU, gloo, forked here): ``prepare()`` with
``use_stateful_dataloader=True`` deals GuideLoom's batches out exactly (each process gets its
rank's), ``save_state`` / ``load_state`` resume exactly, and a loader whose ranks would be lost
(built before ``Accelerator()``) is refused by name.

accelerate wraps the loader's batch sampler in its ``BatchSamplerShard``, which hands batch ``k``
to process ``k % 2``; GuideLoom's `BatchOrder` then yields every rank's batches step by step, so
that each process receives exactly its own (see `guideloom.loading.batch_order`).
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest
import torch
from trainer_setup import BATCH, EPOCHS, SEQ, STEPS, digest, loss_of, make_loader, quiet

pytest.importorskip("accelerate")

WORLD = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _process(rank: int, storage: Any, port: int, out: Path, state: Path, load: bool, stop: int | None,
             early: bool) -> None:  # fmt: skip
    """One accelerate process: train (from ``state`` when ``load``) until global step ``stop``."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState
    from accelerate.utils import DataLoaderConfiguration

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD))  # fmt: skip
    with quiet():
        AcceleratorState._reset_state(reset_partial_state=True)  # the forked test process's
        loader = make_loader(storage, batch_size=BATCH // WORLD) if early else None
        config = DataLoaderConfiguration(use_stateful_dataloader=True)
        accelerator = Accelerator(cpu=True, dataloader_config=config)
        if loader is None:  # after Accelerator(): it takes this process's rank
            loader = make_loader(storage, batch_size=BATCH // WORLD)
        torch.manual_seed(0)
        model = torch.nn.Linear(SEQ, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer, prepared = accelerator.prepare(model, optimizer, loader)
        assert len(prepared) == STEPS, len(prepared)  # a whole epoch of this rank's batches
        step = 0
        if load:
            accelerator.load_state(str(state))
            step = int(torch.load(state / "step.pt"))
        seen: list[Any] = []
        for epoch in range(step // STEPS, EPOCHS):
            prepared.set_epoch(epoch)
            for batch in prepared:
                loss = loss_of(model, batch["tokens"])
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
                seen.append((digest(batch), round(float(loss), 6)))
                step += 1
                if step == stop:
                    accelerator.save_state(str(state))
                    if accelerator.is_main_process:
                        torch.save(step, state / "step.pt")
                    break
            if step == stop:
                break
        accelerator.wait_for_everyone()
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{rank}.json").write_text(json.dumps(seen))
    torch.distributed.destroy_process_group()


def _run(storage: Any, out: Path, state: Path, load: bool = False, stop: int | None = None,
         early: bool = False) -> list[Any]:  # fmt: skip
    """2 forked accelerate processes; each rank's (digest, loss) per step."""
    args = (storage, _free_port(), out, state, load, stop, early)
    torch.multiprocessing.start_processes(_process, args=args, nprocs=WORLD, start_method="fork")
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(WORLD)]


def test_accelerate_two_processes_resume_exactly(storage: Any, tmp_path: Any) -> None:
    whole = _run(storage, tmp_path / "whole", tmp_path / "unused")
    for rank in range(WORLD):  # each process reads exactly GuideLoom's batches of its rank
        own = make_loader(storage, batch_size=BATCH // WORLD, rank=rank, world_size=WORLD)
        assert [d for d, _ in whole[rank]] == [digest(b) for _ in range(EPOCHS) for b in own]
    first = _run(storage, tmp_path / "first", tmp_path / "state", stop=5)
    rest = _run(storage, tmp_path / "rest", tmp_path / "state", load=True)
    for rank in range(WORLD):  # digests and losses: none replayed, none skipped
        assert first[rank] + rest[rank] == whole[rank]


def test_a_loader_built_before_accelerator_is_refused(storage: Any, tmp_path: Any) -> None:
    with pytest.raises(Exception, match=r"OrderLostError.*built before torch.distributed was initialized"):
        _run(storage, tmp_path / "early", tmp_path / "unused", stop=1, early=True)
