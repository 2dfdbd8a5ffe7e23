"""Training on snapshots: resuming a pinned snapshot after the dataset grew, ``follow=True``
moving to the current snapshot at epoch boundaries only, and a state whose snapshot expired."""

from __future__ import annotations

import datetime
from pathlib import Path

import numpy as np
import pytest

from guideloom import StatefulDataLoader, StreamNumpyFormat, StreamStorage
from guideloom.errors import ResumeStateError

FMT = StreamNumpyFormat({"tokens": np.uint32})
L = 10  # tokens per window: every window's first token identifies it


def _grow(storage: StreamStorage, start: int, records: int) -> None:
    """Append ``records`` records of 50 tokens, numbered on from ``start``."""
    with storage.writer(append=True) as writer:
        for k in range(records):
            writer.append({"tokens": np.arange(start + 50 * k, start + 50 * (k + 1), dtype=np.uint32)})


def _firsts(batches: list) -> list[int]:
    return [int(t) for b in batches for t in b["tokens"][:, 0]]


@pytest.fixture
def grown(tmp_path: Path) -> StreamStorage:
    storage = StreamStorage(str(tmp_path / "ds"), FMT)
    _grow(storage, 0, 4)  # 200 tokens: 20 windows
    return storage


def _loader(storage: StreamStorage, **kw) -> StatefulDataLoader:
    return StatefulDataLoader.from_storage(
        storage, sequence_length=L, batch_size=4, shuffle=True, seed=3, **kw
    )


@pytest.mark.parametrize("workers", [(0, "process"), (2, "thread"), (1, "process")])
def test_follow_reads_new_records_from_the_next_epoch_never_inside_one(
    grown: StreamStorage, workers: tuple[int, str]
) -> None:
    url = grown.url
    num_workers, method = workers
    loader = _loader(StreamStorage(url, FMT), follow=True, num_workers=num_workers, parallel_method=method)
    first_snapshot = loader.state_dict()["guideloom_loader"]["snapshot"]
    it = iter(loader)
    seen = _firsts([next(it), next(it)])
    _grow(StreamStorage(url, FMT), 200, 2)  # grows by 10 windows in the middle of epoch 0
    seen += _firsts(list(it))
    assert sorted(seen) == list(range(0, 200, L))  # epoch 0: exactly the old snapshot's windows
    epoch1 = _firsts(list(loader))
    assert sorted(epoch1) == list(range(0, 300, L))  # epoch 1: the grown dataset, each once
    state = loader.state_dict()["guideloom_loader"]
    assert state["snapshot"] != first_snapshot
    assert state["snapshot"] == StreamStorage(url, FMT).current_snapshot.id
    # without follow the loader stays on the snapshot it started on
    still = _loader(StreamStorage(url, FMT, snapshot=first_snapshot))
    list(still)
    assert sorted(_firsts(list(still))) == list(range(0, 200, L))


def test_resume_mid_epoch_after_growth_is_exact(grown: StreamStorage) -> None:
    url = grown.url
    reference = _firsts(list(_loader(StreamStorage(url, FMT))))
    loader = _loader(StreamStorage(url, FMT), follow=True)
    it = iter(loader)
    head = _firsts([next(it), next(it)])
    saved = loader.state_dict()
    _grow(StreamStorage(url, FMT), 200, 2)
    for follow in (True, False):
        resumed = _loader(StreamStorage(url, FMT), follow=follow)  # built on the grown dataset
        resumed.load_state_dict(saved)
        assert head + _firsts(list(resumed)) == reference  # same order, same samples
        nxt = _firsts(list(resumed))
        assert sorted(nxt) == list(range(0, 300 if follow else 200, L))


def test_state_saved_after_an_epoch_ended_follows_into_the_next(grown: StreamStorage) -> None:
    url = grown.url
    loader = _loader(StreamStorage(url, FMT), follow=True)
    list(loader)
    saved = loader.state_dict()
    _grow(StreamStorage(url, FMT), 200, 2)
    resumed = _loader(StreamStorage(url, FMT), follow=True)
    resumed.load_state_dict(saved)
    assert sorted(_firsts(list(resumed))) == list(range(0, 300, L))


