"""The ``guideloom`` command: ``inspect``, ``verify``, ``mix`` and (with the ``ray`` extra) ``ingest``.

``inspect`` and ``verify`` read only the manifest and the shard files, so they work without the
format class the dataset was written with. S3 credentials and endpoints come from the usual
AWS environment variables or from ``--option key=value`` (fsspec storage options; use
``client_kwargs.endpoint_url=http://...`` for MinIO or another S3-compatible endpoint).
"""

from __future__ import annotations

import json
import sys
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
        for _shard, err in verify_shards(location, manifest, checksums=not size_only):
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


@app.command()
def mix(
    sources: list[str] = typer.Argument(..., help="Sources as URL=WEIGHT (weight after the last '=')."),
    sequence_length: int = typer.Option(None, "--sequence-length", "-L", help="Tokens per window (streams)."),
    stopping_strategy: str = typer.Option(
        "all_exhausted", help="all_exhausted (repeat smaller sources) or first_exhausted."
    ),
    option: list[str] = typer.Option(None, "--option", "-o", help=OPTION_HELP),
    preview: int = typer.Option(64, help="How many first positions to show as source letters."),
) -> None:
    """Preview a weighted mixture: each source's share, epoch length and repeats per epoch.

    Reads only the manifests. The numbers are those a ``guideloom.Mixture`` of the same sources,
    weights and stopping strategy gives the loader (see docs/mixing.md).
    """
    from guideloom.loading.interleave import integer_weights
    from guideloom.loading.mixture import MixturePlan

    names: list[str] = []
    sizes: list[int] = []
    weights: list[float] = []
    try:
        options = parse_options(option)
        classes = set()
        for arg in sources:
            url, sep, raw = arg.rpartition("=")
            if not sep or not url:
                raise ValueError(f"{arg!r} is not URL=WEIGHT")
            try:
                weight = float(raw)
            except ValueError:
                weight = float("nan")
            if not weight > 0 or weight == float("inf"):
                raise ValueError(f"{url}: weight {raw!r} is not a positive, finite number")
            weights.append(weight)
            location, manifest = read_manifest(url, options)
            classes.add(manifest.storage_class)
            if manifest.storage_class == "DocumentStorage":
                sizes.append(manifest.total_records)
            elif sequence_length is None:
                raise ValueError(f"{url} is a stream: pass --sequence-length")
            else:
                sizes.append(manifest.total_tokens // sequence_length)
            names.append(location.display_url)
        if len(classes) > 1:
            raise ValueError(f"the sources mix storage classes {sorted(classes)}: a mixture reads one")
        plan = MixturePlan(tuple(names), tuple(sizes), integer_weights(weights), stopping_strategy)
        lines = plan.lines(preview)
    except (GuideLoomError, ValueError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    typer.echo("\n".join(lines))


def _register_ingest() -> None:
    # `guideloom ingest` lives in guideloom.workers (installed with guideloom; its Ray and
    # tokenizer dependencies come with the `ray` extra). Registering it imports neither Ray nor
    # torch. The command is always listed: without the extra, running it says how to install it.
    try:
        from guideloom.workers.cli import register
    except ImportError as err:
        missing = err.name

        @app.command("ingest", context_settings={"ignore_unknown_options": True})
        def ingest(args: list[str] = typer.Argument(None, hidden=True)) -> None:
            """Tokenize raw text on Ray and commit a dataset (needs guideloom[ray])."""
            typer.echo(
                f'error: guideloom ingest needs the ray extra: pip install "guideloom[ray]" '
                f"(missing module {missing!r})",
                err=True,
            )
            raise typer.Exit(1)

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
