# ruff: noqa: B008  (typer declares options as argument defaults)
"""``guideloom ingest``: the typer command, registered on GuideLoom's CLI by :func:`register`.

Importing this module does not import Ray: the driver (:mod:`guideloom.workers.ingest`) is imported when
the command runs. Flags override the values of a ``--config job.yaml`` job file; a flag that is
not given leaves the job file's value (or the default) alone.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import typer

from guideloom.errors import GuideLoomError
from guideloom.workers.config import load_job_file, validate_config

__all__ = ["ingest", "register", "parse_size"]

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_size(text: str) -> int:
    """``"64MiB"`` -> 67108864; plain numbers are bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise typer.BadParameter(f"{text!r} is not a size: use e.g. 1048576, 64MiB or 1GB")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def _json_option(text: str | None, name: str) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise typer.BadParameter(f"{name} must be a JSON object: {err}") from err
    if not isinstance(value, dict):
        raise typer.BadParameter(f"{name} must be a JSON object")
    return value


def ingest(
    inputs: list[str] | None = typer.Argument(
        None, help="Input files: paths, globs or fsspec URLs (JSONL, .gz/.zst, Parquet, text)."
    ),
    output: str | None = typer.Option(None, "--output", "-o", help="Dataset URL or directory."),
    config: Path | None = typer.Option(None, "--config", help="YAML job file; flags override."),
    input_format: str | None = typer.Option(None, help="auto | jsonl | parquet | text."),
    text_field: str | None = typer.Option(None, help="Field holding the text (default text)."),
    text_per_line: bool | None = typer.Option(
        None, "--lines/--file-per-document", help="Plain text: a document per line / per file."
    ),
    tokenizer: str | None = typer.Option(
        None, help="bytes | hf:PATH/tokenizer.json | tiktoken:NAME (default bytes)."
    ),
    eos_token: str | None = typer.Option(None, help="hf: name of the end-of-document token."),
    append_eos: bool | None = typer.Option(
        None, "--eos/--no-eos", help="Append eos to each document (default: stream yes)."
    ),
    layout: str | None = typer.Option(None, help="stream | document (default stream)."),
    doc_index: bool | None = typer.Option(
        None, "--doc-index/--no-doc-index", help="Stream: add a per-token doc_index field."
    ),
    format: str | None = typer.Option(None, help="Document layout: json | msgpack | pickle."),
    passthrough: list[str] | None = typer.Option(
        None, help="Document layout: an input field to keep (repeatable)."
    ),
    shard_size: str | None = typer.Option(None, help="Shard size, e.g. 64MiB."),
    part_size: str | None = typer.Option(None, help="Input bytes per part, e.g. 32MiB."),
    on_bad_record: str | None = typer.Option(None, help="fail (default) | skip."),
    overwrite: bool | None = typer.Option(
        None, "--overwrite/--no-overwrite", help="Replace a different dataset at --output."
    ),
    ray_address: str | None = typer.Option(
        None, help="Ray cluster (e.g. auto); default: RAY_ADDRESS, else a local Ray."
    ),
    num_workers: int | None = typer.Option(None, help="Parts in flight (default: Ray CPUs)."),
    max_retries: int | None = typer.Option(None, help="Retries of a part whose worker died."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Plain log lines, no live display."),
    storage_options: str | None = typer.Option(None, help="Output fsspec options (JSON)."),
    input_storage_options: str | None = typer.Option(None, help="Input fsspec options (JSON)."),
) -> None:
    """Tokenize raw text on Ray and commit a GuideLoom dataset."""
    given: dict[str, Any] = {
        "inputs": inputs or None,
        "output": output,
        "input_format": input_format,
        "text_field": text_field,
        "text_per_line": text_per_line,
        "tokenizer": tokenizer,
        "eos_token": eos_token,
        "append_eos": append_eos,
        "layout": layout,
        "doc_index": doc_index,
        "format": format,
        "passthrough": passthrough or None,
        "shard_size": parse_size(shard_size) if shard_size else None,
        "part_size": parse_size(part_size) if part_size else None,
        "on_bad_record": on_bad_record,
        "overwrite": overwrite,
        "ray_address": ray_address,
        "num_workers": num_workers,
        "max_retries": max_retries,
        "progress": "plain" if quiet else None,
        "storage_options": _json_option(storage_options, "--storage-options"),
        "input_storage_options": _json_option(input_storage_options, "--input-storage-options"),
    }
    overrides = {k: v for k, v in given.items() if v is not None}
    try:
        job = load_job_file(config, overrides) if config else validate_config(overrides)
        from guideloom.workers.ingest import run_ingest  # imports Ray: only when the command runs

        run_ingest(job)
    except GuideLoomError as err:
        print(f"error: {err}", file=sys.stderr)
        raise typer.Exit(code=1) from None


def register(app: typer.Typer) -> None:
    """Add the ``ingest`` command to GuideLoom's typer app."""
    app.command("ingest")(ingest)


def main() -> None:
    """``python -m guideloom.workers.cli``: the ingest command on its own."""
    typer.run(ingest)


if __name__ == "__main__":
    main()
