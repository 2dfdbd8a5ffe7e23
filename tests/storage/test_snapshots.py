"""Snapshots, appends, conflict-safe commits, rollback and expiry (issue 22), on local disk and S3.

Datasets are filled with known records; an append is checked against a one-shot write of the
concatenated input (records, windows across the boundary, checksums). Races are enumerated
step by step (every interleaving of two writers' steps), crashes by stopping a commit after each
of its storage writes (every write is atomic, so the files left are those a SIGKILL at that
point leaves).
"""

from __future__ import annotations

import datetime
import itertools
import shutil
import time
from pathlib import Path

import fsspec
import numpy as np
import pytest

from guideloom import (
    DocumentDataset,
    DocumentJsonFormat,
    DocumentMsgpackFormat,
    DocumentStorage,
    StreamDataset,
    StreamNumpyFormat,
    StreamStorage,
)
from guideloom.errors import (
    CommitConflictError,
    DatasetExistsError,
    DatasetNotFoundError,
    SchemaMismatchError,
)
from guideloom.io import Location

FMT = StreamNumpyFormat({"tokens": np.uint16})
WINDOW = 7  # does not divide the record length: windows cross record and append boundaries
NOW = datetime.timedelta(0)
LEGACY = Path(__file__).resolve().parents[1] / "manifest" / "data" / "v0.1.0"


@pytest.fixture(params=["file", pytest.param("s3", marks=pytest.mark.s3)])
def where(request, tmp_path):
    if request.param == "file":
        return str(tmp_path / "ds"), {}
    bucket = request.getfixturevalue("s3_bucket")
    return f"s3://{bucket}/ds", dict(request.getfixturevalue("s3_options"))


def _storage(where, fmt=FMT, cls=StreamStorage, **kw):
    url, options = where
    return cls(url, fmt, storage_options=options, **kw)


def _records(start, n):
    return [{"tokens": np.arange(start + 10 * i, start + 10 * i + 10, dtype=np.uint16)} for i in range(n)]


def _write(storage, records, **kw):
    with storage.writer(shard_size=40, **kw) as w:
        for r in records:
            w.append(r)


def _windows(storage):
    storage.refresh()
    ds = StreamDataset(storage, WINDOW)
    return ds.read_windows(list(range(len(ds))))["tokens"]


def _files(where):
    url, options = where
    fs, root = fsspec.core.url_to_fs(url, **options)
    root = root.rstrip("/")
    return fs, root, {p[len(root) + 1 :]: fs.cat_file(p) for p in fs.find(f"{root}/shards")}


def _parts(storage, batches, run, append=True):
    for k, records in enumerate(batches):
        with storage.writer(part=k, run=run, shard_size=40, append=append) as w:
            for r in records:
                w.append(r)


# -- append equals a one-shot write ------------------------------------------------------------


def test_append_then_read_equals_a_one_shot_write(where, tmp_path):
    first, second, third = _records(0, 5), _records(1000, 4), _records(2000, 3)
    storage = _storage(where)
    _write(storage, first)
    _, _, before = _files(where)
    _write(storage, second, append=True)  # the single writer
    _parts(storage, [third[:2], third[2:]], run="crawl-3")  # parallel parts
    storage.commit(num_parts=2, run="crawl-3", append=True)

    one_shot = StreamStorage(tmp_path / "one", FMT)
    _parts(one_shot, [first, second, third[:2], third[2:]], run="one", append=False)
    one_shot.commit(num_parts=4, run="one")

    grown = _storage(where)
    assert np.array_equal(_windows(grown), _windows(one_shot))  # windows cross both boundaries
    assert grown.manifest.total_records == 12 and grown.manifest.num_parts == 4
    assert grown.manifest.shard_table.records == one_shot.manifest.shard_table.records
    assert grown.manifest.fingerprint == one_shot.manifest.fingerprint  # counts and checksums
    assert [err for _, err in grown.verify() if err is not None] == []
    _, _, after = _files(where)
    assert {k: after[k] for k in before} == before  # existing shard files byte-identical
    assert [s.operation for s in grown.snapshots()] == ["write", "append", "append"]
    assert [s.summary.added_records for s in grown.snapshots()] == [5, 4, 3]


def test_documents_append_continues_the_document_order(tmp_path):
    storage = DocumentStorage(tmp_path / "d", DocumentJsonFormat())
    with storage.writer() as w:
        for i in range(3):
            w.append({"i": i})
    with storage.writer(append=True) as w:
        for i in range(3, 5):
            w.append({"i": i})
    assert [d["i"] for d in DocumentDataset(DocumentStorage(tmp_path / "d", DocumentJsonFormat()))] == list(
        range(5)
    )


