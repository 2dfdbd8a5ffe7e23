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


def _joined(part: int, texts: list[str]) -> tuple[np.ndarray, list[int]]:
    """A part's hashes as the driver sends them to one decider of every bucket: one array and
    the buckets' lengths (`Deciders.decide`)."""
    buckets = _hashes(part, texts)
    return np.concatenate(buckets), [len(b) for b in buckets]


def test_the_decider_actor_answers_each_part_once_the_parts_ahead_arrived_and_writes_the_index(
    tmp_path,
) -> None:
    """`_DeciderActor` (the class Ray runs as the deciders' actor) driven in process with asyncio:
    a part sent before `open` waits for it, a part waits for the parts ahead of it, a part sent
    without waiting gets no answer, and `finish` returns the index pieces written under the
    dataset's root once every part is decided."""
    import asyncio

    from guideloom.io import Location
    from guideloom.workers.dedup import DROPPED, _DeciderActor

    parts = [["a", "b", "a"], ["c", "b", "d"], ["d", "e", "f"]]
    location = Location(str(tmp_path / "ds"))

    async def run() -> tuple[list[np.ndarray | None], list[dict]]:
        actor = _DeciderActor()
        # part 1 first (it waits for part 0), before the driver's `open` reached the actor
        one = asyncio.ensure_future(actor.decide("job", 1, True, *_joined(1, parts[1])))
        await asyncio.sleep(0)
        assert not one.done()
        await actor.open("job", tuple(range(BUCKETS)), location, None, len(parts))
        await asyncio.sleep(0)
        assert not one.done()  # part 0 has not sent its hashes yet
        zero = await actor.decide("job", 0, True, *_joined(0, parts[0]))
        late = await actor.decide("job", 2, False, *_joined(2, parts[2]))  # a reused part: no answer
        answers = [zero, await one, late]
        pieces = await actor.finish("job")
        assert "job" not in actor.jobs and not [k for k in actor.events if k[0] == "job"]
        return answers, pieces

    answers, pieces = asyncio.run(run())
    zero, one, late = answers
    assert late is None
    assert zero is not None and one is not None and zero.dtype == DROPPED
    dropped = {int(p): bool(h) for a in (zero, one) for p, h in zip(a["pos"], a["held"])}
    assert dropped == {k: v for k, v in _later_occurrences(parts).items() if k >> 32 < 2}
    assert sum(p["count"] for p in pieces) == len({t for texts in parts for t in texts})  # a..f
    assert pieces and all(location.exists(p["path"]) for p in pieces)
