"""The ingestion driver: plan, run one Ray task per part, commit the manifest last.

With ``--commit-every`` (`_Steps`) it also commits while parts run: each time the parts up to the
next commit point are complete, a snapshot of them appended on top of the job's previous one
(`Storage.commit(first_part=...)`); the last snapshot is the one a single commit would make.

Why plain Ray tasks rather than Ray Data with a datasink: a part is the unit of determinism
(its shard names and bytes depend only on the plan) and of restart (its completion record).
One task per part, with ``max_retries`` for dead workers and a bounded number in flight, maps
exactly onto ``storage.writer(part=k)``; Ray Data would re-block the records by its own
scheduling, so part contents (and so shard bytes) would depend on the cluster and the run.

The driver holds only the plan and per-part counts: memory does not grow with the input. Each
task receives only its own part's description (`guideloom.workers.part.PartSpec`), so a
task's argument does not grow with the number of input files either. Where it runs is
`guideloom.workers.connect`'s rule; how it stops, `guideloom.workers.cancellation`'s.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from typing import Any

import ray

from guideloom.errors import DatasetExistsError, GuideLoomError, IngestError, SchemaMismatchError
from guideloom.io import redact_url
from guideloom.io.stats import IOStats, io_stats, merge_stats, subtract_stats
from guideloom.manifest.totals import ingest_totals
from guideloom.types import Tokenizer
from guideloom.workers import decontam, dedup, hooks, rejects
from guideloom.workers.annotate import encode_with_spans, has_offsets
from guideloom.workers.cancellation import IngestCancelled, cancel_on_signals
from guideloom.workers.chat import chat_renderer
from guideloom.workers.config import IngestConfig
from guideloom.workers.connect import connect
from guideloom.workers.output import check_writable, open_storage, recorded_parts, remove_foreign_manifest
from guideloom.workers.part import (
    PartResult,
    PartSpec,
    _no_bos,
    part_spec,
    run_name,
    tokenizer_of,
    write_part,
)
from guideloom.workers.planning import Plan, plan_parts
from guideloom.workers.progress import Progress, make_progress
from guideloom.workers.results import METADATA_KEY, metadata, summary
from guideloom.workers.sources import NeededField, check_fields, expand_inputs
from guideloom.workers.tokenizer_check import check_append_tokenizer
from guideloom.workers.transform import check_transform

__all__ = [
    "COMMITTED_PARTS",
    "INLINE_MAX_BYTES",
    "POLL_S",
    "SPLIT_WARNING_RATIO",
    "commit_points",
    "run_job",
    "task_config",
]

POLL_S = 1.0  # how often the driver wakes to refresh live progress
SPLIT_WARNING_RATIO = 2  # note a compressed input larger than this many part sizes
# The ingest metadata key of a --commit-every step's snapshot: the job's parts it holds.
COMMITTED_PARTS = "committed_parts"
# runner="auto": a job of at most this much planned input runs in the driver's process (no Ray
# to start: a local Ray costs 4-8 s, more than tokenizing this much on one core takes).
INLINE_MAX_BYTES = 64 * 2**20


@ray.remote(num_cpus=0)
class _Tally:
    """Live counts of the parts in flight, reported from inside the tasks."""

    def __init__(self) -> None:
        self.running: dict[int, dict[str, int]] = {}

    def report(self, counts: dict[str, int]) -> None:
        self.running[counts["part"]] = counts

    def snapshot(self) -> dict[int, dict[str, int]]:
        return self.running


def _start_tally() -> Any:
    """The live-counts actor, on the driver's node (soft): losing a worker node leaves it."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = ray.get_runtime_context().get_node_id()
    strategy = NodeAffinitySchedulingStrategy(here, soft=True)
    return _Tally.options(scheduling_strategy=strategy).remote()  # type: ignore[attr-defined]


def _task(
    config: IngestConfig, spec: PartSpec, digest: str, tally: Any, threads: int = 1, dropped: Any = None
) -> PartResult:
    report: Callable[[dict[str, int]], None] | None = None
    if tally is not None:

        def report(counts: dict[str, int]) -> None:
            tally.report.remote(counts)

    _size_thread_pool(threads)
    return _write_counted(
        config, spec, digest, report, None if dropped is None else dropped.part(spec.part, config)
    )