def test_a_dataset_written_before_snapshots_is_one_snapshot_and_takes_appends(tmp_path):
    root = tmp_path / "legacy"
    shutil.copytree(LEGACY / "stream", root)
    manifest_before = (root / "manifest.json").read_bytes()
    fmt = StreamNumpyFormat({"tokens": np.uint32, "loss_mask": np.uint8})
    storage = StreamStorage(root, fmt)
    (only,) = storage.snapshots()
    assert only.sequence == 0 and only.operation == "write" and only.parent is None
    assert storage.current_snapshot.id == only.id
    n = storage.manifest.total_tokens
    with storage.writer(append=True) as w:
        w.append({"tokens": np.arange(5, dtype=np.uint32), "loss_mask": np.ones(5, dtype=np.uint8)})
    history = StreamStorage(root, fmt).snapshots()
    assert [s.sequence for s in history] == [0, 1] and history[1].parent == only.id
    old = StreamStorage(root, fmt, snapshot=only.id)
    assert old.manifest.total_tokens == n and storage.manifest.total_tokens == n + 5
    assert manifest_before != (root / "manifest.json").read_bytes()


# -- bad input ---------------------------------------------------------------------------------


def test_append_with_another_class_or_format_names_both(where):
    _write(_storage(where), _records(0, 2))
    other = StreamNumpyFormat({"tokens": np.uint32})
    with pytest.raises(SchemaMismatchError) as info:
        _storage(where, other)
    assert "uint16" in str(info.value) or "<u2" in str(info.value)
    docs = DocumentStorage(where[0] + "-docs", DocumentJsonFormat(), storage_options=where[1])
    with docs.writer() as w:
        w.append({"a": 1})
    with pytest.raises(SchemaMismatchError) as info:
        DocumentStorage(where[0] + "-docs", DocumentMsgpackFormat(), storage_options=where[1])
    assert "DocumentJsonFormat" in str(info.value) and "DocumentMsgpackFormat" in str(info.value)


def test_append_commit_checks_the_schema_of_the_snapshot_it_lands_on(tmp_path):
    """A dataset replaced by one of another format while an append ran: the append's commit
    refuses, naming both formats, and commits nothing."""
    url = tmp_path / "ds"
    _write(StreamStorage(url, FMT), _records(0, 2))
    appender = StreamStorage(url, FMT)
    _parts(appender, [_records(100, 2)], run="late")
    shutil.rmtree(url / "snapshots")  # replaced outside this storage by a dataset of another format
    (url / "manifest.json").unlink()
    _write(StreamStorage(url, StreamNumpyFormat({"tokens": np.uint32})), _records(0, 1))
    with pytest.raises(SchemaMismatchError) as info:
        appender._commits.commit(1, None, run="late", cleanup=True, append=True)
    text = str(info.value)
    assert "<u4" in text and "<u2" in text and "guideloom inspect" in text


def test_unknown_snapshot_lists_the_nearest_ids(where):
    storage = _storage(where)
    _write(storage, _records(0, 1))
    for i in range(3):
        _write(storage, _records(100 * i, 1), append=True)
    ids = [s.id for s in storage.snapshots()]
    with pytest.raises(DatasetNotFoundError) as info:
        _storage(where, snapshot="00000009-deadbeef")
    text = str(info.value)
    assert "has no snapshot '00000009-deadbeef'" in text and ids[-1] in text and "guideloom log" in text
    with pytest.raises(DatasetNotFoundError, match="nearest kept ids"):
        _storage(where, snapshot="not-an-id")
    pinned = _storage(where, snapshot=ids[1])
    assert pinned.manifest.total_records == 2 and pinned.current_snapshot.id == ids[1]
    with pytest.raises(ValueError, match="cannot write"):
        pinned.writer(append=True)


def test_rollback_to_an_expired_snapshot_names_the_oldest_kept(where):
    storage = _storage(where)
    _write(storage, _records(0, 1))
    first = storage.current_snapshot
    for i in range(3):
        _write(storage, _records(100 * i, 1), append=True)
    expired = storage.expire(keep_last=2, grace=NOW)
    assert [s.id for s in expired][0] == first.id
    kept = storage.snapshots()
    with pytest.raises(DatasetNotFoundError) as info:
        storage.rollback(first.id)
    text = str(info.value)
    assert "has expired" in text and f"the oldest snapshot kept is {kept[0].id}" in text
    with pytest.raises(DatasetNotFoundError, match="has expired"):
        _storage(where, snapshot=first.id)


