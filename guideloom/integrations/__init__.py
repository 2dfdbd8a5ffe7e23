"""Ready callbacks that log `StatefulDataLoader.metrics` from a trainer's own loop.

- `guideloom.integrations.lightning.GuideLoomCallback`: a Lightning ``Callback`` that sends the
  loader's counters to the trainer's loggers every ``log_every_n_steps`` batches;
- `guideloom.integrations.hf.GuideLoomCallback`: a transformers ``TrainerCallback`` that adds
  them to the ``Trainer``'s logs each time it logs.

Each module imports its framework (and through it torch) when it is imported itself; ``import
guideloom`` imports neither. Both log `guideloom.loading.metrics.flatten` of ``metrics()``:
``{prefix}/since_last/{counter}`` and ``{prefix}/total/{counter}``.
"""
