"""S3 faults end in a named GuideLoom error in bounded time, or are retried through.

Every test goes through the fault-injecting proxy (`tests/infra/faultproxy.py`) in front of the real
test S3 endpoint, with an 8 s I/O deadline (the `fault_s3` fixture): that deadline bounds every test in time.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from faultproxy import Fault

from guideloom import StatefulDataLoader, StreamDataset, StreamNumpyFormat, StreamStorage
from guideloom.errors import (
    GuideLoomError,
    ManifestError,
    ShardCorruptError,
    ShardNotFoundError,
    StorageAccessError,
    StorageTimeoutError,
)

pytestmark = pytest.mark.s3

FMT = StreamNumpyFormat({"tokens": np.uint16})
WINDOW = 64


def _write(url, options, shards=3, tokens=4096):
    storage = StreamStorage(url, FMT, storage_options=options)
    with storage.writer(shard_size=tokens * 2) as w:
        for s in range(shards):
            w.append({"tokens": np.full(tokens, s + 1)})
    return storage


@pytest.fixture
def stored(s3_bucket, s3_options):
    url = f"s3://{s3_bucket}/ds"
    storage = _write(url, s3_options)
    return url, storage.manifest


def _reader(url, fault_s3):
    return StreamStorage(url, FMT, storage_options=fault_s3.storage_options)


def _shard_path(manifest, i):
    return manifest.shard_table.path(i, "data")


def _read_all(ds):
    return ds.read_windows(list(range(len(ds))))["tokens"]


def test_transient_faults_are_retried_through(stored, fault_s3):
    """Holds already: a few 503s, resets and truncations, then the exact data."""
    url, manifest = stored
    ds = StreamDataset(_reader(url, fault_s3), WINDOW)
    for action in ("status", "reset", "truncate", "short", "latency"):
        fault_s3.clear()
        rule = fault_s3.add(
            Fault(action, _shard_path(manifest, 1), method="GET", status=503, times=1, delay=0.2)
        )
        tokens = _read_all(ds)
        assert rule.fired == 1, action
        assert tokens.shape == (len(ds), WINDOW)
        expected = np.repeat(np.arange(1, 4), 4096 // WINDOW)
        np.testing.assert_array_equal(tokens[:, 0], expected)


@pytest.mark.parametrize("action", ["short", "truncate", "reset", "status"])
def test_one_bad_answer_on_the_manifest_or_a_part_record_is_retried_through(stored, fault_s3, action):
    """The regression the fault probe found: one short body on the manifest GET (its length
    header agrees, so only its Content-Range or a checksum tells) failed the whole open. Every transient answer is retried, on the manifest and on part records too."""
    url, manifest = stored
    rule = fault_s3.add(Fault(action, r"/manifest\.json$", method="GET", times=1))
    reopened = StreamDataset(_reader(url, fault_s3), WINDOW)
    assert rule.fired == 1
    assert reopened.manifest.fingerprint == manifest.fingerprint
    assert _read_all(reopened)[0, 0] == 1
    # A part record, read back by commit.
    fault_s3.clear()
    storage = StreamStorage(f"{url}-parts", FMT, storage_options=fault_s3.storage_options)
    with storage.writer(part=0) as w:
        w.append({"tokens": np.arange(100)})
    rule = fault_s3.add(Fault(action, r"/parts/.*\.json$", method="GET", times=1))
    committed = storage.commit(num_parts=1)
    assert rule.fired == 1 and committed.total_tokens == 100


def test_a_short_body_that_persists_is_named_corruption(stored, fault_s3):
    """A whole-object read asks for ``bytes=0-``, so the answer's own Content-Range says how
    long the body must be: a body cut short with a length header that agrees is caught on
    every S3 store, also where the store sends no checksum with the object (Ceph RGW). Where it
    sends one (moto), botocore's check of it may tell first."""
    url, _ = stored
    fault_s3.add(Fault("short", r"/manifest\.json$", method="GET"))
    with pytest.raises(ManifestError) as info:
        StreamDataset(_reader(url, fault_s3), WINDOW)
    message = str(info.value)
    assert f"reading {url}/manifest.json" in message and fault_s3.url in message
    causes = {  # whichever check the store allows fires first; both name the real cause
        "ShortBodyError": "ended before the end its own Content-Range announces",
        "FlexibleChecksumError": "do not match the checksum the store recorded",  # moto: a checksum
    }
    assert any(f"({name}" in message and text in message for name, text in causes.items()), message
    assert "on each retry" in message
    assert "guideloom verify" in message and "rewrite the dataset" in message  # the fix
    assert sum(1 for _, path, action in fault_s3.log if action == "short") == 3  # retried


@pytest.mark.parametrize("action", ["status", "truncate", "reset"])
def test_a_shard_that_always_fails_names_the_shard(stored, fault_s3, action):
    url, manifest = stored
    ds = StreamDataset(_reader(url, fault_s3), WINDOW)
    bad = _shard_path(manifest, 1)
    fault_s3.add(Fault(action, bad, method="GET"))
    started = time.monotonic()
    with pytest.raises(StorageAccessError) as info:
        _read_all(ds)
    assert time.monotonic() - started < 8 + 4
    assert bad in str(info.value)
    assert fault_s3.url in str(info.value)


def test_stalled_endpoint_ends_with_a_timeout_naming_endpoint_and_shard(stored, fault_s3):
    url, manifest = stored
    ds = StreamDataset(_reader(url, fault_s3), WINDOW)
    bad = _shard_path(manifest, 0)
    fault_s3.add(Fault("stall", bad, method="GET"))
    started = time.monotonic()
    with pytest.raises(StorageTimeoutError) as info:
        ds[0]
    elapsed = time.monotonic() - started
    assert elapsed < 8 + 4, elapsed  # the 8 s deadline, plus fsspec's 1 s polling and slack
    message = str(info.value)
    assert bad in message and fault_s3.url in message and "GUIDELOOM_IO_DEADLINE_S" in message


