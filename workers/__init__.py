"""Ray ingestion for GuideLoom: raw text in, a committed tokenized dataset out.

The repository keeps this package in the top-level folder ``workers/`` (the layer diagram of the
design); it is installed as ``guideloom.workers`` (``[tool.setuptools.package-dir]`` in
``pyproject.toml``), so no generic top-level ``workers`` package reaches site-packages.

The only package of the project that imports Ray, and only in `guideloom.workers.ingest`
(the driver),
so that ``import guideloom.workers`` and ``guideloom.workers.cli`` stay light. It talks to
storage only through
GuideLoom's public API: ``storage.writer(part=k)``, ``storage.part_complete(k)``,
``storage.commit(num_parts=n)``.

Modules, one concern each::

    config      IngestConfig: the pydantic job description (flags or a YAML job file)
    sources     finding input files and reading records from one segment of one file
    planning    deterministic parts from the inputs: file segments at record boundaries
    tokenizer   bytes / hf:tokenizer.json / tiktoken:NAME behind one small interface
    output      storage class and format from the options; manifest metadata
    part        one part end to end: read, tokenize, storage.writer(part=k) (no Ray)
    ingest      the driver: plan, submit Ray tasks, progress, commit; the Python API
                ingest_dataset(...) -> IngestResult (run_ingest(config) -> manifest)
    progress    live progress (rich) and the plain log-line mode
    cli         the typer command behind ``guideloom ingest``
"""

from __future__ import annotations

__all__ = ["IngestCancelled", "IngestConfig", "IngestResult", "ingest_dataset", "run_ingest"]


def __getattr__(name: str) -> object:
    # Lazy so that `import guideloom.workers` (and the CLI's registration) never imports Ray.
    if name in ("run_ingest", "ingest_dataset", "IngestResult", "IngestCancelled"):
        from guideloom.workers import ingest as driver

        return getattr(driver, name)
    if name == "IngestConfig":
        from guideloom.workers.config import IngestConfig

        return IngestConfig
    raise AttributeError(f"module 'guideloom.workers' has no attribute {name!r}")
