"""Throttling (issue 23 item 5): "slow down" answers lower the requests in flight, are retried
within the deadline, and are reported in io_stats; throttling that never ends is named as such.

Every S3 test goes through the fault-injecting proxy (`tests/infra/faultproxy.py`) in front of the
real test S3 endpoint; the requests in flight are the proxy's own record, not the reader's.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
from faultproxy import Fault

from guideloom import StatefulDataLoader, StreamDataset, StreamNumpyFormat, StreamStorage
from guideloom.errors import StorageTimeoutError
from guideloom.io import io_stats
from guideloom.io.failures import is_throttled, is_transient
from guideloom.io.stats import merge_stats, subtract_stats
from guideloom.io.throttle import Concurrency, concurrency

FMT = StreamNumpyFormat({"tokens": np.uint16})
WINDOW = 64
SHARDS = 32
TOKENS = 1024  # 16 windows per shard: a full-shuffle batch of 32 touches ~20 shards


def _write(url, options, shards=SHARDS, tokens=TOKENS):
    storage = StreamStorage(url, FMT, storage_options=options)
    with storage.writer(shard_size=tokens * 2) as w:
        for s in range(shards):
            w.append({"tokens": (np.arange(tokens) + s * tokens) % 65521})
    return storage


def _loader(url, options):
    storage = StreamStorage(url, FMT, storage_options=options)
    return StatefulDataLoader.from_storage(
        storage,
        sequence_length=WINDOW,
        batch_size=32,
        shuffle="full",
        seed=3,
        num_workers=0,
        read_ahead=0,  # one batch per round of range requests: the rounds follow the batches
    )


def _tokens(batch):
    value = batch["tokens"] if isinstance(batch, dict) else batch
    return np.asarray(value)


@pytest.mark.s3
def test_a_burst_of_slowdown_lowers_the_requests_in_flight_and_the_epoch_stays_exact(
    s3_bucket, s3_options, fault_s3
):
    url = f"s3://{s3_bucket}/ds"
    _write(url, s3_options)
    direct = _loader(url, s3_options)
    expected = [_tokens(b) for _ in range(2) for b in direct]
    assert len(expected) == 2 * SHARDS * TOKENS // WINDOW // 32

    shards = r"/shards/.*/shard-"  # every shard GET; not the manifest
    latency = Fault("latency", shards, method="GET", delay=0.02)  # a server that takes its time
    fault_s3.add(latency)
    # botocore and s3fs retry a throttled GET themselves, holding its slot while they back off:
    # at a limit of 1 or 2 a batch takes seconds, so this test allows more than the fixture's 8 s.
    loader = _loader(url, {**fault_s3.storage_options, "guideloom_deadline_s": 60})
    got, marks = [], {}
    burst = None
    per_epoch = len(expected) // 2
    for epoch in range(2):
        for i, batch in enumerate(loader):
            n = epoch * per_epoch + i
            if n == 4:  # the burst: 10 % of shard GETs answered 503 SlowDown
                marks["pre"] = time.monotonic()
                fault_s3.clear()
                burst = fault_s3.add(Fault("throttle", shards, method="GET", fraction=0.1, delay=0.02))
                fault_s3.add(latency)
            if n == 8:
                marks["settled"] = time.monotonic()
            if n == 12:  # the burst ends
                marks["end"] = time.monotonic()
                fault_s3.clear()
                fault_s3.add(latency)
            if n == per_epoch + per_epoch // 2:
                marks["recovered"] = time.monotonic()
            got.append(_tokens(batch))
    done = time.monotonic()

    # Exact: the same batches in the same order as without faults; nothing lost.
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
    assert burst is not None and burst.fired > 0
    assert any(action == "throttle" for _, _, action in fault_s3.log)

    first = fault_s3.in_flight_log[0][0]
    before = fault_s3.peak_in_flight(first, marks["pre"])
    during = fault_s3.peak_in_flight(marks["settled"], marks["end"])
    after = fault_s3.peak_in_flight(marks["recovered"], done)
    print(f"requests in flight: before {before}, during the burst {during}, after {after}")
    assert before >= 8, before  # ~20 ranges of a batch at once
    assert during <= before // 2, (before, during)  # the limit fell during the burst
    assert after > during, (before, during, after)  # and came back up
    stats = loader.io_stats()
    (store,) = [s for s in stats if fault_s3.url in s]
    # ...to at least half the peak before: read off the limit itself, since how many requests
    # the proxy sees at once also depends on how much CPU the reading threads get
    limit = concurrency(store, 1).limit  # this process's limiter for the store (made already)
    assert limit >= before // 2, (before, during, after, limit)
    assert stats[store]["throttled"] >= 1
    assert 1 <= stats[store]["concurrency_min"] <= before // 2


@pytest.mark.s3
def test_a_write_under_throttling_completes_and_verifies(s3_bucket, fault_s3):
    url = f"s3://{s3_bucket}/ds"
    rule = fault_s3.add(Fault("throttle", r".", method="PUT", fraction=0.3))
    before = io_stats()
    storage = _write(url, fault_s3.storage_options, shards=8)
    assert rule.fired > 0
    fault_s3.clear()
    problems = [(shard, err) for shard, err in storage.verify() if err is not None]
    assert problems == []
    tokens = StreamDataset(StreamStorage(url, FMT, storage_options=fault_s3.storage_options), WINDOW)
    assert len(tokens) == 8 * TOKENS // WINDOW
    first = tokens.read_windows([0])["tokens"][0]
    np.testing.assert_array_equal(first, np.arange(WINDOW))
    seen = subtract_stats(io_stats(), before)
    (store,) = [s for s in seen if fault_s3.url in s]
    assert seen[store]["throttled"] >= 1


@pytest.mark.s3
def test_throttling_that_never_ends_fails_within_the_deadline_saying_so(s3_bucket, s3_options, fault_s3):
    url = f"s3://{s3_bucket}/ds"
    _write(url, s3_options, shards=4)
    options = {**fault_s3.storage_options, "guideloom_deadline_s": 3}
    ds = StreamDataset(StreamStorage(url, FMT, storage_options=options), WINDOW)
    fault_s3.add(Fault("throttle", r"/shards/.*/shard-", method="GET"))
    started = time.monotonic()
    with pytest.raises(StorageTimeoutError) as info:
        ds.read_windows(list(range(len(ds))))
    elapsed = time.monotonic() - started
    assert elapsed < 3 + 3, elapsed
    message = str(info.value)
    assert f"reading {url}/" in message  # the file
    assert "S3 endpoint" in message and fault_s3.url in message  # the store and the endpoint
    assert "throttled" in message and "SlowDown" in message  # the real cause
    assert "fewer DataLoader workers" in message and "higher limit" in message  # the fixes
    assert "prefix" in message and "GUIDELOOM_IO_DEADLINE_S" in message
    assert "damaged" not in message


def test_one_burst_halves_the_limit_once_and_successes_raise_it_by_one_per_window():
    control = Concurrency("test-store", 64)

    async def take(n):
        return [await control.acquire() for _ in range(n)]

    epochs = asyncio.run(take(40))
    for e in epochs[:10]:  # ten throttling answers to requests sent in the same round
        control.throttle(e)
    assert control.limit == 32 and control.throttled == 10
    for _ in epochs:
        control.release()
    assert control.in_flight == 0
    (fresh,) = asyncio.run(take(1))
    control.throttle(fresh)  # sent after the cut: cuts again
    control.release()
    assert control.limit == 16 and control.lowest == 16
    for e in epochs:  # successes of requests sent before the cuts do not count
        control.success(e)
    assert control.limit == 16
    now = asyncio.run(take(1))[0]
    control.release()
    for _ in range(16):  # one window of successes: +1
        control.success(now)
    assert control.limit == 17


def test_slots_beyond_the_limit_wait_and_are_handed_on():
    control = Concurrency("test-store-2", 2)

    async def scenario():
        first = await control.acquire()
        await control.acquire()
        waiting = asyncio.ensure_future(control.acquire())
        await asyncio.sleep(0.01)
        assert not waiting.done() and control.in_flight == 2
        control.throttle(first)  # limit 1: a release does not let the waiter in yet
        control.release()
        await asyncio.sleep(0.01)
        assert not waiting.done()
        control.release()
        await asyncio.wait_for(waiting, 1)
        assert control.in_flight == 1

    asyncio.run(scenario())


def test_throttling_answers_of_each_store_are_recognised_as_transient():
    from botocore.exceptions import ClientError

    slow = ClientError(
        {
            "Error": {"Code": "SlowDown", "Message": "Please reduce your request rate."},
            "ResponseMetadata": {"HTTPStatusCode": 503},
        },
        "GetObject",
    )
    wrapped = OSError(16, "Please reduce your request rate.")  # what s3fs raises, from the ClientError
    wrapped.__cause__ = slow
    assert is_throttled(wrapped) and is_transient(wrapped)
    from gcsfs.retry import HttpError

    assert is_throttled(HttpError({"code": 429, "message": "rateLimitExceeded"}))
    from azure.core.exceptions import HttpResponseError

    busy = HttpResponseError(message="The server is busy.")
    busy.status_code = 503
    busy.error_code = "ServerBusy"
    assert is_throttled(busy)
    assert not is_throttled(OSError(16, "busy"))  # EBUSY alone (a 409 conflict) is not throttling


def test_merged_io_stats_add_throttled_and_keep_the_lowest_limit():
    a = {
        "s": {
            "requests": {"GET": 2},
            "bytes_read": 1,
            "bytes_written": 0,
            "retries": 0,
            "throttled": 3,
            "concurrency_min": 8,
        }
    }
    b = {
        "s": {
            "requests": {"GET": 1},
            "bytes_read": 1,
            "bytes_written": 0,
            "retries": 1,
            "throttled": 2,
            "concurrency_min": 4,
        }
    }
    c = {"s": {"requests": {"GET": 1}, "bytes_read": 0, "bytes_written": 0, "retries": 0}}
    merged = merge_stats([a, b, c])
    assert merged["s"]["throttled"] == 5 and merged["s"]["concurrency_min"] == 4
    assert merged["s"]["requests"]["GET"] == 4
