"""Concurrent writers never publish a mix, and a reader only ever sees one whole dataset.

Every writer pair is covered, on local disk and on S3: two attempts of one part (a retried task
racing its original), two single writers (fresh and with ``overwrite=True``), and overwrites
(single and through parallel parts) while a reader reads. Datasets are filled with one constant
per writer, so any mix shows up as a window or a dataset holding two constants. Interleavings
are enumerated step by step where order matters, and raced in threads where it does not; every
test is bounded (small data, joins with timeouts).
"""

from __future__ import annotations

import datetime
import itertools
import threading

import fsspec
import numpy as np
import pytest

from guideloom import StreamDataset, StreamNumpyFormat, StreamStorage
from guideloom.errors import (
    CommitConflictError,
    IncompletePartsError,
    ShardCorruptError,
    ShardNotFoundError,
)

FMT = StreamNumpyFormat({"tokens": np.uint16})
WINDOW = 16
TOKENS = 256  # per record; shard_size below gives a few shards per writer


def _location(request, tmp_path, backend):
    if backend == "file":
        return str(tmp_path / "ds"), {}
    bucket = request.getfixturevalue("s3_bucket")
    return f"s3://{bucket}/ds", dict(request.getfixturevalue("s3_options"))


@pytest.fixture(params=["file", pytest.param("s3", marks=pytest.mark.s3)])
def where(request, tmp_path):
    return _location(request, tmp_path, request.param)


def _storage(where):
    url, options = where
    return StreamStorage(url, FMT, storage_options=options)


def _fill(writer, value, records=3):
    for _ in range(records):
        writer.append({"tokens": np.full(TOKENS, value)})


def _values(storage):
    """The set of constants in the committed dataset, after checking every shard."""
    storage.refresh()
    bad = [err for _, err in storage.verify() if err is not None]
    assert not bad, bad
    ds = StreamDataset(storage, WINDOW)
    tokens = ds.read_windows(list(range(len(ds))))["tokens"]
    return set(np.unique(tokens).tolist()), len(ds)


def _one_whole(storage, allowed, windows):
    values, n = _values(storage)
    assert len(values) == 1 and values <= allowed, values
    assert n == windows
    return values.pop()


# -- part / part ------------------------------------------------------------------------------

# Steps of two attempts A and B of part 0 and of the commit: each attempt opens, writes its shards
# (flushed, as shard_size is small), and closes (its completion record).
_STEPS = ["A.open", "A.write", "A.close", "B.open", "B.write", "B.close"]


def _orders():
    """Every interleaving of A's and B's steps (each in its own order), commit inserted at
    every point after the first close."""
    a, b = _STEPS[:3], _STEPS[3:]
    for positions in itertools.combinations(range(6), 3):
        order, ia, ib = [], 0, 0
        for k in range(6):
            if k in positions:
                order.append(a[ia])
                ia += 1
            else:
                order.append(b[ib])
                ib += 1
        first_close = min(order.index("A.close"), order.index("B.close"))
        for c in range(first_close + 1, 7):
            yield [*order[:c], "commit", *order[c:]]


_ORDERS = list(_orders())


# Local disk runs every interleaving; S3 every eighth (each S3 case costs a bucket and requests).
_CASES = [pytest.param("file", n, id="file-" + "-".join(o)) for n, o in enumerate(_ORDERS)] + [
    pytest.param("s3", n, id="s3-" + "-".join(o), marks=pytest.mark.s3)
    for n, o in enumerate(_ORDERS)
    if n % 8 == 0
]


