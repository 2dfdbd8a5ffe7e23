"""`loader.metrics()` (issue 35 item 2): its totals are what `io_stats`, `source_counts` and the
batches themselves say, with 0 workers, thread workers and worker processes, across a resume.

The S3 test reads through the fault-injecting proxy in front of the real test endpoint, which
cuts the first two shard GETs' bodies short (GuideLoom retries them) and answers a fifth of
the shard GETs with "slow down" (so there are retries and throttling answers to count), and
through a block cache (so the second epoch has cache hits)."""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import pytest
import torch
from faultproxy import Fault

from guideloom import Mixture, StatefulDataLoader, StreamNumpyFormat, StreamStorage
from guideloom.errors import ResumeStateError
from guideloom.loading.metrics import COUNTERS, flatten, io_counters

FMT = StreamNumpyFormat({"tokens": np.uint16, "loss_mask": np.uint8})
WINDOW, BATCH = 64, 8
WORKERS = [
    pytest.param({}, id="0-workers"),
    pytest.param({"parallel_method": "thread", "num_workers": 2}, id="threads"),
    pytest.param({"num_workers": 2}, id="processes"),
]
ADDITIVE = [k for k in COUNTERS if k != "wait_s"]


def _write(url: str, options: dict[str, Any] | None = None, records: int = 80, seed: int = 0) -> None:
    """~40k tokens in several shards; loss_mask is 1 on a random ~third of the tokens."""
    storage = StreamStorage(url, FMT, storage_options=options)
    rng = np.random.default_rng(seed)
    with storage.writer(shard_size=12_000) as w:
        for n in rng.integers(100, 900, records):
            w.append(
                {"tokens": rng.integers(0, 60000, n).astype(np.uint16), "loss_mask": rng.random(n) < 0.3}
            )


def _loader(storage: Any, **kwargs: Any) -> StatefulDataLoader:
    return StatefulDataLoader.from_storage(
        storage, sequence_length=WINDOW, batch_size=BATCH, shuffle=True, seed=3, **kwargs
    )


def _roundtrip(state: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(state))  # a checkpoint keeps plain data


class Seen:
    """What the training loop itself received: batches, rows and loss_mask tokens."""

    def __init__(self) -> None:
        self.batches = self.rows = self.mask = 0
        self.wall = 0.0

    def take(self, batches: Any, n: int | None = None) -> None:
        """Receive ``n`` batches of ``batches`` (a loader: a new pass; an iterator: its next ones)."""
        began = time.perf_counter()
        for i, batch in enumerate(batches):
            self.batches += 1
            self.rows += len(batch["tokens"])
            self.mask += int(batch["loss_mask"].sum())
            if n is not None and i + 1 == n:
                break
        self.wall += time.perf_counter() - began


def _settled_metrics(loader: Any) -> dict[str, Any]:
    """``loader.metrics()`` once its I/O counters stand still: thread workers keep reading ahead
    in this process while the loop is not taking batches (until their queues are full), so a
    later `io_stats` could otherwise have grown past what `metrics` read a moment before."""
    last, deadline = None, time.monotonic() + 30
    while time.monotonic() < deadline:
        now = io_counters(loader.io_stats())
        if now == last:
            break
        last = now
        time.sleep(0.1)
    return loader.metrics()


def _check(total: dict[str, Any], loader: Any, seen: Seen, io_before: dict[str, int] | None = None) -> None:
    """``total`` against the loader's own io_stats and source_counts and the batches seen."""
    counts = loader.source_counts()
    assert total["sources"] == counts
    ((name, mine),) = counts.items()
    assert total["samples"] == mine["samples"] == seen.rows
    assert total["tokens"] == mine["tokens"] == seen.rows * WINDOW
    assert total["batches"] == seen.batches
    assert total["loss_mask_tokens"] == seen.mask
    io = io_counters(loader.io_stats())
    for key, n in io.items():
        assert total[key] == n + (io_before or {}).get(key, 0), key
    assert 0 < total["wait_s"] <= seen.wall


