"""Subsets and splits: skip/take of samples and a seeded held-out split, as views and through
from_storage, with the loader's exact order, ranks and resume; the split is the same in every
run, at every world size and after the dataset grows."""

from __future__ import annotations

import numpy as np
import pytest

from guideloom import StatefulDataLoader, StreamDataset, StreamNumpyFormat, StreamStorage
from guideloom.errors import ResumeStateError
from guideloom.storage.subset import GROUP

FMT = StreamNumpyFormat({"tokens": np.uint32})
L = 4


def _write(url, windows, append=False):
    storage = StreamStorage(url, FMT)
    with storage.writer(append=append, shard_size=4096) as w:
        first = len(StreamDataset(StreamStorage(url, FMT), sequence_length=L)) * L if append else 0
        for start in range(first, first + windows * L, 6):  # records of 6 tokens across windows
            w.append({"tokens": np.arange(start, min(start + 6, first + windows * L), dtype=np.uint32)})
    return StreamStorage(url, FMT)


def _ids(rows):
    """Window numbers of rows of tokens (window k holds k*L .. k*L + L - 1)."""
    return [int(r[0]) // L for r in rows]


def test_take_and_skip_are_the_views_samples(tmp_path):
    view = StreamDataset(_write(tmp_path / "ds", 50), sequence_length=L)
    part = view.skip(10).take(15)
    assert len(part) == 15 and len(view.take(500)) == 50 and len(view.skip(500)) == 0
    assert _ids(part[i]["tokens"] for i in range(15)) == list(range(10, 25))
    assert _ids(part.read_batch([0, -1, 3])["tokens"]) == [10, 24, 13]
    with pytest.raises(IndexError, match="out of range"):
        part[15]


def test_holdout_splits_every_sample_once_by_the_fraction_and_the_seed(tmp_path):
    view = StreamDataset(_write(tmp_path / "ds", 2 * GROUP + 357), sequence_length=L)
    kept, held = view.holdout(0.01, seed=7)
    kept_ids, held_ids = (
        _ids(kept.read_batch(range(len(kept)))["tokens"]),
        _ids(held.read_batch(range(len(held)))["tokens"]),
    )
    assert sorted(kept_ids + held_ids) == list(range(len(view)))
    assert kept_ids == sorted(kept_ids) and held_ids == sorted(held_ids)
    per_group = [sum(1 for i in held_ids if i // GROUP == g) for g in range(2)]
    assert per_group == [10, 10]  # exactly the fraction in every whole group
    again = StreamDataset(_write(tmp_path / "other", 2 * GROUP + 357), sequence_length=L).holdout(
        0.01, seed=7
    )[1]
    assert (
        _ids(again.read_batch(range(len(again)))["tokens"]) == held_ids
    )  # the same split on the same indexes
    other_seed = view.holdout(0.01, seed=8)[1]
    assert _ids(other_seed.read_batch(range(len(other_seed)))["tokens"]) != held_ids


def test_a_split_keeps_every_sample_on_its_side_as_the_dataset_grows(tmp_path):
    url = tmp_path / "ds"
    before = StreamDataset(_write(url, GROUP + 300), sequence_length=L).holdout(0.05, seed=1)[1]
    held_before = _ids(before.read_batch(range(len(before)))["tokens"])
    _write(url, 900, append=True)
    after = StreamDataset(StreamStorage(url, FMT), sequence_length=L).holdout(0.05, seed=1)[1]
    held_after = _ids(after.read_batch(range(len(after)))["tokens"])
    assert held_after[: len(held_before)] == held_before and len(held_after) > len(held_before)


@pytest.mark.parametrize("world_size", [1, 3])
def test_from_storage_reads_the_held_out_part_on_every_rank_and_resumes_exactly(tmp_path, world_size):
    storage = _write(tmp_path / "ds", 3 * GROUP)
    held = _ids(
        StreamDataset(storage, sequence_length=L).holdout(0.02, seed=3)[1].read_batch(range(60))["tokens"]
    )

    def loader(rank, **kw):
        return StatefulDataLoader.from_storage(
            StreamStorage(tmp_path / "ds", FMT), sequence_length=L, batch_size=4, shuffle="full", seed=11,
            holdout=0.02, holdout_seed=3, held_out=True, rank=rank, world_size=world_size, **kw,
        )  # fmt: skip

    seen = [i for rank in range(world_size) for b in loader(rank) for i in _ids(b["tokens"])]
    assert sorted(seen) == held  # the ranks' shares are the held-out samples, each once

    first = loader(0)
    reference = [_ids(b["tokens"]) for b in first]
    run = loader(0)
    it = iter(run)
    done = [_ids(next(it)["tokens"]) for _ in range(2)]
    state = run.state_dict()
    resumed = loader(0, num_workers=2)
    resumed.load_state_dict(state)
    assert done + [_ids(b["tokens"]) for b in resumed] == reference


def test_skip_and_take_through_from_storage_and_the_state_of_another_subset(tmp_path):
    _write(tmp_path / "ds", 80)

    def loader(**kw):
        return StatefulDataLoader.from_storage(
            StreamStorage(tmp_path / "ds", FMT), sequence_length=L, batch_size=5, **kw
        )

    assert [i for b in loader(skip=20, take=30) for i in _ids(b["tokens"])] == list(range(20, 50))
    run = loader(skip=20, take=30)
    next(iter(run))
    state = run.state_dict()
    with pytest.raises(ResumeStateError) as info:
        loader(skip=20, take=40).load_state_dict(state)
    text = str(info.value)
    assert "another subset of the same dataset" in text and "skip=20,take=30" in text and "take=" in text
    with pytest.raises(ResumeStateError):
        loader().load_state_dict(state)  # the whole dataset is not that subset


def test_a_subset_with_record_boundaries_marks_the_base_windows_documents(tmp_path):
    _write(tmp_path / "ds", 40)
    kw = dict(sequence_length=L, batch_size=4, boundaries="records")
    whole = [b for b in StatefulDataLoader.from_storage(StreamStorage(tmp_path / "ds", FMT), **kw)]
    part = [
        b for b in StatefulDataLoader.from_storage(StreamStorage(tmp_path / "ds", FMT), skip=8, take=8, **kw)
    ]
    for got, want in zip(part, whole[2:4]):
        assert got["tokens"].tolist() == want["tokens"].tolist()
        assert got["position_ids"].tolist() == want["position_ids"].tolist()


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"holdout": 0.0005}, "use holdout=0.001"),
        ({"holdout": 1.0}, "above 0 and below 1"),
        ({"held_out": True}, "give holdout=FRACTION too"),
        ({"skip": -1}, "skip= takes a number of samples"),
        ({"take": 2.5}, "take= takes a number of samples"),
    ],
)
def test_bad_subset_arguments_are_named_before_any_read(tmp_path, kwargs, needle):
    with pytest.raises(ValueError, match=needle.replace("(", r"\(")):
        StatefulDataLoader.from_storage(tmp_path / "nothing-here", sequence_length=L, **kwargs)


def test_trace_of_a_subset_run_names_the_bytes_each_row_read(tmp_path):
    import guideloom

    storage = _write(tmp_path / "ds", 400)
    kw = dict(sequence_length=L, batch_size=4, shuffle="full", seed=1)
    run = StatefulDataLoader.from_storage(storage, skip=100, take=200, holdout=0.1, **kw)
    it = iter(run)
    delivered = [next(it)["tokens"] for _ in range(3)]
    state = run.state_dict()
    view = StreamDataset(storage, sequence_length=L).holdout(0.1)[0].skip(100).take(200)
    rows = list(guideloom.trace(state, view, steps=range(3)))
    assert len(rows) == 12
    for row in rows:
        want = delivered[row["step"]][row["row"]]
        piece = row["pieces"][0]
        lo, hi = piece["byte_range"]
        data = (tmp_path / "ds" / piece["path"]).read_bytes()[lo:hi]
        assert np.frombuffer(data, np.uint32).tolist() == want[: (hi - lo) // 4].tolist()
