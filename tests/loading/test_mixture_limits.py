"""Per-source limits in a Mixture beside weights: ``samples`` (read at most a source's first N
samples) and ``repeat`` (passes over a source that use it up, which set the epoch's end); the
order resumes exactly, and a state of other limits is refused."""

from __future__ import annotations

import collections
import math

import numpy as np
import pytest

from guideloom import Mixture, StatefulDataLoader, StreamNumpyFormat, StreamStorage
from guideloom.errors import MixtureError, ResumeStateError

FMT = StreamNumpyFormat({"tokens": np.uint32})
L = 4


def _write(url, windows, base):
    storage = StreamStorage(url, FMT)
    with storage.writer() as w:
        w.append({"tokens": np.arange(base, base + windows * L, dtype=np.uint32)})
    return StreamStorage(url, FMT)


@pytest.fixture
def two(tmp_path):
    return _write(tmp_path / "big", 60, 0), _write(tmp_path / "small", 10, 100_000)


def _rows(mixture, **kw):
    loader = StatefulDataLoader.from_storage(
        mixture, sequence_length=L, batch_size=4, shuffle="full", seed=2, sources=True, **kw
    )
    return [(int(s), int(i)) for b in loader for s, i in zip(b["source"], b["source_index"])]


def test_samples_limits_a_source_to_its_first_samples(two):
    big, small = two
    rows = _rows(Mixture({"big": (big, 0.5, {"samples": 20}), "small": (small, 0.5)}))
    big_rows = [i for s, i in rows if s == 0]
    assert big_rows and max(big_rows) < 20
    assert sorted(collections.Counter(big_rows)) == list(range(20))  # every one of the 20 read


def test_repeat_sets_how_many_passes_use_a_source_up(two):
    big, small = two
    once = Mixture({"big": (big, 0.5), "small": (small, 0.5)}, stopping_strategy="first_exhausted")
    twice = Mixture(
        {"big": (big, 0.5), "small": (small, 0.5, {"repeat": 2})}, stopping_strategy="first_exhausted"
    )
    assert once.plan(L).draws[1] == 10 and twice.plan(L).draws[1] == 20
    counts = collections.Counter(i for s, i in _rows(twice) if s == 1)
    assert counts == {i: 2 for i in range(10)}  # each small sample twice, in two orders
    half = Mixture({"big": (big, 0.5, {"repeat": 0.5}), "small": (small, 0.5)})
    assert (
        half.plan(L).draws[0] >= math.ceil(0.5 * 60)
        and half.plan(L).epoch_length < once.plan(L).epoch_length * 6
    )


def test_a_state_with_limits_resumes_exactly_and_other_limits_are_refused(two):
    big, small = two

    def loader(repeat=3, **kw):
        mix = Mixture({"big": (big, 0.7, {"samples": 30}), "small": (small, 0.3, {"repeat": repeat})})
        return StatefulDataLoader.from_storage(
            mix, sequence_length=L, batch_size=4, shuffle="full", seed=9, **kw
        )

    reference = [b["tokens"].tolist() for b in loader()]
    run = loader()
    it = iter(run)
    done = [next(it)["tokens"].tolist() for _ in range(3)]
    state = run.state_dict()
    assert state["guideloom_loader"]["mixture"]["repeat"] == [1.0, 3.0]
    resumed = loader(num_workers=2)
    resumed.load_state_dict(state)
    assert done + [b["tokens"].tolist() for b in resumed] == reference
    with pytest.raises(
        ResumeStateError, match=r"repeat limits \[1.0, 3.0\], but this mixture has \[1.0, 2.0\]"
    ):
        loader(repeat=2).load_state_dict(state)


@pytest.mark.parametrize(
    ("limits", "needle"),
    [
        ({"samples": 0}, "'samples' must be a whole number"),
        ({"repeat": -1}, "'repeat' must be a positive number"),
        ({"repat": 2}, "'samples' .* 'repeat' .* and/or 'defaults'"),
        ([2], "the third item of a source holds its limits"),
    ],
)
def test_bad_limits_name_the_source_and_the_form(two, limits, needle):
    big, small = two
    with pytest.raises(MixtureError, match=needle) as info:
        Mixture({"big": (big, 0.5, limits), "small": (small, 0.5)})
    assert "'big'" in str(info.value)
