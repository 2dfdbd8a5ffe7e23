"""Lightning resumes GuideLoom's loader exactly: batches after ``fit(ckpt_path=...)`` equal an
uninterrupted run's (none replayed, none skipped), mid-epoch and at an epoch's end."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch
from trainer_setup import EPOCHS, SEQ, STEPS, digest, loss_of, make_loader, quiet

from guideloom.errors import ResumeStateError

pl = pytest.importorskip("pytorch_lightning")


class Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(SEQ, 1)
        self.seen: list[tuple[str, float]] = []

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss = loss_of(self.layer, batch["tokens"])
        self.seen.append((digest(batch), round(float(loss), 6)))
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _trainer(tmp_path: Any, **kwargs: Any) -> Any:
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    settings = dict(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(tmp_path))  # fmt: skip
    return pl.Trainer(**{**settings, **kwargs})


def _fit(trainer: Any, model: Any, loader: Any, ckpt: Any = None) -> None:
    with quiet():
        trainer.fit(model, train_dataloaders=loader, ckpt_path=ckpt)


@pytest.fixture(scope="module")
def whole(storage: Any, tmp_path_factory: Any) -> list[tuple[str, float]]:
    model = Tiny()
    _fit(_trainer(tmp_path_factory.mktemp("whole"), max_epochs=EPOCHS), model, make_loader(storage))
    assert len(model.seen) == EPOCHS * STEPS
    return model.seen


@pytest.mark.parametrize(
    "stops, workers",
    [((5,), (0, 0)), ((12,), (0, 0)), ((5, 17), (0, 0)), ((7,), (0, 2))],
    ids=["mid-epoch", "epoch-end", "second-resume", "other-num-workers"],
)
def test_lightning_resumes_exactly(storage: Any, whole: Any, tmp_path: Any, stops: tuple[int, ...],
                                   workers: tuple[int, int]) -> None:  # fmt: skip
    seen: list[tuple[str, float]] = []
    ckpt = None
    for i, stop in enumerate([*stops, None]):
        model = Tiny()
        limit = {"max_steps": stop} if stop is not None else {}
        saving = []
        if stop is not None:  # a checkpoint saved during training, at global step `stop`
            saving = [pl.callbacks.ModelCheckpoint(dirpath=tmp_path, filename=f"stop{stop}",
                                                   every_n_train_steps=stop, save_top_k=-1)]  # fmt: skip
        trainer = _trainer(
            tmp_path, max_epochs=EPOCHS, callbacks=saving, enable_checkpointing=bool(saving), **limit
        )
        _fit(trainer, model, make_loader(storage, workers[min(i, 1)]), ckpt)
        seen += model.seen
        if stop is not None:
            ckpt = str(tmp_path / f"stop{stop}.ckpt")
    assert [d for d, _ in seen] == [d for d, _ in whole]
    assert seen == whole


class OneCycle(Tiny):
    """Lightning #20550: configure_optimizers reads trainer.estimated_stepping_batches."""

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        total = self.trainer.estimated_stepping_batches
        schedule = torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=0.1, total_steps=max(int(total), 100)
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class OwnTotal(OneCycle):
    """The fix the #20550 error names: the total steps from len(loader), not estimated_stepping_batches."""

    def __init__(self, loader: Any) -> None:
        super().__init__()
        self.loader = loader

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        total = len(self.loader) * self.trainer.max_epochs // self.trainer.accumulate_grad_batches
        schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=max(total, 100))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def _stop_at_5(tmp_path: Any, model: Any, loader: Any) -> None:
    saving = [pl.callbacks.ModelCheckpoint(dirpath=tmp_path, filename="{step}", every_n_train_steps=5)]
    _fit(_trainer(tmp_path, max_epochs=EPOCHS, max_steps=5, callbacks=saving, enable_checkpointing=True),
         model, loader)  # fmt: skip


def _rebuilt(storage: Any) -> Any:
    """torchdata's own StatefulDataLoader over GuideLoom's dataset and BatchOrder."""
    from torchdata.stateful_dataloader import StatefulDataLoader as TorchdataLoader

    own = make_loader(storage)
    with quiet():
        return TorchdataLoader(own.dataset, batch_sampler=own.batch_sampler, collate_fn=own.collate_fn)


@pytest.mark.parametrize("make", [make_loader, _rebuilt], ids=["guideloom-loader", "torchdata-batch-order"])
def test_estimated_stepping_batches_on_resume_is_a_named_error(
    storage: Any, tmp_path: Any, make: Any
) -> None:
    """Lightning #20550 would drop the loader state silently; GuideLoom refuses, naming the fix."""
    first = OneCycle()
    _stop_at_5(tmp_path, first, make(storage))  # a fresh fit may read it: no state to lose
    assert len(first.seen) == 5
    with pytest.raises(ResumeStateError, match=r"#20550.*len\(train_loader\) \* trainer.max_epochs"):
        _fit(_trainer(tmp_path, max_epochs=EPOCHS), OneCycle(), make(storage), str(tmp_path / "step=5.ckpt"))


def test_total_steps_from_len_loader_resumes_exactly(storage: Any, tmp_path: Any) -> None:
    """The fix as the error writes it: the same schedule, and the resumed batches are exact."""
    loader = make_loader(storage)
    model = OwnTotal(loader)
    _fit(_trainer(tmp_path / "whole", max_epochs=EPOCHS), model, loader)
    whole = model.seen
    loader = make_loader(storage)
    first = OwnTotal(loader)
    _stop_at_5(tmp_path, first, loader)
    loader = make_loader(storage)
    second = OwnTotal(loader)
    _fit(_trainer(tmp_path, max_epochs=EPOCHS), second, loader, str(tmp_path / "step=5.ckpt"))
    assert first.seen + second.seen == whole