def test_expire_with_keep_last_zero_is_refused(where):
    storage = _storage(where)
    _write(storage, _records(0, 1))
    with pytest.raises(ValueError) as info:
        storage.expire(keep_last=0)
    assert "current snapshot is always kept" in str(info.value) and "keep_last=1" in str(info.value)
    assert len(storage.snapshots()) == 1


# -- rollback and expiry -----------------------------------------------------------------------


def test_rollback_restores_an_old_snapshot_exactly_and_keeps_history(where):
    storage = _storage(where)
    _write(storage, _records(0, 3))
    first_windows, first = _windows(storage), storage.current_snapshot
    _write(storage, _records(500, 3), append=True)
    _write(storage, _records(900, 2), overwrite=True)
    snap = storage.rollback(first.id)
    assert snap.operation == "rollback" and snap.source == first.id
    assert np.array_equal(_windows(_storage(where)), first_windows)
    assert [s.operation for s in storage.snapshots()] == ["write", "append", "overwrite", "rollback"]
    assert _storage(where).manifest.fingerprint == _storage(where, snapshot=first.id).manifest.fingerprint


def test_expire_deletes_only_what_no_kept_snapshot_uses(where):
    storage = _storage(where)
    _write(storage, _records(0, 3))
    _write(storage, _records(500, 3), overwrite=True)
    kept_windows = _windows(storage)
    _write(storage, _records(800, 2), append=True)
    grown = _windows(storage)
    fs, root, before = _files(where)
    expired = storage.expire(keep_last=2, grace=NOW)
    assert [s.operation for s in expired] == ["write"]
    _, _, after = _files(where)
    assert set(after) < set(before)  # the first write's shards are gone ...
    assert np.array_equal(_windows(_storage(where)), grown)  # ... the kept ones read whole
    rolled = storage.rollback(storage.snapshots()[0].id)
    assert rolled.summary.records == 3 and np.array_equal(_windows(_storage(where)), kept_windows)


@pytest.mark.parametrize(
    "order",
    [["E", "W", "C"], ["W", "E", "C"], ["W", "C", "E"]],
    ids=["expire-first", "expire-while-writing", "expire-after"],
)
def test_expire_never_deletes_a_running_writers_files(where, order):
    """An appender (W: writes its shards, C: commits) and an expirer (E, default grace) in every
    order: nothing the appender wrote is deleted, its records land, and every kept snapshot
    reads whole."""
    storage = _storage(where)
    _write(storage, _records(0, 2))
    _write(storage, _records(100, 2), overwrite=True)
    appender = _storage(where)
    writer = appender.writer(append=True, shard_size=40)
    for step in order:
        if step == "W":
            for r in _records(300, 3):
                writer.append(r)
        elif step == "C":
            writer.close()
        else:
            _storage(where).expire(keep_last=1)
    final = _storage(where)
    assert final.manifest.total_records == 5
    for snap in final.snapshots():
        kept = _storage(where, snapshot=snap.id)
        assert [err for _, err in kept.verify() if err is not None] == []


# -- races -------------------------------------------------------------------------------------

_STEPS = {"A": ["A.write", "A.commit"], "B": ["B.write", "B.commit"]}


def _interleavings(a, b):
    for positions in itertools.combinations(range(len(a) + len(b)), len(a)):
        out, ia, ib = [], 0, 0
        for k in range(len(a) + len(b)):
            if k in positions:
                out.append(a[ia])
                ia += 1
            else:
                out.append(b[ib])
                ib += 1
        yield out


