# ruff: noqa: B008  (typer declares options as argument defaults)
"""``guideloom ingest``: the typer command, registered on GuideLoom's CLI by `register`.

A thin layer over the Python API, `guideloom.workers.ingest_dataset`. Importing this
module does not import Ray: the driver (`guideloom.workers.ingest`) is imported when the
command runs, and without the ``ray`` extra the command says how to install it. Flags override
the values of a ``--config job.yaml`` job file; a flag that is not given leaves the job file's
value (or the default) alone.

Exit status: 0 committed (or already committed), 1 the job failed (bad input, storage), 2 a usage
error (missing ``--output``, an unknown or invalid option), 130 interrupted (Ctrl-C, SIGTERM).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import typer
import typer.core
from typer._click.exceptions import UsageError

from guideloom.errors import GuideLoomError, IngestError
from guideloom.workers.config import read_job_file, validate_config

__all__ = ["ingest", "register", "parse_size", "INSTALL_HINT"]

INSTALL_HINT = 'guideloom ingest needs the ray extra: pip install "guideloom[ray]"'
EXIT_INTERRUPTED = 130

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


def _passthrough_defaults(items: list[str] | None) -> dict[str, Any] | None:
    """``--passthrough-default NAME=VALUE``: VALUE as JSON where it parses (``0``, ``null``,
    ``"x"``), else the string as written."""
    if not items:
        return None
    out: dict[str, Any] = {}
    for item in items:
        name, eq, text = item.partition("=")
        if not eq or not name:
            raise typer.BadParameter(
                f"--passthrough-default {item!r}: write NAME=VALUE, e.g. --passthrough-default lang=unknown"
            )
        try:
            out[name] = json.loads(text)
        except json.JSONDecodeError:
            out[name] = text
    return out


def ingest(
    inputs: list[str] | None = typer.Argument(
        None,
        metavar="INPUTS",
        help="Input files: paths, globs or fsspec URLs (JSONL, .gz/.zst, Parquet, text).",
    ),
    output: str | None = typer.Option(
        None,
        "--output",
        "-o",
        metavar="URL",
        help="Dataset URL or directory (required, here or in the job file).",
    ),
    config: Path | None = typer.Option(
        None, "--config", metavar="FILE", help="YAML job file; flags override."
    ),
    input_format: str | None = typer.Option(
        None, metavar="FORMAT", help="auto | jsonl | parquet | text | chat | an installed reader's name."
    ),
    messages_field: str | None = typer.Option(
        None, metavar="FIELD", help="Chat: the field holding the messages (default messages)."
    ),
    chat_template: str | None = typer.Option(
        None, metavar="TEMPLATE", help="Chat: auto (the hf: tokenizer's own, default) | chatml."
    ),
    train_on: str | None = typer.Option(
        None, metavar="WHAT", help="Chat: where loss_mask is 1: assistant (default) | all | last."
    ),
    bos: bool | None = typer.Option(
        None, "--bos/--no-bos", help="Add the beginning-of-sequence token to each document."
    ),
    transform: str | None = typer.Option(
        None, metavar="MODULE:FUNCTION", help="A function record -> record | None run before tokenizing."
    ),
    transform_id: str | None = typer.Option(
        None, metavar="ID", help="The transform's name and version (part of the job's identity)."
    ),
    meta_field: list[str] | None = typer.Option(
        None, metavar="FIELD", help="Stream with metadata: a record field annotating its span (repeatable)."
    ),
    spans_field: str | None = typer.Option(
        None, metavar="FIELD", help="Stream with metadata: the field of character-offset spans."
    ),
    meta_format: str | None = typer.Option(
        None, metavar="FORMAT", help="Stream with metadata: json (default) | msgpack annotations."
    ),
    text_field: str | None = typer.Option(
        None, metavar="FIELD", help="Field holding the text (default text)."
    ),
    text_per_line: bool | None = typer.Option(
        None, "--lines/--file-per-document", help="Plain text: a document per line / per file."
    ),
    tokenizer: str | None = typer.Option(
        None,
        metavar="SPEC",
        help="bytes | hf:PATH/tokenizer.json | tiktoken:NAME | NAME[:ARG] of an installed tokenizer "
        "(default bytes).",
    ),
    eos_token: str | None = typer.Option(
        None, metavar="TOKEN", help="hf: name of the end-of-document token."
    ),
    append_eos: bool | None = typer.Option(
        None, "--eos/--no-eos", help="Append eos to each document (default: stream yes)."
    ),
    layout: str | None = typer.Option(
        None,
        metavar="LAYOUT",
        help="stream | documents | stream_with_meta (default stream; document and stream-with-meta also work).",
    ),
    doc_index: bool | None = typer.Option(
        None, "--doc-index/--no-doc-index", help="Stream: add a per-token doc_index field."
    ),
    format: str | None = typer.Option(
        None, metavar="FORMAT", help="Document layout: json | msgpack | pickle."
    ),
    passthrough: list[str] | None = typer.Option(
        None, metavar="FIELD", help="Document layout: an input field to keep (repeatable)."
    ),
    id_field: str | None = typer.Option(
        None,
        "--id-field",
        metavar="FIELD",
        help="An input field naming each record (guideloom trace shows it).",
    ),
    passthrough_default: list[str] | None = typer.Option(
        None,
        metavar="FIELD=VALUE",
        help="Document layout: the value a --passthrough field takes where a record lacks it (JSON or text).",
    ),
    shard_size: str | None = typer.Option(None, metavar="SIZE", help="Shard size, e.g. 64MiB."),
    part_size: str | None = typer.Option(None, metavar="SIZE", help="Input bytes per part, e.g. 32MiB."),
    on_bad_record: str | None = typer.Option(None, metavar="POLICY", help="fail (default) | skip."),
    rejects: str | None = typer.Option(
        None,
        metavar="URL",
        help="Write every rejected record (file, line, reason, message) here as JSON Lines.",
    ),
    decontaminate: list[str] | None = typer.Option(
        None,
        metavar="EVAL",
        help="Drop documents sharing an n-gram with these eval files (JSONL/Parquet, a folder; repeatable).",
    ),
    decontaminate_field: str | None = typer.Option(
        None, metavar="FIELD", help="The eval records' text field (default text)."
    ),
    decontaminate_ngram: int | None = typer.Option(
        None, metavar="N", help="Words per n-gram for --decontaminate (default 13)."
    ),
    overwrite: bool | None = typer.Option(
        None,
        "--overwrite/--no-overwrite",
        help="Delete any dataset at --output (even this job's own) and ingest again.",
    ),
    append: bool | None = typer.Option(
        None,
        "--append/--no-append",
        help="Add the records after the dataset at --output (a new snapshot); a re-run lands once.",
    ),
    commit_every: str | None = typer.Option(
        None,
        metavar="N|SIZE",
        help="Commit a snapshot each time the next N parts (or SIZE of input, e.g. 2GiB) are complete.",
    ),
    ray_address: str | None = typer.Option(
        None, metavar="ADDRESS", help="Ray cluster (host:6379); default: RAY_ADDRESS, else a new local Ray."
    ),
    runner: str | None = typer.Option(
        None,
        metavar="auto|ray|inline",
        help="Where parts run: Ray, or this process (no Ray to start); auto: inline for small "
        "or one-worker jobs when no cluster is named.",
    ),
    num_workers: int | None = typer.Option(
        None, metavar="N", help="Parts in flight (default: twice the cluster's CPUs)."
    ),
    max_retries: int | None = typer.Option(None, metavar="N", help="Retries of a part whose worker died."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Plain log lines, no live display."),
    storage_options: str | None = typer.Option(None, metavar="JSON", help="Output fsspec options (JSON)."),
    input_storage_options: str | None = typer.Option(
        None, metavar="JSON", help="Input fsspec options (JSON)."
    ),
) -> None:
    """Tokenize raw text on Ray and commit a GuideLoom dataset."""
    given: dict[str, Any] = {
        "inputs": inputs or None,
        "output": output,
        "input_format": input_format,
        "messages_field": messages_field,
        "chat_template": chat_template,
        "train_on": train_on,
        "bos": bos,
        "transform": transform,
        "transform_id": transform_id,
        "meta_fields": meta_field or None,
        "spans_field": spans_field,
        "meta_format": meta_format,
        "text_field": text_field,
        "text_per_line": text_per_line,
        "tokenizer": tokenizer,
        "eos_token": eos_token,
        "append_eos": append_eos,
        "layout": layout,
        "doc_index": doc_index,
        "format": format,
        "passthrough": passthrough or None,
        "id_field": id_field,
        "passthrough_defaults": _passthrough_defaults(passthrough_default),
        "shard_size": parse_size(shard_size) if shard_size else None,
        "part_size": parse_size(part_size) if part_size else None,
        "on_bad_record": on_bad_record,
        "rejects": rejects,
        "decontaminate": decontaminate or None,
        "decontaminate_field": decontaminate_field,
        "decontaminate_ngram": decontaminate_ngram,
        "overwrite": overwrite,
        "append": append,
        "commit_every": commit_every,
        "ray_address": ray_address,
        "runner": runner,
        "num_workers": num_workers,
        "max_retries": max_retries,
        "progress": "plain" if quiet else None,
        "storage_options": _json_option(storage_options, "--storage-options"),
        "input_storage_options": _json_option(input_storage_options, "--input-storage-options"),
    }
    overrides = {k: v for k, v in given.items() if v is not None}
    try:
        data = read_job_file(config) if config else {}
        data.update(overrides)
        for key, flag in (("output", "--output URL"), ("inputs", "INPUTS")):
            if not data.get(key):
                where = f" or in the job file {config}" if config else ""
                raise UsageError(f"missing {flag}: name it on the command line{where}")
        job = validate_config(data, source=f"job file {config}" if config else "options")
    except IngestError as err:
        raise UsageError(str(err)) from None
    _run(job)


def _run(job: Any) -> None:
    try:
        from guideloom.workers.ingest import IngestCancelled, ingest_dataset  # imports Ray
    except ImportError as err:
        print(f"error: {INSTALL_HINT} (missing module {err.name!r})", file=sys.stderr)
        raise typer.Exit(code=1) from None
    try:
        ingest_dataset(config=job)
    except IngestCancelled as err:
        print(f"[guideloom ingest] {err}", file=sys.stderr, flush=True)
        raise typer.Exit(code=EXIT_INTERRUPTED) from None
    except KeyboardInterrupt:  # before any part started
        print("[guideloom ingest] interrupted before any part ran: nothing written", file=sys.stderr)
        raise typer.Exit(code=EXIT_INTERRUPTED) from None
    except GuideLoomError as err:
        print(f"error: {err}", file=sys.stderr)
        raise typer.Exit(code=1) from None


class _PlainHelpCommand(typer.core.TyperCommand):
    """click's plain help layout: option names are never cut, text wraps at the terminal width
    (rich's table truncates ``--input-storage-options`` at 80 columns)."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        super(typer.core.TyperCommand, self).format_help(ctx, formatter)


def register(app: typer.Typer) -> None:
    """Add the ``ingest`` command to GuideLoom's typer app."""
    app.command("ingest", cls=_PlainHelpCommand)(ingest)


def main() -> None:
    """``python -m guideloom.workers.cli``: the ingest command on its own."""
    typer.run(ingest)


if __name__ == "__main__":
    main()
