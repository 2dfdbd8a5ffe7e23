"""Exact deduplication of an ingestion job on Ray (``dedup="exact"``, ``--dedup exact``).

A document is dropped when its text (after the transform; the rendered conversation for chat;
normalised first with ``dedup_normalize``) has the same 128-bit hash as an earlier document of
the job, or as a document the dataset already holds (an append). *Earlier* is the ingestion
order: part by part, and within a part, record by record. So the documents kept, and the
shard bytes, are the same on any number of workers and nodes.

One read of the input, no barrier between hashing and writing:

1. **Hash, in the part's own task**: the part task reads and prepares its records once, as it
   always does (`guideloom.workers.part.write_part`), hashes each document's text, and sends
   the hashes, with their positions ``part << 32 | n`` (n: the document's number in the part),
   to the deciders, split by bucket (the hash's first byte,
   `guideloom.manifest.hashindex.BUCKETS` buckets).
2. **Decide, part by part in part order** (`Decider`; a Ray actor per group of buckets, or one
   object in this process for an inline job): part k's documents are decided once parts
   0..k-1 have sent their hashes: a hash an earlier part held, or an earlier document of the
   part, is a duplicate; a first occurrence the dataset's index holds (an append) is dropped as
   already held. A decider holds only its buckets' share of the distinct hashes (16 bytes
   each); the driver holds only the actors' handles.
3. **Write**: the part task, holding its prepared records, receives its dropped positions and
   writes the others (`PartDedup`), counting the dropped per input file. Parts start in part
   order, so part k rarely waits: the parts ahead of it started first, and waiting on Ray does
   not hold a CPU. The output is that of a job whose parts were written one after another.

When every part is written the deciders write their buckets' new hashes as index pieces. A
part an earlier run finished keeps its shards, and reads its input again only to send its
hashes (`part_hashes`). Its cost is measured by ``make bench`` (benchmarks/dedup_bench.py).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import ray

from guideloom.errors import GuideLoomError, HashIndexError, IngestError
from guideloom.io import Location, redact_url
from guideloom.manifest.hashindex import (
    BUCKETS,
    HASH_DTYPE,
    INDEX_KEY,
    HashIndex,
    HashPiece,
    bucket_of,
    hash_texts,
)
from guideloom.manifest.snapshots import merge_plan
from guideloom.storage.hashindex import index_of, load_pieces, write_piece
from guideloom.workers.config import IngestConfig
from guideloom.workers.part import PartResult, PartSpec, _Pending, _Preparer, _read_options, tokenizer_of
from guideloom.workers.readers import input_reader

__all__ = [
    "DEDUP_KEY",
    "Decider",
    "Deciders",
    "POSITION",
    "PartDedup",
    "base_index",
    "part_hashes",
    "record_dedup",
    "start_deciders",
]

DEDUP_KEY = "dedup"  # the ingest metadata key of the counts
POSITION = np.dtype([("hash", HASH_DTYPE), ("pos", "<u8")])
DROPPED = np.dtype([("pos", "<u8"), ("held", "u1")])
_HASH_BATCH = 4096  # texts hashed at once


def base_index(config: IngestConfig, storage: Any) -> HashIndex | None:
    """The index of the snapshot a deduplicated append adds to (None for a write or overwrite).

    Args:
        config: The job.
        storage: The output storage.

    Returns:
        The current snapshot's index, or None when the job does not append.

    Raises:
        IngestError: The dataset has no index (ingested without hashes), its index is damaged,
            or it hashed texts with another normalisation; each says the command that fixes it.
    """
    if not config.append or not storage.exists():
        return None
    snap = storage.current_snapshot
    url = storage.url
    try:
        index = index_of(storage.location, snap)
    except HashIndexError as err:
        raise IngestError(f"cannot deduplicate against {url}: {err}; nothing was committed") from None
    norm = " --normalize" if config.dedup_normalize else ""
    if index is None:
        raise IngestError(
            f"cannot deduplicate against {url}: its snapshot {snap.id} has no hash index (it was "
            f"ingested without --dedup exact). Build one with `guideloom index-hashes {url}{norm}`, "
            "then run this append again; nothing was committed"
        )
    if index.normalize != config.dedup_normalize:
        said = "normalised" if index.normalize else "as they are"
        flag = "pass --dedup-normalize" if index.normalize else "drop --dedup-normalize"
        raise IngestError(
            f"cannot deduplicate against {url}: its hash index hashed texts {said}: {flag} to match "
            f"it, or rebuild it with `guideloom index-hashes {url} --rebuild{norm}`; nothing was committed"
        )
    try:  # every piece readable and intact before any task starts
        for bucket in range(index.buckets):
            load_pieces(storage.location, index, bucket)
    except HashIndexError as err:
        raise IngestError(f"cannot deduplicate against {url}: {err}; nothing was committed") from None
    return index


def _bucketed(part: int, texts: Sequence[str], numbers: Sequence[int], normalize: bool) -> list[np.ndarray]:
    """`BUCKETS` arrays of `POSITION` (hash, ``part << 32 | n``) of ``texts`` (the documents
    numbered ``numbers`` in their part), each in position order."""
    found: list[np.ndarray] = []
    base = np.uint64(part << 32)
    for i in range(0, len(texts), _HASH_BATCH):
        out = np.empty(len(texts[i : i + _HASH_BATCH]), POSITION)
        out["hash"] = hash_texts(list(texts[i : i + _HASH_BATCH]), normalize)
        out["pos"] = np.asarray(numbers[i : i + _HASH_BATCH], np.uint64) + base
        found.append(out)
    everything = np.concatenate(found) if found else np.empty(0, POSITION)
    buckets = bucket_of(everything["hash"])
    return [everything[buckets == b] for b in range(BUCKETS)]


def part_hashes(config: IngestConfig, spec: PartSpec) -> list[np.ndarray]:
    """The hashes of part ``spec.part``'s documents, by bucket, read on their own (plain Python:
    no Ray). Only a part an earlier run finished (its shards are kept, not written again) reads
    its input for them; a part being written hashes the documents it prepares (`PartDedup`).

    Args:
        config: The job.
        spec: The part.

    Returns:
        `BUCKETS` arrays of `POSITION` (hash, ``part << 32 | n``), each in position order.
        Empty documents are not hashed (they are not stored anyway).
    """
    # Only chat rendering needs the tokenizer (its template and special tokens).
    tokenizer: Any = tokenizer_of(config) if config.chat else None
    prepare = _Preparer(config, tokenizer)
    read_options = _read_options(config)
    texts: list[str] = []
    numbers: list[int] = []
    n = 0
    for seg in spec.segments:
        f = spec.files[seg.file]
        shown = redact_url(f.url)
        for raw in input_reader(f.kind).read(f, seg, read_options):
            item = prepare(raw, shown)
            if isinstance(item, _Pending):
                if item.text:
                    texts.append(item.text)
                    numbers.append(n)
                n += 1
    return _bucketed(spec.part, texts, numbers, config.dedup_normalize)


class _Seen:
    """Sorted runs of distinct hashes (merged when one is not more than twice the next), so
    that adding a part's hashes costs about its own size, and a lookup one search per run."""

    def __init__(self) -> None:
        self.runs: list[np.ndarray] = []

    def add(self, hashes: np.ndarray) -> None:
        if len(hashes):
            self.runs.append(hashes)
        while len(self.runs) > 1 and len(self.runs[-2]) <= 2 * len(self.runs[-1]):
            last = self.runs.pop()
            self.runs[-1] = np.sort(np.concatenate([self.runs[-1], last]))

    def holds(self, hashes: np.ndarray) -> np.ndarray:
        return _holds(self.runs, hashes)


