"""The deciders of exact dedup (`guideloom.workers.dedup.Decider`), in process: whatever order the
parts' hashes arrive in, sent twice (a retried task) or split over groups of buckets, each part's
dropped documents are exactly the later occurrences in ingestion order, and a first occurrence
the dataset's index holds is dropped as already held."""

from __future__ import annotations

import random

import numpy as np

from guideloom.manifest.hashindex import BUCKETS, hash_texts
from guideloom.workers.dedup import Decider, _bucketed


def _hashes(part: int, texts: list[str]) -> list[np.ndarray]:
    return _bucketed(part, texts, list(range(len(texts))), False)


def _later_occurrences(parts: list[list[str]], held: frozenset[str] = frozenset()) -> dict[int, bool]:
    seen: set[str] = set()
    out = {}
    for k, texts in enumerate(parts):
        for n, t in enumerate(texts):
            if t in seen:
                out[(k << 32) | n] = False
            elif t in held:
                out[(k << 32) | n] = True
            seen.add(t)
    return out


def _dropped(deciders: list[Decider], parts: int) -> dict[int, bool]:
    out = {}
    for k in range(parts):
        for d in deciders:
            found = d.dropped(k)
            assert found is not None
            out.update(zip(found["pos"].tolist(), map(bool, found["held"].tolist())))
    return out


def test_any_arrival_order_retries_and_groups_drop_exactly_the_later_occurrences() -> None:
    rng = random.Random(36)
    for _ in range(40):
        parts = [
            [f"doc {rng.randint(0, 25)}" for _ in range(rng.randint(0, 15))] for _ in range(rng.randint(1, 6))
        ]
        groups = [tuple(range(BUCKETS))[t::3] for t in range(3)]
        whole, split = Decider(tuple(range(BUCKETS)), None, None), [Decider(g, None, None) for g in groups]
        order = list(range(len(parts)))
        rng.shuffle(order)
        for k in order + order[:2]:  # the first two again: retried tasks
            h = _hashes(k, parts[k])
            whole.submit(k, h)
            for d, g in zip(split, groups):
                d.submit(k, [h[b] for b in g])
        assert _dropped([whole], len(parts)) == _dropped(split, len(parts)) == _later_occurrences(parts)


def test_a_part_waits_for_the_parts_ahead_of_it_and_held_hashes_are_dropped_as_held() -> None:

    parts = [["a", "b", "a"], ["c", "b", "d"], ["d", "e"]]
    decider = Decider(tuple(range(BUCKETS)), None, None)
    held = np.sort(hash_texts(["c", "e"]))
    decider.olds = {b: [held] for b in range(BUCKETS)}  # as `load_pieces` returns them
    decider.submit(1, _hashes(1, parts[1]))
    assert decider.dropped(1) is None  # part 0 has not sent its hashes yet
    decider.submit(0, _hashes(0, parts[0]))
    decider.submit(2, _hashes(2, parts[2]))
    assert _dropped([decider], 3) == _later_occurrences(parts, frozenset({"c", "e"}))
    new = np.concatenate([a for runs in decider.new.values() for a in runs])
    assert sorted(new.tolist()) == sorted(hash_texts(["a", "b", "d"]).tolist())  # the index's new hashes
