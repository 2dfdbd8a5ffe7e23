"""Lightning DDP on CPU (gloo, 2 processes forked by ``strategy="ddp_fork"``): a checkpoint of a
2-process fit resumes exactly into 2 processes and into 1. With Lightning's default
``use_distributed_sampler=True`` GuideLoom's loader is kept as it is (its ``sampler`` is already a
``DistributedSampler``: `guideloom.loading.batch_order.RankSampler`), and reads the same batches;
a rebuild that would inject Lightning's sampler into the order is refused by name.

Each process builds its loader in ``train_dataloader()`` (after the process group exists, so it
takes that process's rank and world size) and writes what it trained on to a file: the forked
processes' models are not the test's.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import torch
from trainer_setup import BATCH, EPOCHS, SEQ, STEPS, loss_of, make_loader, quiet

from guideloom.errors import OrderLostError

pl = pytest.importorskip("pytorch_lightning")

WORLD = 2  # BATCH // WORLD windows a batch on each rank: STEPS global steps an epoch either way


class Ranked(pl.LightningModule):
    """A tiny model whose loader is built in each process; it records (rows, loss) per step."""

    def __init__(self, storage: Any, out: Path) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(SEQ, 1)
        self.storage, self.out = storage, out
        self.seen: list[tuple[list[list[int]], float]] = []

    def train_dataloader(self) -> Any:
        return make_loader(self.storage, batch_size=BATCH // self.trainer.world_size)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss = loss_of(self.layer, batch["tokens"])
        self.seen.append((batch["tokens"].tolist(), round(float(loss), 6)))
        return loss

    def on_train_end(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / f"rank{self.global_rank}.json").write_text(json.dumps(self.seen))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(storage: Any, out: Path, ckpt_dir: Path, devices: int, stop: int | None = None,
         ckpt: str | None = None, injection: bool = False) -> list[Any]:  # fmt: skip
    """One fit; each rank's (rows, loss) per step, by rank."""
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    saving = []
    if stop is not None:
        saving = [pl.callbacks.ModelCheckpoint(dirpath=ckpt_dir, filename="{step}", every_n_train_steps=stop)]
    trainer = pl.Trainer(
        accelerator="cpu", devices=devices, strategy="ddp_fork" if devices > 1 else "auto",
        use_distributed_sampler=injection, max_epochs=EPOCHS, max_steps=stop or -1, callbacks=saving,
        enable_checkpointing=bool(saving), logger=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=str(ckpt_dir),
    )  # fmt: skip
    with quiet():
        trainer.fit(Ranked(storage, out), ckpt_path=ckpt)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(devices)]


def _global(per_rank: list[Any]) -> list[list[list[int]]]:
    """The global steps' rows: each rank's batch, joined in rank order."""
    return [sum((steps[k][0] for steps in per_rank), []) for k in range(len(per_rank[0]))]


@pytest.fixture(scope="module")
def ddp_runs(storage: Any, tmp_path_factory: Any) -> dict[str, Any]:
    """An uninterrupted 2-process fit, one stopped at step 5 and resumed in 2 processes."""
    root = tmp_path_factory.mktemp("ddp")
    runs = {"whole": _fit(storage, root / "whole", root / "c0", WORLD)}
    runs["first"] = _fit(storage, root / "first", root / "c1", WORLD, stop=5)
    runs["ckpt"] = str(root / "c1" / "step=5.ckpt")
    runs["rest"] = _fit(storage, root / "rest", root / "c2", WORLD, ckpt=runs["ckpt"])
    return runs


def test_ddp_two_to_two_resumes_exactly(ddp_runs: dict[str, Any]) -> None:
    whole, first, rest = ddp_runs["whole"], ddp_runs["first"], ddp_runs["rest"]
    assert [len(r) for r in whole] == [EPOCHS * STEPS] * WORLD and [len(r) for r in first] == [5, 5]
    for rank in range(WORLD):  # rows and losses: none replayed, none skipped
        assert first[rank] + rest[rank] == whole[rank]
    every = [tuple(row) for step in _global(whole)[:STEPS] for row in step]
    assert len(set(every)) == len(every) == STEPS * BATCH  # the ranks share an epoch out


def test_ddp_two_to_one_resumes_exactly(ddp_runs: dict[str, Any], storage: Any, tmp_path: Any) -> None:
    (one,) = _fit(storage, tmp_path / "one", tmp_path / "c", 1, ckpt=ddp_runs["ckpt"])
    # the same global rows (losses differ: one process trains on the whole global batch)
    assert _global(ddp_runs["first"]) + [rows for rows, _ in one] == _global(ddp_runs["whole"])


def test_ddp_with_lightning_s_default_sampler_setting_resumes_exactly(
    ddp_runs: dict[str, Any], storage: Any, tmp_path: Any
) -> None:
    """use_distributed_sampler=True (Lightning's default): the loader is kept; the same rows and
    losses as with use_distributed_sampler=False, uninterrupted and resumed."""
    whole = _fit(storage, tmp_path / "whole", tmp_path / "c0", WORLD, injection=True)
    assert whole == ddp_runs["whole"]
    rest = _fit(storage, tmp_path / "rest", tmp_path / "c1", WORLD, ckpt=ddp_runs["ckpt"], injection=True)
    assert rest == ddp_runs["rest"]


def test_lightning_sampler_injection_is_a_named_error(storage: Any) -> None:
    """What Lightning would do with use_distributed_sampler=True under DDP to a loader without a
    DistributedSampler (forced here, without the processes): the order refuses the injection."""
    from pytorch_lightning.utilities.data import _update_dataloader
    from torch.utils.data import DistributedSampler

    loader = make_loader(storage, batch_size=BATCH // WORLD, rank=0, world_size=WORLD)
    injected = DistributedSampler(loader.dataset, num_replicas=WORLD, rank=0)
    with pytest.raises(OrderLostError, match=r"Trainer\(use_distributed_sampler=False\)"):
        _update_dataloader(loader, injected)
