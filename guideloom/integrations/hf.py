"""`GuideLoomCallback` for the transformers ``Trainer``: the loader's `metrics` in its logs.

The ``Trainer`` does not hand its loader to callbacks in a form that leads back to GuideLoom's
(it trains on the loader ``get_train_dataloader`` returns), so the callback is given the
loader. Return that loader itself from ``get_train_dataloader``: a loader that accelerate's
``prepare`` rebuilt from ``loader.dataset`` and ``loader.batch_sampler`` is another loader, and
GuideLoom's counts only see the batches its own loader hands out.
"""

from __future__ import annotations

from typing import Any

try:
    import transformers
except ImportError as err:  # pragma: no cover - the dev environment has it
    raise ImportError("guideloom.integrations.hf needs transformers: pip install transformers") from err

from guideloom.loading.metrics import flatten

__all__ = ["GuideLoomCallback"]


class GuideLoomCallback(transformers.TrainerCallback):  # type: ignore[misc]
    """Adds `StatefulDataLoader.metrics` to the ``Trainer``'s logs each time it logs.

    At every ``on_log`` (every ``logging_steps``, and at evaluation) the loader's
    `guideloom.loading.metrics.flatten` values (``{prefix}/since_last/...``, the counts since
    the previous log, and ``{prefix}/total/...``) are added to the ``logs`` dict, which the
    callbacks after this one receive, and to the matching entry of ``state.log_history``. The
    ``Trainer`` calls its reporting callbacks (``report_to``: TensorBoard, W&B, ...) before the
    ones passed to it; to have them receive these values, put this callback first:
    ``trainer.callback_handler.callbacks.insert(0, callback)``.

    Args:
        loader: The GuideLoom loader the ``Trainer`` trains on.
        prefix: The first part of each logged name.
    """

    def __init__(self, loader: Any, prefix: str = "guideloom") -> None:
        self.loader = loader
        self.prefix = prefix
        self.logged: dict[str, float] = {}  # the last values added

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        """Add the loader's metrics to ``logs`` and to ``state.log_history``'s entry of this log.

        Args:
            args: The ``TrainingArguments``.
            state: The ``TrainerState``.
            control: The ``TrainerControl``.
            logs: The values being logged (added to in place).
            **kwargs: What else the ``Trainer`` passes (model, optimizer, ...).
        """
        values = flatten(self.loader.metrics(), self.prefix)
        if logs is not None:
            logs.update(values)
        history = state.log_history
        if history and history[-1].get("step") == state.global_step:
            history[-1].update(values)
        self.logged = values
