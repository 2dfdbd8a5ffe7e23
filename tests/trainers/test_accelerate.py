"""accelerate ``prepare()`` with ``use_stateful_dataloader=True`` resumes GuideLoom's loader exactly
through ``save_state``/``load_state``: batches equal an uninterrupted run's."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from trainer_setup import EPOCHS, SEQ, STEPS, accelerate_steps, digest, make_loader, quiet

accelerate = pytest.importorskip("accelerate")


def _run(
    storage: Any, num_workers: int, state_dir: Any, load: bool, stop: int | None
) -> tuple[list[Any], int]:
    """Train until global step ``stop`` (then save_state) or the end; returns (seen, steps taken)."""
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration

    with quiet():
        accelerator = Accelerator(
            cpu=True, dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True)
        )
        torch.manual_seed(0)
        model = torch.nn.Linear(SEQ, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer, loader = accelerator.prepare(model, optimizer, make_loader(storage, num_workers))
        step = 0
        if load:
            accelerator.load_state(str(state_dir))
            step = int(torch.load(state_dir / "step.pt"))
        record = lambda batch, loss: (digest(batch), round(float(loss), 6))  # noqa: E731
        return accelerate_steps(accelerator, model, optimizer, loader, step, stop, state_dir, record)


@pytest.mark.parametrize(
    "stops, workers",
    [((5,), (0, 0)), ((12,), (0, 0)), ((5, 17), (0, 0)), ((7,), (2, 2))],
    ids=["mid-epoch", "epoch-end", "second-resume", "two-workers"],
)
def test_accelerate_resumes_exactly(storage: Any, tmp_path: Any, stops: tuple[int, ...],
                                    workers: tuple[int, int]) -> None:  # fmt: skip
    whole, steps = _run(storage, 0, tmp_path / "unused", False, None)
    assert steps == EPOCHS * STEPS
    own = make_loader(storage)  # GuideLoom's own loop: the batches accelerate must deliver
    assert [d for d, _ in whole] == [digest(b) for _ in range(EPOCHS) for b in own]
    seen: list[Any] = []
    for i, stop in enumerate([*stops, None]):
        part, _ = _run(storage, workers[min(i, 1)], tmp_path / "state", i > 0, stop)
        seen += part
    assert [d for d, _ in seen] == [d for d, _ in whole]
    assert seen == whole