def _write_counted(
    config: IngestConfig,
    spec: PartSpec,
    digest: str,
    report: Callable[[dict[str, int]], None] | None,
    dropper: dedup.PartDedup | None,
) -> PartResult:
    """`write_part`, with the requests it sent (a reused part's are its checks): reported, not
    recorded. What a Ray task and an inline job run for each part."""
    before = io_stats()
    result = write_part(config, spec, digest, report, dropper)
    return {**result, "io_stats": subtract_stats(io_stats(), before)}


def _preferred_order(plan: Plan, first: set[int] | frozenset[int]) -> list[int]:
    """The parts in the order they start: those in ``first`` (an earlier run recorded them:
    their work is only checks), then the rest, each group by number."""
    return sorted(range(len(plan.parts)), key=lambda k: (k not in first, k))


_write_part_task = ray.remote(_task)

TASK_CPUS = 1  # what each part task asks Ray for (`_task_options`)
CANCEL_GRACE_S = 0.5  # on an interruption, how long replies on their way may take to land


def _size_thread_pool(threads: int) -> None:
    """Size the tokenizers' Rust thread pool (rayon) before the first encode in this worker
    process: ``threads`` is the node's CPUs over the parts that run at once (`threads_per_part`).
    Unsized, every part's `encode_batch` starts a thread per core of the node, and parts that
    run side by side oversubscribe it (measured with 2 parts on 2 cores: 1.20M -> 1.62M tokens/s,
    611k -> 829k tokens per CPU second); one part alone keeps every core. A value the user set
    (RAYON_NUM_THREADS) is kept."""
    os.environ.setdefault("RAYON_NUM_THREADS", str(max(1, int(threads))))


