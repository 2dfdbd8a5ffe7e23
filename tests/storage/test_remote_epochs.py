"""Remote epochs: whole blocks per request, bounded read-ahead, the same samples as local disk.

Requests and bytes are counted at the counting S3 proxy (tests/infra/s3proxy.py); the samples of every
remote epoch are compared with the same loader over a local-disk copy of the dataset.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from guideloom import StatefulDataLoader, StreamDataset, StreamNumpyFormat, StreamStorage
from guideloom.io import Location
from guideloom.io.ranges import merge_ranges
from guideloom.io.s3 import POOL_OPTION
from guideloom.testing import assert_exact_resume

WINDOW = 256  # tokens (uint16): 512 bytes per window
WINDOW_BYTES = WINDOW * 2
WINDOWS = 2048  # 1 MiB of tokens in two shards, so some block crosses the shard boundary
BLOCK, BUFFER, RUN, BATCH = 64, 4, 8, 8
FORMAT = StreamNumpyFormat({"tokens": np.uint16})
SETTINGS: dict[str, Any] = dict(
    sequence_length=WINDOW,
    batch_size=BATCH,
    seed=5,
    shuffle="block",
    shuffle_block_size=BLOCK,
    shuffle_buffer_blocks=BUFFER,
    shuffle_run_size=RUN,
)


def _tokens() -> np.ndarray:
    return (np.arange(WINDOWS * WINDOW, dtype=np.uint64) * 7 % 65_521).astype(np.uint16)


def _write(url: str, options: dict[str, Any] | None) -> None:
    storage = StreamStorage(url, FORMAT, storage_options=options)
    with storage.writer(shard_size=WINDOWS * WINDOW_BYTES // 2 + 1000) as w:
        tokens = _tokens()
        for piece in np.array_split(tokens, 7):  # records that do not line up with windows
            w.append({"tokens": piece})


@pytest.fixture
def remote_and_local(s3_bucket: str, s3_options: dict[str, Any], tmp_path: Any) -> tuple[str, str]:
    url = f"s3://{s3_bucket}/epochs"
    _write(url, s3_options)
    _write(str(tmp_path / "local"), None)
    assert len(StreamStorage(url, FORMAT, storage_options=s3_options).manifest.shards) == 2
    return url, str(tmp_path / "local")


def _batches(loader: Any) -> list[list[int]]:
    """Each batch as the first token of each window (which names the window uniquely here)."""
    return [b["tokens"][:, 0].tolist() for b in loader]


def _data_gets(proxy: Any) -> list[Any]:
    return [e for e in proxy.log if e.method == "GET" and "/data" in e.path and 200 <= e.status < 300]


# -- merging close ranges -------------------------------------------------------------------------


def test_close_ranges_merge_smallest_gaps_first_within_the_budget():
    # Eight 1000-byte ranges with gaps of 10, 20, ..., 70 bytes: 8000 bytes asked.
    starts, pos = [], 0
    for gap in (0, 10, 20, 30, 40, 50, 60, 70):
        pos += gap
        starts.append(pos)
        pos += 1000
    ends = [s + 1000 for s in starts]
    rels = ["f"] * 8
    assert len(merge_ranges(rels, starts, ends, max_gap=0).requests) == 8
    assert len(merge_ranges(rels, starts, ends, max_gap=100).requests) == 1  # no budget: every gap
    plan = merge_ranges(rels, starts, ends, max_gap=100, gap_budget=0.02)  # 160 gap bytes allowed
    fetched = sum(b - a for _, a, b in plan.requests)
    assert fetched <= 8000 * 1.02
    assert len(plan.requests) == 3  # gaps 10 + 20 + 30 + 40 + 50 = 150 <= 160; adding 60 would not fit
    assert len(merge_ranges(rels, starts, ends, max_gap=25, gap_budget=1.0).requests) == 6
    # Ranges of different files never merge, and every asked range maps back to its bytes.
    plan = merge_ranges(["a", "b"], [0, 10], [10, 20], max_gap=1 << 20, gap_budget=1.0)
    assert len(plan.requests) == 2


@pytest.mark.s3
def test_s3_connection_pool_is_sized_for_the_concurrent_ranges(
    s3_bucket: str, s3_options: dict[str, Any], counting_s3: Any
):
    import fsspec

    fs = fsspec.filesystem("s3", **s3_options)
    fs.pipe_file(f"{s3_bucket}/blob", bytes(range(256)) * 1024)  # 256 KiB
    location = Location(f"s3://{s3_bucket}", counting_s3.storage_options)
    assert location.fs.config_kwargs[POOL_OPTION] == 64  # s3fs's default pool holds 10
    own = Location(f"s3://{s3_bucket}", {**s3_options, "config_kwargs": {POOL_OPTION: 3}})
    assert own.fs.config_kwargs[POOL_OPTION] == 3  # a pool the user chose is kept
    counting_s3.reset()
    counting_s3.delay_s = 0.2  # every request waits: only concurrent ones overlap
    starts = list(range(0, 256 * 1024, 8192))  # 32 ranges far apart: no merging
    blobs = location.read_ranges(["blob"] * 32, starts, [s + 100 for s in starts])
    counting_s3.delay_s = 0.0
    assert all(b == (bytes(range(256)) * 1024)[s : s + 100] for b, s in zip(blobs, starts))
    assert counting_s3.max_in_flight > 10, counting_s3.max_in_flight


# -- block-shuffled epochs ------------------------------------------------------------------------


@pytest.mark.s3
@pytest.mark.parametrize(
    "workers", [{"num_workers": 0}, {"num_workers": 2}, {"num_workers": 2, "parallel_method": "thread"}]
)
def test_block_shuffled_epoch_is_about_one_get_per_block_with_the_local_samples(
    remote_and_local: tuple[str, str], counting_s3: Any, workers: dict[str, Any]
):
    url, local = remote_and_local
    reference = _batches(StatefulDataLoader.from_storage(StreamStorage(local, FORMAT), **SETTINGS))
    storage = StreamStorage(url, FORMAT, storage_options=counting_s3.storage_options)
    budget = 128 * 2**10  # 32 batches (one shuffle buffer) per read, once grown
    loader = StatefulDataLoader.from_storage(storage, read_ahead_bytes=budget, **SETTINGS, **workers)
    counting_s3.reset()
    assert _batches(loader) == reference
    gets = _data_gets(counting_s3)
    delivered = WINDOWS * WINDOW_BYTES
    assert sum(e.bytes for e in gets) <= 1.1 * delivered  # read amplification
    blocks = WINDOWS // BLOCK
    # Whole blocks, one request each: plus the pieces of the first buffer while the groups grow
    # (1, 1, 2, 4, 8, 16 batches, each touching up to BUFFER blocks), the block the rotation
    # splits at the end of the stream and the one the shard boundary splits.
    assert len(gets) <= blocks + 6 * BUFFER + 2, len(gets)
    # One request per run (what a batch at a time costs) would be eight times as many.
    per_batch = StatefulDataLoader.from_storage(storage, read_ahead=0, **SETTINGS, **workers)
    counting_s3.reset()
    assert _batches(per_batch) == reference
    assert len(_data_gets(counting_s3)) >= 4 * len(gets)


@pytest.mark.s3
def test_read_ahead_stays_within_its_bytes(
    remote_and_local: tuple[str, str], s3_options: dict[str, Any], monkeypatch
):
    url, _ = remote_and_local
    asked: list[int] = []
    original = StreamDataset.read_windows

    def spy(self: Any, indexes: Any) -> Any:
        asked.append(len(indexes))
        return original(self, indexes)

    monkeypatch.setattr(StreamDataset, "read_windows", spy)
    storage = StreamStorage(url, FORMAT, storage_options=s3_options)
    budget = 100 * 2**10  # 25 batches fit: groups of at most 16 (a power of two)
    for workers in ({"num_workers": 0}, {"num_workers": 2, "parallel_method": "thread"}):
        asked.clear()
        loader = StatefulDataLoader.from_storage(storage, read_ahead_bytes=budget, **SETTINGS, **workers)
        assert sum(len(b) for b in _batches(loader)) == WINDOWS
        assert max(asked) * WINDOW_BYTES <= budget
        # 256 batches: groups of 1, 1, 2, 4, 8 batches, then fifteen of 16 (threads finish them
        # in any order).
        assert sorted(asked) == sorted([BATCH, BATCH, 2 * BATCH, 4 * BATCH, 8 * BATCH] + [16 * BATCH] * 15)


@pytest.mark.s3
def test_remote_epochs_resume_exactly(s3_bucket: str, s3_options: dict[str, Any]):
    url = f"s3://{s3_bucket}/resume"
    storage = StreamStorage(url, FORMAT, storage_options=s3_options)
    with storage.writer() as w:
        w.append({"tokens": _tokens()[: 96 * WINDOW]})
    settings = {**SETTINGS, "shuffle_block_size": 16, "shuffle_run_size": 4, "batch_size": 4}

    def make_loader(**kwargs: Any) -> Any:
        return StatefulDataLoader.from_storage(storage, read_ahead_bytes=16 * 2**10, **settings, **kwargs)

    assert_exact_resume(make_loader, worker_counts=(0, 2), world_sizes=(1,), elastic=())


def test_read_ahead_settings_are_checked(tmp_path: Any, monkeypatch: pytest.MonkeyPatch):
    _write(str(tmp_path / "ds"), None)
    storage = StreamStorage(str(tmp_path / "ds"), FORMAT)
    make = StatefulDataLoader.from_storage
    with pytest.raises(ValueError, match="read_ahead_bytes=-1 must be a non-negative whole number"):
        make(storage, sequence_length=WINDOW, read_ahead_bytes=-1)
    with pytest.raises(ValueError, match="both given: set one"):
        make(storage, sequence_length=WINDOW, read_ahead=2, read_ahead_bytes=2**20)
    monkeypatch.setenv("GUIDELOOM_READ_AHEAD_BYTES", "4MiB")
    with pytest.raises(ValueError, match="GUIDELOOM_READ_AHEAD_BYTES='4MiB' is not a whole number of bytes"):
        make(storage, sequence_length=WINDOW, read_ahead_bytes=None, shuffle=True)
