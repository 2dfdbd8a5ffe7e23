"""The transformers ``Trainer`` with GuideLoom's loader and ``resume_from_checkpoint``: what it
does, checked against an uninterrupted run (a tiny model built here, nothing downloaded)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch
from trainer_setup import BATCH, EPOCHS, SEQ, STEPS, digest, loss_of, make_loader, quiet

transformers = pytest.importorskip("transformers")


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(SEQ, 1)
        self.seen: list[str] = []

    def forward(self, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
        self.seen.append(digest(tokens))
        return {"loss": loss_of(self.layer, tokens)}


class Stop(transformers.TrainerCallback):  # type: ignore[misc]
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if state.global_step == self.step:
            control.should_save = control.should_training_stop = True
        return control


def _run(storage: Any, out: Any, stop: int | None = None, resume: str | None = None) -> list[str]:
    loader = make_loader(storage)

    class WithGuideLoom(transformers.Trainer):  # type: ignore[misc]
        def get_train_dataloader(self) -> Any:
            return self.accelerator.prepare(loader)

    args = transformers.TrainingArguments(
        output_dir=str(out), num_train_epochs=EPOCHS, per_device_train_batch_size=BATCH, use_cpu=True,
        report_to=[], save_strategy="no", logging_strategy="no", disable_tqdm=True, learning_rate=0.1,
        dataloader_num_workers=0,
    )  # fmt: skip
    model = Tiny()
    callbacks = [Stop(stop)] if stop is not None else []
    logging.getLogger("transformers").setLevel(logging.ERROR)
    with quiet():
        WithGuideLoom(model=model, args=args, callbacks=callbacks).train(resume_from_checkpoint=resume)
    return model.seen


def test_trainer_resume_from_checkpoint_continues_the_order(storage: Any, tmp_path: Any) -> None:
    whole = _run(storage, tmp_path / "whole")
    assert len(whole) == EPOCHS * STEPS
    first = _run(storage, tmp_path / "run", stop=5)
    rest = _run(storage, tmp_path / "run", resume=str(tmp_path / "run" / "checkpoint-5"))
    assert first + rest == whole
