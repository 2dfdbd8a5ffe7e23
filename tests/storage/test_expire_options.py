"""`Storage.expire`'s ``older_than`` forms, `Storage.remove_unreferenced`, and the arguments
`Storage.commit` refuses."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pytest

from guideloom import StreamNumpyFormat, StreamStorage
from guideloom.errors import DatasetNotFoundError
from guideloom.storage import open_view

FMT = StreamNumpyFormat({"tokens": np.uint32})
NOW = dt.timedelta(0)


def _grown(root: Path, appends: int = 2) -> StreamStorage:
    storage = StreamStorage(str(root), FMT)
    with storage.writer(shard_size=64) as w:
        w.append({"tokens": np.arange(20, dtype=np.uint32)})
    for k in range(appends):
        with storage.writer(append=True, shard_size=64) as w:
            w.append({"tokens": np.arange(k, k + 8, dtype=np.uint32)})
    return storage


def test_older_than_takes_an_age_or_an_aware_time(tmp_path: Path) -> None:
    storage = _grown(tmp_path / "ds")
    assert storage.expire(dt.timedelta(hours=1), keep_last=1, grace=NOW) == []  # all younger
    hour_ago = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1)
    assert storage.expire(hour_ago, keep_last=1, grace=NOW) == []
    later = dt.datetime.now(dt.timezone(dt.timedelta(hours=5))) + dt.timedelta(minutes=5)  # any zone
    first = storage.snapshots()[0].id
    expired = storage.expire(later, keep_last=2, grace=NOW)
    assert [s.id for s in expired] == [first] and len(storage.snapshots()) == 2
    assert StreamStorage(storage.url, FMT).manifest.total_tokens == 36


def test_older_than_of_another_kind_is_named(tmp_path: Path) -> None:
    storage = _grown(tmp_path / "ds")
    with pytest.raises(ValueError, match="older_than must be an aware datetime \\(with a time zone\\)"):
        storage.expire(dt.datetime.now(), keep_last=1)
    with pytest.raises(TypeError, match="older_than must be a datetime, a timedelta or None, got '1d'"):
        storage.expire("1d", keep_last=1)  # type: ignore[arg-type]
    assert len(storage.snapshots()) == 3  # nothing expired


def test_expire_where_nothing_was_committed_is_named(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError, match="nothing to expire"):
        StreamStorage(str(tmp_path / "none"), FMT).expire(keep_last=1)


def test_remove_unreferenced_deletes_what_no_kept_snapshot_uses(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    storage = _grown(root, appends=0)
    with storage.writer(overwrite=True, shard_size=64) as w:
        w.append({"tokens": np.arange(100, 140, dtype=np.uint32)})
    storage.expire(keep_last=1)  # the first write's shards stay: younger than the grace period
    stray = root / "shards" / "left-by-a-crashed-writer"
    stray.mkdir(parents=True)
    (stray / "000.bin").write_bytes(b"x")
    (root / "NOTES.txt").write_text("not the dataset's")
    shards_before = {p for p in (root / "shards").rglob("*") if p.is_file()}
    storage.remove_unreferenced()
    shards_after = {p for p in (root / "shards").rglob("*") if p.is_file()}
    assert shards_after < shards_before and not stray.exists()
    assert (root / "NOTES.txt").read_text() == "not the dataset's"
    fresh = StreamStorage(str(root), FMT)
    assert fresh.manifest.total_tokens == 40
    assert open_view(fresh, 40)[0]["tokens"].tolist() == list(range(100, 140))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_parts": 0}, "num_parts must be a positive int, got 0"),
        ({"num_parts": True}, "num_parts must be a positive int, got True"),
        ({"num_parts": 2, "first_part": 2}, "first_part must be an int in \\[0, num_parts=2\\), got 2"),
        ({"num_parts": 1, "run": "no spaces"}, "run must be 1-64 letters, digits, '-' or '_'"),
    ],
)
def test_commit_names_bad_arguments(tmp_path: Path, kwargs: dict, message: str) -> None:
    storage = StreamStorage(str(tmp_path / "ds"), FMT)
    with pytest.raises(ValueError, match=message):
        storage.commit(**kwargs)
    assert not storage.exists()
