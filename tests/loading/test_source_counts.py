"""Per-source accounting in mixtures: the ``source`` / ``source_index`` batch keys (``sources=True``)
and ``loader.source_counts()``, against a brute-force count of what real loaders yielded, across
worker modes, elastic resumes (other world size, batch size, worker count) and epoch ends; the
keys equal what `guideloom.trace` says for the same steps."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
import torch

import guideloom
from guideloom import (
    DocumentJsonFormat,
    DocumentStorage,
    Mixture,
    StatefulDataLoader,
    StreamNumpyFormat,
    StreamStorage,
)
from guideloom.errors import ResumeStateError
from guideloom.loading.state import STATE_KEY

FMT = StreamNumpyFormat({"tokens": np.uint32})
L = 8
BASE = 1_000_000  # source k's token ids start at k * BASE: a window's tokens say its source


def _stream(url: str, windows: int, base: int) -> StreamStorage:
    storage = StreamStorage(url, FMT)
    with storage.writer(shard_size=400) as writer:
        tokens = np.arange(base, base + windows * L, dtype=np.uint32)
        for lo in range(0, tokens.size, 29):  # records of 29 tokens: windows cross records and shards
            writer.append({"tokens": tokens[lo : lo + 29]})
    return StreamStorage(url, FMT)


def _documents(url: str, name: str, count: int) -> DocumentStorage:
    storage = DocumentStorage(url, DocumentJsonFormat())
    with storage.writer(shard_size=300) as writer:
        for i in range(count):
            writer.append({"source": name, "id": i, "text": "y" * (i % 7)})
    return DocumentStorage(url, DocumentJsonFormat())


@pytest.fixture(name="streams")
def streams_fixture(tmp_path: Any) -> Mixture:
    return Mixture(
        {
            "web": (_stream(str(tmp_path / "web"), 37, 0), 0.6),
            "code": (_stream(str(tmp_path / "code"), 11, BASE), 0.3),
            "books": (_stream(str(tmp_path / "books"), 4, 2 * BASE), 0.1),
        }
    )


@pytest.fixture(name="docs")
def docs_fixture(tmp_path: Any) -> Mixture:
    return Mixture(
        {
            "tweets": (_documents(str(tmp_path / "tweets"), "tweets", 41), 2),
            "papers": (_documents(str(tmp_path / "papers"), "papers", 9), 1),
        }
    )


def _rows(batch: Any, names: tuple[str, ...]) -> list[tuple[int, int]]:
    """(source, source_index) of every row, checked against the row's own content."""
    pairs = list(zip(batch["source"].tolist(), batch["source_index"].tolist()))
    assert batch["source"].dtype == batch["source_index"].dtype == torch.int64
    if "tokens" in batch:
        first = batch["tokens"][:, 0].tolist()
        assert [(t // BASE, (t % BASE) // L) for t in first] == pairs
    else:
        docs = batch["documents"]
        assert [(names.index(d["source"]), d["id"]) for d in docs] == pairs
    return pairs


def _expected(counts: Counter[int], names: tuple[str, ...], tokens: bool) -> dict[str, Any]:
    return {
        n: {"samples": counts[k], "tokens": counts[k] * L if tokens else None} for k, n in enumerate(names)
    }


@pytest.mark.parametrize("layout", ["stream", "documents"])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_counts_equal_a_brute_force_count_of_the_rows(
    streams: Mixture, docs: Mixture, layout: str, num_workers: int
) -> None:
    mix = streams if layout == "stream" else docs
    names = mix.names
    kwargs: dict[str, Any] = {"sequence_length": L} if layout == "stream" else {}
    loader = StatefulDataLoader.from_storage(
        mix, batch_size=5, shuffle=True, seed=3, num_workers=num_workers, sources=True, **kwargs
    )
    counts: Counter[int] = Counter()
    assert loader.source_counts() == _expected(counts, names, layout == "stream")
    for _ in range(3):  # three epochs: the counts of finished epochs are kept
        for batch in loader:
            counts.update(s for s, _ in _rows(batch, names))
            assert loader.source_counts() == _expected(counts, names, layout == "stream")
    # one rank, drop_last=False: every position of each epoch is handed out (the last batch short)
    assert sum(counts.values()) == 3 * mix.plan(**kwargs).epoch_length


def test_documents_batches_hold_the_records_and_the_keys(docs: Mixture) -> None:
    loader = StatefulDataLoader.from_storage(docs, batch_size=4, sources=True)
    batch = next(iter(loader))
    assert sorted(batch) == ["documents", "source", "source_index"]
    assert all(isinstance(d, dict) for d in batch["documents"]) and len(batch["documents"]) == 4
    plain = next(iter(StatefulDataLoader.from_storage(docs, batch_size=4)))
    assert plain == batch["documents"]  # the same records in the same order; off by default


def _lockstep(loaders: list[Any], steps: int | None, names: tuple[str, ...], counts: Counter[int]) -> bool:
    """Advance every rank's loader ``steps`` batches (None: to the end of the pass), counting all
    ranks' rows; True if the pass ended."""
    its = [iter(ld) for ld in loaders]
    taken = 0
    while steps is None or taken < steps:
        try:
            batches = [next(it) for it in its]
        except StopIteration:
            return True
        for batch in batches:
            counts.update(s for s, _ in _rows(batch, names))
        taken += 1
        for ld in loaders:  # every rank reports the same global figures
            assert ld.source_counts() == _expected(counts, names, True)
    return False


@pytest.mark.parametrize("drop_last", [False, True])
def test_counts_after_an_elastic_resume_equal_an_uninterrupted_run(streams: Mixture, drop_last: bool) -> None:
    names = streams.names
    common: dict[str, Any] = {"sequence_length": L, "shuffle": True, "seed": 5, "sources": True}

    def ranks(world: int, batch_size: int, workers: int, method: str = "process") -> list[Any]:
        return [
            StatefulDataLoader.from_storage(
                streams,
                batch_size=batch_size,
                rank=r,
                world_size=world,
                num_workers=workers,
                parallel_method=method,
                drop_last=drop_last,
                **common,
            )
            for r in range(world)
        ]

    # the uninterrupted run: 1 rank, batches of 4
    single = ranks(1, 4, 0)[0]
    reference: list[dict[str, Any]] = []  # counts after each batch, and the global position
    positions: list[int] = []
    for _ in range(2):
        for _batch in single:
            reference.append(single.source_counts())
            positions.append(single.state_dict()[STATE_KEY]["position"])

    # the interrupted run: 2 ranks of 2 (6 steps: position 24) ...
    counts: Counter[int] = Counter()
    first = ranks(2, 2, 0)
    _lockstep(first, 6, names, counts)
    state = first[0].state_dict()
    assert state[STATE_KEY]["position"] == 24
    # ... resumed on 3 ranks with batches of 1 and 2 worker processes
    second = ranks(3, 1, 2)
    for ld in second:
        ld.load_state_dict(state)
        # right after the resume: the uninterrupted run's counts at the same position (24 = 6 x 4)
        assert ld.source_counts() == reference[positions.index(24)] == _expected(counts, names, True)
    _lockstep(second, 5, names, counts)  # position 39: not a multiple of 4, compare by brute force
    state = second[0].state_dict()
    assert state[STATE_KEY]["position"] == 39
    # ... and on 1 rank with batches of 3, thread workers: to the end of the epoch and through
    # the next one (each epoch end leaves out the remainder of *this* loader's schedule)
    third = ranks(1, 3, 2, "thread")
    third[0].load_state_dict(state)
    assert _lockstep(third, None, names, counts)
    assert _lockstep(third, None, names, counts)
    saved = third[0].state_dict()
    fresh = ranks(2, 4, 0)
    for ld in fresh:
        ld.load_state_dict(saved)
        assert ld.source_counts() == _expected(counts, names, True)


def test_a_state_at_an_epochs_last_batch_keeps_the_left_out_remainder_out(streams: Mixture) -> None:
    names = streams.names
    epoch_length = streams.plan(L).epoch_length
    loader = StatefulDataLoader.from_storage(
        streams, sequence_length=L, batch_size=5, drop_last=True, sources=True
    )
    assert epoch_length % 5  # a remainder is left out
    counts: Counter[int] = Counter()
    for batch in loader:  # the state is saved inside the loop at the last batch
        counts.update(s for s, _ in _rows(batch, names))
        state = loader.state_dict()
    assert state[STATE_KEY]["position"] == epoch_length  # position: the whole epoch ...
    assert state[STATE_KEY]["delivered"]["positions"] == epoch_length // 5 * 5  # ... handed out: not all
    again = StatefulDataLoader.from_storage(streams, sequence_length=L, batch_size=2, sources=True)
    again.load_state_dict(state)
    assert again.source_counts() == _expected(counts, names, True)
    assert list(again) == []  # the empty pass at the epoch's end, then the next epoch
    for batch in again:
        counts.update(s for s, _ in _rows(batch, names))
    assert again.source_counts() == _expected(counts, names, True)


def test_states_saved_before_the_counts_load(streams: Mixture) -> None:
    """A state without 'delivered' (saved before it existed) loads and resumes exactly; its earlier
    epochs are counted as whole epochs of the saving loader's settings."""
    loader = StatefulDataLoader.from_storage(streams, sequence_length=L, batch_size=4, sources=True)
    for _ in range(2):
        list(loader)
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.state_dict()
    old = {STATE_KEY: {k: v for k, v in state[STATE_KEY].items() if k != "delivered"}}
    again = StatefulDataLoader.from_storage(streams, sequence_length=L, batch_size=2)
    again.load_state_dict(old)
    assert again.source_counts() == loader.source_counts()
    assert again.state_dict()[STATE_KEY]["position"] == state[STATE_KEY]["position"] == 12


def test_a_corrupt_delivered_key_is_named(streams: Mixture) -> None:
    loader = StatefulDataLoader.from_storage(streams, sequence_length=L, batch_size=4)
    state = loader.state_dict()
    state[STATE_KEY]["delivered"] = {"samples": [1, 2], "positions": 0}  # 2 of 3 sources
    with pytest.raises(ResumeStateError) as err:
        StatefulDataLoader.from_storage(streams, sequence_length=L, batch_size=4).load_state_dict(state)
    message = str(err.value)
    assert "'delivered' should hold samples (a list of 3 non-negative ints, one per source)" in message
    assert "delete the 'delivered' key to load the state" in message
    del state[STATE_KEY]["delivered"]  # the fix, as written
    StatefulDataLoader.from_storage(streams, sequence_length=L, batch_size=4).load_state_dict(state)


@pytest.mark.parametrize("world_size", [1, 2])
def test_source_keys_equal_what_trace_says(streams: Mixture, world_size: int) -> None:
    loaders = [
        StatefulDataLoader.from_storage(
            streams, sequence_length=L, batch_size=3, shuffle="block", shuffle_block_size=4,
            shuffle_buffer_blocks=2, seed=9, rank=r, world_size=world_size, sources=True,
        )
        for r in range(world_size)
    ]  # fmt: skip
    state = loaders[0].state_dict()
    yielded = [[b for _ in range(2) for b in ld] for ld in loaders]  # two epochs, per rank
    steps = range(len(yielded[0]))
    traced = guideloom.trace_arrays(state, streams, steps=steps)  # step, rank, row order
    got = [per_rank[s]["source"] for s in steps for per_rank in yielded]
    assert np.concatenate([g.numpy() for g in got]).tolist() == traced.source.tolist()
    got = [per_rank[s]["source_index"] for s in steps for per_rank in yielded]
    assert np.concatenate([g.numpy() for g in got]).tolist() == traced.sample_index.tolist()
    rows = list(guideloom.trace(state, streams, steps=steps))
    assert len(rows) == sum(len(b["source"]) for per_rank in yielded for b in per_rank)
    for row in rows:
        batch = yielded[row["rank"]][row["step"]]
        assert streams.names[int(batch["source"][row["row"]])] == row["source"]
        assert int(batch["source_index"][row["row"]]) == row["sample_index"]


@pytest.mark.parametrize("drop_last", [False, True])
def test_each_ranks_count_of_one_dataset_is_what_it_received(tmp_path: Any, drop_last: bool) -> None:
    # one dataset's per-rank count is summed from the schedule in closed form: check it against
    # the rows each rank's loop received, after every batch of an epoch with a short last batch
    # (37 windows) or none (drop_last), at the epoch's end, and into the next epoch
    storage = _stream(str(tmp_path / "one"), 37, 0)
    for world, batch in ((1, 4), (2, 3), (3, 5)):
        for rank in range(world):
            loader = StatefulDataLoader.from_storage(
                storage,
                sequence_length=L,
                batch_size=batch,
                shuffle=True,
                seed=2,
                rank=rank,
                world_size=world,
                drop_last=drop_last,
            )
            rows = 0
            for limit in (None, 3):  # all of epoch 0, then 3 batches of epoch 1
                for k, got in enumerate(loader):
                    rows += len(got["tokens"])
                    assert loader.source_counts(scope="rank")[storage.url]["samples"] == rows, (world, rank, k)
                    if k + 1 == limit:
                        break
                assert loader.source_counts(scope="rank")[storage.url]["samples"] == rows, (world, rank)


def test_single_dataset_counts_and_refusals(tmp_path: Any, streams: Mixture) -> None:
    storage = _stream(str(tmp_path / "one"), 10, 0)
    loader = StatefulDataLoader.from_storage(storage, sequence_length=L, batch_size=3)
    rows = sum(len(b["tokens"]) for b in loader)
    assert loader.source_counts() == {storage.url: {"samples": rows, "tokens": rows * L}} != {}
    with pytest.raises(ValueError) as err:
        StatefulDataLoader.from_storage(storage, sequence_length=L, sources=True)
    assert "is one dataset" in str(err.value) and "leave sources out" in str(err.value)
    assert loader.source_counts(scope="rank") == loader.source_counts()  # one rank: the same
    with pytest.raises(ValueError) as err:
        loader.source_counts(scope="node")
    assert "scope is 'global'" in str(err.value) and "or 'rank'" in str(err.value)


def test_a_collate_fn_gets_the_keys_added_or_is_named(streams: Mixture) -> None:
    def as_dict(samples: list[Any]) -> dict[str, Any]:
        return {"first": [int(s["tokens"][0]) for s in samples]}

    loader = StatefulDataLoader.from_storage(
        streams, sequence_length=L, batch_size=4, collate_fn=as_dict, sources=True
    )
    batch = next(iter(loader))
    assert [t // BASE for t in batch["first"]] == batch["source"].tolist()
    assert [(t % BASE) // L for t in batch["first"]] == batch["source_index"].tolist()

    bad = StatefulDataLoader.from_storage(
        streams, sequence_length=L, batch_size=4, collate_fn=lambda s: len(s), sources=True
    )
    with pytest.raises(TypeError) as err:
        next(iter(bad))
    assert "collate_fn returned a int" in str(err.value) and "return a dict from collate_fn" in str(err.value)


def test_a_state_moved_back_counts_its_position(streams: Mixture) -> None:
    """A state at an epoch's end whose position is edited back (to replay the last batches)
    counts what its position says was handed out, not the end it was saved at."""
    loader = StatefulDataLoader.from_storage(streams, sequence_length=L, batch_size=4, sources=True)
    counts: list[dict[str, Any]] = []
    for _batch in loader:
        counts.append(loader.source_counts())
    state = loader.state_dict()
    state[STATE_KEY].update(position=20, finished=False)
    again = StatefulDataLoader.from_storage(streams, sequence_length=L, batch_size=4, sources=True)
    again.load_state_dict(state)
    assert again.source_counts() == counts[4]  # after 5 batches of 4


@pytest.mark.parametrize("num_workers", [0, 2])
def test_streams_with_metadata_carry_the_keys(tmp_path: Any, write_dataset: Any, num_workers: int) -> None:
    from tests.loading.conftest import SEQUENCE_LENGTH

    first = write_dataset("stream_with_meta", str(tmp_path / "a"), {}, size=30)
    second = write_dataset("stream_with_meta", str(tmp_path / "b"), {}, size=12)
    mix = Mixture({"a": (first, 2), "b": (second, 1)})
    loader = StatefulDataLoader.from_storage(
        mix, sequence_length=SEQUENCE_LENGTH, batch_size=4, num_workers=num_workers, sources=True
    )
    plain = StatefulDataLoader.from_storage(mix, sequence_length=SEQUENCE_LENGTH, batch_size=4)
    views = mix.dataset(SEQUENCE_LENGTH).views
    counts: Counter[int] = Counter()
    for batch, same in zip(loader, plain):
        assert torch.equal(batch["tokens"], same["tokens"])
        for row, (k, j) in enumerate(zip(batch["source"].tolist(), batch["source_index"].tolist())):
            assert batch["tokens"][row].tolist() == views[k][j]["tokens"].tolist()
            counts[k] += 1
    assert loader.source_counts() == {
        n: {"samples": counts[k], "tokens": counts[k] * SEQUENCE_LENGTH} for k, n in enumerate(mix.names)
    }


@pytest.mark.parametrize("num_workers", [0, 2])
def test_rank_scope_counts_this_ranks_rows(streams: Mixture, num_workers: int) -> None:
    names = streams.names

    def ranks(world: int, batch_size: int) -> list[Any]:
        return [
            StatefulDataLoader.from_storage(
                streams, sequence_length=L, batch_size=batch_size, shuffle=True, seed=2, rank=r,
                world_size=world, num_workers=num_workers, sources=True,
            )
            for r in range(world)
        ]  # fmt: skip

    loaders = ranks(3, 2)
    own: list[Counter[int]] = [Counter() for _ in loaders]
    for _epoch in range(2):  # each epoch leaves out a remainder of epoch_length % 3 (drop_last=False)
        its = [iter(ld) for ld in loaders]
        while True:
            try:
                batches = [next(it) for it in its]
            except StopIteration:
                break
            for r, batch in enumerate(batches):
                own[r].update(s for s, _ in _rows(batch, names))
                assert loaders[r].source_counts(scope="rank") == _expected(own[r], names, True)
    total = sum(own, Counter())
    assert loaders[0].source_counts() == _expected(total, names, True)  # global: all ranks
    assert all(sum(c.values()) < sum(total.values()) for c in own)
    # after a resume into 2 ranks: the rank scope counts from 0, the global one goes on
    state = loaders[0].state_dict()
    resumed = ranks(2, 4)
    for ld in resumed:
        ld.load_state_dict(state)
        assert ld.source_counts(scope="rank") == _expected(Counter(), names, True)
    batch = next(iter(resumed[1]))
    assert resumed[1].source_counts(scope="rank") == _expected(Counter(batch["source"].tolist()), names, True)


def test_one_ranks_counts_in_closed_form_equal_its_rows(streams: Mixture) -> None:
    # one rank: the pass's received steps are one run of positions, counted from its two ends
    loader = StatefulDataLoader.from_storage(
        streams, sequence_length=L, batch_size=3, shuffle=True, seed=5, sources=True
    )
    own: Counter[int] = Counter()
    for epoch in range(2):  # the last batch of each epoch is short (drop_last=False)
        for k, batch in enumerate(loader):
            own.update(s for s, _ in _rows(batch, streams.names))
            if k % 4 == epoch:  # asked mid-pass, not every step: the rest comes as one run
                assert loader.source_counts(scope="rank") == _expected(own, streams.names, True)
        assert loader.source_counts(scope="rank") == _expected(own, streams.names, True)
        assert loader.source_counts(scope="rank") == loader.source_counts()
