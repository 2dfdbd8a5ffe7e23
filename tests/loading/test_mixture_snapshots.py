"""A loader state saved on a Mixture records each source's snapshot: after a source grows by an
append, a loader on a new Mixture of the same storages reopens each source at its saved snapshot
and resumes the saved order exactly; a source whose snapshot has expired, or one given as a view
(which cannot be reopened), is named with the fix."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from guideloom import Mixture, StatefulDataLoader, StreamDataset, StreamNumpyFormat, StreamStorage
from guideloom.errors import ResumeStateError

FMT = StreamNumpyFormat({"tokens": np.uint16})


def _write(url, start, records=6, append=False):
    storage = StreamStorage(url, FMT)
    with storage.writer(append=append) as w:
        for i in range(records):
            first = start + 10 * i
            w.append({"tokens": np.arange(first, first + 10, dtype=np.uint16)})
    return storage


def _loader(web, code, num_workers=0):
    mixture = Mixture({"web": (StreamStorage(web, FMT), 0.6), "code": (StreamStorage(code, FMT), 0.4)})
    return StatefulDataLoader.from_storage(
        mixture, sequence_length=8, batch_size=2, shuffle="full", seed=5, num_workers=num_workers
    )


@pytest.mark.parametrize("num_workers", [0, 2])
def test_state_on_a_mixture_names_each_sources_snapshot_and_resumes_after_one_grows(tmp_path, num_workers):
    web, code = tmp_path / "web", tmp_path / "code"
    pins = [_write(web, 0).current_snapshot.id, _write(code, 1000).current_snapshot.id]
    reference = [b["tokens"].tolist() for b in _loader(web, code)]
    assert len(reference) >= 6

    loader = _loader(web, code)
    it = iter(loader)
    seen = [next(it)["tokens"].tolist() for _ in range(3)]
    state = loader.state_dict()
    assert state["guideloom_loader"]["source_snapshots"] == pins

    grown = _write(code, 5000, records=4, append=True)  # one source grows while training is stopped
    assert grown.current_snapshot.id != pins[1]

    resumed = _loader(web, code, num_workers)  # on the grown source: back to the saved snapshots
    resumed.load_state_dict(state)
    assert seen + [b["tokens"].tolist() for b in resumed] == reference

    fresh = [b["tokens"].tolist() for b in _loader(web, code)]  # a new run reads the grown source
    assert any(5000 <= t < 5040 for batch in fresh for row in batch for t in row)


def test_a_source_snapshot_no_longer_kept_is_named(tmp_path):
    web, code = tmp_path / "web", tmp_path / "code"
    _write(web, 0)
    pin = _write(code, 1000).current_snapshot.id
    loader = _loader(web, code)
    it = iter(loader)
    next(it)
    state = loader.state_dict()

    grown = _write(code, 5000, records=2, append=True)
    grown.expire(keep_last=1)

    resumed = _loader(web, code)
    with pytest.raises(ResumeStateError) as info:
        resumed.load_state_dict(state)
    text = str(info.value)
    assert "'code'" in text and pin in text and "keep_last" in text


def test_a_source_given_as_a_view_that_moved_names_the_pinned_snapshot(tmp_path):
    web, code = tmp_path / "web", tmp_path / "code"
    _write(web, 0)
    pin = _write(code, 1000).current_snapshot.id

    def loader():
        views = {
            "web": (StreamStorage(web, FMT), 0.6),
            "code": (StreamDataset(StreamStorage(code, FMT), sequence_length=8), 0.4),
        }
        return StatefulDataLoader.from_storage(Mixture(views), sequence_length=8, batch_size=2, seed=5)

    first = loader()
    next(iter(first))
    state = first.state_dict()
    _write(code, 5000, records=2, append=True)

    with pytest.raises(ResumeStateError) as info:
        loader().load_state_dict(state)
    text = str(info.value)
    assert "'code'" in text and f"snapshot={pin!r}" in text and "StreamDataset" in text


def _following(web, code, **kw):
    mixture = Mixture({"web": (StreamStorage(web, FMT), 0.6), "code": (StreamStorage(code, FMT), 0.4)})
    return StatefulDataLoader.from_storage(
        mixture, sequence_length=8, batch_size=2, shuffle="full", seed=5, follow=True, **kw
    )


@pytest.mark.parametrize("num_workers", [0, 2])
def test_follow_on_a_mixture_moves_every_source_at_epoch_boundaries_only(tmp_path, num_workers):
    web, code = tmp_path / "web", tmp_path / "code"
    _write(web, 0)
    _write(code, 1000)
    loader = _following(web, code, num_workers=num_workers)
    it = iter(loader)
    first = [next(it)["tokens"].tolist()]
    _write(code, 5000, records=4, append=True)  # grows during epoch 0
    first += [b["tokens"].tolist() for b in it]
    tokens = {t for batch in first for row in batch for t in row}
    assert not any(5000 <= t < 5040 for t in tokens)  # never inside an epoch
    second = [b["tokens"].tolist() for b in loader]  # epoch 1: on the grown source
    assert any(5000 <= t < 5040 for batch in second for row in batch for t in row)

    # epoch 1 is what a mixture built on the grown sources reads as its epoch 1
    fresh = _loader(web, code)
    list(fresh)
    assert [b["tokens"].tolist() for b in fresh] == second

    # a state saved inside the followed epoch resumes exactly, after another append
    loader = _following(web, code)
    list(loader)
    it = iter(loader)
    done = [next(it)["tokens"].tolist() for _ in range(2)]
    state = loader.state_dict()
    _write(web, 9000, records=3, append=True)
    resumed = _following(web, code, num_workers=num_workers)
    resumed.load_state_dict(state)
    assert done + [b["tokens"].tolist() for b in resumed] == second


def test_follow_on_a_mixture_with_a_view_source_names_it(tmp_path):
    web, code = tmp_path / "web", tmp_path / "code"
    _write(web, 0)
    _write(code, 1000)
    views = {
        "web": (StreamStorage(web, FMT), 0.6),
        "code": (StreamDataset(StreamStorage(code, FMT), sequence_length=8), 0.4),
    }
    with pytest.raises(ValueError, match=r"source 'code' was given as a view, which cannot be reopened"):
        StatefulDataLoader.from_storage(Mixture(views), sequence_length=8, follow=True)


def _mixture_rank_epochs(rank, web, code, store, out):
    """One rank of two (gloo): two epochs of a following mixture; rank 0 grows a source between
    them, after rank 1 has reached its epoch boundary (a rank choosing alone would miss it)."""
    import json
    import time
    from pathlib import Path

    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        loader = _following(web, code, rank=rank, world_size=2)
        epochs = []
        for epoch in range(2):
            epochs.append([row[0] for b in loader for row in b["tokens"].tolist()])
            if epoch == 0:
                dist.barrier()
                if rank == 0:
                    time.sleep(1.0)
                    _write(code, 5000, records=4, append=True)
        Path(out).write_text(json.dumps(epochs))
    finally:
        dist.destroy_process_group()


def test_ranks_follow_a_mixture_to_the_same_snapshots(tmp_path):
    import json

    import torch.multiprocessing as mp

    web, code = tmp_path / "web", tmp_path / "code"
    _write(web, 0)
    _write(code, 1000)
    outs = [str(tmp_path / f"rank{r}.json") for r in range(2)]
    context = mp.get_context("spawn")
    procs = [
        context.Process(
            target=_mixture_rank_epochs, args=(r, str(web), str(code), str(tmp_path / "store"), outs[r])
        )
        for r in range(2)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(180)
    assert [p.exitcode for p in procs] == [0, 0]
    ranks = [json.loads(Path(o).read_text()) for o in outs]
    fresh = _loader(web, code)  # one rank, on the grown sources: its epoch 1
    list(fresh)
    want = sorted(row[0] for b in fresh for row in b["tokens"].tolist())
    together = ranks[0][1] + ranks[1][1]
    missing = list(want)
    for t in together:
        missing.remove(t)  # every row the ranks read is one of that epoch's, once
    assert len(missing) < 2, (len(want), len(together))  # 29 positions: the last one does not split over 2 ranks
    assert any(t >= 5000 for t in together)