def _holds(runs: Sequence[np.ndarray], hashes: np.ndarray) -> np.ndarray:
    """Which of ``hashes`` one of the sorted ``runs`` holds."""
    out = np.zeros(len(hashes), bool)
    for run in runs:
        if len(run) and len(hashes):
            at = np.minimum(np.searchsorted(run, hashes), len(run) - 1)
            out |= run[at] == hashes
    return out


class Decider:
    """Decides the buckets of ``group``, part by part in part order (plain Python: the Ray
    actor `_DeciderActor` and the inline runner hold one).

    A part's documents are decided once every earlier part's hashes arrived: a hash held by an
    earlier part (or earlier in the part) is a duplicate; a first occurrence that the dataset's
    index holds (an append) is dropped as already held. Only first occurrences are kept, so
    the decider holds its buckets' share of the job's distinct hashes, never a document.
    """

    def __init__(self, group: tuple[int, ...], location: Location | None, index: HashIndex | None) -> None:
        self.group, self.location, self.index = group, location, index
        self.olds = {
            b: load_pieces(location, index, b) if index is not None and location is not None else []
            for b in group
        }
        self.seen = {b: _Seen() for b in group}
        self.new: dict[int, list[np.ndarray]] = {b: [] for b in group}
        self.waiting: dict[int, tuple[np.ndarray, ...]] = {}
        self.decided: dict[int, np.ndarray] = {}
        self.next = 0

    def submit(self, part: int, hashes: Sequence[np.ndarray]) -> None:
        """Take part ``part``'s hashes of the group's buckets (in group order), and decide every
        part now decidable. A part sent again (a retried task) is decided once.

        Args:
            part: The part.
            hashes: Its `POSITION` array of each bucket of the group.
        """
        if part < self.next or part in self.waiting:
            return
        self.waiting[part] = tuple(hashes)
        while self.next in self.waiting:
            self.decided[self.next] = self._decide(self.waiting.pop(self.next))
            self.next += 1

    def dropped(self, part: int) -> np.ndarray | None:
        """The `DROPPED` positions of ``part`` in the group's buckets, sorted (None: not yet).

        Args:
            part: The part.

        Returns:
            The positions, or None while an earlier part's hashes are missing.
        """
        return self.decided.get(part)

    def _decide(self, hashes: tuple[np.ndarray, ...]) -> np.ndarray:
        out = []
        for bucket, arr in zip(self.group, hashes):
            ranked = arr[np.argsort(arr["hash"], kind="stable")]  # ties stay in position order
            first = np.ones(len(ranked), bool)
            first[1:] = ranked["hash"][1:] != ranked["hash"][:-1]
            keep = ranked[first]
            earlier = self.seen[bucket].holds(keep["hash"])
            held = _holds(self.olds[bucket], keep["hash"]) & ~earlier
            fresh = keep["hash"][~earlier]  # sorted and distinct
            self.seen[bucket].add(fresh)
            self.new[bucket].append(keep["hash"][~earlier & ~held])
            dropped = np.empty(int((~first).sum() + earlier.sum() + held.sum()), DROPPED)
            later = np.concatenate([ranked["pos"][~first], keep["pos"][earlier]])
            dropped["pos"][: len(later)] = later
            dropped["held"][: len(later)] = 0
            dropped["pos"][len(later) :] = keep["pos"][held]
            dropped["held"][len(later) :] = 1
            out.append(dropped)
        joined = np.concatenate(out) if out else np.empty(0, DROPPED)
        return joined[np.argsort(joined["pos"], kind="stable")]

    def finish(self) -> list[dict[str, Any]]:
        """Write the group's new hashes as index pieces (merged with the last old ones as
        `merge_plan` says) and return the group's pieces of the new index, as dicts."""
        pieces: list[dict[str, Any]] = []
        for bucket in self.group:
            pieces += [p.model_dump() for p in self._pieces(bucket)]
        return pieces

    def _pieces(self, bucket: int) -> list[HashPiece]:
        pieces = list(self.index.of_bucket(bucket)) if self.index is not None else []
        new = np.concatenate(self.new[bucket]) if self.new[bucket] else np.empty(0, HASH_DTYPE)
        if len(new) and self.location is not None:
            new = np.sort(new)
            olds = self.olds[bucket]
            merge = merge_plan([p.count for p in pieces] + [len(new)])
            if merge > 1:
                new = np.unique(np.concatenate([*olds[len(olds) - merge + 1 :], new]))
                pieces = pieces[: len(pieces) - merge + 1]
            pieces.append(write_piece(self.location, bucket, new))
        return pieces


