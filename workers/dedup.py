"""Exact deduplication of an ingestion job on Ray (``dedup="exact"``, ``--dedup exact``).

A document is dropped when its text (after the transform; the rendered conversation for chat;
normalised first with ``dedup_normalize``) has the same 128-bit hash as an earlier document of
the job, or as a document the dataset already holds (an append). *Earlier* is the ingestion
order: part by part, and within a part, record by record. So the documents kept, and the
shard bytes, are the same on any number of workers and nodes.

Three steps, before the parts are written:

1. **Hash** (one Ray task per part, in parallel): the part's records are read and prepared
   exactly as its writer will (`guideloom.workers.part`), and each document's hash is sent, with
   its position ``part << 32 | n`` (n: the document's number in the part), to the bucket of its
   first byte (`guideloom.manifest.hashindex.BUCKETS` buckets, one object each).
2. **Decide** (one Ray task per bucket, or per few buckets when the job has fewer parts than
   buckets): the bucket's hashes from every part, sorted stably by
   hash, so that the first of equal hashes is the earliest position; every later one is a
   duplicate. A first occurrence whose hash the dataset's index already holds (an append) is
   dropped too. The task writes the bucket's new hashes as an index piece and returns the
   positions dropped. No task holds more than its buckets' share of the hashes (1/16 of them
   with 16 parts or more); the driver holds only object references and the pieces'
   descriptions.
3. **Write**: each part task receives the positions dropped (only the duplicates) and skips
   those documents while writing (`Dropper`), counting them per input file.

The hash pass reads each part a second time: its cost is measured by ``make bench``
(benchmarks/dedup_bench.py). A transform must be deterministic (the same record gives the same
result) for the two reads to agree, as it must for a retried part to write the same bytes.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
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
    "Dropper",
    "HashPass",
    "POSITION",
    "base_index",
    "part_hashes",
    "record_dedup",
    "run_hash_pass",
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


def part_hashes(config: IngestConfig, spec: PartSpec) -> list[np.ndarray]:
    """The hashes of part ``spec.part``'s documents, by bucket (plain Python: no Ray).

    Args:
        config: The job.
        spec: The part.

    Returns:
        `BUCKETS` arrays of `POSITION` (hash, ``part << 32 | n``), each in position order.
        Empty documents are not hashed (they are not stored anyway).
    """
    # Only chat rendering needs the tokenizer (its template and special tokens): loading one
    # (a vocabulary file) would cost a fresh worker process more than hashing its part.
    tokenizer: Any = tokenizer_of(config) if config.chat else None
    prepare = _Preparer(config, tokenizer)
    read_options = _read_options(config)
    texts: list[str] = []
    numbers: list[int] = []
    found: list[np.ndarray] = []
    n = 0
    base = spec.part << 32

    def flush() -> None:
        if texts:
            out = np.empty(len(texts), POSITION)
            out["hash"] = hash_texts(texts, config.dedup_normalize)
            out["pos"] = np.asarray(numbers, np.uint64) + np.uint64(base)
            found.append(out)
            texts.clear()
            numbers.clear()

    for seg in spec.segments:
        f = spec.files[seg.file]
        shown = redact_url(f.url)
        for raw in input_reader(f.kind).read(f, seg, read_options):
            item = prepare(raw, shown)
            if isinstance(item, _Pending):
                if item.text:
                    texts.append(item.text)
                    numbers.append(n)
                    if len(texts) >= _HASH_BATCH:
                        flush()
                n += 1
    flush()
    everything = np.concatenate(found) if found else np.empty(0, POSITION)
    buckets = bucket_of(everything["hash"])
    return [everything[buckets == b] for b in range(BUCKETS)]


def decide_bucket(
    bucket: int,
    location: Location | None,
    index: HashIndex | None,
    *hashes: np.ndarray,
) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """Decide one bucket: the positions dropped and the bucket's index pieces afterwards.

    Args:
        bucket: The bucket.
        location: The dataset's root (where new pieces are written); None writes none.
        index: The index of the snapshot an append adds to, or None.
        *hashes: Every part's `POSITION` array of this bucket, in part order.

    Returns:
        `DROPPED` positions (``held``: 1 when the dataset already held it, 0 when an earlier
        document of the job has it), sorted; and the bucket's pieces (as dicts) of the new index.
    """
    joined = np.concatenate(hashes) if hashes else np.empty(0, POSITION)
    order = np.argsort(joined["hash"], kind="stable")  # ties stay in position order
    ranked = joined[order]
    first = np.ones(len(ranked), bool)
    first[1:] = ranked["hash"][1:] != ranked["hash"][:-1]
    keep = ranked[first]
    olds = load_pieces(location, index, bucket) if (index is not None and location is not None) else []
    held = np.zeros(len(keep), bool)
    for old in olds:
        if len(old):
            at = np.minimum(np.searchsorted(old, keep["hash"]), len(old) - 1)
            held |= old[at] == keep["hash"]
    dropped = np.empty(int((~first).sum() + held.sum()), DROPPED)
    later = ranked["pos"][~first]
    dropped["pos"][: len(later)] = later
    dropped["held"][: len(later)] = 0
    dropped["pos"][len(later) :] = keep["pos"][held]
    dropped["held"][len(later) :] = 1
    dropped = dropped[np.argsort(dropped["pos"], kind="stable")]
    pieces = list(index.of_bucket(bucket)) if index is not None else []
    new = keep["hash"][~held]
    if len(new) and location is not None:
        merge = merge_plan([p.count for p in pieces] + [len(new)])
        if merge > 1:
            new = np.unique(np.concatenate([*olds[len(olds) - merge + 1 :], new]))
            pieces = pieces[: len(pieces) - merge + 1]
        pieces.append(write_piece(location, bucket, new))
    return dropped, [p.model_dump() for p in pieces]


def decide_buckets(
    group: tuple[int, ...],
    parts: int,
    location: Location | None,
    index: HashIndex | None,
    *hashes: np.ndarray,
) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """`decide_bucket` for each bucket of ``group`` (one task decides a few buckets when a job
    has few parts: a task per bucket would cost more than the deciding).

    Args:
        group: The buckets.
        parts: How many parts the job has.
        location: The dataset's root, or None.
        index: The index of the snapshot an append adds to, or None.
        *hashes: For each bucket of ``group`` in turn, every part's array of it, in part order.

    Returns:
        The positions dropped in all of them, sorted, and their pieces.
    """
    dropped, pieces = [], []
    for j, bucket in enumerate(group):
        d, p = decide_bucket(bucket, location, index, *hashes[j * parts : (j + 1) * parts])
        dropped.append(d)
        pieces += p
    joined = np.concatenate(dropped) if dropped else np.empty(0, DROPPED)
    return joined[np.argsort(joined["pos"], kind="stable")], pieces


_hash_task = ray.remote(num_cpus=1, num_returns=BUCKETS)(part_hashes)
_decide_task = ray.remote(num_cpus=1, num_returns=2)(decide_buckets)


class HashPass:
    """What the hash and decide steps leave: the references of each bucket's dropped positions
    (for the part tasks) and the job's new index."""

    def __init__(self, dropped: list[Any], index: HashIndex | None) -> None:
        self.dropped = dropped
        self.index = index


