"""The callbacks that log `loader.metrics()` (issue 35 item 2), in the real frameworks: Lightning's
``Trainer`` with its ``CSVLogger`` (the values read back from the file it writes, also after
``fit(ckpt_path=...)``) and the transformers ``Trainer`` (its ``log_history``)."""

from __future__ import annotations

import csv
import logging
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pl = pytest.importorskip("pytorch_lightning")
transformers = pytest.importorskip("transformers")

from guideloom import StatefulDataLoader, StreamNumpyFormat, StreamStorage  # noqa: E402

SEQ, BATCH, WINDOWS, EPOCHS = 8, 4, 48, 2  # 12 steps an epoch
FMT = StreamNumpyFormat({"tokens": np.uint16, "loss_mask": np.uint8})


@pytest.fixture(scope="module")
def storage(tmp_path_factory: Any) -> Any:
    url = str(tmp_path_factory.mktemp("metrics_callbacks") / "data")
    tokens = np.arange(WINDOWS * SEQ + 3, dtype=np.uint16)
    with StreamStorage(url, FMT).writer() as writer:
        writer.append({"tokens": tokens, "loss_mask": (tokens % 3 == 0).astype(np.uint8)})
    return StreamStorage(url, FMT)


def _loader(storage: Any, num_workers: int = 0) -> Any:
    return StatefulDataLoader.from_storage(
        storage, sequence_length=SEQ, batch_size=BATCH, shuffle=True, seed=3, num_workers=num_workers
    )


# -- Lightning ---------------------------------------------------------------------------------
class Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(SEQ, 1)
        self.masked = 0  # loss_mask tokens of the batches trained on

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        self.masked += int(batch["loss_mask"].sum())
        return self.layer(batch["tokens"].float() / 1000).pow(2).mean()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(tmp_path: Path, loader: Any, model: Any, ckpt: Any = None, **kwargs: Any) -> Path:
    from guideloom.integrations.lightning import GuideLoomCallback

    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    logger = pl.loggers.CSVLogger(str(tmp_path), name="run", version=0)
    callbacks = [GuideLoomCallback(), *kwargs.pop("callbacks", [])]
    trainer = pl.Trainer(
        accelerator="cpu", devices=1, logger=logger, log_every_n_steps=4, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=str(tmp_path), max_epochs=EPOCHS,
        callbacks=callbacks, **kwargs,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model, train_dataloaders=loader, ckpt_path=ckpt)
    return Path(logger.log_dir) / "metrics.csv"


def _rows(path: Path) -> list[dict[str, float]]:
    with path.open() as f:
        rows = [{k: float(v) for k, v in row.items() if v != ""} for row in csv.DictReader(f)]
    return [r for r in rows if "guideloom/total/batches" in r]


@pytest.mark.parametrize("workers", [0, 2])
def test_lightning_logs_the_loaders_metrics_to_its_logger(storage: Any, tmp_path: Path, workers: int) -> None:
    model, loader = Tiny(), _loader(storage, workers)
    rows = _rows(_fit(tmp_path, loader, model))
    assert [r["step"] for r in rows][:3] == [4, 8, 12]  # every 4 batches (and at each epoch's end)
    last = rows[-1]
    counts = loader.source_counts()
    (samples,) = [c["samples"] for c in counts.values()]
    assert last["guideloom/total/batches"] == EPOCHS * 12
    assert last["guideloom/total/samples"] == samples == EPOCHS * 12 * BATCH
    assert last["guideloom/total/tokens"] == samples * SEQ
    assert last["guideloom/total/loss_mask_tokens"] == model.masked > 0
    assert last["guideloom/total/wait_s"] > 0
    since = sum(r["guideloom/since_last/batches"] for r in rows)
    assert since == EPOCHS * 12  # the intervals add up to the total


def test_lightning_totals_continue_after_fit_from_a_checkpoint(storage: Any, tmp_path: Path) -> None:
    tokens = np.arange(WINDOWS * SEQ, dtype=np.uint16)  # every window, once an epoch
    masked = EPOCHS * int((tokens % 3 == 0).sum())
    save = pl.callbacks.ModelCheckpoint(
        dirpath=str(tmp_path / "ckpt"), filename="{step}", every_n_train_steps=5
    )
    first = Tiny()
    _fit(tmp_path / "first", _loader(storage), first, max_steps=5, callbacks=[save])
    second, loader = Tiny(), _loader(storage)
    rows = _rows(_fit(tmp_path / "second", loader, second, ckpt=str(tmp_path / "ckpt" / "step=5.ckpt")))
    last = rows[-1]
    assert last["guideloom/total/batches"] == EPOCHS * 12  # 5 before the checkpoint, 19 after
    assert last["guideloom/total/loss_mask_tokens"] == masked == first.masked + second.masked
    assert loader.metrics()["total"]["batches"] == EPOCHS * 12


# -- transformers ------------------------------------------------------------------------------
class TinyLM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(SEQ, 1)
        self.masked = 0

    def forward(self, tokens: torch.Tensor, loss_mask: torch.Tensor) -> dict[str, torch.Tensor]:
        self.masked += int(loss_mask.sum())
        return {"loss": self.layer(tokens.float() / 1000).pow(2).mean()}


def test_the_transformers_trainer_logs_the_loaders_metrics(storage: Any, tmp_path: Path) -> None:
    from guideloom.integrations.hf import GuideLoomCallback

    loader = _loader(storage)

    class WithGuideLoom(transformers.Trainer):  # type: ignore[misc]
        def get_train_dataloader(self) -> Any:
            return loader  # GuideLoom's own loader: its batches are the ones counted

    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), num_train_epochs=EPOCHS, per_device_train_batch_size=BATCH, use_cpu=True,
        report_to=[], save_strategy="no", logging_steps=4, disable_tqdm=True, learning_rate=0.1,
    )  # fmt: skip
    model, callback = TinyLM(), GuideLoomCallback(loader, prefix="data")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = WithGuideLoom(model=model, args=args, callbacks=[callback])
        trainer.train()
    logged = [e for e in trainer.state.log_history if "data/total/batches" in e]
    assert [e["step"] for e in logged][:3] == [4, 8, 12]
    assert [e["data/total/batches"] for e in logged][:3] == [4, 8, 12]
    last = logged[-1]
    assert last["data/total/batches"] == EPOCHS * 12
    assert last["data/total/loss_mask_tokens"] == model.masked > 0
    (counts,) = loader.source_counts().values()
    assert last["data/total/samples"] == counts["samples"] == EPOCHS * 12 * BATCH
    assert sum(e["data/since_last/batches"] for e in logged) == EPOCHS * 12


def test_the_lightning_callback_refuses_what_is_not_a_guideloom_loader() -> None:
    from guideloom.integrations.lightning import GuideLoomCallback

    with pytest.raises(TypeError, match="from_storage"):
        GuideLoomCallback(loader=torch.utils.data.DataLoader(list(range(4))))
