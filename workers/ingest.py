"""The Python API of ingestion: `ingest_dataset` -> `IngestResult`, and `run_ingest`.

The work is split by concern: `guideloom.workers.driver` (plan, Ray tasks, commit),
`guideloom.workers.connect` (which Ray cluster), `guideloom.workers.cancellation` (signals,
`IngestCancelled`), `guideloom.workers.results` (the manifest metadata and the summary). The
names the API has always had stay importable from here and from ``guideloom.workers``.

Where it runs (one rule): on the cluster named by ``ray_address`` or ``RAY_ADDRESS`` (set by ``ray
job submit``), else on a local Ray it starts itself (``address="local"``), never on some other
cluster that happens to run on the machine. It says which on stderr.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guideloom.errors import GuideLoomError
from guideloom.io import redact_text
from guideloom.workers.cancellation import IngestCancelled
from guideloom.workers.config import IngestConfig, load_job_file, validate_config
from guideloom.workers.driver import run_job, task_config
from guideloom.workers.results import METADATA_KEY, open_code, summary
from guideloom.workers.results import metadata as _metadata  # noqa: F401  (its old home)

__all__ = [
    "IngestCancelled",
    "IngestResult",
    "METADATA_KEY",
    "ingest_dataset",
    "open_code",
    "run_ingest",
    "summary",
    "task_config",
]


def _coerce(config: IngestConfig | dict[str, Any] | str | Path) -> IngestConfig:
    if isinstance(config, IngestConfig):
        return config
    if isinstance(config, dict):
        return validate_config(config)
    return load_job_file(config)


def run_ingest(config: IngestConfig | dict[str, Any] | str | Path) -> Any:
    """Ingest the job (a config, a dict of options or a YAML job file path); return the manifest.

    Re-running an interrupted job redoes only the parts without a valid completion record; re-
    running a committed job returns its manifest without doing anything. An interruption
    (KeyboardInterrupt) cancels the parts in flight and raises `IngestCancelled`.
    """
    return _ingest(_coerce(config))[0]


def _ingest(config: IngestConfig) -> tuple[Any, Any, bool, dict[str, Any]]:
    """(manifest, storage, whether it was committed before this call, the requests sent)."""
    try:
        return run_job(config)
    except GuideLoomError as err:  # no credentials from input URLs in any message
        message = redact_text(str(err), list(config.inputs))
        if message != str(err):
            err.args = (message,)
        raise


# -- the Python API --------------------------------------------------------------------------


@dataclass(frozen=True)
class IngestResult:
    """What `ingest_dataset` committed (or found already committed).

    Counts come from the manifest's ``ingest`` metadata; ``bad_records`` maps each input (URL
    without credentials) to ``{reason: count}`` of the records skipped under ``on_bad_record:
    skip``; ``empty_documents`` counts documents with no tokens (not stored).

    Attributes:
        manifest: The committed `Manifest` (its metadata has the job under `"ingest"`).
        storage: The opened storage (`StreamStorage`, `DocumentStorage` or
            `StreamWithMetaStorage`), ready for a view.
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
        filtered: `{input URL: records}` the transform dropped (returned None).
        io_stats: The requests the job sent, per store, as `guideloom.io.io_stats` counts them
            (`{store: {"requests": {"GET": n, "PUT": n, ...}, "bytes_read": n,
            "bytes_written": n, "retries": n}}`): the driver's and every Ray task's, reading
            the inputs and writing the output; local disk sends none.
        dropped: `{input URL: {reason: records}}` of everything the job dropped: bad records
            by reason, `empty`, `filtered` and `contaminated` (`guideloom.workers.rejects`).
        rejects: Where the rejected records are listed (``rejects``), without credentials.
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
    filtered: dict[str, int] = field(default_factory=dict)
    io_stats: dict[str, Any] = field(default_factory=dict)
    dropped: dict[str, dict[str, int]] = field(default_factory=dict)
    rejects: str | None = None

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
    ``tokenizer`` may also be a tokenizer object (any object with the `guideloom.types.Tokenizer`
    protocol, picklable: Ray sends it to every task); its ``describe()`` is part of the job's
    identity and is recorded in the manifest.
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
        **options: Any other `IngestConfig` field: `tokenizer` (a spec or a tokenizer
            object), `input_format` (`"chat"` for conversations, with `messages_field`,
            `chat_template` and `train_on`), `eos_token`, `bos`, `layout`
            (`"stream_with_meta"` with `meta_fields`, `spans_field`, `meta_format`),
            `transform` and `transform_id`,
            `shard_size` and `part_size` (bytes), `on_bad_record`, `rejects` (a file listing
            every rejected record), `decontaminate` with `decontaminate_field` and
            `decontaminate_ngram` (see docs/clean-data.md), `overwrite`, `append`,
            `commit_every` (a snapshot per that many parts, or a size of input such as
            `"2GiB"`, complete in part order; see docs/datasets-that-grow.md), `ray_address`,
            `num_workers` (parts in flight), `max_retries`, `storage_options`, ...

    Returns:
        An `IngestResult`: the manifest, the opened storage and the counts.

    Raises:
        IngestError: Bad options (an unknown or invalid one, named), an input that does not
            exist or a glob that matches nothing, a bad record under `on_bad_record="fail"`
            (named by file and line: a chat, annotation or transform error too), an unknown
            tokenizer or input format (the known names are listed), a tokenizer that cannot be
            loaded, is not picklable or has no end-of-document token (or no
            beginning-of-sequence token with `bos`, or no chat template with
            `chat_template="auto"`), a transform that does not import or cannot be pickled, an output that cannot be written, a Ray address where
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
    manifest, storage, before, requests = _ingest(job)
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
        filtered=dict(meta.get("filtered", {})),
        io_stats=requests,
        dropped=dict(meta.get("dropped", {})),
        rejects=meta.get("rejects"),
    )
