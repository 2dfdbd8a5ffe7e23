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
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from trainer_setup import BATCH, EPOCHS, SEQ, STEPS, accelerate_steps, digest, make_loader, quiet

pytest.importorskip("accelerate")

WORLD = 2
DEADLINE_S = 240  # one run of the processes takes 5-30 s; a hang must not stall the suite


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _process(rank: int, storage: Any, port: int, out: Path, state: Path, load: bool, stop: int | None,
             early: bool, world: int = WORLD) -> None:  # fmt: skip
    """One of ``world`` accelerate processes: train (from ``state`` when ``load``) until global
    step ``stop``; the global batch is ``BATCH`` windows at any ``world``."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState
    from accelerate.utils import DataLoaderConfiguration

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      LOCAL_RANK=str(rank), WORLD_SIZE=str(world))  # fmt: skip
    with quiet():
        AcceleratorState._reset_state(reset_partial_state=True)  # the forked test process's
        loader = make_loader(storage, batch_size=BATCH // world) if early else None
        config = DataLoaderConfiguration(use_stateful_dataloader=True)
        accelerator = Accelerator(cpu=True, dataloader_config=config)
        if loader is None:  # after Accelerator(): it takes this process's rank
            loader = make_loader(storage, batch_size=BATCH // world)
        torch.manual_seed(0)
        model = torch.nn.Linear(SEQ, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer, prepared = accelerator.prepare(model, optimizer, loader)
        assert len(prepared) == STEPS, len(prepared)  # a whole epoch of this rank's batches
        step = 0
        if load:
            accelerator.load_state(str(state))
            step = int(torch.load(state / "step.pt"))
        record = lambda batch, loss: (digest(batch), round(float(loss), 6), windows(batch))  # noqa: E731
        seen, _ = accelerate_steps(accelerator, model, optimizer, prepared, step, stop, state, record)
        accelerator.wait_for_everyone()
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{rank}.json").write_text(json.dumps(seen))
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    # End here, skipping the interpreter's teardown: freeing the DDP reducer that accelerate made
    # joins a gloo thread, which can wait forever for the other rank once that one has exited
    # (seen once under load: the rank's results were written, the process never ended).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def windows(batch: Any) -> list[int]:
    """The window numbers of a batch (the trainers' dataset counts its tokens up from 0)."""
    return (batch["tokens"][:, 0].long() // SEQ).tolist()  # type: ignore[no-any-return]


def _run(storage: Any, out: Path, state: Path, load: bool = False, stop: int | None = None,
         early: bool = False, world: int = WORLD) -> list[Any]:  # fmt: skip
    """``world`` forked accelerate processes; each rank's (digest, loss, windows) per step."""
    args = (storage, _free_port(), out, state, load, stop, early, world)
    context = torch.multiprocessing.start_processes(
        _process, args=args, nprocs=world, join=False, start_method="fork"
    )
    deadline = time.monotonic() + DEADLINE_S
    while not context.join(timeout=1):  # raises if a process failed
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail(f"the {world} accelerate processes did not end within {DEADLINE_S} s")
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


def test_accelerate_two_processes_resume_exactly(storage: Any, tmp_path: Any) -> None:
    whole = _run(storage, tmp_path / "whole", tmp_path / "unused")
    for rank in range(WORLD):  # each process reads exactly GuideLoom's batches of its rank
        own = make_loader(storage, batch_size=BATCH // WORLD, rank=rank, world_size=WORLD)
        assert [d for d, _, _ in whole[rank]] == [digest(b) for _ in range(EPOCHS) for b in own]
    first = _run(storage, tmp_path / "first", tmp_path / "state", stop=5)
    rest = _run(storage, tmp_path / "rest", tmp_path / "state", load=True)
    for rank in range(WORLD):  # digests and losses: none replayed, none skipped
        assert first[rank] + rest[rank] == whole[rank]


def test_accelerate_two_processes_saved_one_process_resumed(storage: Any, tmp_path: Any) -> None:
    """2 -> 1: accelerate saves the loader's state (the same on every rank: one global position)
    and one process, with the same global batch (BATCH windows, where each of 2 had BATCH // 2),
    resumes it exactly: the samples of every step and, up to float rounding (gradients averaged
    over 2 ranks instead of one mean over the batch), the losses of an uninterrupted 1-process run."""
    alone = _run(storage, tmp_path / "alone", tmp_path / "unused", world=1)[0]
    first = _run(storage, tmp_path / "first", tmp_path / "state", stop=5)
    rest = _run(storage, tmp_path / "rest", tmp_path / "state", load=True, world=1)[0]
    steps = [w0 + w1 for (_, _, w0), (_, _, w1) in zip(*first, strict=True)] + [w for _, _, w in rest]
    assert steps == [w for _, _, w in alone]  # every step's samples: none replayed, none skipped
    losses = [(a + b) / 2 for (_, a, _), (_, b, _) in zip(*first, strict=True)] + [
        loss for _, loss, _ in rest
    ]
    assert losses == pytest.approx([loss for _, loss, _ in alone], rel=1e-4, abs=1e-6)


def test_a_loader_built_before_accelerator_is_refused(storage: Any, tmp_path: Any) -> None:
    with pytest.raises(Exception, match=r"OrderLostError.*built before torch.distributed was initialized"):
        _run(storage, tmp_path / "early", tmp_path / "unused", stop=1, early=True)


def _shard(order: Any, **kwargs: Any) -> Any:
    from accelerate.data_loader import BatchSamplerShard

    return BatchSamplerShard(order, num_processes=WORLD, **kwargs)


def test_accelerate_shards_deal_each_process_its_rank_s_batches(storage: Any) -> None:
    """In one process: accelerate's BatchSamplerShard around each rank's order gives that rank's
    batches (and length); what would lose or repeat samples is refused by name."""
    from guideloom import BatchOrder
    from guideloom.errors import OrderLostError
    from guideloom.storage import open_view

    view = open_view(storage, SEQ)
    for rank in range(WORLD):
        order = BatchOrder(view, BATCH // WORLD, shuffle=True, seed=1, rank=rank, world_size=WORLD)
        own = BatchOrder(view, BATCH // WORLD, shuffle=True, seed=1, rank=rank, world_size=WORLD)
        shard = _shard(order, process_index=rank)
        assert list(shard) == list(own) and len(shard) == len(own) == STEPS
    order = BatchOrder(view, BATCH // WORLD, shuffle=True, rank=0, world_size=WORLD)
    for kwargs, named in (
        ({"process_index": 0, "split_batches": True}, "split_batches=True splits each"),
        ({"process_index": 1}, r"this one is 1\), but GuideLoom's batch order was built for rank 0"),
    ):
        with pytest.raises(OrderLostError, match=named):
            list(_shard(order, **kwargs))
    # 45 windows: each epoch ends with a step of smaller batches, which even_batches would pad
    odd = BatchOrder(view.take(45), 4, rank=0, world_size=WORLD)
    with pytest.raises(OrderLostError, match=r"even_batches=False"):
        list(_shard(odd, process_index=0))
    padded_out = BatchOrder(view.take(45), 4, rank=0, world_size=WORLD)
    assert list(_shard(padded_out, process_index=0, even_batches=False)) == list(
        BatchOrder(view.take(45), 4, rank=0, world_size=WORLD)
    )


def test_the_shard_saves_the_order_s_state_and_a_count_alone_is_named(storage: Any) -> None:
    """accelerate's shard gets the order's state (what resumes 2 -> 1); a loader state without it
    (torchdata's None for a wrapped sampler) is refused by name, never read as a fresh start."""
    from guideloom import BatchOrder
    from guideloom.errors import ResumeStateError
    from guideloom.storage import open_view

    view = open_view(storage, SEQ)
    order = BatchOrder(view, BATCH // WORLD, shuffle=True, seed=1, rank=1, world_size=WORLD)
    shard = _shard(order, process_index=1)
    it = iter(shard)
    for _ in range(3):
        next(it)
    assert shard.state_dict() == order.state_dict()
    alone = BatchOrder(view, BATCH, shuffle=True, seed=1, rank=0, world_size=1)
    alone.load_state_dict(shard.state_dict())  # 2 -> 1: the position after 3 global steps
    assert next(iter(alone)) == list(BatchOrder(view, BATCH, shuffle=True, seed=1, rank=0, world_size=1))[3]
    with pytest.raises(ResumeStateError, match="same number of processes"):
        alone.load_state_dict(None)  # type: ignore[arg-type]
