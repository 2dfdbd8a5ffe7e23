"""The ingestion driver: plan, run one Ray task per part, commit the manifest last.

Why plain Ray tasks rather than Ray Data with a datasink: a part is the unit of determinism
(its shard names and bytes depend only on the plan) and of restart (``storage.part_complete``).
One task per part, with ``max_retries`` for dead workers and a bounded number in flight, maps
exactly onto ``storage.writer(part=k)``; Ray Data would re-block the records by its own
scheduling, so part contents (and so shard bytes) would depend on the cluster and the run.

The driver holds only the plan and per-part counts: memory does not grow with the input. Each
task receives only its own part's description (`guideloom.workers.part.PartSpec`), so a
task's argument does not grow with the number of input files either.

Where it runs (one rule): on the cluster named by ``ray_address`` or ``RAY_ADDRESS`` (set by ``ray
job submit``), else on a local Ray it starts itself (``address="local"``), never on some other
cluster that happens to run on the machine. It says which on stderr.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray

from guideloom.errors import DatasetExistsError, GuideLoomError, IngestError, SchemaMismatchError
from guideloom.io import redact_text, redact_url
from guideloom.storage.opening import opening_code
from guideloom.workers.config import IngestConfig, load_job_file, validate_config
from guideloom.workers.output import (
    check_writable,
    open_storage,
    remove_foreign_manifest,
    remove_sidecars,
)
from guideloom.workers.part import PartResult, PartSpec, part_spec, run_name, write_part
from guideloom.workers.planning import Plan, plan_parts
from guideloom.workers.progress import Progress, make_progress
from guideloom.workers.sources import expand_inputs
from guideloom.workers.tokenizer import load_tokenizer

__all__ = [
    "IngestCancelled",
    "IngestResult",
    "METADATA_KEY",
    "ingest_dataset",
    "open_code",
    "run_ingest",
    "summary",
]

METADATA_KEY = "ingest"
HOOKS_ENV = "GUIDELOOM_INGEST_TEST_HOOKS"  # JSON; tests only (crash a worker, slow parts down)
METADATA_VERSION = 2
CONNECT_TIMEOUT_S = 5.0  # a cluster address that does not answer within this is an error
POLL_S = 1.0  # how often the driver wakes to refresh live progress
SPLIT_WARNING_RATIO = 2  # note a compressed input larger than this many part sizes


class IngestCancelled(KeyboardInterrupt):
    """The job was interrupted (Ctrl-C, SIGTERM from ``ray job stop``); in-flight parts were
    cancelled. ``written`` parts of ``total`` are kept; a re-run of the same job redoes only the
    others. A subclass of ``KeyboardInterrupt``, so ``except Exception`` does not swallow it.

    Attributes:
        written: Parts whose completion record was written before the interruption.
        total: Parts of the job's plan.
    """

    def __init__(self, written: int, total: int) -> None:
        """Raised by `ingest_dataset`; there is no need to build one yourself.

        Args:
            written: Parts written and kept.
            total: Parts of the job's plan.
        """
        self.written, self.total = written, total
        super().__init__(
            f"interrupted: {written} of {total} parts are written and kept; run the same command "
            f"again to finish the other {total - written} (nothing is committed until all are)"
        )

    def __str__(self) -> str:
        return str(self.args[0])


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


def _task(config: IngestConfig, spec: PartSpec, digest: str, hooks: dict[str, Any], tally: Any) -> PartResult:
    report: Callable[[dict[str, int]], None] | None = None
    if tally is not None:

        def report(counts: dict[str, int]) -> None:
            tally.report.remote(counts)

    return write_part(config, spec, digest, hooks, report)


_write_part_task = ray.remote(_task)


def _coerce(config: IngestConfig | dict[str, Any] | str | Path) -> IngestConfig:
    if isinstance(config, IngestConfig):
        return config
    if isinstance(config, dict):
        return validate_config(config)
    return load_job_file(config)


# -- where to run ----------------------------------------------------------------------------


def _host_port(address: str) -> tuple[str, int] | None:
    """``host:port`` of a GCS (or ``ray://``) address; None for ``auto`` or an unparsable one."""
    if address.startswith("ray://"):
        address = address[len("ray://") :]
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


def _resolve_auto() -> str:
    """What ``auto`` means here: the address in the session file of the last ``ray start`` on
    this machine (never "any Ray process found running", Ray's legacy fallback)."""
    from ray._common.utils import get_default_ray_temp_dir

    path = Path(get_default_ray_temp_dir()) / "ray_current_cluster"
    try:
        address = path.read_text().strip()
    except OSError:
        address = ""
    if not address:
        raise IngestError(
            f"--ray-address auto: no running cluster recorded in {path} (no `ray start` here): "
            "give the cluster's address (host:6379), or drop --ray-address to run on a local Ray"
        )
    return address


def _check_reachable(address: str, source: str) -> None:
    """Fail fast (``CONNECT_TIMEOUT_S``) when nothing listens at the cluster address."""
    local_hint = "unset RAY_ADDRESS and drop --ray-address to run on a local Ray that guideloom starts itself"
    if address.startswith(("http://", "https://")):
        raise IngestError(
            f"{source} {address} is a dashboard (Jobs API) address: submit the command with "
            f"`ray job submit --address {address} -- guideloom ingest ...`, or give the cluster's "
            f"GCS address (host:6379); or {local_hint}"
        )
    target = _host_port(address)
    if target is None:
        return
    try:
        socket.create_connection(target, timeout=CONNECT_TIMEOUT_S).close()
    except OSError as err:
        raise IngestError(
            f"no Ray cluster answers at {target[0]}:{target[1]} ({source} {address}): "
            f"{type(err).__name__}: {err}. Start the cluster or fix the address; or {local_hint}"
        ) from None


def _connect(config: IngestConfig, say: Callable[[str], None]) -> bool:
    """Connect to Ray; True when this call started a local Ray (and so must shut it down)."""
    if ray.is_initialized():
        return False
    if config.ray_address:
        address, source = config.ray_address, "--ray-address"
    else:
        address, source = os.environ.get("RAY_ADDRESS", ""), "RAY_ADDRESS"
    if address:
        if address == "auto":
            address, source = _resolve_auto(), f"{source} auto"
        _check_reachable(address, source)
        try:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise IngestError(
                f"cannot join the Ray cluster at {address} ({source}): {err}. A driver must run "
                "on a node of the cluster: submit it with `ray job submit`; or unset "
                "RAY_ADDRESS and drop --ray-address to run on a local Ray"
            ) from None
        say(
            f"running on the Ray cluster at {address} ({source}; "
            f"{int(ray.cluster_resources().get('CPU', 0))} CPUs)"
        )
        return False
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(
        address="local",
        num_cpus=config.num_workers,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
    )
    say(
        f"started a local Ray ({int(ray.cluster_resources().get('CPU', 0))} CPUs); "
        "--ray-address or RAY_ADDRESS runs on a cluster instead"
    )
    return True


# -- the job ---------------------------------------------------------------------------------


def _existing(storage: Any, digest: str, config: IngestConfig) -> Any | None:
    """The manifest when this very job was already committed; refuses another dataset."""
    if not storage.exists():
        return None
    manifest = storage.manifest
    recorded = (manifest.metadata or {}).get(METADATA_KEY, {}).get("plan")
    if recorded == digest and not config.overwrite:
        return manifest
    if config.overwrite:
        # Nothing is deleted here: the old dataset stays readable until commit() replaces its
        # manifest, and commit removes the old files after that.
        return None
    raise DatasetExistsError(
        f"{storage.url} already holds a dataset that this job did not write (other inputs, "
        "tokenizer or options): pass --overwrite to replace it, or choose another --output"
    )


def _open_output(config: IngestConfig, tokenizer: Any) -> Any:
    """The output storage; a dataset of another class or format there is refused or replaced."""
    try:
        return open_storage(config, tokenizer)
    except SchemaMismatchError as err:
        if not config.overwrite:
            raise DatasetExistsError(
                f"the output already holds a different dataset ({err}); pass --overwrite to "
                "replace it, or choose another --output"
            ) from err
    remove_foreign_manifest(config)  # hide it from readers; delete() below removes the rest
    storage = open_storage(config, tokenizer)
    storage.delete()
    return storage


def _in_flight(config: IngestConfig) -> int:
    """Parts submitted at once: ``num_workers``, else twice the cluster's CPUs right now (the
    queued half is the demand an autoscaling cluster grows on; re-read as parts finish)."""
    if config.num_workers:
        return config.num_workers
    return max(2 * int(ray.cluster_resources().get("CPU", 0)), 2)


def task_config(config: IngestConfig) -> IngestConfig:
    """The config a task receives: without the input list (the task reads its PartSpec)."""
    return config.model_copy(update={"inputs": ["(planned by the driver)"]})


def _run_parts(
    config: IngestConfig, plan: Plan, digest: str, progress: Progress, results: list[PartResult]
) -> None:
    """Run every part, appending each finished part's result to ``results`` as it ends."""
    hooks = json.loads(os.environ.get(HOOKS_ENV, "{}"))
    task = _write_part_task.options(max_retries=config.max_retries, num_cpus=1)
    tally = _start_tally() if progress.live else None
    config_ref = ray.put(task_config(config))
    todo = list(range(len(plan.parts)))[::-1]
    pending: dict[Any, int] = {}
    polled = time.monotonic()
    try:
        while todo or pending:
            limit = _in_flight(config)
            while todo and len(pending) < limit:
                k = todo.pop()
                pending[task.remote(config_ref, part_spec(plan, k), digest, hooks, tally)] = k
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
            if tally is not None and time.monotonic() - polled >= POLL_S:
                polled = time.monotonic()
                try:
                    running = ray.get(tally.snapshot.remote(), timeout=30)
                except ray.exceptions.RayError:  # live counts are a nicety: go on without
                    tally = None
                    continue
                progress.running([c for k, c in running.items() if k in pending.values()])
    finally:
        for ref in pending:
            # Not force=True: a force-cancelled task whose reply is already on its way makes
            # Ray 2.60 abort the driver ("Tried to complete task that was not pending").
            ray.cancel(ref, force=False)
        if tally is not None:
            try:
                ray.kill(tally)
            except ray.exceptions.RayError:
                pass


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _cancel_on_signals() -> Callable[[], None]:
    """SIGINT and SIGTERM (``ray job stop``) raise KeyboardInterrupt in the driver, so that the
    parts in flight are cancelled cleanly. Installed after ``ray.init``, whose crash handlers
    would otherwise take SIGTERM; returns the function that restores the previous handlers."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_interrupt)

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)

    return restore


MAX_RECORDED_INPUTS = 16  # input patterns kept verbatim in the manifest's ingest metadata


def _digest_of_files(plan: Plan) -> str:
    h = hashlib.sha256()
    for f in plan.files:
        h.update(f"{f.url}\t{f.size}\n".encode())
    return h.hexdigest()


def _metadata(
    config: IngestConfig, plan: Plan, digest: str, tokenizer: Any, results: list[PartResult]
) -> dict[str, Any]:
    bad: dict[str, Counter[str]] = {}
    empty: Counter[str] = Counter()
    for r in results:
        empty.update(r["empty_documents"])
        for url, counts in r["bad_records"].items():
            bad.setdefault(url, Counter()).update(counts)
    return {
        METADATA_KEY: {
            "version": METADATA_VERSION,
            "plan": digest,
            "tokenizer": tokenizer.describe(),
            "options": config.identity(),
            "inputs": {
                # The inputs as given (globs, directories or files), at most a few of them: an
                # explicit list of 100k files is its count, bytes and digest, not 100k entries.
                "patterns": [redact_url(p) for p in config.inputs[:MAX_RECORDED_INPUTS]],
                "patterns_given": len(config.inputs),
                "files": len(plan.files),
                "bytes": sum(f.size for f in plan.files),
                "sha256": _digest_of_files(plan),
            },
            "empty_files": sum(f.size == 0 for f in plan.files),
            "parts": len(plan.parts),
            "documents": sum(r["documents"] for r in results),
            "tokens": sum(r["tokens"] for r in results),
            "empty_documents": dict(sorted(empty.items())),
            "bad_records": {u: dict(sorted(c.items())) for u, c in sorted(bad.items())},
            "bad_records_total": sum(sum(c.values()) for c in bad.values()),
        }
    }


def open_code(manifest: Any, url: str, *, storage_options: bool = False) -> str:
    """The Python lines that open the dataset, from the storage class and format the manifest
    records (the schema is never guessed from the files); the same lines ``guideloom inspect``
    prints (`guideloom.storage.opening.opening_code`)."""
    return opening_code(url, manifest, storage_options=storage_options)


def summary(manifest: Any, url: str | None = None, *, storage_options: bool = False) -> str:
    """A few lines on what a committed ingestion wrote, then the Python lines that open it."""
    meta = manifest.metadata[METADATA_KEY]
    tok = meta["tokenizer"]
    lines = [
        f"committed {len(manifest.shards)} shards, {manifest.total_bytes:,} bytes: "
        f"{meta['documents']:,} documents, {meta['tokens']:,} tokens in {meta['parts']} parts",
        f"tokenizer {tok['spec']} (vocabulary {tok['vocab_size']:,}, eos {tok['eos_id']})",
    ]
    empty = sum(meta["empty_documents"].values())
    empty_files = meta["empty_files"]
    if not isinstance(empty_files, int):  # metadata version 1 listed them
        empty_files = len(empty_files)
    if empty or empty_files:
        lines.append(f"empty documents skipped: {empty}; empty files: {empty_files}")
    if meta["bad_records_total"]:
        lines.append(f"bad records skipped: {meta['bad_records_total']}")
        for where, counts in meta["bad_records"].items():
            reasons = ", ".join(f"{n} {reason}" for reason, n in counts.items())
            lines.append(f"  {where}: {reasons}")
    if url is not None:
        lines.append("open it with:")
        lines += [
            "  " + line for line in open_code(manifest, url, storage_options=storage_options).splitlines()
        ]
    return "\n".join(lines)


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


def run_ingest(config: IngestConfig | dict[str, Any] | str | Path) -> Any:
    """Ingest the job (a config, a dict of options or a YAML job file path); return the manifest.

    Re-running an interrupted job redoes only the parts without a valid completion record; re-
    running a committed job returns its manifest without doing anything. An interruption
    (KeyboardInterrupt) cancels the parts in flight and raises `IngestCancelled`.
    """
    return _ingest(_coerce(config))[0]


def _ingest(config: IngestConfig) -> tuple[Any, Any, bool]:
    """(manifest, storage, whether it was committed before this call)."""
    try:
        return _ingest_unsafe(config)
    except GuideLoomError as err:  # no credentials from input URLs in any message
        message = redact_text(str(err), list(config.inputs))
        if message != str(err):
            err.args = (message,)
        raise


def _ingest_unsafe(config: IngestConfig) -> tuple[Any, Any, bool]:
    tokenizer = load_tokenizer(
        config.tokenizer, eos_token=config.eos_token, storage_options=config.input_storage_options
    )
    if config.eos and tokenizer.eos_id is None:
        raise IngestError(
            f"tokenizer {tokenizer.spec} has no end-of-document token: name one with "
            "--eos-token, or pass --no-eos"
        )
    files = expand_inputs(config.inputs, config.input_format, config.input_storage_options)
    plan = plan_parts(
        files,
        part_size=config.part_size,
        text_per_line=config.text_per_line,
        storage_options=config.input_storage_options,
    )
    digest = plan.digest({**config.identity(), "tokenizer": tokenizer.describe()})
    storage = _open_output(config, tokenizer)
    done = _existing(storage, digest, config)
    progress = make_progress(config.progress, len(plan.parts), sum(plan.part_bytes))
    if done is not None:
        progress.message(f"{storage.url} already holds this job's dataset: nothing to do")
        progress.close()
        return done, storage, True
    for note in _compressed_notes(plan, config.part_size):
        progress.message(note)

    check_writable(config, storage.url)
    results: list[PartResult] = []
    started = _connect(config, progress.message)
    restore = _cancel_on_signals()
    try:
        _run_parts(config, plan, digest, progress, results)
    except KeyboardInterrupt:
        raise IngestCancelled(len(results), len(plan.parts)) from None
    finally:
        progress.close()
        if started:
            ray.shutdown()
        restore()
    results.sort(key=lambda r: r["part"])
    reused = sum(bool(r.get("reused")) for r in results)
    if reused:
        progress.message(f"reused {reused} of {len(results)} parts from an earlier run")
    metadata = _metadata(config, plan, digest, tokenizer, results)
    if metadata[METADATA_KEY]["documents"] == 0:
        raise IngestError(
            f"inputs {', '.join(config.inputs)} hold no documents (every file empty, or every "
            "record empty or bad): nothing committed"
        )
    manifest = storage.commit(num_parts=len(plan.parts), metadata=metadata, run=run_name(digest))
    remove_sidecars(config)
    progress.message(summary(manifest, storage.url, storage_options=bool(config.storage_options)))
    return manifest, storage, False


# -- the Python API --------------------------------------------------------------------------


@dataclass(frozen=True)
class IngestResult:
    """What `ingest_dataset` committed (or found already committed).

    Counts come from the manifest's ``ingest`` metadata; ``bad_records`` maps each input (URL
    without credentials) to ``{reason: count}`` of the records skipped under ``on_bad_record:
    skip``; ``empty_documents`` counts documents with no tokens (not stored).

    Attributes:
        manifest: The committed `Manifest` (its metadata has the job under `"ingest"`).
        storage: The opened storage (`StreamStorage` or `DocumentStorage`), ready for a view.
        url: The output URL, without credentials.
        documents: Documents stored.
        tokens: Tokens stored (end-of-document tokens included).
        parts: Parts the job was planned into (one Ray task each).
        shards: Shards written.
        bytes: Bytes of every shard file, headers included.
        bad_records: `{input URL: {reason: records}}` of the bad records skipped.
        bad_records_total: Bad records skipped, over all inputs.
        empty_documents: Documents with no tokens (counted, not stored).
        already_committed: True when the output already held this job's dataset and nothing
            ran.
    """

    manifest: Any
    storage: Any = field(repr=False)
    url: str
    documents: int
    tokens: int
    parts: int
    shards: int
    bytes: int
    bad_records: dict[str, dict[str, int]]
    bad_records_total: int
    empty_documents: int
    already_committed: bool

    def open_code(self) -> str:
        """The Python lines that open this dataset (storage class and format from the manifest).

        Returns:
            Import lines and a `storage = ...(url, format)` line, as `guideloom inspect` prints
            them.
        """
        return open_code(self.manifest, self.url)


def ingest_dataset(
    inputs: list[str] | str | None = None,
    output: str | None = None,
    *,
    config: IngestConfig | str | Path | None = None,
    **options: Any,
) -> IngestResult:
    """Ingest ``inputs`` into a dataset at ``output`` on Ray; return what was committed.

    Options are the job file's keys (`guideloom.workers.config.IngestConfig`), e.g.
    ``tokenizer="hf:tokenizer.json"``, ``part_size=32 * 2**20`` (bytes), ``on_bad_record="skip"``.
    ``config`` is an IngestConfig or a YAML job file; ``inputs``, ``output`` and ``options``
    override its values, as flags override a job file on the command line. ``progress`` defaults
    to ``"none"`` here (``"plain"`` prints log lines to stderr). Raises ``IngestError`` (and
    subclasses) on bad options or input, `IngestCancelled` when interrupted.

    It runs on the Ray cluster named by ``ray_address`` or ``RAY_ADDRESS``, or else on a local
    Ray it starts (and stops) itself. Re-running an interrupted job redoes only the parts without
    a valid completion record; re-running a committed job returns at once
    (``already_committed``), without starting Ray.

    Args:
        inputs: Paths, globs or fsspec URLs of the input files (JSON Lines, Parquet or plain
            text; `.gz` / `.zst` compressed), or one such string.
        output: The dataset URL or local folder to write.
        config: An `IngestConfig`, or the path of a YAML job file, whose values `inputs`,
            `output` and `options` override.
        **options: Any other `IngestConfig` field: `tokenizer`, `eos_token`, `layout`,
            `shard_size` and `part_size` (bytes), `on_bad_record`, `overwrite`, `ray_address`,
            `num_workers` (parts in flight), `max_retries`, `storage_options`, ...

    Returns:
        An `IngestResult`: the manifest, the opened storage and the counts.

    Raises:
        IngestError: Bad options (an unknown or invalid one, named), an input that does not
            exist or a glob that matches nothing, a bad record under `on_bad_record="fail"`
            (named by file and line), a tokenizer that cannot be loaded or has no
            end-of-document token, an output that cannot be written, a Ray address where
            nothing answers, or inputs without a single document; nothing is committed.
        DatasetExistsError: The output holds a dataset this job did not write, and `overwrite`
            is False.
        IngestCancelled: Interrupted (Ctrl-C, SIGTERM); the finished parts are kept.
        StorageAccessError: The storage refused a request or could not be reached.
    """
    overrides: dict[str, Any] = dict(options)
    if inputs is not None:
        overrides["inputs"] = [inputs] if isinstance(inputs, str) else [str(i) for i in inputs]
    if output is not None:
        overrides["output"] = str(output)
    if isinstance(config, IngestConfig):
        job = validate_config({**config.model_dump(), **overrides}) if overrides else config
    elif config is not None:
        job = load_job_file(config, overrides)
    else:
        overrides.setdefault("progress", "none")
        job = validate_config(overrides)
    manifest, storage, before = _ingest(job)
    meta = manifest.metadata[METADATA_KEY]
    return IngestResult(
        manifest=manifest,
        storage=storage,
        url=storage.url,
        documents=meta["documents"],
        tokens=meta["tokens"],
        parts=meta["parts"],
        shards=len(manifest.shards),
        bytes=manifest.total_bytes,
        bad_records=meta["bad_records"],
        bad_records_total=meta["bad_records_total"],
        empty_documents=sum(meta["empty_documents"].values()),
        already_committed=before,
    )