def test_errors_inside_dataloader_workers_stay_guideloom_errors(stored, fault_s3):
    url, manifest = stored
    fault_s3.add(Fault("status", _shard_path(manifest, 2), method="GET"))
    loader = StatefulDataLoader.from_storage(
        _reader(url, fault_s3), sequence_length=WINDOW, batch_size=8, num_workers=2
    )
    with pytest.raises(StorageAccessError, match=_shard_path(manifest, 2)):
        for _ in loader:
            pass


def test_refused_write_and_refused_commit_are_named_and_keep_the_old_dataset(stored, fault_s3):
    url, manifest = stored
    storage = _reader(url, fault_s3)
    fault_s3.add(Fault("status", r"/shard-\d+\.tokens", method="PUT"))
    with pytest.raises(StorageAccessError, match=r"writing .*shard-00000\.tokens"):
        with storage.writer(overwrite=True) as w:
            w.append({"tokens": np.arange(10)})
    fault_s3.clear()
    # The commit itself is the creation of the next snapshot's log entry: refused, nothing lands.
    fault_s3.add(Fault("status", r"/snapshots/log/\d+\.json", method="PUT"))
    with pytest.raises(StorageAccessError, match=r"creating .*snapshots/log/\d+\.json"):
        with storage.writer(overwrite=True) as w:
            w.append({"tokens": np.arange(10)})
    fault_s3.clear()
    survivor = StreamDataset(_reader(url, fault_s3), WINDOW)
    assert survivor.manifest.fingerprint == manifest.fingerprint
    assert _read_all(survivor)[0, 0] == 1
    # manifest.json is only a copy of the current snapshot's record: a refused copy does not
    # undo a commit that landed, and readers find the new snapshot through the log.
    fault_s3.add(Fault("status", r"/manifest\.json", method="PUT"))
    with _reader(url, fault_s3).writer(append=True) as w:
        w.append({"tokens": np.full(10, 7)})
    fault_s3.clear()
    grown = _reader(url, fault_s3)
    assert grown.current_snapshot.operation == "append"
    assert grown.manifest.total_tokens == manifest.total_tokens + 10


def test_deleted_shard_names_the_missing_file(stored, s3_options, fault_s3):
    url, manifest = stored
    import fsspec

    fs, root = fsspec.core.url_to_fs(url, **s3_options)
    missing = _shard_path(manifest, 2)
    fs.rm(f"{root}/{missing}")
    ds = StreamDataset(_reader(url, fault_s3), WINDOW)
    with pytest.raises(ShardNotFoundError) as info:
        _read_all(ds)  # one batch over all three shards
    message = str(info.value)
    assert missing in message
    for other in (_shard_path(manifest, 0), _shard_path(manifest, 1)):
        assert other not in message


@pytest.mark.parametrize("change", [b"xy", b""])
def test_a_shard_that_grew_or_was_replaced_on_s3_is_caught_when_read(stored, s3_options, change):
    """The ranged GET's Content-Range carries the object's size: a shard with bytes appended
    (or rewritten shorter, past the windows read) fails as corrupt, naming the file and both
    sizes, with no request of its own. Windows of the other shards still read."""
    url, manifest = stored
    import fsspec

    fs, root = fsspec.core.url_to_fs(url, **s3_options)
    changed = _shard_path(manifest, 1)
    body = fs.cat_file(f"{root}/{changed}")
    fs.pipe_file(f"{root}/{changed}", body + change if change else body[:-2])
    ds = StreamDataset(StreamStorage(url, FMT, storage_options=s3_options), WINDOW)
    per_shard = 4096 // WINDOW
    with pytest.raises(ShardCorruptError) as info:
        ds[per_shard]  # the first window of shard 1: bytes the manifest still covers
    message = str(info.value)
    assert changed in message and f"has {len(body) + len(change) - (0 if change else 2)} bytes" in message
    assert f"records {len(body)}" in message
    np.testing.assert_array_equal(ds[0]["tokens"], np.full(WINDOW, 1))


def _unreachable(**extra):
    return {"key": "k", "secret": "s", "skip_instance_cache": True, "guideloom_deadline_s": 5, **extra}


@pytest.mark.parametrize("how", ["client_kwargs", "top_level", "fsspec_env", "aws_env"])
def test_connection_errors_name_the_endpoint_however_it_was_given(how, monkeypatch):
    endpoint = "http://127.0.0.1:9"  # discard port: nothing listens
    config = {"config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 0.5}}
    if how == "client_kwargs":
        options = _unreachable(client_kwargs={"endpoint_url": endpoint}, **config)
    elif how == "top_level":
        options = _unreachable(endpoint_url=endpoint, **config)
    elif how == "fsspec_env":
        import fsspec.config

        monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": endpoint})
        options = _unreachable(**config)
    else:
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        options = _unreachable(**config)
    started = time.monotonic()
    with pytest.raises(StorageAccessError) as info:
        StreamStorage("s3://some-bucket/ds", FMT, storage_options=options)
    assert time.monotonic() - started < 10
    assert endpoint in str(info.value), str(info.value)
    assert "default for this protocol" not in str(info.value)


def test_missing_bucket_says_so(s3_options):
    storage = StreamStorage("s3://gl-no-such-bucket-i10/ds", FMT, storage_options=s3_options)
    with pytest.raises(GuideLoomError) as info:
        with storage.writer() as w:
            w.append({"tokens": [1, 2]})
    message = str(info.value)
    assert "gl-no-such-bucket-i10" in message and "bucket does not exist" in message
    assert "None" not in message
