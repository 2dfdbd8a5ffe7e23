"""Ray ingestion for GuideLoom: raw text in, a committed tokenized dataset out.

The repository keeps this package in the top-level folder ``workers/`` (the layer diagram of the
design); it is installed as ``guideloom.workers`` (``[tool.setuptools.package-dir]`` in
``pyproject.toml``), so no generic top-level ``workers`` package reaches site-packages.

The only package of the project that imports Ray, and only in the driver's modules
(`guideloom.workers.connect`, `guideloom.workers.driver` and the API in
`guideloom.workers.ingest`), so that ``import guideloom.workers`` and ``guideloom.workers.cli``
stay light. It talks to storage only through GuideLoom's public API: ``storage.writer(part=k,
metadata=...)``, ``storage.read_part_record(k)``, ``storage.check_shard``,
``storage.commit(num_parts=n)``, `guideloom.io.Location` and `guideloom.layout`'s paths.

Modules, one concern each::

    config        IngestConfig: the pydantic job description (flags or a YAML job file)
    tokenizer     tokenizers by name (TOKENIZERS: bytes, hf:, tiktoken:, a package's own)
    readers       input readers by name (INPUT_READERS: jsonl, parquet, text, a package's own)
    sources       finding input files, picking each one's reader; records -> documents
    planning      deterministic parts from the inputs: the readers' segments, packed
    output        storage class and format; a part's counts in its completion record
    part          one part end to end: read, tokenize, storage.writer(part=k) (no Ray)
    hooks         the one testing seam: a test's hook module run at points inside a part
    results       the manifest's ingest metadata and the summary (no Ray)
    connect       which Ray cluster: --ray-address, RAY_ADDRESS, auto, or a local Ray
    cancellation  SIGINT/SIGTERM -> IngestCancelled
    driver        plan, submit Ray tasks, progress, commit (run_job)
    ingest        the Python API: ingest_dataset(...) -> IngestResult, run_ingest(config)
    progress      live progress (rich) and the plain log-line mode
    cli           the typer command behind ``guideloom ingest``
"""

from __future__ import annotations

__all__ = ["IngestCancelled", "IngestConfig", "IngestResult", "ingest_dataset", "run_ingest"]


def __getattr__(name: str) -> object:
    # Lazy so that `import guideloom.workers` (and the CLI's registration) never imports Ray.
    if name in ("run_ingest", "ingest_dataset", "IngestResult", "IngestCancelled"):
        from guideloom.workers import ingest as api

        return getattr(api, name)
    if name == "IngestConfig":
        from guideloom.workers.config import IngestConfig

        return IngestConfig
    raise AttributeError(f"module 'guideloom.workers' has no attribute {name!r}")
