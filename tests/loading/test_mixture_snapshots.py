"""A loader state saved on a Mixture records each source's snapshot: after a source grows by an
append, a loader on a new Mixture of the same storages reopens each source at its saved snapshot
and resumes the saved order exactly; a source whose snapshot has expired, or one given as a view
(which cannot be reopened), is named with the fix."""

from __future__ import annotations

import numpy as np
import pytest

from guideloom import Mixture, StatefulDataLoader, StreamDataset, StreamNumpyFormat, StreamStorage
from guideloom.errors import ResumeStateError

FMT = StreamNumpyFormat({"tokens": np.uint16})


def _write(url, start, records=6, append=False):
    storage = StreamStorage(url, FMT)
    with storage.writer(append=append) as w:
        for i in range(records):
            first = start + 10 * i
            w.append({"tokens": np.arange(first, first + 10, dtype=np.uint16)})
    return storage


def _loader(web, code, num_workers=0):
    mixture = Mixture({"web": (StreamStorage(web, FMT), 0.6), "code": (StreamStorage(code, FMT), 0.4)})
    return StatefulDataLoader.from_storage(
        mixture, sequence_length=8, batch_size=2, shuffle="full", seed=5, num_workers=num_workers
    )


@pytest.mark.parametrize("num_workers", [0, 2])
def test_state_on_a_mixture_names_each_sources_snapshot_and_resumes_after_one_grows(tmp_path, num_workers):
    web, code = tmp_path / "web", tmp_path / "code"
    pins = [_write(web, 0).current_snapshot.id, _write(code, 1000).current_snapshot.id]
    reference = [b["tokens"].tolist() for b in _loader(web, code)]
    assert len(reference) >= 6

    loader = _loader(web, code)
    it = iter(loader)
    seen = [next(it)["tokens"].tolist() for _ in range(3)]
    state = loader.state_dict()
    assert state["guideloom_loader"]["source_snapshots"] == pins

    grown = _write(code, 5000, records=4, append=True)  # one source grows while training is stopped
    assert grown.current_snapshot.id != pins[1]

    resumed = _loader(web, code, num_workers)  # on the grown source: back to the saved snapshots
    resumed.load_state_dict(state)
    assert seen + [b["tokens"].tolist() for b in resumed] == reference

    fresh = [b["tokens"].tolist() for b in _loader(web, code)]  # a new run reads the grown source
    assert any(5000 <= t < 5040 for batch in fresh for row in batch for t in row)


def test_a_source_snapshot_no_longer_kept_is_named(tmp_path):
    web, code = tmp_path / "web", tmp_path / "code"
    _write(web, 0)
    pin = _write(code, 1000).current_snapshot.id
    loader = _loader(web, code)
    it = iter(loader)
    next(it)
    state = loader.state_dict()

    grown = _write(code, 5000, records=2, append=True)
    grown.expire(keep_last=1)

    resumed = _loader(web, code)
    with pytest.raises(ResumeStateError) as info:
        resumed.load_state_dict(state)
    text = str(info.value)
    assert "'code'" in text and pin in text and "keep_last" in text


def test_a_source_given_as_a_view_that_moved_names_the_pinned_snapshot(tmp_path):
    web, code = tmp_path / "web", tmp_path / "code"
    _write(web, 0)
    pin = _write(code, 1000).current_snapshot.id

    def loader():
        views = {
            "web": (StreamStorage(web, FMT), 0.6),
            "code": (StreamDataset(StreamStorage(code, FMT), sequence_length=8), 0.4),
        }
        return StatefulDataLoader.from_storage(Mixture(views), sequence_length=8, batch_size=2, seed=5)

    first = loader()
    next(iter(first))
    state = first.state_dict()
    _write(code, 5000, records=2, append=True)

    with pytest.raises(ResumeStateError) as info:
        loader().load_state_dict(state)
    text = str(info.value)
    assert "'code'" in text and f"snapshot={pin!r}" in text and "StreamDataset" in text
