"""The ``guideloom`` command: ``inspect``, ``verify`` and (with the ``ray`` extra) ``ingest``.

``inspect`` and ``verify`` read only the manifest and the shard files, so they work without the
format class the dataset was written with. S3 credentials and endpoints come from the usual
AWS environment variables or from ``--option key=value`` (fsspec storage options; use
``client_kwargs.endpoint_url=http://...`` for MinIO or another S3-compatible endpoint).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

import typer

from guideloom.errors import GuideLoomError
from guideloom.storage.checks import read_manifest, verify_shards

app = typer.Typer(
    name="guideloom",
    help="Tokenized training data in object storage: inspect, verify and ingest datasets.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

OPTION_HELP = (
    "fsspec storage option KEY=VALUE (repeatable); dotted keys nest, e.g. "
    "client_kwargs.endpoint_url=http://127.0.0.1:9000. Values are parsed as JSON when they can be."
)


def parse_options(pairs: list[str] | None) -> dict[str, Any]:
    """``["key=v", "client_kwargs.endpoint_url=http://x"]`` -> nested storage options."""
    options: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--option")
        try:
            value: Any = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        target = options
        *parents, leaf = key.split(".")
        for parent in parents:
            target = target.setdefault(parent, {})
        target[leaf] = value
    return options


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


@app.command()
def inspect(
    url: str = typer.Argument(..., help="Dataset URL or local path."),
    option: list[str] = typer.Option(None, "--option", "-o", help=OPTION_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the whole manifest as JSON."),
    shards: int = typer.Option(10, help="How many shards to list (0: none, -1: all)."),
) -> None:
    """Show a dataset's storage class, format, counts and shards."""
    try:
        location, manifest = read_manifest(url, parse_options(option))
    except GuideLoomError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(manifest.model_dump_json(indent=2))
        return
    fmt = manifest.format
    lines = [
        f"dataset        {location.display_url}",
        f"storage class  {manifest.storage_class}",
        f"format         {fmt.name} ({fmt.module}) {json.dumps(fmt.config)}",
        f"records        {manifest.total_records:,}",
    ]
    if manifest.storage_class != "DocumentStorage":
        lines.append(f"tokens         {manifest.total_tokens:,}")
    if manifest.storage_class == "StreamWithMetaStorage":
        lines.append(f"spans          {manifest.total_spans:,}")
    lines += [
        f"bytes          {manifest.total_bytes:,} ({_human(manifest.total_bytes)})",
        f"parts, shards  {manifest.num_parts}, {len(manifest.shards)}",
        f"created        {manifest.created_at} by guideloom {manifest.guideloom_version}",
        f"fingerprint    {manifest.fingerprint}",
    ]
    if manifest.metadata:
        lines.append(f"metadata       {json.dumps(manifest.metadata, sort_keys=True)[:2000]}")
    typer.echo("\n".join(lines))
    listed = manifest.shards if shards < 0 else manifest.shards[:shards]
    if listed:
        typer.echo("\n  part  shard      records       tokens        bytes  data file")
        for s in listed:
            typer.echo(
                f"  {s.part:4d}  {s.index:5d}  {s.records:11,d}  {s.tokens:11,d}  {s.size:11,d}  "
                f"{s.files['data'].path}"
            )
        if len(listed) < len(manifest.shards):
            typer.echo(f"  ... {len(manifest.shards) - len(listed)} more (--shards -1 lists all)")


@app.command()
def verify(
    url: str = typer.Argument(..., help="Dataset URL or local path."),
    option: list[str] = typer.Option(None, "--option", "-o", help=OPTION_HELP),
    size_only: bool = typer.Option(False, "--size-only", help="Check sizes only (no full read)."),
) -> None:
    """Re-check every shard file's size and checksum against the manifest.

    Exits 0 when all match, 1 naming each bad shard, 2 when the dataset cannot be opened.
    """
    try:
        location, manifest = read_manifest(url, parse_options(option))
        bad = 0
        progress = _verify_progress() if sys.stderr.isatty() else None
        for _shard, err in verify_shards(location, manifest, checksums=not size_only, progress=progress):
            if err is not None:
                bad += 1
                typer.echo(f"BAD  {err}", err=True)
    except GuideLoomError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    what = "sizes" if size_only else "sizes and checksums"
    if bad:
        typer.echo(f"{bad} of {len(manifest.shards)} shards of {location.display_url} are damaged", err=True)
        raise typer.Exit(1)
    typer.echo(f"ok: {len(manifest.shards)} shards of {location.display_url}, {what} match the manifest")


def _verify_progress() -> Callable[[int, int], None]:
    """A one-line ``checked i/n shards`` display on a terminal's stderr (at most 10 updates/s)."""
    last = [0.0]

    def show(done: int, total: int) -> None:
        now = time.monotonic()
        if done == total or now - last[0] >= 0.1:
            last[0] = now
            end = "\n" if done == total else ""
            sys.stderr.write(f"\rchecked {done:,}/{total:,} shards{end}")
            sys.stderr.flush()

    return show


def _register_ingest() -> None:
    # `guideloom ingest` lives in the workers package (Ray). Its module imports Ray lazily, so
    # registering it costs nothing; without the package the command is simply absent.
    try:
        from guideloom.workers.cli import register
    except ImportError:
        return
    register(app)


_register_ingest()


def main() -> None:
    try:
        app()
    except GuideLoomError as err:  # pragma: no cover - commands handle their own
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
