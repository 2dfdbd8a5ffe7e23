"""Which positions of an epoch each rank takes at each step (plain integer arithmetic).

A *position* counts samples handed out in the current epoch over all ranks; the epoch's
`guideloom.loading.order.EpochOrder` turns positions into sample indexes. An epoch that
starts (or resumes) at position ``start`` with ``W`` ranks and batch size ``B``:

- step ``s`` takes positions ``[start + s*W*B, start + (s+1)*W*B)``; rank ``r`` takes the
  contiguous ``B`` of them at ``start + s*W*B + r*B``;
- when fewer than ``W*B`` positions remain, then with ``drop_last=True`` they are dropped; with
  ``drop_last=False`` one last, smaller step gives every rank ``R // W`` of the ``R`` remaining
  positions (same layout), and the ``R % W < W`` left over are dropped;
- so every rank gets the same number of batches (unequal counts hang collective ops), the ranks'
  samples are disjoint, and at most ``W*B - 1`` (``drop_last=True``) or ``W - 1``
  (``drop_last=False``) samples of the epoch are not handed out.

Once all steps are taken the epoch is *complete* and its position is ``N``. Because a position
does not depend on ``W`` or on the number of workers, a state saved by rank 0 of ``W`` ranks
resumes on ``W'`` ranks: the remaining positions ``[position, N)`` are split the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["EpochSchedule"]


@dataclass(frozen=True)
class EpochSchedule:
    """The steps of one epoch (or of its rest, from ``start``) for ``world_size`` ranks."""

    num_samples: int
    batch_size: int
    world_size: int
    drop_last: bool
    start: int = 0

    # Derived once here (read many times a pass: plain attributes, not properties)
    step_size: int = field(init=False, repr=False, compare=False)
    """Positions one full step takes over all ranks."""
    full_steps: int = field(init=False, repr=False, compare=False)
    """Steps of ``step_size`` positions from ``start``."""
    last_batch_size: int = field(init=False, repr=False, compare=False)
    """Batch size of the final short step (0: there is none)."""

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.world_size < 1:
            raise ValueError("batch_size and world_size must be positive")
        if not 0 <= self.start <= self.num_samples:
            raise ValueError(f"start position {self.start} is outside [0, {self.num_samples}]")
        step = self.batch_size * self.world_size
        full, rest = divmod(self.num_samples - self.start, step)
        derived = self.__dict__  # a frozen dataclass: its own fields set once, here
        derived["step_size"], derived["full_steps"] = step, full
        derived["last_batch_size"] = 0 if self.drop_last else rest // self.world_size

    @property
    def num_steps(self) -> int:
        """Batches each rank gets from ``start`` to the end of the epoch."""
        return self.full_steps + (1 if self.last_batch_size else 0)

    @property
    def consumed(self) -> int:
        """Positions handed out from ``start`` to the end of the epoch (all ranks)."""
        return self.full_steps * self.step_size + self.last_batch_size * self.world_size

    def batch_range(self, step: int, rank: int) -> tuple[int, int]:
        """Half-open range of positions that ``rank`` takes at ``step``."""
        if not 0 <= step < self.num_steps:
            raise IndexError(f"step {step} outside [0, {self.num_steps})")
        if not 0 <= rank < self.world_size:
            raise IndexError(f"rank {rank} outside [0, {self.world_size})")
        base = self.start + step * self.step_size
        size = self.batch_size if step < self.full_steps else self.last_batch_size
        return base + rank * size, base + (rank + 1) * size

    def position_after(self, steps: int) -> int:
        """The epoch position once ``steps`` steps have been taken; ``num_samples`` when complete."""
        if steps >= self.num_steps:
            return self.num_samples
        return self.start + steps * self.step_size
