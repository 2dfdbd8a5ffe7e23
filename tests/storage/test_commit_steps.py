"""``storage.commit(num_parts=..., first_part=..., append=True)``: a run committed in steps ends
with the shard table one commit of all its parts gives; bad steps are refused with the fix."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from guideloom import StreamDataset, StreamNumpyFormat, StreamStorage

FMT = StreamNumpyFormat({"tokens": np.uint16})


def _write_parts(storage: StreamStorage, n: int, *, append: bool = False) -> None:
    for k in range(n):
        with storage.writer(part=k, run="job", shard_size=64, append=append) as writer:
            for j in range(3):
                start = 100 * k + 30 * j
                writer.append({"tokens": np.arange(start, start + 30)})


def _columns(storage: StreamStorage) -> dict:
    t = storage.manifest.shard_table
    return {
        "part": list(t.part),
        "index": list(t.index),
        "records": list(t.records),
        "tokens": list(t.tokens),
        "part_base": list(t.part_base),
        "prefixes": len(t.prefix),
        "files": {name: (list(c.size), list(c.checksum)) for name, c in t.files.items()},
        "parts": storage.manifest.num_parts,
    }


@pytest.mark.parametrize("base", [False, True])
def test_steps_end_as_one_commit(tmp_path: Path, base: bool) -> None:
    tables, streams = [], []
    for name, steps in (("once", [(0, 5)]), ("steps", [(0, 2), (2, 3), (3, 5)])):
        storage = StreamStorage(str(tmp_path / name), FMT)
        if base:
            with storage.writer() as writer:
                writer.append({"tokens": np.arange(1000, 1040)})
        _write_parts(storage, 5, append=base)
        for first, upto in steps:
            storage.commit(
                num_parts=upto, run="job", append=base or first > 0, first_part=first, cleanup=upto == 5
            )
        snaps = storage.snapshots()
        assert [s.num_parts for s in snaps][-len(steps) :] == [upto + base for _, upto in steps]
        tables.append(_columns(StreamStorage(str(tmp_path / name), FMT)))
        fresh = StreamStorage(str(tmp_path / name), FMT)
        streams.append(StreamDataset(fresh, fresh.manifest.total_tokens)[0]["tokens"].tolist())
    assert tables[0] == tables[1]
    assert streams[0] == streams[1]


def test_bad_steps_are_refused_with_the_fix(tmp_path: Path) -> None:
    storage = StreamStorage(str(tmp_path / "ds"), FMT)
    _write_parts(storage, 4)
    with pytest.raises(ValueError, match="pass append=True"):
        storage.commit(num_parts=4, run="job", first_part=2)
    with pytest.raises(ValueError, match=r"first_part must be an int in \[0, num_parts=4\)"):
        storage.commit(num_parts=4, run="job", first_part=4, append=True)
    with pytest.raises(ValueError) as info:  # parts 0..1 were never committed
        storage.commit(num_parts=4, run="job", first_part=2, append=True)
    assert "has no snapshot" in str(info.value) and "from part 0" in str(info.value)
    storage.commit(num_parts=1, run="job", cleanup=False)
    with pytest.raises(ValueError) as info:
        storage.commit(num_parts=4, run="job", first_part=2, append=True)
    assert "has 1 part (" in str(info.value) and "Commit the run's parts from part 0" in str(info.value)
    assert StreamStorage(str(tmp_path / "ds"), FMT).manifest.num_parts == 1  # nothing committed


def test_a_writer_closed_without_a_record_commits_nothing_and_says_so(tmp_path: Path) -> None:
    """A single writer with no record appended: a write or an overwrite is refused by name (a
    dataset holds one record or more; pydantic's own message about a shard table without a
    'data' column came out before), an append leaves the dataset as it was."""
    from guideloom.errors import RecordError

    storage = StreamStorage(tmp_path / "s", FMT)
    with pytest.raises(
        RecordError, match=r"closed without a record appended, so nothing was committed \(no dataset\)"
    ):
        with storage.writer():
            pass
    assert not storage.exists()
    with storage.writer() as writer:
        writer.append({"tokens": np.arange(5)})
    first = storage.current_snapshot.id
    with storage.writer(append=True):
        pass
    with pytest.raises(
        RecordError, match=r"the dataset committed there is unchanged\): append at least one record"
    ):
        with storage.writer(overwrite=True):
            pass
    assert storage.current_snapshot.id == first and [err for _, err in storage.verify()] == [None]
    assert StreamDataset(storage, 5)[0]["tokens"].tolist() == [0, 1, 2, 3, 4]


def test_parts_without_a_record_append_nothing_and_a_write_of_them_is_refused(tmp_path: Path) -> None:
    """``commit(num_parts=...)`` of parts that hold no record (pydantic's "shard table has no
    'data' column" came out before): a write is refused by name and commits nothing; an append
    on a dataset records the parts as adding nothing (the run's later steps number on from
    them); an append where no dataset is committed is refused by name."""
    from guideloom.errors import RecordError

    def empty_parts(storage: StreamStorage, run: str, parts: range, **mode: bool) -> None:
        for k in parts:
            with storage.writer(part=k, run=run, **mode):
                pass

    storage = StreamStorage(tmp_path / "ds", FMT)
    empty_parts(storage, "none", range(2))
    with pytest.raises(
        RecordError, match=r"the 2 parts committed hold no record, so nothing was committed \(no dataset\)"
    ):
        storage.commit(num_parts=2, run="none")
    with pytest.raises(
        RecordError, match="nothing to append: the 2 parts committed hold no record and no dataset"
    ):
        storage.commit(num_parts=2, run="none", append=True)
    assert not storage.exists()

    with storage.writer() as writer:
        writer.append({"tokens": np.arange(7)})
    first = storage.current_snapshot.id
    empty_parts(storage, "over", range(1), overwrite=True)
    with pytest.raises(
        RecordError, match=r"the 1 part committed holds no record.*the dataset committed there is unchanged"
    ):
        storage.commit(num_parts=1, run="over")
    assert storage.current_snapshot.id == first

    # A run in two steps whose first step's parts are empty: the second step's part 2 lands as
    # the dataset's part 3 (1 + 2), as a one-shot commit of all four parts would place it.
    empty_parts(storage, "steps", range(2), append=True)
    nothing = storage.commit(num_parts=2, run="steps", append=True)
    assert nothing.num_parts == 3 and nothing.total_tokens == 7
    step = storage.current_snapshot
    assert step.operation == "append" and step.summary.added_shards == 0 and step.summary.added_records == 0
    again = storage.commit(num_parts=2, run="steps", append=True)  # the same step: already landed
    assert again.num_parts == 3 and storage.current_snapshot.id == step.id
    for k in (2, 3):
        with storage.writer(part=k, run="steps", append=True) as writer:
            writer.append({"tokens": np.arange(10 * k, 10 * k + 5)})
    rest = storage.commit(num_parts=4, run="steps", append=True, first_part=2)
    assert rest.num_parts == 5 and list(rest.shard_table.part) == [0, 3, 4]
    assert [s.operation for s in storage.snapshots()] == ["write", "append", "append"]
    assert StreamDataset(storage, 17)[0]["tokens"].tolist() == [*range(7), *range(20, 25), *range(30, 35)]
    assert [err for _, err in storage.verify()] == [None, None, None]
