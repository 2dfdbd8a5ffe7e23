"""A loader state records the dataset snapshot it read: after an append, a loader from
``from_storage`` reopens that snapshot and resumes the saved order exactly; a loader built on a
view (which cannot reopen its storage) names the snapshot and the code that resumes it."""

from __future__ import annotations

import numpy as np
import pytest

from guideloom import StatefulDataLoader, StreamDataset, StreamNumpyFormat, StreamStorage
from guideloom.errors import ResumeStateError

FMT = StreamNumpyFormat({"tokens": np.uint16})


def _loader(storage):
    return StatefulDataLoader.from_storage(storage, sequence_length=8, batch_size=2, shuffle="full", seed=3)


def test_state_after_an_append_names_the_snapshot_and_resumes_on_it(tmp_path):
    url = tmp_path / "ds"
    storage = StreamStorage(url, FMT)
    with storage.writer() as w:
        for i in range(8):
            w.append({"tokens": np.arange(10 * i, 10 * i + 10, dtype=np.uint16)})
    pinned_id = storage.current_snapshot.id
    reference = [b["tokens"].tolist() for b in _loader(StreamStorage(url, FMT))]

    loader = _loader(StreamStorage(url, FMT))
    it = iter(loader)
    seen = [next(it)["tokens"].tolist() for _ in range(3)]
    state = loader.state_dict()
    assert state["guideloom_loader"]["snapshot"] == pinned_id

    with storage.writer(append=True) as w:  # the dataset grows while training is stopped
        w.append({"tokens": np.arange(500, 540, dtype=np.uint16)})

    reopened = _loader(StreamStorage(url, FMT))  # on the grown dataset: back to the saved snapshot
    reopened.load_state_dict(state)
    assert seen + [b["tokens"].tolist() for b in reopened] == reference

    view = StreamDataset(StreamStorage(url, FMT), sequence_length=8)
    grown = StatefulDataLoader(view, batch_size=2, shuffle="full", seed=3)
    with pytest.raises(ResumeStateError) as info:
        grown.load_state_dict(state)
    text = str(info.value)
    assert f"snapshot {pinned_id}" in text and f"snapshot={pinned_id!r}" in text
    assert StreamStorage(url, FMT).current_snapshot.id in text

    resumed = _loader(StreamStorage(url, FMT, snapshot=pinned_id))
    resumed.load_state_dict(state)
    rest = [b["tokens"].tolist() for b in resumed]
    assert seen + rest == reference  # the pinned snapshot's order, exactly