@pytest.mark.s3
@pytest.mark.parametrize("workers", WORKERS)
def test_totals_are_io_stats_source_counts_and_the_batches_across_a_resume(
    s3_bucket: str, s3_options: dict[str, Any], fault_s3: Any, tmp_path: Any, workers: dict[str, Any]
) -> None:
    url = f"s3://{s3_bucket}/ds"
    _write(url, s3_options)
    shards = r"/shards/.*/shard-"
    fault_s3.add(Fault("truncate", shards, method="GET", times=2))  # bodies cut short: retried
    fault_s3.add(Fault("throttle", shards, method="GET", fraction=0.2))
    options = {**fault_s3.storage_options, "guideloom_deadline_s": 60}
    storage = StreamStorage(url, FMT, storage_options=options, cache_dir=tmp_path / "cache")

    first, seen = _loader(storage, **workers), Seen()
    epoch0 = iter(first)
    seen.take(epoch0, 3)
    early = _settled_metrics(first)
    _check(early["total"], first, seen)
    assert early["since_last"] == early["total"]  # the first call: everything so far
    seen.take(epoch0)  # the rest of epoch 0: every block read once, some answers throttled
    seen.take(iter(first), 5)  # epoch 1 begins: from the cache
    middle = _settled_metrics(first)
    _check(middle["total"], first, seen)
    for key in ADDITIVE:
        assert early["since_last"][key] + middle["since_last"][key] == middle["total"][key], key
    total = middle["total"]
    assert total["gets"] > 0 and total["bytes_read"] > 0
    assert total["throttled"] > 0 and total["retries"] > 0
    assert total["cache_hits"] > 0

    state = _roundtrip(first.state_dict())
    saved = state["metrics"]
    assert {k: saved[k] for k in ADDITIVE} == {k: total[k] for k in ADDITIVE}
    del first

    resumed = _loader(
        StreamStorage(url, FMT, storage_options=options, cache_dir=tmp_path / "cache"), **workers
    )
    resumed.load_state_dict(state)
    start = resumed.metrics()
    assert start["total"]["batches"] == seen.batches and start["since_last"]["batches"] == 0
    assert start["since_last"]["samples"] == 0  # counting restarts where the state was saved
    seen.take(resumed)  # the rest of epoch 1
    end = _settled_metrics(resumed)
    _check(end["total"], resumed, seen, io_before={k: saved[k] for k in io_counters({})})
    assert end["since_last"]["batches"] == seen.batches - total["batches"]
    assert resumed.epoch == 1 and seen.batches == 2 * len(resumed)  # two whole epochs, nothing repeated


def test_a_mixture_reports_each_source(tmp_path: Any) -> None:
    for name, seed in (("a", 1), ("b", 2)):
        _write(str(tmp_path / name), records=30, seed=seed)
    mixture = Mixture({n: (StreamStorage(str(tmp_path / n), FMT), w) for n, w in (("a", 0.7), ("b", 0.3))})
    loader, seen = _loader(mixture, sources=True), Seen()
    by_source = {0: 0, 1: 0}
    for i, batch in enumerate(loader):
        seen.batches += 1
        seen.rows += len(batch["tokens"])
        seen.mask += int(batch["loss_mask"].sum())
        for s in batch["source"].tolist():
            by_source[s] += 1
        if i == 6:
            break
    metrics = loader.metrics()
    total = metrics["total"]
    assert total["sources"] == loader.source_counts()
    assert [total["sources"][n]["samples"] for n in ("a", "b")] == [by_source[0], by_source[1]]
    assert total["samples"] == seen.rows and total["loss_mask_tokens"] == seen.mask
    assert total["gets"] == 0 and total["bytes_read"] == 0  # local disk sends no requests
    flat = flatten(metrics, prefix="data")
    assert (
        flat["data/total/a/samples"] == by_source[0] and flat["data/total/b/tokens"] == by_source[1] * WINDOW
    )
    assert flat["data/since_last/batches"] == 7 and flat["data/total/loss_mask_tokens"] == seen.mask
    again = loader.metrics()["since_last"]
    assert again["batches"] == again["samples"] == 0 and again["sources"]["a"]["samples"] == 0


def test_documents_have_no_tokens_and_no_loss_mask(tmp_path: Any, write_dataset: Any) -> None:
    storage = write_dataset("documents", str(tmp_path / "docs"), {})
    # worker processes, thread workers, then inline (the loader checked below)
    for kind in ({"num_workers": 2}, {"num_workers": 2, "parallel_method": "thread"}, {"num_workers": 0}):
        loader = StatefulDataLoader.from_storage(storage, batch_size=4, **kind)
        batches = list(loader)
        total = loader.metrics()["total"]
        assert total["batches"] == len(batches) and total["samples"] == sum(len(b) for b in batches)
        assert total["tokens"] is None and total["loss_mask_tokens"] is None, kind
    flat = flatten(loader.metrics())
    assert "guideloom/total/tokens" not in flat and flat["guideloom/total/samples"] == total["samples"]


def test_documents_with_a_loss_mask_count_it_in_every_kind_of_loop(tmp_path: Any) -> None:
    # records with a loss_mask (chat documents) are counted batch by batch, inline, by threads
    # and by worker processes; a dataset without one skips the count per group and reports None
    from guideloom import DocumentMsgpackFormat, DocumentStorage

    rng = np.random.default_rng(3)
    masked = DocumentStorage(str(tmp_path / "chat"), DocumentMsgpackFormat())
    with masked.writer() as w:
        for _ in range(37):
            n = int(rng.integers(1, 30))
            w.append(
                {
                    "tokens": rng.integers(0, 99, n).tolist(),
                    "loss_mask": (rng.random(n) < 0.5).astype(int).tolist(),
                }
            )
    for kind in ({"num_workers": 0}, {"num_workers": 2, "parallel_method": "thread"}, {"num_workers": 2}):
        loader = StatefulDataLoader.from_storage(masked, batch_size=4, shuffle=True, seed=1, **kind)
        batches = list(loader)
        expected = sum(int(np.count_nonzero(r["loss_mask"])) for b in batches for r in b)
        total = loader.metrics()["total"]
        assert total["batches"] == len(batches) == 10 and total["loss_mask_tokens"] == expected > 0, kind