def threads_per_part(config: IngestConfig) -> int:
    """Tokenizer threads for each part: the cluster's CPUs over the parts that run at once (Ray
    runs at most one part per CPU), at least 1."""
    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    return max(1, cpus // max(1, min(_in_flight(config), cpus)))


def _check_picklable(tokenizer: Any) -> None:
    """A tokenizer object travels to every task pickled (by Ray's cloudpickle): refuse one that
    cannot before anything starts."""
    if isinstance(tokenizer, str):
        return
    from ray import cloudpickle

    try:
        cloudpickle.dumps(tokenizer)
    except Exception as err:  # pickling raises TypeError, PicklingError, AttributeError, ...
        cls = type(tokenizer)
        raise IngestError(
            f"the tokenizer object {tokenizer!r} ({cls.__module__}.{cls.__qualname__}) cannot be "
            f"pickled ({type(err).__name__}: {err}); Ray sends it to every task. Make it "
            "picklable (keep what builds it, such as a file path, and load the rest lazily, or "
            "define __reduce__), or register a factory by name (entry point group "
            "'guideloom.tokenizers') and pass its spec"
        ) from err


def _existing(storage: Any, digest: str, config: IngestConfig) -> Any | None:
    """The manifest when this very job was already committed; refuses another dataset."""
    if not storage.exists():
        return None
    manifest = storage.manifest
    recorded = (manifest.metadata or {}).get(METADATA_KEY, {})
    if recorded.get("plan") == digest and not config.overwrite:
        if COMMITTED_PARTS in recorded:
            return None  # a --commit-every job stopped part way: it goes on (_committed_before)
        return manifest
    if config.overwrite or config.append:
        # Nothing is deleted here: the old dataset stays readable until commit() replaces its
        # manifest, and commit removes the old files after that.
        return None
    raise DatasetExistsError(
        f"{storage.url} already holds a dataset that this job did not write (other inputs, "
        "tokenizer or options): pass --overwrite to replace it, or choose another --output"
    )


def _open_output(config: IngestConfig, tokenizer: Tokenizer) -> Any:
    """The output storage; a dataset of another class or format there is refused or replaced."""
    try:
        return open_storage(config, tokenizer)
    except SchemaMismatchError as err:
        if config.append:
            raise  # names both schemas: an append must match the dataset's
        if not config.overwrite:
            raise DatasetExistsError(
                f"the output already holds a different dataset ({err}); pass --overwrite to "
                "replace it, or choose another --output"
            ) from err
    remove_foreign_manifest(config)  # hide it from readers; delete() below removes the rest
    storage = open_storage(config, tokenizer)
    storage.delete()
    return storage


def commit_points(plan: Plan, rule: tuple[str, int] | None) -> list[int]:
    """Where a job commits: after part ``p - 1`` for each ``p`` (increasing; the last is the
    number of parts). ``rule``: `IngestConfig.commit_rule` (every n parts, or every n input
    bytes of parts in part order); None commits once, at the end."""
    n = len(plan.parts)
    if rule is None:
        return [n]
    kind, amount = rule
    if kind == "parts":
        return [*range(amount, n, amount), n]
    points, since = [], 0
    for k, size in enumerate(plan.part_bytes[: n - 1]):
        since += size
        if since >= amount:
            points.append(k + 1)
            since = 0
    return [*points, n]


def _committed_before(storage: Any, digest: str, config: IngestConfig) -> int:
    """Parts of this job that an earlier, interrupted run with ``--commit-every`` committed
    (its last snapshot records how many): they are not committed again."""
    if config.overwrite or not storage.exists():
        return 0
    recorded = (storage.manifest.metadata or {}).get(METADATA_KEY, {})
    if recorded.get("plan") != digest:
        return 0
    return int(recorded.get(COMMITTED_PARTS, 0))


def _counts_before(config: IngestConfig, storage: Any, committed: int) -> tuple[int, int]:
    """The documents and tokens of the dataset this job adds to ((0, 0) for a write or an
    overwrite): the job's metadata counts the whole dataset. A job that goes on after an
    interrupted ``--commit-every`` run reads them back from what its last step recorded."""
    if config.overwrite or not storage.exists():
        return 0, 0
    manifest = storage.manifest
    if committed:
        recorded = (manifest.metadata or {}).get(METADATA_KEY, {})
        job = recorded.get("job")
        if not isinstance(job, dict):  # an earlier version's step: its counts are the job's
            return 0, 0
        return recorded["documents"] - job["documents"], recorded["tokens"] - job["tokens"]
    if not config.append:
        return 0, 0
    totals = ingest_totals(manifest, storage.snapshots, storage.current_snapshot.id)
    return totals.documents or 0, totals.tokens or 0


class _Steps:
    """Commits a job's parts in steps (``--commit-every``): each time the parts up to the next
    commit point are all complete, a snapshot of them appended on top of the job's previous
    one. The first step is the job's own kind of commit (a write, an overwrite or an append);
    the last records the job's whole metadata, as a one-shot commit does."""

    def __init__(
        self,
        config: IngestConfig,
        storage: Any,
        plan: Plan,
        digest: str,
        tokenizer: Tokenizer,
        progress: Progress,
        committed: int,
    ) -> None:
        self.config, self.storage, self.plan, self.digest = config, storage, plan, digest
        self.tokenizer, self.progress = tokenizer, progress
        self.committed = committed  # parts 0 .. committed - 1 are in a snapshot
        self.points = [p for p in commit_points(plan, config.commit_rule) if p > committed]
        self.done: set[int] = set()
        self.manifest: Any = None
        self.before = _counts_before(config, storage, committed)
        self.hash_index: Any = None  # the job's new hash index (dedup), recorded by its last step

    def part_done(self, results: list[PartResult]) -> None:
        """After each finished part: commit every step whose parts are now all complete (not
        the last: that one is committed after Ray stops, by `final`)."""
        self.done.add(results[-1]["part"])
        while len(self.points) > 1 and all(k in self.done for k in range(self.committed, self.points[0])):
            self._commit(self.points.pop(0), sorted(results, key=lambda r: r["part"]))

    def final(self, results: list[PartResult]) -> Any:
        """Commit the last step (every part is complete): the job's final snapshot."""
        return self._commit(len(self.plan.parts), results)

    def _commit(self, point: int, results: list[PartResult]) -> Any:
        n = len(self.plan.parts)
        upto = [r for r in results if r["part"] < point]
        recorded = metadata(self.config, self.plan, self.digest, self.tokenizer, upto, self.before)
        if self.config.dedup is not None:
            dedup.record_dedup(recorded, upto, self.hash_index if point == n else None)
        if point < n:
            if recorded[METADATA_KEY]["job"]["documents"] == 0:
                # nothing of this job to read yet (an append's parts that held only documents
                # the dataset has, say): the next step commits these parts too
                return None
            recorded[METADATA_KEY][COMMITTED_PARTS] = point
        elif recorded[METADATA_KEY]["documents"] == 0:
            raise IngestError(
                f"inputs {', '.join(self.config.inputs)} hold no documents (every file empty, or "
                "every record empty or bad): nothing committed"
            )
        first = self.committed
        manifest = self.storage.commit(
            num_parts=point,
            metadata=recorded,
            run=run_name(self.digest),
            append=self.config.append or first > 0,
            first_part=first,
            cleanup=point == n,  # earlier steps must not remove the attempts of parts to come
        )
        self.committed, self.manifest = point, manifest
        if point < n:
            snap = self.storage.current_snapshot
            self.progress.message(
                f"committed snapshot {snap.id}: parts 0..{point - 1} of {n} "
                f"({manifest.total_tokens:,} tokens in the dataset)"
            )
        return manifest


def _in_flight(config: IngestConfig) -> int:
    """Parts submitted at once: ``num_workers``, else twice the cluster's CPUs right now (the
    queued half is the demand an autoscaling cluster grows on; re-read as parts finish)."""
    if config.num_workers:
        return config.num_workers
    return max(2 * int(ray.cluster_resources().get("CPU", 0)), 2)


def task_config(config: IngestConfig) -> IngestConfig:
    """The config a task receives: without the input list (the task reads its PartSpec)."""
    return config.model_copy(update={"inputs": ["(planned by the driver)"]})


def _task_options(config: IngestConfig, started: bool) -> dict[str, Any]:
    """Ray options of the part tasks (``started``: this process started the local Ray)."""
    options: dict[str, Any] = {"max_retries": config.max_retries, "num_cpus": TASK_CPUS}
    if hooks.HOOKS_ENV in os.environ:  # tests only: see guideloom.workers.hooks
        present = None if started else ray.get_runtime_context().runtime_env.get("env_vars", {})
        seam = hooks.forwarded_env(present)
        if seam:
            options["runtime_env"] = {"env_vars": seam}
    return options


def _run_parts(
    config: IngestConfig,
    plan: Plan,
    digest: str,
    progress: Progress,
    results: list[PartResult],
    started: bool = False,
    on_part: Callable[[list[PartResult]], None] | None = None,
    first: set[int] | frozenset[int] = frozenset(),
    dropped: Any = None,
) -> None:
    """Run every part, appending each finished part's result to ``results`` as it ends
    (``started``: this process started the local Ray it runs on; ``on_part`` is called with
    ``results`` after each; the parts in ``first``, those an earlier run recorded, start first:
    their tasks only check them)."""
    task = _write_part_task.options(**_task_options(config, started))
    tally = _start_tally() if progress.live else None
    config_ref = ray.put(task_config(config))
    threads = threads_per_part(config)
    todo = _preferred_order(plan, first)[::-1]
    pending: dict[Any, int] = {}
    polled = time.monotonic()
    try:
        while todo or pending:
            limit = _in_flight(config)
            while todo and len(pending) < limit:
                k = todo.pop()
                pending[task.remote(config_ref, part_spec(plan, k), digest, tally, threads, dropped)] = k
            done, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
            for ref in done:
                pending.pop(ref)
                try:
                    results.append(ray.get(ref))
                except ray.exceptions.RayTaskError as err:
                    cause = err.cause
                    if isinstance(cause, GuideLoomError):
                        raise cause from None
                    raise
                progress.part_done(results[-1])
                if on_part is not None:
                    on_part(results)
            if tally is not None and time.monotonic() - polled >= POLL_S:
                polled = time.monotonic()
                try:
                    running = ray.get(tally.snapshot.remote(), timeout=30)
                except ray.exceptions.RayError:  # live counts are a nicety: go on without
                    tally = None
                    continue
                progress.running([c for k, c in running.items() if k in pending.values()])
    finally:
        if pending:
            # A task cancelled while its reply is on its way makes Ray abort the driver ("Tried
            # to complete task that was not pending": the cancel races the reply's callback;
            # ray-project/ray#54798). An interruption often comes just as a part ends (`ray job
            # stop` after a part shows up): such replies get CANCEL_GRACE_S to land, and only
            # the tasks still running are cancelled, not forcibly (force=True widens the race).
            landed, _ = ray.wait(list(pending), num_returns=len(pending), timeout=CANCEL_GRACE_S)
            for ref in set(pending) - set(landed):
                ray.cancel(ref, force=False)
        if tally is not None:
            try:
                ray.kill(tally)
            except ray.exceptions.RayError:
                pass


def runs_inline(config: IngestConfig, plan: Plan) -> tuple[bool, str]:
    """Whether the parts run in this process (``runner``; see `IngestConfig`), and why."""
    if config.runner != "auto":
        return config.runner == "inline", f"--runner {config.runner}"
    if config.ray_address or os.environ.get("RAY_ADDRESS"):
        return False, "a Ray cluster is named"
    if ray.is_initialized():
        return False, "Ray is running in this process"
    planned = sum(plan.part_bytes)
    if planned <= INLINE_MAX_BYTES:
        return True, f"a small job ({planned / 2**20:.1f} MiB <= {INLINE_MAX_BYTES // 2**20} MiB)"
    if config.num_workers == 1:
        return True, "one worker"
    return False, f"{planned / 2**20:.0f} MiB of input on up to {config.num_workers or 'all'} workers"


def _run_parts_inline(
    config: IngestConfig,
    plan: Plan,
    digest: str,
    progress: Progress,
    results: list[PartResult],
    on_part: Callable[[list[PartResult]], None] | None = None,
    first: set[int] | frozenset[int] = frozenset(),
    dropped: dedup.Deciders | None = None,
) -> None:
    """`_run_parts` in this process: the same parts, written by the same function in the same
    order of preference, one after another. The tokenizer keeps its thread pool's default (every
    core), as the one part running has the machine to itself."""
    report = (lambda counts: progress.running([counts])) if progress.live else None
    as_task = task_config(config)
    for k in _preferred_order(plan, first):
        dropper = None if dropped is None else dropped.part(k, as_task)
        results.append(_write_counted(as_task, part_spec(plan, k), digest, report, dropper))
        progress.part_done(results[-1])
        if on_part is not None:
            on_part(results)


def _compressed_notes(plan: Plan, part_size: int) -> list[str]:
    notes = []
    for f in plan.files:
        if f.compression and f.size > SPLIT_WARNING_RATIO * part_size:
            notes.append(
                f"note: {redact_url(f.url)} ({f.size / 2**20:.1f} MiB, {f.compression}) cannot be "
                f"split by byte offset: one part reads all of it while --part-size is "
                f"{part_size / 2**20:.1f} MiB; split it into several files to use more workers"
            )
    return notes


def _check_job_kinds(config: IngestConfig, tokenizer: Tokenizer) -> dict[str, Any]:
    """Check, before anything starts, what chat, --bos, spans and a transform need; return what
    the plan digest adds for them (the chat template's hash)."""
    extra: dict[str, Any] = {}
    check_transform(config.transform)
    if config.bos and getattr(tokenizer, "bos_id", None) is None:
        raise IngestError(_no_bos(tokenizer))
    if config.chat:
        renderer = chat_renderer(config.chat_template, tokenizer)
        extra["chat_template_sha256"] = hashlib.sha256(renderer.source.encode()).hexdigest()
    if config.spans_field is not None and not has_offsets(tokenizer):
        encode_with_spans(tokenizer, [], [])  # the IngestError that says what is missing
    return extra


def _check_chat_files(files: list[Any]) -> None:
    for f in files:
        if f.kind not in ("jsonl", "parquet"):
            raise IngestError(
                f"input {redact_url(f.url)}: --input-format chat reads JSON Lines or Parquet "
                f"records holding a list of messages, and this file is {f.kind}: name .jsonl or "
                ".parquet files"
            )


def _needed_fields(config: IngestConfig) -> list[NeededField]:
    """The fields every record of this job must hold (none where a transform makes the record:
    it may add them)."""
    if config.transform is not None:
        return []
    if config.chat:
        needed = [NeededField(config.messages_field, "messages field", "--messages-field", "list")]
    else:
        needed = [NeededField(config.text_field, "text field", "--text-field")]
    needed += [
        NeededField(
            name,
            "passthrough field",
            "--passthrough",
            drop=True,
            also=f"or give records without it a value: --passthrough-default {name}=VALUE",
        )  # fmt: skip
        for name in config.passthrough
        if name not in config.passthrough_defaults
    ]
    needed += [NeededField(name, "meta field", "--meta-field", drop=True) for name in config.meta_fields]
    return needed


def run_job(config: IngestConfig) -> tuple[Any, Any, bool, IOStats]:
    """Plan, write every part on Ray and commit: (manifest, storage, whether the output already
    held this job's dataset, so that nothing ran, and the requests the job sent per store: the
    driver's and every task's, as `guideloom.io.io_stats` counts them).

    Raises:
        IngestError: Bad input or options (see `guideloom.workers.ingest.ingest_dataset`).
        DatasetExistsError: The output holds a dataset this job did not write.
        IngestCancelled: Interrupted; the finished parts are kept.
    """
    counted = io_stats()
    _check_picklable(config.tokenizer)
    tokenizer = tokenizer_of(config)
    if config.eos and tokenizer.eos_id is None:
        raise IngestError(
            f"tokenizer {tokenizer.spec} has no end-of-document token: name one with "
            "--eos-token, or pass --no-eos"
        )
    extra = _check_job_kinds(config, tokenizer)
    config, eval_set = decontam.prepare(config)  # reads the eval set; the tasks get its index
    extra.update(eval_set)
    files = expand_inputs(config.inputs, config.reader_format, config.input_storage_options)
    if config.chat:
        _check_chat_files(files)
    check_fields(
        files,
        _needed_fields(config),
        config.input_storage_options,
        first_fails=config.on_bad_record == "fail",
    )
    plan = plan_parts(
        files,
        part_size=config.part_size,
        text_per_line=config.text_per_line,
        storage_options=config.input_storage_options,
    )
    digest = plan.digest({**config.identity(), "tokenizer": tokenizer.describe(), **extra})
    config = rejects.with_default(config, digest)  # a decontaminated job names what it dropped
    storage = _open_output(config, tokenizer)
    check_append_tokenizer(config, storage, tokenizer)
    done = _existing(storage, digest, config)
    progress = make_progress(config.progress, len(plan.parts), sum(plan.part_bytes))
    if done is not None:
        progress.message(f"{storage.url} already holds this job's dataset: nothing to do")
        progress.close()
        return done, storage, True, subtract_stats(io_stats(), counted)
    for note in _compressed_notes(plan, config.part_size):
        progress.message(note)

    check_writable(config, storage.url)
    base = dedup.base_index(config, storage) if config.dedup is not None else None
    results: list[PartResult] = []
    steps = _Steps(
        config, storage, plan, digest, tokenizer, progress, _committed_before(storage, digest, config)
    )
    if steps.committed:
        progress.message(
            f"{storage.url} holds parts 0..{steps.committed - 1} of this job (committed by an "
            "earlier run): committing the rest on top of them"
        )
    recorded = recorded_parts(config, run_name(digest)) & set(range(len(plan.parts)))
    inline, why = runs_inline(config, plan)
    if inline:
        started = False
        progress.message(
            f"running {len(plan.parts)} part(s) in this process, no Ray ({why}); "
            "--runner ray runs them on Ray"
        )
    else:
        started = connect(config, progress.message)
    restore = cancel_on_signals()
    dropped: dedup.Deciders | None = None
    try:
        if config.dedup is not None:  # parts hash as they read; deciders decide in part order
            dropped = dedup.start_deciders(config, len(plan.parts), storage.location, base, inline)
        progress.start(len(recorded))
        first = recorded if dropped is None else frozenset()  # dedup: parts start in part order
        if inline:
            _run_parts_inline(config, plan, digest, progress, results, steps.part_done, first, dropped)
        else:
            _run_parts(config, plan, digest, progress, results, started, steps.part_done, first, dropped)
        if dropped is not None:
            steps.hash_index = dropped.finish(config)
    except KeyboardInterrupt:
        raise IngestCancelled(len(results), len(plan.parts)) from None
    except rejects.RejectedRecordError as err:
        rejects.on_failure(config, err)  # --rejects: the record that stopped the job
        raise
    finally:
        progress.close()
        if dropped is not None:
            dropped.close()
        if started:
            ray.shutdown()
        restore()
    results.sort(key=lambda r: r["part"])
    reused = sum(bool(r.get("reused")) for r in results)
    if reused:
        progress.message(f"reused {reused} of {len(results)} parts from an earlier run")
    rejects.finish(config, plan.files, results, run_name(digest), progress.message)
    manifest = steps.final(results)
    requests = merge_stats([subtract_stats(io_stats(), counted), *(r.get("io_stats", {}) for r in results)])
    progress.message(
        summary(manifest, storage.url, storage_options=bool(config.storage_options), requests=requests)
    )
    return manifest, storage, False, requests