def test_expired_snapshot_names_it_and_the_oldest_kept(grown: StreamStorage) -> None:
    url = grown.url
    loader = _loader(StreamStorage(url, FMT))
    next(iter(loader))
    saved = loader.state_dict()
    pinned = saved["guideloom_loader"]["snapshot"]
    writable = StreamStorage(url, FMT)
    _grow(writable, 200, 1)
    _grow(writable, 250, 1)
    writable.expire(keep_last=1, grace=datetime.timedelta(0))
    oldest = StreamStorage(url, FMT).snapshots()[0].id
    fresh = _loader(StreamStorage(url, FMT))
    with pytest.raises(ResumeStateError) as info:
        fresh.load_state_dict(saved)
    message = str(info.value)
    assert pinned in message and "no longer kept" in message
    assert f"the oldest snapshot kept is {oldest}" in message
    assert "Pick a kept one" not in message  # a state cannot be resumed on another snapshot
    assert "without loading the state" in message and "keep_last" in message


def test_follow_refused_with_persistent_workers(grown: StreamStorage) -> None:
    with pytest.raises(ValueError, match="persistent_workers"):
        _loader(StreamStorage(grown.url, FMT), follow=True, num_workers=1, persistent_workers=True)


def _rank_epochs(rank: int, url: str, store: str, out: str) -> None:
    """One rank of a two-rank gloo group: two epochs with follow=True; rank 0 grows the
    dataset between them, after the other rank has already moved on to its second epoch (so
    a rank choosing its snapshot alone would take the old one)."""
    import json
    import time

    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        loader = StatefulDataLoader.from_storage(
            StreamStorage(url, FMT), sequence_length=L, batch_size=2, shuffle=True, seed=1, follow=True
        )
        epochs = []
        for epoch in range(2):
            epochs.append(_firsts(list(loader)))
            if epoch == 0:
                dist.barrier()
                if rank == 0:
                    time.sleep(1.0)  # rank 1 is at its epoch boundary by now
                    _grow(StreamStorage(url, FMT), 200, 2)
        Path(out).write_text(json.dumps(epochs))
    finally:
        dist.destroy_process_group()


def test_ranks_follow_the_same_snapshot(grown: StreamStorage, tmp_path: Path) -> None:
    import json

    import torch.multiprocessing as mp

    outs = [str(tmp_path / f"rank{r}.json") for r in range(2)]
    context = mp.get_context("spawn")
    procs = [
        context.Process(target=_rank_epochs, args=(r, grown.url, str(tmp_path / "store"), outs[r]))
        for r in range(2)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    ranks = [json.loads(Path(o).read_text()) for o in outs]
    for epoch, expected in ((0, 200), (1, 300)):
        together = ranks[0][epoch] + ranks[1][epoch]
        assert sorted(together) == list(range(0, expected, L))  # one snapshot, split over ranks


def test_follow_with_several_ranks_needs_torch_distributed(grown: StreamStorage) -> None:
    with pytest.raises(ValueError, match="init_process_group"):
        _loader(StreamStorage(grown.url, FMT), follow=True, rank=0, world_size=2)


def test_resume_and_follow_on_every_store(dataset_url: tuple[str, dict]) -> None:
    """Reopening a pinned snapshot keeps the storage options (credentials, endpoint)."""
    url, options = dataset_url
    storage = StreamStorage(url, FMT, storage_options=options)
    _grow(storage, 0, 4)
    reference = _firsts(list(_loader(StreamStorage(url, FMT, storage_options=options))))
    loader = _loader(StreamStorage(url, FMT, storage_options=options), follow=True)
    it = iter(loader)
    head = _firsts([next(it)])
    saved = loader.state_dict()
    _grow(StreamStorage(url, FMT, storage_options=options), 200, 2)
    resumed = _loader(StreamStorage(url, FMT, storage_options=options), follow=True)
    resumed.load_state_dict(saved)
    assert head + _firsts(list(resumed)) == reference
    assert sorted(_firsts(list(resumed))) == list(range(0, 300, L))


def test_labels_and_boundaries_resume_and_follow_too(grown: StreamStorage) -> None:
    url = grown.url
    loader = _loader(StreamStorage(url, FMT), follow=True, labels=True)
    reference = [b["labels"].tolist() for b in _loader(StreamStorage(url, FMT), labels=True)]
    it = iter(loader)
    head = [next(it)["labels"].tolist()]
    saved = loader.state_dict()
    assert saved["guideloom_loader"]["snapshot"] == grown.current_snapshot.id
    _grow(StreamStorage(url, FMT), 200, 2)
    resumed = _loader(StreamStorage(url, FMT), follow=True, labels=True)
    resumed.load_state_dict(saved)
    assert head + [b["labels"].tolist() for b in resumed] == reference
    assert sorted(_firsts(list(resumed))) == list(range(0, 300, L))
