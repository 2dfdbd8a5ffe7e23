"""What every trainer test shares: one tiny stream dataset, GuideLoom's loader over it, batch digests.

A plain module (not a conftest: several conftest.py exist under tests/, so 'from conftest import'
is ambiguous); tests/trainers/conftest.py writes the dataset once per session.

The dataset: one record of ``WINDOWS * SEQ + 3`` counting tokens, so every window differs and a
digest names a batch; ``BATCH`` windows a batch, ``STEPS`` batches an epoch on one rank.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from guideloom import StatefulDataLoader, StreamNumpyFormat, StreamStorage

SEQ, BATCH, WINDOWS, EPOCHS = 8, 4, 48, 2
STEPS = WINDOWS // BATCH  # 12 steps an epoch on one rank
SEED = 3


def stream_format() -> StreamNumpyFormat:
    return StreamNumpyFormat({"tokens": np.uint16})


def write_stream(url: str) -> StreamStorage:
    """The trainers' dataset at ``url`` (a local folder), opened for reading."""
    with StreamStorage(url, stream_format()).writer() as writer:
        writer.append({"tokens": np.arange(WINDOWS * SEQ + 3, dtype=np.uint16)})
    return StreamStorage(url, stream_format())


def make_loader(storage: Any, num_workers: int = 0, **kwargs: Any) -> Any:
    """GuideLoom's loader as the trainer tests build it (``kwargs`` override the defaults)."""
    options = {"sequence_length": SEQ, "batch_size": BATCH, "shuffle": True, "seed": SEED, **kwargs}
    return StatefulDataLoader.from_storage(storage, num_workers=num_workers, **options)


def digest(tokens: Any) -> str:
    """A short name for a batch (or its ``tokens`` tensor)."""
    if isinstance(tokens, dict):
        tokens = tokens["tokens"]
    return hashlib.sha1(tokens.numpy().tobytes()).hexdigest()[:12]


def loss_of(layer: Any, tokens: Any) -> Any:
    """The tiny models' loss (inputs scaled so that SGD at lr 0.1 stays finite)."""
    return layer(tokens.float() / 1000).pow(2).mean()


def accelerate_steps(accelerator: Any, model: Any, optimizer: Any, loader: Any, step: int,
                     stop: int | None, state: Any, record: Any) -> tuple[list[Any], int]:  # fmt: skip
    """The accelerate tests' training loop: from global ``step`` (epochs of ``STEPS``) until global
    step ``stop`` (then ``save_state`` into ``state``, and the step beside it) or the last epoch's
    end. ``record(batch, loss)`` is what each step keeps. Returns (kept, steps reached)."""
    import torch

    seen: list[Any] = []
    for epoch in range(step // STEPS, EPOCHS):
        loader.set_epoch(epoch)
        for batch in loader:
            loss = loss_of(model, batch["tokens"])
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            seen.append(record(batch, loss))
            step += 1
            if step == stop:
                accelerator.save_state(str(state))
                if accelerator.is_main_process:
                    torch.save(step, state / "step.pt")
                return seen, step
    return seen, step


@contextmanager
def quiet() -> Iterator[None]:
    """The frameworks' own warnings (deprecations, 'no GPU', 'no process group') off."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