class _DeciderActor:
    """`Decider` objects on Ray, one per job and group of buckets: parts send their hashes as soon
    as they have them, and wait (without holding a CPU) for their decision. The actor outlives
    a job: later jobs of the same driver reuse it (`start_deciders`), as they reuse Ray's
    worker processes, instead of paying a process start each."""

    def __init__(self) -> None:
        self.jobs: dict[str, Decider] = {}
        self.events: dict[tuple[str, int], asyncio.Event] = {}
        self.parts: dict[str, int] = {}
        self.pieces: dict[str, Any] = {}  # job: its pieces being written (a future)

    async def open(
        self, job: str, group: tuple[int, ...], location: Location | None, index: HashIndex | None, parts: int
    ) -> None:
        try:
            self.jobs[job] = Decider(group, location, index)
            self.parts[job] = parts
        finally:  # a part that sent its hashes first waits for this (calls of two callers are not ordered)
            self.events.setdefault((job, -1), asyncio.Event()).set()

    async def decide(
        self, job: str, part: int, wait: bool, joined: np.ndarray, counts: list[int]
    ) -> np.ndarray | None:
        if job not in self.jobs:
            await self.events.setdefault((job, -1), asyncio.Event()).wait()
        decider = self.jobs[job]  # a KeyError: `open` failed (the driver's ray.get says why)
        decider.submit(part, np.split(joined, np.cumsum(counts)[:-1]))  # one array per bucket
        for (j, k), event in list(self.events.items()):
            if j == job and k >= 0 and decider.dropped(k) is not None:
                event.set()
                del self.events[(j, k)]
        if decider.next == self.parts[job] and job not in self.pieces:
            # Every part decided: write the index pieces while the last parts are tokenized
            # (in a thread, so that the waiting parts get their answers at once).
            self.pieces[job] = asyncio.get_running_loop().run_in_executor(None, decider.finish)
        if not wait:
            return None
        while (found := decider.dropped(part)) is None:
            await self.events.setdefault((job, part), asyncio.Event()).wait()
        return found

    async def finish(self, job: str) -> list[dict[str, Any]]:
        self.events.pop((job, -1), None)
        self.parts.pop(job, None)
        decider = self.jobs.pop(job)
        writing = self.pieces.pop(job, None)
        return decider.finish() if writing is None else list(await writing)


