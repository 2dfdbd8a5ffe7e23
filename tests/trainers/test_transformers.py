"""The transformers ``Trainer`` with GuideLoom's loader and ``resume_from_checkpoint``: what it
does, checked against an uninterrupted run (a tiny model built here, nothing downloaded)."""

from __future__ import annotations

import hashlib
import logging
import warnings
from typing import Any

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from guideloom import StatefulDataLoader, StreamNumpyFormat, StreamStorage  # noqa: E402

SEQ, BATCH, WINDOWS, EPOCHS, STEPS = 8, 4, 48, 2, 12


@pytest.fixture(scope="module")
def storage(tmp_path_factory: Any) -> Any:
    url = str(tmp_path_factory.mktemp("transformers") / "data")
    with StreamStorage(url, StreamNumpyFormat({"tokens": np.uint16})).writer() as writer:
        writer.append({"tokens": np.arange(WINDOWS * SEQ + 3, dtype=np.uint16)})
    return StreamStorage(url, StreamNumpyFormat({"tokens": np.uint16}))


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(SEQ, 1)
        self.seen: list[str] = []

    def forward(self, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
        self.seen.append(hashlib.sha1(tokens.numpy().tobytes()).hexdigest()[:12])
        return {"loss": self.layer(tokens.float() / 1000).pow(2).mean()}


class Stop(transformers.TrainerCallback):  # type: ignore[misc]
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if state.global_step == self.step:
            control.should_save = control.should_training_stop = True
        return control


def _run(storage: Any, out: Any, stop: int | None = None, resume: str | None = None) -> list[str]:
    loader = StatefulDataLoader.from_storage(
        storage, sequence_length=SEQ, batch_size=BATCH, shuffle=True, seed=3
    )

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
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        WithGuideLoom(model=model, args=args, callbacks=callbacks).train(resume_from_checkpoint=resume)
    return model.seen


def test_trainer_resume_from_checkpoint_continues_the_order(storage: Any, tmp_path: Any) -> None:
    whole = _run(storage, tmp_path / "whole")
    assert len(whole) == EPOCHS * STEPS
    first = _run(storage, tmp_path / "run", stop=5)
    rest = _run(storage, tmp_path / "run", resume=str(tmp_path / "run" / "checkpoint-5"))
    assert first + rest == whole