def run_hash_pass(
    config: IngestConfig,
    specs: Sequence[PartSpec],
    location: Location,
    base: HashIndex | None,
    max_retries: int = 3,
) -> HashPass:
    """Run the hash and decide steps on Ray (the caller is connected).

    Args:
        config: The job (as the tasks receive it).
        specs: Every part.
        location: The dataset's root (index pieces are written there).
        base: The index an append deduplicates against, or None.
        max_retries: Retries of a task whose worker died.

    Returns:
        The dropped positions' references and the new index.
    """
    config_ref = ray.put(config)
    # num_returns=BUCKETS: each call gives one reference per bucket (typed as one by Ray's stubs).
    by_part: list[Any] = [
        _hash_task.options(max_retries=max_retries).remote(config_ref, spec) for spec in specs
    ]
    tasks = max(1, min(BUCKETS, len(specs)))  # each decides BUCKETS / tasks of the hashes
    groups = [tuple(range(BUCKETS))[t::tasks] for t in range(tasks)]
    decided: list[Any] = [
        _decide_task.options(max_retries=max_retries).remote(
            group, len(specs), location, base, *(refs[b] for b in group for refs in by_part)
        )
        for group in groups
    ]
    dropped = [d for d, _ in decided]
    try:
        piece_lists = ray.get([p for _, p in decided])
    except ray.exceptions.RayTaskError as err:
        if isinstance(err.cause, GuideLoomError):
            raise err.cause from None
        raise
    return _pass_of(config, dropped, [p for found in piece_lists for p in found])


def _pass_of(config: IngestConfig, dropped: list[Any], pieces: list[dict[str, Any]]) -> HashPass:
    """The `HashPass` of the decide steps' dropped positions and index pieces (as dicts)."""
    held = tuple(HashPiece.model_validate(p) for p in pieces)
    index = HashIndex(normalize=config.dedup_normalize, documents=sum(p.count for p in held), pieces=held)
    return HashPass(dropped, index)


def run_hash_pass_here(
    config: IngestConfig,
    specs: Sequence[PartSpec],
    location: Location,
    base: HashIndex | None,
) -> HashPass:
    """`run_hash_pass` in this process (an inline job, `guideloom.workers.driver.runs_inline`):
    the same steps one after another, so the same documents are dropped.

    Args:
        config: The job (as the tasks receive it).
        specs: Every part.
        location: The dataset's root (index pieces are written there).
        base: The index an append deduplicates against, or None.

    Returns:
        The dropped positions (one array, for `Dropper`) and the new index.
    """
    by_part = [part_hashes(config, spec) for spec in specs]
    everything = tuple(range(BUCKETS))
    dropped, found = decide_buckets(
        everything, len(specs), location, base, *(hashes[b] for b in everything for hashes in by_part)
    )
    return _pass_of(config, [dropped], found)


class Dropper:
    """Called by a part's writer for each document in order (`guideloom.workers.part`): True
    for those to drop, which it counts per input file."""

    def __init__(self, part: int, dropped: Sequence[np.ndarray]) -> None:
        lo, hi = np.uint64(part << 32), np.uint64((part + 1) << 32)
        self.drop: dict[int, bool] = {}
        for arr in dropped:
            a, b = np.searchsorted(arr["pos"], [lo, hi])
            for pos, held in zip(arr["pos"][a:b].tolist(), arr["held"][a:b].tolist()):
                self.drop[pos - (part << 32)] = bool(held)
        self.n = 0
        self.duplicates: Counter[str] = Counter()
        self.held: Counter[str] = Counter()

    @classmethod
    def of_refs(cls, part: int, refs: list[Any] | None) -> Dropper | None:
        """The dropper of a part task given the decide tasks' references (None: no dedup).

        Args:
            part: The part.
            refs: The references of every bucket's dropped positions, or None.

        Returns:
            The dropper, or None.
        """
        return None if refs is None else cls(part, ray.get(refs))

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