@pytest.mark.parametrize("workers", WORKERS)
def test_a_pass_left_inside_a_group_keeps_what_the_loop_received(tmp_path: Any, workers: Any) -> None:
    # the loop leaves a pass in the middle of a read group, then runs two whole passes: every
    # batch it received counts (the groups prefetched and never handed out do not)
    _write(str(tmp_path / "ds"))
    loader = _loader(StreamStorage(str(tmp_path / "ds"), FMT), **workers)
    seen = Seen()
    seen.take(loader, 5)
    assert loader.metrics()["total"]["loss_mask_tokens"] == seen.mask
    seen.take(loader)
    seen.take(loader)
    total = loader.metrics()["total"]
    assert total["batches"] == seen.batches and total["loss_mask_tokens"] == seen.mask > 0
    assert 0 < total["wait_s"] <= seen.wall


def test_another_ranks_state_starts_this_ranks_counters_from_zero(tmp_path: Any) -> None:
    _write(str(tmp_path / "ds"), records=40)
    storage = StreamStorage(str(tmp_path / "ds"), FMT)
    rank0 = _loader(storage, rank=0, world_size=2)
    Seen().take(rank0, 4)
    state = _roundtrip(rank0.state_dict())
    assert state["metrics"]["batches"] == 4 and state["metrics"]["rank"] == 0

    same = _loader(storage, rank=0, world_size=2)
    same.load_state_dict(state)
    assert same.metrics()["total"]["batches"] == 4
    other = _loader(storage, rank=1, world_size=2)
    other.load_state_dict(state)
    total = other.metrics()["total"]
    assert total["batches"] == 0 and total["loss_mask_tokens"] is None  # not this rank's
    assert total["sources"] == same.metrics()["total"]["sources"]  # all ranks' samples: the same

    old = {k: v for k, v in state.items() if k != "metrics"}  # a state from before metrics()
    older = _loader(storage, rank=0, world_size=2)
    older.load_state_dict(old)
    assert older.metrics()["total"]["batches"] == 0

    waited = state["metrics"]["wait_s"]
    state["metrics"]["wait_s"] = np.float64(waited)  # a NumPy float (a float) is a number too
    again = _loader(storage, rank=0, world_size=2)
    again.load_state_dict(state)
    assert again.metrics()["total"]["batches"] == 4
    for bad in ("many", True, None):  # not numbers (JSON's true is not 1)
        state["metrics"]["batches"] = bad
        with pytest.raises(ResumeStateError, match="delete that key"):
            _loader(storage, rank=0, world_size=2).load_state_dict(state)


def test_a_plain_torch_dataset_has_no_metrics() -> None:
    loader = StatefulDataLoader(torch.utils.data.TensorDataset(torch.arange(4)), batch_size=2)
    with pytest.raises(AttributeError, match="from_storage"):
        loader.metrics()


@pytest.mark.parametrize("workers", WORKERS)
def test_the_device_stage_one_batch_ahead_counts_what_the_loop_holds(
    tmp_path: Any, workers: dict[str, Any]
) -> None:
    # device= copies batch k + 1 before the loop gets batch k: the counts still follow receipt
    _write(str(tmp_path / "ds"), records=30)
    loader, seen = _loader(StreamStorage(str(tmp_path / "ds"), FMT), device="cpu", **workers), Seen()
    batches = iter(loader)
    for taken in (1, 2, 3):
        seen.take(batches, 1)
        total = loader.metrics()["total"]
        assert (total["batches"], total["loss_mask_tokens"]) == (taken, seen.mask)
    seen.take(batches)
    assert loader.metrics()["total"]["loss_mask_tokens"] == seen.mask


@pytest.mark.parametrize("workers", WORKERS)
def test_a_call_inside_a_group_counts_what_the_loop_received_even_if_it_changed_it(
    tmp_path: Any, workers: dict[str, Any]
) -> None:
    # groups of 4 batches (read_ahead=3), one loss_mask count per group: a metrics() call after
    # each batch counts the received part of the group in progress, and a loop that zeroes the
    # masks it received (they share memory with the group read) does not change what was counted
    _write(str(tmp_path / "ds"), records=30)
    loader = _loader(StreamStorage(str(tmp_path / "ds"), FMT), read_ahead=3, **workers)
    mask = batches = 0
    for batch in loader:
        batches += 1
        mask += int(batch["loss_mask"].sum())
        batch["loss_mask"].zero_()
        total = loader.metrics()["total"]
        assert (total["batches"], total["loss_mask_tokens"]) == (batches, mask)
    assert batches == len(loader) > 8
    state = _roundtrip(loader.state_dict())["metrics"]
    assert (state["batches"], state["loss_mask_tokens"]) == (batches, mask)