def _values(storage):
    storage.refresh()
    assert [err for _, err in storage.verify() if err is not None] == []
    tokens = StreamDataset(storage, 10).read_windows(list(range(len(StreamDataset(storage, 10)))))["tokens"]
    return sorted(set(int(t[0]) // 1000 for t in tokens)), len(tokens)


@pytest.mark.parametrize("order", list(_interleavings(_STEPS["A"], _STEPS["B"])), ids="-".join)
def test_two_appenders_both_land_once_in_every_order(where, order):
    base = _storage(where)
    _write(base, [{"tokens": np.full(10, 0, dtype=np.uint16)}])
    storages = {w: _storage(where) for w in "AB"}
    values = {"A": 1000, "B": 2000}
    for step in order:
        who, what = step.split(".")
        s = storages[who]
        if what == "write":
            _parts(
                s,
                [[{"tokens": np.full(10, values[who] + i, dtype=np.uint16)} for i in range(2)]],
                run=f"j{who}",
            )
        else:
            s.commit(num_parts=1, run=f"j{who}", append=True)
    groups, n = _values(_storage(where))
    assert groups == [0, 1, 2] and n == 5  # both appends, each once, nothing lost
    assert [s.operation for s in _storage(where).snapshots()] == ["write", "append", "append"]


@pytest.mark.parametrize(
    "order", list(_interleavings(["A.write", "A.commit"], ["O.open", "O.close"])), ids="-".join
)
def test_an_appender_and_an_overwriter_never_lose_a_commit(where, order):
    """The overwrite started on the snapshot before: if the append lands first, the overwrite
    raises CommitConflictError naming both snapshots; otherwise the append lands on top."""
    _write(_storage(where), [{"tokens": np.full(10, 0, dtype=np.uint16)}])
    appender, over = _storage(where), _storage(where)
    writer = None
    for step in order:
        if step == "A.write":
            _parts(appender, [[{"tokens": np.full(10, 1000, dtype=np.uint16)}]], run="ja")
        elif step == "A.commit":
            appender.commit(num_parts=1, run="ja", append=True)
        elif step == "O.open":
            writer = over.writer(overwrite=True, shard_size=40)
            writer.append({"tokens": np.full(10, 3000, dtype=np.uint16)})
        else:
            assert writer is not None
            if order.index("A.commit") < order.index("O.close") and order.index("O.open") < order.index(
                "A.commit"
            ):
                with pytest.raises(CommitConflictError) as info:
                    writer.close()
                history = _storage(where).snapshots()
                assert history[0].id in str(info.value) and history[-1].id in str(info.value)
            else:
                writer.close()
    groups, _ = _values(_storage(where))
    ops = [s.operation for s in _storage(where).snapshots()]
    if ops[-1] == "append":
        assert groups in ([0, 1], [1, 3])  # on the first write, or on top of the overwrite
    else:
        assert ops[-1] == "overwrite" and groups == [3]
        assert "append" in ops  # the append is in the history (roll back to it)


def test_appenders_racing_in_threads_all_land(where):
    _race_appenders(where)


@pytest.mark.s3
def test_appenders_racing_on_a_store_without_conditional_writes_all_land(s3_bucket, s3_options, monkeypatch):
    """Where the store ignores If-None-Match (Ceph RGW 16.2), commits take turns by claims:
    racing appenders still all land, each once."""
    monkeypatch.setattr(Location, "conditional_writes", lambda self: False)
    _race_appenders((f"s3://{s3_bucket}/ds", dict(s3_options)))
    assert Location(f"s3://{s3_bucket}/ds", dict(s3_options)).sizes_under("snapshots/claims") == {}


@pytest.mark.s3
def test_a_crashed_writers_claim_expires(s3_bucket, s3_options, monkeypatch):
    """A claim left by a writer that died holding it blocks the number only for the lease."""
    import guideloom.io.writes as location_module  # (the claims live in io/writes.py)

    monkeypatch.setattr(Location, "conditional_writes", lambda self: False)
    monkeypatch.setattr(location_module, "CLAIM_LEASE_S", 1.0)
    location = Location(f"s3://{s3_bucket}/claims", dict(s3_options))
    location.write("c/00000000000000000001-dead", b"")  # the dead writer's claim
    time.sleep(2.5)  # past the lease, by the store's clock (whole seconds on some stores)
    assert location.create("x.json", b"1", "c") is True
    assert location.read("x.json") == b"1" and location.sizes_under("c") == {}


def _race_appenders(where):
    import threading

    _write(_storage(where), [{"tokens": np.full(10, 0, dtype=np.uint16)}])
    errors = []

    def run(k):
        try:
            s = _storage(where)
            _parts(s, [[{"tokens": np.full(10, 1000 * (k + 1), dtype=np.uint16)}]], run=f"t{k}")
            s.commit(num_parts=1, run=f"t{k}", append=True)
        except Exception as err:
            errors.append(err)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    groups, n = _values(_storage(where))
    assert groups == [0, 1, 2, 3, 4] and n == 5


# -- crashes and re-runs -----------------------------------------------------------------------


class _Crash(BaseException):
    """Stands for the process dying: nothing after it runs."""


def _crash_after(storage, writes):
    """Make ``storage`` stop (raise `_Crash`) after ``writes`` more storage writes/creates."""
    location = storage.location
    left = [writes]
    for name in ("write", "create"):
        original = getattr(Location, name)

        def step(rel, data, *args, _original=original):
            if left[0] == 0:
                raise _Crash(rel)
            left[0] -= 1
            return _original(location, rel, data, *args)

        setattr(location, name, step)


@pytest.mark.parametrize("crash_at", range(5))
def test_an_append_re_run_after_a_crash_at_any_step_lands_once(where, crash_at):
    _write(_storage(where), _records(0, 2))
    before = _windows(_storage(where))
    first = _storage(where)
    _parts(first, [_records(5000, 2), _records(6000, 1)], run="crawl-7")
    _crash_after(first, crash_at)
    try:
        first.commit(num_parts=2, run="crawl-7", append=True)
        crashed = False
    except _Crash:
        crashed = True
    seen = _windows(_storage(where))  # readers: the old snapshot or the new one, never a mix
    assert seen.shape[0] in (before.shape[0], (20 + 30) // WINDOW) and np.array_equal(
        seen[: len(before)], before
    )
    rerun = _storage(where)
    manifest = rerun.commit(num_parts=2, run="crawl-7", append=True)
    rerun.commit(num_parts=2, run="crawl-7", append=True)  # and once more: still once
    assert manifest.total_records == 5
    final = _storage(where)
    assert final.manifest.total_records == 5
    assert [s.operation for s in final.snapshots()] == ["write", "append"], crashed


def test_a_commit_whose_manifest_copy_is_behind_is_still_current(where):
    """The log entry is the commit; manifest.json is a copy. A copy left behind (a crash just
    after the log entry) does not hide the snapshot from readers."""
    storage = _storage(where)
    _write(storage, _records(0, 2))
    fs, root, _ = _files(where)
    stale = fs.cat_file(f"{root}/manifest.json")
    _write(storage, _records(100, 1), append=True)
    fs.pipe_file(f"{root}/manifest.json", stale)
    assert _storage(where).manifest.total_records == 3
    assert _storage(where).current_snapshot.sequence == 2
    fs.rm(f"{root}/manifest.json")  # no copy at all: the log still holds the dataset
    assert _storage(where).exists() and _storage(where).manifest.total_records == 3
    with pytest.raises(DatasetExistsError):
        _storage(where).writer()


# -- metadata cost -----------------------------------------------------------------------------


def test_an_append_writes_metadata_for_its_own_shards_only(tmp_path):
    """Bytes of new metadata files written by an append of 2 shards: the same for a dataset of
    4 shards and of 200 (apart from the merge of small pieces, which the plan bounds)."""

    def appended_bytes(n_records):
        url = tmp_path / f"n{n_records}"
        storage = StreamStorage(url, FMT)
        _write(storage, _records(0, n_records))
        snaps = lambda: {p: p.stat().st_size for p in (url / "snapshots").rglob("*.json")}  # noqa: E731
        before = snaps()
        _write(storage, _records(0, 2), append=True)
        new = {p: s for p, s in snaps().items() if p not in before}
        return sum(new.values()), storage.manifest.num_shards

    small, n_small = appended_bytes(4)
    large, n_large = appended_bytes(200)
    assert n_large > 40 * n_small / 6
    assert large < 1.5 * small, (small, large)


def test_s3_conditional_writes_are_detected(request):
    """moto's server refuses a second If-None-Match: * PUT; Ceph RGW 16.2 (CI's) ignores it.
    The probe says which, and a create keeps its meaning on both: the second one is refused."""
    pytest.importorskip("s3fs")
    bucket = request.getfixturevalue("s3_bucket")
    backend = request.getfixturevalue("s3_endpoint").backend
    location = Location(f"s3://{bucket}/probe", dict(request.getfixturevalue("s3_options")))
    honoured = location.conditional_writes()
    if backend in ("moto", "rgw"):
        assert honoured is (backend == "moto")
    assert location.create("x.json", b"1", "claims/x") is True
    assert location.create("x.json", b"2", "claims/x") is False
    assert location.read("x.json") == b"1"
    assert location.sizes_under("claims") == {}  # every claim withdrawn


test_s3_conditional_writes_are_detected = pytest.mark.s3(test_s3_conditional_writes_are_detected)
