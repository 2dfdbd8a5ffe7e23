"""What a committed job records and prints: the manifest's ``ingest`` metadata and the summary.

No Ray here: the CLI, ``guideloom inspect`` and the benchmarks read these without starting it.
The metadata holds the job's identity (plan digest, tokenizer ``describe()``, the options that
decide the bytes), the inputs compactly, and the counts summed over the parts' results.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

import guideloom.layout as layout
from guideloom.io import redact_url
from guideloom.storage.opening import opening_code
from guideloom.types import Tokenizer
from guideloom.workers import decontam, rejects
from guideloom.workers.config import IngestConfig
from guideloom.workers.part import PartResult
from guideloom.workers.planning import Plan

__all__ = ["MAX_RECORDED_INPUTS", "METADATA_KEY", "METADATA_VERSION", "metadata", "open_code", "summary"]

METADATA_KEY = "ingest"
METADATA_VERSION = 3  # 3: documents and tokens are the whole dataset's (guideloom.manifest.totals)
MAX_RECORDED_INPUTS = 16  # input patterns kept verbatim in the manifest's ingest metadata


def _digest_of_files(plan: Plan) -> str:
    h = hashlib.sha256()
    for f in plan.files:
        h.update(f"{f.url}\t{f.size}\n".encode())
    return h.hexdigest()


def metadata(
    config: IngestConfig,
    plan: Plan,
    digest: str,
    tokenizer: Tokenizer,
    results: list[PartResult],
    before: tuple[int, int] = (0, 0),
) -> dict[str, Any]:
    """The manifest metadata of a job (``{METADATA_KEY: {...}}``) from its parts' results.

    ``documents`` and ``tokens`` are the whole dataset's: ``before`` (the documents and tokens of
    the dataset an append adds to) plus this job's, which ``job`` holds on its own. The rest
    (inputs, tokenizer, options, bad records) describes this job."""
    documents = sum(r["documents"] for r in results)
    tokens = sum(r["tokens"] for r in results)
    bad: dict[str, Counter[str]] = {}
    empty: Counter[str] = Counter()
    filtered: Counter[str] = Counter()
    for r in results:
        empty.update(r["empty_documents"])
        filtered.update(r.get("filtered", {}))
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
            "documents": before[0] + documents,
            "tokens": before[1] + tokens,
            "job": {"documents": documents, "tokens": tokens},
            "empty_documents": dict(sorted(empty.items())),
            "bad_records": {u: dict(sorted(c.items())) for u, c in sorted(bad.items())},
            "bad_records_total": sum(sum(c.values()) for c in bad.values()),
            **({"filtered": dict(sorted(filtered.items()))} if config.transform is not None else {}),
            **_dropped(config, results),
        }
    }


def _dropped(config: IngestConfig, results: list[PartResult]) -> dict[str, Any]:
    """Everything the job dropped, per input file and reason and in all (when it dropped
    anything); the eval set it was decontaminated against and the rejects file, when it names
    them."""
    dropped = rejects.dropped_counts(results)
    out: dict[str, Any] = {"dropped": dropped, "dropped_total": rejects.totals(dropped)} if dropped else {}
    eval_set = decontam.recorded(config)
    if eval_set is not None:
        out["decontamination"] = eval_set
    if config.rejects is not None:
        out["rejects"] = redact_url(config.rejects)
    return out


def open_code(manifest: Any, url: str, *, storage_options: bool = False) -> str:
    """The Python lines that open the dataset, from the storage class and format the manifest
    records (the schema is never guessed from the files); the same lines ``guideloom inspect``
    prints (`guideloom.storage.opening.opening_code`)."""
    return opening_code(url, manifest, storage_options=storage_options)


def requests_line(requests: dict[str, Any]) -> list[str]:
    """``requests STORE: GET n, PUT n, ...; B read, B written`` per store that was sent any
    (local disk sends none)."""
    lines = []
    for store, entry in sorted(requests.items()):
        kinds = ", ".join(f"{kind} {n:,}" for kind, n in sorted(entry["requests"].items()))
        if not kinds:
            continue
        retries = f", {entry['retries']:,} retried" if entry.get("retries") else ""
        throttled = f", {entry['throttled']:,} throttled" if entry.get("throttled") else ""
        lines.append(
            f"requests {store}: {kinds}{retries}{throttled}; {entry['bytes_read']:,} bytes read, "
            f"{entry['bytes_written']:,} written"
        )
    return lines


def summary(
    manifest: Any,
    url: str | None = None,
    *,
    storage_options: bool = False,
    requests: dict[str, Any] | None = None,
) -> str:
    """A few lines on what a committed ingestion wrote (with the ``requests`` it sent per
    store, when given), then the Python lines that open it."""
    meta = manifest.metadata[METADATA_KEY]
    tok = meta["tokenizer"]
    job = meta.get("job") or meta  # metadata version 2 and earlier: the job's counts only
    this_job = f"this job: {job['documents']:,} documents, {job['tokens']:,} tokens in {meta['parts']} parts"
    if job is not meta and (job["documents"], job["tokens"]) != (meta["documents"], meta["tokens"]):
        # an append: this job's own shards (those under its run's folder) apart from the dataset's
        run = f"{layout.run_prefix(str(meta['plan'])[:64])}/"
        mine = [sh for sh in manifest.shards if sh.files["data"].path.startswith(run)]
        lines = [
            f"{this_job}: {len(mine)} shards, {sum(sh.size for sh in mine):,} bytes",
            f"the dataset now: {meta['documents']:,} documents, {meta['tokens']:,} tokens, "
            f"{len(manifest.shards)} shards, {manifest.total_bytes:,} bytes",
        ]
    else:
        lines = [this_job, f"committed: {len(manifest.shards)} shards, {manifest.total_bytes:,} bytes"]
    lines.append(f"tokenizer {tok['spec']} (vocabulary {tok['vocab_size']:,}, eos {tok['eos_id']})")
    empty = sum(meta["empty_documents"].values())
    empty_files = meta["empty_files"]
    if not isinstance(empty_files, int):  # metadata version 1 listed them
        empty_files = len(empty_files)
    if empty or empty_files:
        lines.append(f"empty documents skipped: {empty}; empty files: {empty_files}")
    if meta.get("filtered"):
        lines.append(f"records the transform dropped: {sum(meta['filtered'].values())}")
    if meta["bad_records_total"]:
        lines.append(f"bad records skipped: {meta['bad_records_total']}")
        for where, counts in meta["bad_records"].items():
            reasons = ", ".join(f"{n} {reason}" for reason, n in counts.items())
            lines.append(f"  {where}: {reasons}")
    lines += rejects.summary_lines(meta)
    lines += requests_line(requests or {})
    if url is not None:
        lines.append("open it with:")
        lines += [
            "  " + line for line in open_code(manifest, url, storage_options=storage_options).splitlines()
        ]
    return "\n".join(lines)