_decider_actor = ray.remote(num_cpus=0, max_restarts=0)(_DeciderActor)
_ACTORS: dict[tuple[str, str, int], list[Any]] = {}  # (Ray session, job, count): this driver's deciders


class Deciders:
    """The job's deciders, one per group of buckets: Ray actors, or `Decider` objects in this
    process (an inline job). Part tasks receive it (it pickles as the actors' handles)."""

    def __init__(
        self,
        groups: list[tuple[int, ...]],
        actors: list[Any] | None,
        local: list[Decider] | None,
        job: str = "",
    ) -> None:
        self.groups, self.actors, self.local, self.job = groups, actors, local, job
        self.finished = False
        self.opened: list[Any] = []  # the actors' `open` calls (the driver only)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "opened": []}  # what a part task gets: the handles

    def decide(self, part: int, hashes: list[np.ndarray], wait: bool) -> list[np.ndarray]:
        """Send part ``part``'s hashes (by bucket) to each decider; with ``wait``, its decisions.

        Args:
            part: The part.
            hashes: Its `POSITION` array of every bucket.
            wait: Whether to wait for (and return) the positions dropped.

        Returns:
            The `DROPPED` arrays of each decider (empty without ``wait``).
        """
        if self.local is not None:
            for d, group in zip(self.local, self.groups):
                d.submit(part, [hashes[b] for b in group])
            if not wait:
                return []
            found = [d.dropped(part) for d in self.local]
            if any(d is None for d in found):  # the inline runner writes parts in order: never
                raise IngestError(f"part {part} was written before the parts ahead of it were hashed")
            return [d for d in found if d is not None]
        assert self.actors is not None
        refs = []
        for a, group in zip(self.actors, self.groups):
            # The group's buckets as one array and their lengths: Ray serializes each argument
            # on its own (16 arrays a call took the dedup row from 1.06-1.08x to 1.08-1.09x).
            mine = [hashes[b] for b in group]
            refs.append(a.decide.remote(self.job, part, wait, np.concatenate(mine), [len(h) for h in mine]))
        return [d for d in ray.get(refs) if d is not None]

    def finish(self, config: IngestConfig) -> HashIndex:
        """Write the new index pieces once every part is decided; the job's new index.

        Args:
            config: The job.

        Returns:
            The index of the snapshot the job commits.
        """
        if self.local is not None:
            found = [d.finish() for d in self.local]
        else:
            assert self.actors is not None
            _get(self.opened)
            found = _get([a.finish.remote(self.job) for a in self.actors])
        self.finished = True
        pieces = sorted((p for group in found for p in group), key=lambda p: p["bucket"])  # stable
        held = tuple(HashPiece.model_validate(p) for p in pieces)
        return HashIndex(normalize=config.dedup_normalize, documents=sum(p.count for p in held), pieces=held)

    def close(self) -> None:
        """After the job: a job that did not finish ends its actors (a part task still waiting
        on one then fails), and the next job starts new ones."""
        if self.finished or not self.actors:
            return
        for key, actors in list(_ACTORS.items()):
            if actors is self.actors:
                del _ACTORS[key]
        for a in self.actors:
            try:
                ray.kill(a)
            except ray.exceptions.RayError:
                pass

    def part(self, part: int, config: IngestConfig) -> PartDedup:
        """What `guideloom.workers.part.write_part` is given for part ``part``.

        Args:
            part: The part.
            config: The job.

        Returns:
            Its `PartDedup`.
        """
        return PartDedup(part, self, config)


