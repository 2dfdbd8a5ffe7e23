"""`GuideLoomCallback` for Lightning: the loader's `metrics` sent to the trainer's loggers.

Works with ``pytorch_lightning`` and with ``lightning`` (``lightning.pytorch``): the callback
derives from the ``Callback`` of whichever of the two the program has imported (if both are
installed and neither is imported yet, ``lightning.pytorch``).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from typing import Any

from guideloom.loading.loader import StatefulDataLoader
from guideloom.loading.metrics import flatten

__all__ = ["GuideLoomCallback"]


def _lightning() -> Any:
    for name in ("lightning.pytorch", "pytorch_lightning"):
        if name in sys.modules:
            return sys.modules[name]
    for name in ("lightning.pytorch", "pytorch_lightning"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError(
        "guideloom.integrations.lightning needs Lightning: pip install pytorch-lightning (or lightning)"
    )


_pl = _lightning()


def _loaders(found: Any, name: str = "") -> list[tuple[str, Any]]:
    """The GuideLoom loaders among a trainer's train loaders (one, or a dict or list of them),
    each with the name its metrics are logged under."""
    if isinstance(found, Mapping):
        return [item for key, value in found.items() for item in _loaders(value, f"{name}{key}/")]
    if isinstance(found, (list, tuple)):
        return [item for i, value in enumerate(found) for item in _loaders(value, f"{name}{i}/")]
    return [(name, found)] if isinstance(found, StatefulDataLoader) else []


class GuideLoomCallback(_pl.Callback):  # type: ignore[misc,name-defined]
    """Logs `StatefulDataLoader.metrics` through the trainer's loggers while it trains.

    Every ``every_n_steps`` training batches (default: the trainer's ``log_every_n_steps``) it
    calls ``metrics()`` on the GuideLoom loader(s) the trainer trains on (or the one given) and
    sends `guideloom.loading.metrics.flatten` of it to each of ``trainer.loggers`` at the
    trainer's global step: ``{prefix}/since_last/...`` (the counts since the previous log) and
    ``{prefix}/total/...``. Several train loaders (a dict or list) are logged under their key.
    The loaders' totals live in their state, which Lightning checkpoints with the fit, so they
    continue after ``fit(ckpt_path=...)``.

    Args:
        loader: The loader to report; default: the trainer's train loader(s) that are GuideLoom's.
        every_n_steps: Training batches between two logs; default: ``trainer.log_every_n_steps``.
        prefix: The first part of each logged name.
    """

    def __init__(
        self, loader: Any = None, every_n_steps: int | None = None, prefix: str = "guideloom"
    ) -> None:
        super().__init__()
        if every_n_steps is not None and (isinstance(every_n_steps, bool) or every_n_steps < 1):
            raise ValueError(f"every_n_steps must be a positive integer, got {every_n_steps!r}")
        if loader is not None and not isinstance(loader, StatefulDataLoader):
            raise TypeError(
                f"GuideLoomCallback(loader=...) reports a GuideLoom StatefulDataLoader, got "
                f"{type(loader).__name__}; build it with StatefulDataLoader.from_storage, or leave "
                "loader out to report the trainer's GuideLoom train loaders"
            )
        self.loader = loader
        self.every_n_steps = every_n_steps
        self.prefix = prefix
        self._batches = 0
        self.logged: dict[str, float] = {}  # the last values sent (for a look in a notebook)

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """Count the batch; every ``every_n_steps`` batches, log the loaders' metrics.

        Args:
            trainer: The Lightning trainer.
            pl_module: The module being trained.
            outputs: What ``training_step`` returned.
            batch: The batch.
            batch_idx: The batch's index in the epoch.
        """
        self._batches += 1
        every = self.every_n_steps or max(1, int(getattr(trainer, "log_every_n_steps", 50) or 1))
        if self._batches % every == 0:
            self.log_now(trainer)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        """Log at each epoch's end too, so a short epoch's counts are not left unlogged.

        Args:
            trainer: The Lightning trainer.
            pl_module: The module being trained.
        """
        self.log_now(trainer)

    def log_now(self, trainer: Any) -> dict[str, float]:
        """Send the loaders' metrics to the trainer's loggers now.

        Args:
            trainer: The Lightning trainer.

        Returns:
            The values sent, by name.
        """
        given = self.loader is not None
        values: dict[str, float] = {}
        for name, loader in _loaders(self.loader if given else trainer.train_dataloader):
            try:
                metrics = loader.metrics()
            except AttributeError:  # torchdata's loader over a plain torch dataset: no metrics
                if given:
                    raise
                continue
            values.update(flatten(metrics, f"{self.prefix}/{name}".rstrip("/") if name else self.prefix))
        if values:
            for logger in trainer.loggers:
                logger.log_metrics(values, step=trainer.global_step)
        self.logged = values
        return values