@pytest.mark.parametrize(("backend", "n"), _CASES)
def test_two_attempts_of_one_part_commit_exactly_one(request, tmp_path, backend, n):
    order = _ORDERS[n]
    storage = _storage(_location(request, tmp_path, backend))
    writers = {}
    committed = None
    for step in order:
        who, what = step.split(".") if "." in step else (None, step)
        if what == "open":
            # overwrite=True: an attempt may start after the commit (a retry arriving late)
            writers[who] = storage.writer(part=0, shard_size=TOKENS * 2, overwrite=True)
        elif what == "write":
            _fill(writers[who], {"A": 1, "B": 2}[who])
        elif what == "close":
            writers[who].close()
        else:
            committed = storage.commit(num_parts=1)
    assert committed is not None
    value = _one_whole(storage, {1, 2}, 3 * TOKENS // WINDOW)
    # The manifest is the completion record that was current at commit time, checksums included.
    assert committed.fingerprint == storage.refresh().fingerprint
    assert value in (1, 2)


def test_racing_attempts_in_threads_commit_one_or_fail_clearly(where):
    storage = _storage(where)
    errors = []

    def attempt(value):
        try:
            with _storage(where).writer(part=0, shard_size=TOKENS * 2) as w:
                _fill(w, value)
        except Exception as err:  # a loser may find its files removed by a commit: not here
            errors.append(err)

    threads = [threading.Thread(target=attempt, args=(v,)) for v in (1, 2, 3, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    storage.commit(num_parts=1)
    _one_whole(storage, {1, 2, 3, 4}, 3 * TOKENS // WINDOW)


def test_commit_refuses_a_record_whose_files_were_removed(where):
    storage = _storage(where)
    with storage.writer(part=0, shard_size=TOKENS * 2) as w:
        _fill(w, 1)
    straggler = storage.writer(
        part=0, overwrite=True, shard_size=TOKENS * 2
    )  # an attempt still running when the commit happens
    _fill(straggler, 2)
    storage.commit(num_parts=1)  # publishes attempt 1 and removes the straggler's files
    straggler.close()  # its record now names files that are gone
    assert _one_whole(storage, {1}, 3 * TOKENS // WINDOW) == 1
    with pytest.raises(IncompletePartsError, match=r"part 0: .*(missing|bytes)"):
        storage.commit(num_parts=1)
    assert _one_whole(storage, {1}, 3 * TOKENS // WINDOW) == 1  # still the committed one


# -- single / single --------------------------------------------------------------------------


@pytest.mark.parametrize("overwrite", [False, True], ids=["fresh", "overwrite"])
@pytest.mark.parametrize("closing", ["AB", "BA"])
def test_two_single_writers_first_commit_wins_the_other_conflicts(where, overwrite, closing):
    """Both writers start on the same snapshot: the first to close commits; the second raises
    CommitConflictError naming both snapshots, commits nothing and removes its shards."""
    if overwrite:
        with _storage(where).writer() as w:
            _fill(w, 9)
    a = _storage(where).writer(overwrite=overwrite, shard_size=TOKENS * 2)
    b = _storage(where).writer(overwrite=overwrite, shard_size=TOKENS * 2)
    _fill(a, 1)
    _fill(b, 2)
    first, second = (a, b) if closing == "AB" else (b, a)
    first.close()
    landed = _storage(where).current_snapshot
    with pytest.raises(CommitConflictError) as info:
        second.close()
    assert landed.id in str(info.value) and "run the" in str(info.value)
    expected = 1 if closing == "AB" else 2
    assert _one_whole(_storage(where), {1, 2}, 3 * TOKENS // WINDOW) == expected
    assert _storage(where).current_snapshot.id == landed.id
    url, options = where
    fs, root = fsspec.core.url_to_fs(url, **options)
    assert not fs.exists(f"{root}/{second.shard_prefix}")


def test_single_writers_racing_in_threads(where):
    with _storage(where).writer() as w:
        _fill(w, 9)
    errors, conflicts, landed = [], [], []

    def run(value):
        for _ in range(3):
            try:
                with _storage(where).writer(
                    overwrite=True, shard_size=TOKENS * 2, metadata={"value": value}
                ) as w:
                    _fill(w, value)
                landed.append(value)  # (not in commit order: threads append when they run)
            except CommitConflictError as err:
                conflicts.append(err)  # another overwrite landed first: refused, nothing lost
            except Exception as err:
                errors.append(err)

    threads = [threading.Thread(target=run, args=(v,)) for v in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert not errors, errors
    assert landed and len(landed) + len(conflicts) == 9
    final = _one_whole(_storage(where), {1, 2, 3}, 3 * TOKENS // WINDOW)
    history = _storage(where).snapshots()
    assert len(history) == 1 + len(landed)  # every landed overwrite is one snapshot
    committed = [snap.metadata["value"] for snap in history[1:]]  # in commit order
    assert sorted(committed) == sorted(landed)
    assert final == committed[-1]  # the last commit is the dataset, whole


# -- overwrite while reading --------------------------------------------------------------------


def _read_pass(ds):
    """All windows of an open view: its one constant, or None if the old files are gone."""
    try:
        tokens = ds.read_windows(list(range(len(ds))))["tokens"]
    except (ShardNotFoundError, ShardCorruptError):
        return None  # the dataset it opened was replaced and cleaned up: a clear error, no mix
    values = set(np.unique(tokens).tolist())
    assert len(values) == 1, f"a reader saw a mix of datasets: {values}"
    return values.pop()


def test_parallel_overwrite_keeps_the_old_dataset_readable_until_commit(where):
    storage = _storage(where)
    for k in range(2):
        with storage.writer(part=k, shard_size=TOKENS * 2) as w:
            _fill(w, 1)
    storage.commit(num_parts=2)
    old = StreamDataset(_storage(where), WINDOW)
    assert _read_pass(old) == 1
    new_job = _storage(where)
    for k in range(2):
        with new_job.writer(part=k, overwrite=True, shard_size=TOKENS * 2, run="job-2") as w:
            _fill(w, 2)
        assert _read_pass(old) == 1  # parts written, nothing committed: the old data, whole
        assert _read_pass(StreamDataset(_storage(where), WINDOW)) == 1
    new_job.commit(num_parts=2, run="job-2")
    assert _read_pass(old) in (1, None)
    assert _read_pass(StreamDataset(_storage(where), WINDOW)) == 2
    assert _one_whole(_storage(where), {2}, 6 * TOKENS // WINDOW) == 2


def test_rerun_of_the_same_job_reuses_finished_parts(where):
    storage = _storage(where)
    with storage.writer(part=0, run="job-1") as w:
        _fill(w, 1)
    first = storage.read_part_record(0, run="job-1")
    assert storage.part_complete(0, run="job-1")
    assert not storage.part_complete(0, run="job-2")  # another job never takes this part
    assert not storage.part_complete(1, run="job-1")
    with storage.writer(part=1, run="job-1") as w:
        _fill(w, 1)
    storage.commit(num_parts=2, run="job-1")
    assert storage.read_part_record(0, run="job-1") == first
    assert _one_whole(storage, {1}, 6 * TOKENS // WINDOW) == 1


@pytest.mark.parametrize("how", ["single", "parts"])
def test_overwrite_while_reading_never_shows_a_mix(where, how):
    with _storage(where).writer(shard_size=TOKENS * 2) as w:
        _fill(w, 1)
    stop = threading.Event()
    seen: list[int | None] = []
    failures: list[BaseException] = []

    def reader():
        ds = StreamDataset(_storage(where), WINDOW)
        try:
            while not stop.is_set():
                value = _read_pass(ds)
                seen.append(value)
                if value is None or len(seen) % 3 == 0:
                    ds = StreamDataset(_storage(where), WINDOW)  # reopen: the current manifest
        except BaseException as err:
            failures.append(err)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for value in (2, 3, 4):
            target = _storage(where)
            if how == "single":
                with target.writer(overwrite=True, shard_size=TOKENS * 2) as w:
                    _fill(w, value)
            else:
                for k in range(2):
                    with target.writer(
                        part=k, overwrite=True, shard_size=TOKENS * 2, run=f"job-{value}"
                    ) as w:
                        _fill(w, value)
                target.commit(num_parts=2, run=f"job-{value}")
    finally:
        stop.set()
        thread.join(timeout=120)
    assert not failures, failures
    assert {v for v in seen if v is not None} <= {1, 2, 3, 4}
    assert seen, "the reader never completed a pass"
    final = 4
    windows = (3 if how == "single" else 6) * TOKENS // WINDOW
    assert _one_whole(_storage(where), {final}, windows) == final


def test_old_parts_are_removed_by_expire_after_an_overwrite(where):
    """The replaced snapshot's files stay (it can be rolled back to) until it expires; then
    they are gone and the current snapshot reads whole."""
    storage = _storage(where)
    with storage.writer(part=0) as w:
        _fill(w, 1)
    storage.commit(num_parts=1)
    old_prefixes = set(storage.manifest.shard_table.prefix)
    with storage.writer(part=0, overwrite=True, run="job-2") as w:
        _fill(w, 2)
    storage.commit(num_parts=1, run="job-2")
    url, options = where
    fs, root = fsspec.core.url_to_fs(url, **options)
    for prefix in old_prefixes:
        assert fs.exists(f"{root}/{prefix}/part-00000/shard-00000.tokens")
    expired = storage.expire(keep_last=1, grace=datetime.timedelta(0))
    assert [s.sequence for s in expired] == [1]
    for prefix in old_prefixes:
        assert not fs.exists(f"{root}/{prefix}/part-00000/shard-00000.tokens")
    assert _one_whole(storage, {2}, 3 * TOKENS // WINDOW) == 2


def test_a_reader_after_an_overwrite_is_told_to_refresh_and_refresh_works(where):
    """A view opened before an overwrite reads shards the new commit removed: the error says
    why (the overwrite, which `guideloom verify` does not see) and the fix, storage.refresh()."""
    storage = _storage(where)
    with storage.writer(part=0) as w:
        _fill(w, 1)
    storage.commit(num_parts=1)
    stale = StreamDataset(storage, WINDOW)
    other = _storage(where)
    with other.writer(part=0, overwrite=True, run="job-2") as w:
        _fill(w, 2)
    other.commit(num_parts=1, run="job-2")
    import datetime as dt

    other.expire(keep_last=1, grace=dt.timedelta(0))  # an overwrite keeps the old files until they expire
    with pytest.raises(ShardNotFoundError) as caught:
        stale.read_windows([0])
    text = str(caught.value)
    assert "overwritten or rolled back after this storage read its manifest" in text
    assert "old snapshots expired" in text
    assert "call `storage.refresh()` and open the dataset (view, loader) again" in text
    storage.refresh()  # the fix, as the message names it
    tokens = StreamDataset(storage, WINDOW).read_windows([0])["tokens"]
    assert set(np.unique(tokens).tolist()) == {2}