def _get(refs: list[Any]) -> list[Any]:
    try:
        return ray.get(refs)
    except ray.exceptions.RayTaskError as err:
        if isinstance(err.cause, GuideLoomError):
            raise err.cause from None
        raise


def start_deciders(
    config: IngestConfig, parts: int, location: Location, base: HashIndex | None, inline: bool
) -> Deciders:
    """The job's deciders: in this process for an inline job, else Ray actors (the caller is
    connected), one per group of buckets and per 4 CPUs of the cluster, so that none holds every
    hash on a cluster of 8 CPUs or more (each holds its share of the distinct hashes). The
    actors are this driver's for its Ray session: a later job reuses them.

    Args:
        config: The job.
        parts: How many parts the job has.
        location: The dataset's root (index pieces are written there).
        base: The index an append deduplicates against, or None.
        inline: Whether the parts run in this process.

    Returns:
        The deciders.
    """
    if inline:
        groups = [tuple(range(BUCKETS))]
        return Deciders(groups, None, [Decider(g, location, base) for g in groups])
    # One decider per 4 CPUs: a process of its own costs a small cluster more than its share of
    # the hashes would (a decider holds 16 bytes per distinct document of its buckets).
    cpus = int(ray.cluster_resources().get("CPU", 1))
    count = max(1, min(BUCKETS, parts, cpus // 4))
    groups = [tuple(range(BUCKETS))[t::count] for t in range(count)]
    context = ray.get_runtime_context()
    key = (context.get_session_name(), context.get_job_id(), count)
    actors = _ACTORS.get(key)
    if actors is None:
        options = {"scheduling_strategy": "SPREAD"} if count > 1 else {}
        actors = _ACTORS[key] = [_decider_actor.options(**options).remote() for _ in groups]
    job = uuid.uuid4().hex
    deciders = Deciders(groups, actors, None, job)
    # Not waited for: a new actor starts while the parts read (a part's hashes wait for it).
    deciders.opened = [a.open.remote(job, g, location, base, parts) for a, g in zip(actors, groups)]
    return deciders


class PartDedup:
    """Given to a part's writer (`guideloom.workers.part.write_part`): the part's prepared
    records are hashed as they are read, their hashes sent to the deciders, and the records
    written once the part's decisions arrive (the records ahead of it were hashed by then, or
    nearly: parts start in part order). Then it is called for each document in order: True for
    those to drop, which it counts per input file."""

    def __init__(self, part: int, deciders: Deciders, config: IngestConfig) -> None:
        self.part, self.deciders, self.config = part, deciders, config
        self.drop: dict[int, bool] = {}
        self.n = 0
        self.duplicates: Counter[str] = Counter()
        self.held: Counter[str] = Counter()

    def prepared(self, records: Iterable[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """Read the part's records (each tuple's last item is the prepared one), hash its
        documents, and wait for its decisions.

        Args:
            records: The part's records as the writer reads them.

        Returns:
            The same records, in a list.
        """
        kept = list(records)
        texts: list[str] = []
        numbers: list[int] = []
        n = 0
        for record in kept:
            item = record[-1]
            if isinstance(item, _Pending):
                if item.text:
                    texts.append(item.text)
                    numbers.append(n)
                n += 1
        hashes = _bucketed(self.part, texts, numbers, self.config.dedup_normalize)
        base = self.part << 32
        for arr in self.deciders.decide(self.part, hashes, wait=True):
            for pos, held in zip(arr["pos"].tolist(), arr["held"].tolist()):
                self.drop[pos - base] = bool(held)
        return kept

    def reused(self, spec: PartSpec) -> None:
        """Send the hashes of a part an earlier run wrote (read again: its shards stay).

        Args:
            spec: The part.
        """
        self.deciders.decide(self.part, part_hashes(self.config, spec), wait=False)

    def __call__(self, url: str) -> bool:
        n, self.n = self.n, self.n + 1
        held = self.drop.get(n)
        if held is None:
            return False
        (self.held if held else self.duplicates)[url] += 1
        return True

    def counts(self) -> dict[str, Any]:
        """What the part's result keeps: ``{"duplicates": {url: n}, "already_held": {url: n}}``."""
        return {
            "duplicates": dict(sorted(self.duplicates.items())),
            "already_held": dict(sorted(self.held.items())),
        }


def record_dedup(recorded: dict[str, Any], results: list[PartResult], index: HashIndex | None) -> None:
    """Add the job's dedup counts to its ingest metadata, and the new index to the snapshot's
    metadata (only on the job's last snapshot: an earlier ``--commit-every`` step holds only
    some of the parts, and records none).

    Args:
        recorded: The metadata `guideloom.workers.results.metadata` made (changed in place).
        results: The parts' results.
        index: The index of the snapshot being committed, or None.
    """
    dup: Counter[str] = Counter()
    held: Counter[str] = Counter()
    for r in results:
        dup.update(r.get("duplicates", {}))
        held.update(r.get("already_held", {}))
    recorded["ingest"][DEDUP_KEY] = {
        "mode": "exact",
        "duplicates": sum(dup.values()),
        "already_held": sum(held.values()),
        "by_input": {u: {"duplicates": dup[u], "already_held": held[u]} for u in sorted(dup | held)},
    }
    if index is not None:
        recorded[INDEX_KEY] = json.loads(index.model_dump_json())
