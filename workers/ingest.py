"""The ingestion driver: plan, run one Ray task per part, commit the manifest last.

Why plain Ray tasks rather than Ray Data with a datasink: a part is the unit of determinism
(its shard names and bytes depend only on the plan) and of restart (``storage.part_complete``).
One task per part, with ``max_retries`` for dead workers and a bounded number in flight, maps
exactly onto ``storage.writer(part=k)``; Ray Data would re-block the records by its own
scheduling, so part contents (and so shard bytes) would depend on the cluster and the run.

The driver holds only the plan and per-part counts: memory does not grow with the input.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import ray

from guideloom.errors import DatasetExistsError, GuideLoomError, IngestError, SchemaMismatchError
from guideloom.workers.config import IngestConfig, load_job_file, validate_config
from guideloom.workers.output import (
    check_writable,
    open_storage,
    remove_foreign_manifest,
    remove_sidecars,
)
from guideloom.workers.part import PartResult, write_part
from guideloom.workers.planning import Plan, plan_parts
from guideloom.workers.progress import Progress, make_progress
from guideloom.workers.sources import expand_inputs
from guideloom.workers.tokenizer import load_tokenizer

__all__ = ["run_ingest", "METADATA_KEY"]

METADATA_KEY = "ingest"
HOOKS_ENV = "GUIDELOOM_INGEST_TEST_HOOKS"  # JSON; tests only (crash a worker, slow parts down)
METADATA_VERSION = 1

_write_part_task = ray.remote(write_part)


def _coerce(config: IngestConfig | dict[str, Any] | str | Path) -> IngestConfig:
    if isinstance(config, IngestConfig):
        return config
    if isinstance(config, dict):
        return validate_config(config)
    return load_job_file(config)


def _connect(config: IngestConfig) -> bool:
    """Connect to Ray; True when this call started a local Ray (and so must shut it down)."""
    if ray.is_initialized():
        return False
    if config.ray_address or os.environ.get("RAY_ADDRESS"):
        ray.init(address=config.ray_address, log_to_driver=False)  # a cluster, or `ray job submit`
        return False
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=config.num_workers, include_dashboard=False, log_to_driver=False)
    return True


def _existing(storage: Any, digest: str, config: IngestConfig) -> Any | None:
    """The manifest when this very job was already committed; refuses another dataset."""
    if not storage.exists():
        return None
    manifest = storage.manifest
    recorded = (manifest.metadata or {}).get(METADATA_KEY, {}).get("plan")
    if recorded == digest and not config.overwrite:
        return manifest
    if config.overwrite:
        storage.delete()
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


def _run_parts(config: IngestConfig, plan: Plan, digest: str, progress: Progress) -> list[PartResult]:
    hooks = json.loads(os.environ.get(HOOKS_ENV, "{}"))
    task = _write_part_task.options(max_retries=config.max_retries, num_cpus=1)
    config_ref, plan_ref = ray.put(config), ray.put(plan)
    todo = list(range(len(plan.parts)))[::-1]
    pending: dict[Any, int] = {}
    results: list[PartResult] = []
    try:
        while todo or pending:
            limit = _in_flight(config)
            while todo and len(pending) < limit:
                k = todo.pop()
                pending[task.remote(config_ref, plan_ref, k, digest, hooks)] = k
            done, _ = ray.wait(list(pending), num_returns=1)
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
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
    return sorted(results, key=lambda r: r["part"])


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
            "inputs": [{"url": f.url, "size": f.size} for f in plan.files],
            "empty_files": [f.url for f in plan.files if f.size == 0],
            "parts": len(plan.parts),
            "documents": sum(r["documents"] for r in results),
            "tokens": sum(r["tokens"] for r in results),
            "empty_documents": dict(sorted(empty.items())),
            "bad_records": {u: dict(sorted(c.items())) for u, c in sorted(bad.items())},
            "bad_records_total": sum(sum(c.values()) for c in bad.values()),
        }
    }


def summary(manifest: Any) -> str:
    """A few lines on what a committed ingestion wrote."""
    meta = manifest.metadata[METADATA_KEY]
    tok = meta["tokenizer"]
    lines = [
        f"committed {len(manifest.shards)} shards, {manifest.total_bytes:,} bytes: "
        f"{meta['documents']:,} documents, {meta['tokens']:,} tokens in {meta['parts']} parts",
        f"tokenizer {tok['spec']} (vocabulary {tok['vocab_size']:,}, eos {tok['eos_id']})",
    ]
    empty = sum(meta["empty_documents"].values())
    if empty or meta["empty_files"]:
        lines.append(f"empty documents skipped: {empty}; empty files: {len(meta['empty_files'])}")
    if meta["bad_records_total"]:
        lines.append(f"bad records skipped: {meta['bad_records_total']}")
        for url, counts in meta["bad_records"].items():
            reasons = ", ".join(f"{n} {reason}" for reason, n in counts.items())
            lines.append(f"  {url}: {reasons}")
    return "\n".join(lines)


def run_ingest(config: IngestConfig | dict[str, Any] | str | Path) -> Any:
    """Ingest the job (a config, a dict of options or a YAML job file path); return the manifest.

    Re-running an interrupted job redoes only the parts without a valid completion record; re-
    running a committed job returns its manifest without doing anything.
    """
    config = _coerce(config)
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
        return done

    check_writable(config, storage.url)
    started = _connect(config)
    try:
        results = _run_parts(config, plan, digest, progress)
    finally:
        progress.close()
        if started:
            ray.shutdown()
    reused = sum(bool(r.get("reused")) for r in results)
    if reused:
        progress.message(f"reused {reused} of {len(results)} parts from an earlier run")
    metadata = _metadata(config, plan, digest, tokenizer, results)
    if metadata[METADATA_KEY]["documents"] == 0:
        raise IngestError(
            f"inputs {', '.join(config.inputs)} hold no documents (every file empty, or every "
            "record empty or bad): nothing committed"
        )
    manifest = storage.commit(num_parts=len(plan.parts), metadata=metadata)
    remove_sidecars(config)
    progress.message(summary(manifest))
    return manifest
