"""Test helpers for code that trains from GuideLoom: check that a loader resumes exactly.

``assert_exact_resume(make_loader)`` runs the loader uninterrupted as a reference, then
interrupts and restores it in every way a training job does, and compares batch by batch:

- mid-epoch, at the very end of an epoch, and the epoch after a resumed one. The end of an
  epoch is torchdata's rule: a state saved inside the loop at the epoch's last batch resumes
  into an empty pass and then the next epoch; a state saved after the loop ended (the pass
  raised ``StopIteration``) resumes into the next epoch;
- saving with one ``num_workers`` and loading with another (``0 <-> 2`` by default), and checking
  that ``num_workers`` never changes the batches;
- for several world sizes simulated in one process (one loader per rank);
- elastic: a state saved by rank 0 of ``W`` ranks and loaded by every one of ``W'`` ranks; over
  all new ranks, step by step, the rest of the epoch must be the global order from the saved
  position on, every remaining sample exactly once, up to the documented remainder.

``make_loader(num_workers=..., rank=..., world_size=...)`` must return a new
`guideloom.StatefulDataLoader` over the same data with the same settings each time (build it
with ``parallel_method="thread"`` to check thread workers instead of processes). Samples
are compared by content, so use data whose samples differ (e.g. token ids counting up). torch is
imported only when the helper runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

__all__ = ["assert_exact_resume", "batch_keys"]

Batch = list[Hashable]  # one key per sample of a batch


def _freeze(x: Any) -> Hashable:
    import numpy as np
    import torch

    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    if isinstance(x, np.ndarray):
        return (x.dtype.str, x.shape, x.tobytes())
    if isinstance(x, Mapping):
        return tuple(sorted((str(k), _freeze(v)) for k, v in x.items()))
    if isinstance(x, (list, tuple)):
        return tuple(_freeze(v) for v in x)
    try:
        hash(x)
    except TypeError:
        return repr(x)
    return x


def _rows(column: Any) -> list[Hashable]:
    import numpy as np
    import torch

    if isinstance(column, (torch.Tensor, np.ndarray)):
        return [_freeze(column[i]) for i in range(len(column))]
    return [_freeze(v) for v in column]


def batch_keys(batch: Any) -> Batch:
    """One hashable key per sample of a collated batch (dict of columns, list, or tensor)."""
    if isinstance(batch, Mapping):
        columns = [_rows(batch[k]) for k in sorted(batch, key=str)]
        sizes = {len(c) for c in columns}
        if len(sizes) > 1:
            raise AssertionError(f"batch columns have different lengths: {sorted(sizes)}")
        return [tuple(row) for row in zip(*columns)]
    return _rows(batch)


class _Run:
    def __init__(self, make_loader: Callable[..., Any], key: Callable[[Any], Batch]) -> None:
        self.make_loader = make_loader
        self.key = key

    def loader(self, workers: int, rank: int, world: int) -> Any:
        return self.make_loader(num_workers=workers, rank=rank, world_size=world)

    def take(self, loader: Any, count: int | None = None) -> list[Batch]:
        """The next ``count`` batches of one pass (all of it when ``count`` is None)."""
        out: list[Batch] = []
        if count == 0:
            return out
        for batch in loader:
            out.append(self.key(batch))
            if count is not None and len(out) == count:
                break
        return out


def _check(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise AssertionError(f"{where}: {what}")


def _first_difference(got: Any, want: Any) -> str:
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            return f"batch {i} differs ({len(g)} vs {len(w)} samples)"
    return f"{len(got)} batches instead of {len(want)}"


def _same(got: Any, want: Any, where: str) -> None:
    if got != want:
        raise AssertionError(f"{where}: {_first_difference(got, want)}")


def _roundtrip(state: dict[str, Any]) -> dict[str, Any]:
    """States must survive JSON (plain ints and short strings): check it and use the copy."""
    return json.loads(json.dumps(state))  # type: ignore[no-any-return]


def _interleave(per_rank: list[list[Batch]], where: str) -> list[Hashable]:
    counts = {len(x) for x in per_rank}
    _check(len(counts) == 1, where, f"ranks got different numbers of batches: {sorted(counts)}")
    flat: list[Hashable] = []
    for step in range(counts.pop()):
        sizes = {len(x[step]) for x in per_rank}
        _check(len(sizes) == 1, where, f"step {step}: ranks got batches of sizes {sorted(sizes)}")
        for batches in per_rank:
            flat.extend(batches[step])
    return flat


def assert_exact_resume(
    make_loader: Callable[..., Any],
    *,
    worker_counts: Sequence[int] = (0, 2),
    world_sizes: Sequence[int] = (1, 2),
    elastic: Sequence[tuple[int, int]] = ((4, 2), (4, 8)),
    sample_key: Callable[[Any], Batch] | None = None,
) -> None:
    """Raise ``AssertionError`` (saying where) unless ``make_loader``'s loaders resume exactly.

    ``worker_counts``: ``num_workers`` values; every ordered pair of neighbours is tried for
    saving and loading, and each must give the reference batches. ``world_sizes``: world sizes
    whose every rank is checked. ``elastic``: ``(saved_on, resumed_on)`` world-size changes.
    ``sample_key(batch) -> list of per-sample keys`` defaults to `batch_keys`.
    """
    run = _Run(make_loader, sample_key or batch_keys)
    workers = list(dict.fromkeys(worker_counts)) or [0]
    base = workers[0]
    pairs = [(workers[i], workers[(i + 1) % len(workers)]) for i in range(len(workers))]

    for world in world_sizes:
        for rank in range(world):
            ref_loader = run.loader(base, rank, world)
            ref = [run.take(ref_loader), run.take(ref_loader)]  # two uninterrupted epochs
            n = len(ref[0])
            at = f"world_size={world} rank={rank}"
            _check(n > 0, at, "the reference epoch has no batches")
            _check(len(ref[1]) == n, at, f"epoch 1 has {len(ref[1])} batches, epoch 0 has {n}")
            if rank == 0:
                for w in workers[1:]:
                    other = run.loader(w, rank, world)
                    for epoch in (0, 1):
                        _same(run.take(other), ref[epoch], f"{at} num_workers={w}: epoch {epoch}")
            for k in sorted({0, n // 2, n}):
                for save_w, load_w in pairs if k else [(base, base)]:
                    where = f"{at}, resumed after {k} of {n} batches (num_workers {save_w} -> {load_w})"
                    first = run.loader(save_w, rank, world)
                    _same(run.take(first, k), ref[0][:k], f"{where}, before saving")
                    state = _roundtrip(first.state_dict())  # inside the loop, at batch k
                    del first
                    second = run.loader(load_w, rank, world)
                    second.load_state_dict(state)
                    # at the epoch's last batch: torchdata's rule, the rest of the epoch is empty
                    _same(run.take(second), ref[0][k:], f"{where}, rest of the epoch")
                    _same(run.take(second), ref[1], f"{where}, the epoch after")
            for save_w, load_w in pairs:
                where = f"{at}, resumed after the loop of epoch 0 ended (num_workers {save_w} -> {load_w})"
                first = run.loader(save_w, rank, world)
                _same(run.take(first), ref[0], f"{where}, before saving")
                state = _roundtrip(first.state_dict())
                del first
                second = run.loader(load_w, rank, world)
                second.load_state_dict(state)
                _same(run.take(second), ref[1], f"{where}, the next pass")

    for old_world, new_world in elastic:
        glob_loader = run.loader(base, 0, 1)
        glob = [
            [key for batch in run.take(glob_loader) for key in batch],
            [key for batch in run.take(glob_loader) for key in batch],
        ]
        where = f"elastic resume {old_world} -> {new_world} ranks"
        old = [run.loader(base, r, old_world) for r in range(old_world)]
        steps = len(old[0]) // 2
        done = _interleave([run.take(loader, steps) for loader in old], where)
        _check(done == glob[0][: len(done)], where, "the first ranks' steps are not the global order")
        state = _roundtrip(old[0].state_dict())
        info = state["guideloom_loader"]
        total, position = info["num_samples"], info["position"]
        _check(position == len(done), where, f"saved position {position}, but {len(done)} were consumed")
        new = []
        for r in range(new_world):
            loader = run.loader(workers[-1] if r == 0 else base, r, new_world)
            loader.load_state_dict(state)
            new.append(loader)
        drop_last, batch_size = new[0].drop_last, new[0].batch_size
        bound = new_world * batch_size if drop_last else new_world
        for epoch, start in ((0, position), (1, 0)):
            rest = _interleave([run.take(loader) for loader in new], f"{where}, epoch {epoch}")
            _check(
                rest == glob[epoch][start : start + len(rest)],
                f"{where}, epoch {epoch}",
                "the new ranks' samples, step by step, are not the global order from the saved "
                "position (something repeated, skipped or reordered)",
            )
            left = total - start - len(rest)
            _check(
                0 <= left < bound,
                f"{where}, epoch {epoch}",
                f"{left} samples were not handed out (at most {bound - 1} may be)",
            )
