"""The ``guideloom`` command: ``inspect``, ``verify``, ``log``, ``rollback``, ``expire``, ``mix``
and (with the ``ray`` extra) ``ingest``.

``inspect`` and ``verify`` read only the manifest and the shard files, so they work without the
format class the dataset was written with. S3 credentials and endpoints come from the usual
AWS environment variables or from ``--option key=value`` (fsspec storage options; use
``client_kwargs.endpoint_url=http://...`` for MinIO or another S3-compatible endpoint).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import typer

from guideloom.errors import GuideLoomError
from guideloom.manifest import Manifest
from guideloom.manifest.snapshots import Snapshot
from guideloom.manifest.totals import ingest_totals
from guideloom.reporting import register as _register_report
from guideloom.storage.byurl import open_url
from guideloom.storage.checks import read_manifest, verify_shards
from guideloom.storage.history import History
from guideloom.storage.opening import opening_code
from guideloom.types import DOCUMENTS, STREAM

app = typer.Typer(
    name="guideloom",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
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


def _count(n: int, word: str) -> str:
    """``_count(1, "shard")`` -> ``"1 shard"``; ``_count(2_000, "shard")`` -> ``"2,000 shards"``."""
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def _version(value: bool) -> None:
    if value:
        from guideloom._version import __version__

        typer.echo(f"guideloom {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Tokenized training data in object storage (the commands below; COMMAND --help for each)."""


WIDTH = 80  # inspect's text output fits this many columns
_INGEST = "ingest"  # the metadata key guideloom ingest writes (guideloom.workers.ingest.METADATA_KEY)


def summarize(
    display_url: str,
    manifest: Manifest,
    shards: int = 10,
    storage_options: dict[str, Any] | None = None,
    snapshots: Callable[[], Sequence[Snapshot]] | None = None,
) -> dict[str, Any]:
    """What ``inspect`` shows, as JSON values: counts, format, metadata and the first shards.

    Reads the manifest's shard columns only: no per-shard objects are built, so the cost does
    not grow with the number of shards beyond the columns themselves. ``shards``: how many
    shards to list (-1: all). ``documents`` is the whole dataset's number of documents when it
    is known (`guideloom.manifest.totals.ingest_totals`; ``snapshots`` reads the snapshot log,
    needed for datasets ingested by earlier versions); otherwise None.
    """
    table = manifest.shard_table
    n = len(table)
    documents = ingest_totals(manifest, snapshots).documents
    listed = range(n if shards < 0 else min(shards, n))
    columns = list(table.files.values())
    return {
        "url": display_url,
        "storage_class": manifest.storage_class,
        "format": manifest.format.model_dump(),
        "documents": documents,
        "records": manifest.total_records,
        "tokens": manifest.total_tokens,
        "spans": manifest.total_spans,
        "bytes": manifest.total_bytes,
        "parts": manifest.num_parts,
        "shards": n,
        "created_at": manifest.created_at,
        "guideloom_version": manifest.guideloom_version,
        "fingerprint": manifest.fingerprint,
        "metadata": manifest.metadata,
        "opening_code": opening_code(display_url, manifest, storage_options=storage_options or {}),
        "shard_list": [
            {
                "part": table.part[i],
                "index": table.index[i],
                "records": table.records[i],
                "tokens": table.tokens[i],
                "spans": table.spans[i],
                "bytes": sum(c.size[i] for c in columns),
                "data": table.path(i, "data"),
            }
            for i in listed
        ],
    }


def _short(value: Any, room: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= room else text[: max(room - 1, 1)] + "…"


def _metadata_lines(metadata: dict[str, Any], indent: str = "  ") -> list[str]:
    """One line per key (nested dicts indented, long lists counted), each within WIDTH columns."""
    lines: list[str] = []
    for key in sorted(metadata):
        value = metadata[key]
        if isinstance(value, dict) and value:
            lines.append(f"{indent}{key}:")
            lines += _metadata_lines(value, indent + "  ")
            continue
        if isinstance(value, list) and len(value) > 3:
            value = f"[{_count(len(value), 'item')}; --json shows them]"
        label = f"{indent}{key}: "
        lines.append(label + _short(value, WIDTH - len(label)))
    return lines


def render(summary: dict[str, Any]) -> str:
    """``inspect``'s text: the summary of `summarize`, within `WIDTH` columns."""
    fmt = summary["format"]
    rows = [
        ("dataset", summary["url"]),
        ("storage class", summary["storage_class"]),
        ("format", f"{fmt['name']} ({fmt['module']})"),
        ("  config", _short(fmt["config"], WIDTH - 15)),
    ]
    if summary["documents"] is not None:
        rows.append(("documents", f"{summary['documents']:,}"))
    if summary["storage_class"] != "DocumentStorage":
        many = summary["documents"] is not None and summary["documents"] != summary["records"]
        note = " (one per batch written: a record holds several documents)" if many else ""
        rows.append(("records", f"{summary['records']:,}{note}"))
        rows.append(("tokens", f"{summary['tokens']:,}"))
    if summary["storage_class"] == "StreamWithMetaStorage":
        rows.append(("spans", f"{summary['spans']:,}"))
    rows += [
        ("size", f"{summary['bytes']:,} bytes ({_human(summary['bytes'])})"),
        ("layout", f"{_count(summary['shards'], 'shard')} in {_count(summary['parts'], 'part')}"),
        ("created", f"{summary['created_at']}, guideloom {summary['guideloom_version']}"),
        ("fingerprint", summary["fingerprint"]),
    ]
    lines = [f"{label:<15}{value}" for label, value in rows]
    if summary["metadata"]:
        lines += ["metadata", *_metadata_lines(summary["metadata"])]
    lines += [
        "",
        "open it in Python:",
        *("  " + line if line else "" for line in summary["opening_code"].split("\n")),
    ]
    listed = summary["shard_list"]
    if listed:
        lines += ["", " part  shard     records        tokens         bytes  data file"]
        for s in listed:
            lines.append(
                f"{s['part']:5d}  {s['index']:5d}  {s['records']:10,d}  {s['tokens']:12,d}  "
                f"{s['bytes']:12,d}  {s['data'].rsplit('/', 1)[-1]}"
            )
        more = summary["shards"] - len(listed)
        if more:
            lines.append(f"  ... {_count(more, 'more shard')} (--shards -1 lists all)")
    return "\n".join(lines)


@app.command(short_help="Summarize a dataset and print the Python lines that open it.")
def inspect(
    url: str = typer.Argument(..., metavar="URL", help="Dataset URL or local path."),
    option: list[str] = typer.Option(None, "--option", "-o", metavar="KEY=VALUE", help=OPTION_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON object (for scripts)."),
    manifest_json: bool = typer.Option(False, "--manifest", help="Print the whole manifest as JSON."),
    shards: int = typer.Option(10, metavar="N", help="Shards to list (0: none, -1: all)."),
) -> None:
    """Show a dataset's storage class, format, counts, metadata and shards, and the Python
    lines that open it.

    Exits 0, or 2 when the dataset cannot be opened.
    """
    try:
        options = parse_options(option)
        location, manifest = read_manifest(url, options)
    except GuideLoomError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    if manifest_json:
        typer.echo(manifest.model_dump_json(indent=2))
        return
    summary = summarize(location.display_url, manifest, shards, options, History(location).snapshots)
    typer.echo(json.dumps(summary, indent=2) if as_json else render(summary))


@app.command(short_help="Re-check every shard's size and checksum against the manifest.")
def verify(
    url: str = typer.Argument(..., metavar="URL", help="Dataset URL or local path."),
    option: list[str] = typer.Option(None, "--option", "-o", metavar="KEY=VALUE", help=OPTION_HELP),
    size_only: bool = typer.Option(False, "--size-only", help="Check sizes only (no full read)."),
) -> None:
    """Re-check every shard file's size and checksum against the manifest.

    Exits 0 when all match, 1 naming each bad shard, 2 when the dataset cannot be opened.
    """
    try:
        location, history = _history(url, option)
        snap, manifest = history.open()
        bad = 0
        for problem in history.check_metadata(snap):  # what only verify checks of the metadata
            bad += 1
            typer.echo(f"BAD  {problem}", err=True)
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


def _history(url: str, option: list[str] | None) -> tuple[Any, Any]:
    from guideloom.io import Location
    from guideloom.storage.history import History

    location = Location(url, parse_options(option))
    return location, History(location)


@app.command(short_help="Print a dataset's snapshots, oldest first.")
def log(
    url: str = typer.Argument(..., metavar="URL", help="Dataset URL or local path."),
    option: list[str] = typer.Option(None, "--option", "-o", metavar="KEY=VALUE", help=OPTION_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object per snapshot."),
) -> None:
    """Print the history: each kept snapshot's id, time, operation, parent and counts (oldest
    first; the current one is marked with *).

    Exits 0, or 2 when the dataset cannot be opened.
    """
    try:
        location, history = _history(url, option)
        current, _ = history.open()  # as every reader opens it: the current snapshot checked
        snaps = history.snapshots()
    except GuideLoomError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    for snap in snaps:
        if as_json:
            typer.echo(snap.model_dump_json(exclude={"pieces"}))
        else:
            typer.echo(f"{'*' if snap.id == current.id else ' '} {snap}")
            dropped = (snap.metadata.get(_INGEST) or {}).get("dropped_total")
            if dropped:  # what that ingestion dropped, per reason (guideloom.workers.rejects)
                typer.echo("    dropped: " + ", ".join(f"{n:,} {reason}" for reason, n in dropped.items()))


@app.command(short_help="Make an older snapshot current (a new 'rollback' snapshot).")
def rollback(
    url: str = typer.Argument(..., metavar="URL", help="Dataset URL or local path."),
    snapshot: str = typer.Argument(
        ..., metavar="ID", help="A snapshot id from `guideloom log` (or its number)."
    ),
    option: list[str] = typer.Option(None, "--option", "-o", metavar="KEY=VALUE", help=OPTION_HELP),
) -> None:
    """Roll the dataset back to snapshot ID: a new snapshot with exactly its shards (no shard
    file is written or deleted). Exits 0, or 2 naming the problem (unknown or expired id, a
    commit that landed meanwhile)."""
    from guideloom.storage.commit import Committer

    try:
        location, history = _history(url, option)
        committer = Committer.of_location(location)
        current = history.current()
        snap = committer.rollback(history.get(snapshot), current)
    except GuideLoomError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"rolled back: {snap}")


@app.command(short_help="Delete old snapshots and the files only they use.")
def expire(
    url: str = typer.Argument(..., metavar="URL", help="Dataset URL or local path."),
    keep_last: int = typer.Option(
        1, "--keep-last", metavar="N", help="Keep the N newest snapshots (at least 1)."
    ),
    older_than: str = typer.Option(
        None, "--older-than", metavar="AGE", help="Expire only snapshots older than AGE: 30m, 12h, 7d."
    ),
    grace: str = typer.Option("1d", "--grace", metavar="AGE", help="Never delete files younger than AGE."),
    option: list[str] = typer.Option(None, "--option", "-o", metavar="KEY=VALUE", help=OPTION_HELP),
) -> None:
    """Expire snapshots beyond the newest N (and older than AGE), then delete the shard files,
    table pieces and part records no kept snapshot uses that are older than the grace period.
    Exits 0, or 2 naming the problem."""
    from guideloom.storage.commit import Committer

    try:
        age = _age(older_than) if older_than else None
        location, _ = _history(url, option)
        committer = Committer.of_location(location)
        expired = committer.expire(age, keep_last, _age(grace))
    except (GuideLoomError, ValueError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    for snap in expired:
        typer.echo(f"expired {snap.id}  {snap.time}  {snap.operation}")
    typer.echo(f"{_count(len(expired), 'snapshot')} expired at {location.display_url}")
    if expired and _age(grace).total_seconds() > 0:
        files, size = committer.grace_kept
        typer.echo(
            f"files that only expired snapshots used and that are younger than --grace {grace} stay "
            f"({_count(files, 'file')}, {size:,} bytes; a writer may still be using them): run "
            "expire again once they are older, or pass --grace 0s when no writer or reader is "
            "working on the dataset"
        )


def _age(text: str) -> Any:
    import datetime as dt

    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = text[:-1], text[-1:]
    if unit not in units or not number.replace(".", "", 1).isdigit():
        raise ValueError(f"an age is a number and a unit (s, m, h or d), like 12h or 7d; got {text!r}")
    return dt.timedelta(seconds=float(number) * units[unit])


@app.command()
def mix(
    sources: list[str] = typer.Argument(
        ...,
        help="Sources as URL=WEIGHT (weight after the last '='), or W1 PREFIX1 W2 PREFIX2 (Megatron's list).",
    ),
    sequence_length: int = typer.Option(None, "--sequence-length", "-L", help="Tokens per window (streams)."),
    stopping_strategy: str = typer.Option(
        "all_exhausted", help="all_exhausted (repeat smaller sources) or first_exhausted."
    ),
    option: list[str] = typer.Option(None, "--option", "-o", help=OPTION_HELP),
    preview: int = typer.Option(64, help="How many first positions to show as source letters."),
    weight_by: str = typer.Option(
        "samples", help="samples (weights are shares of samples) or tokens (shares of tokens, documents)."
    ),
    schedule: str = typer.Option("auto", help="auto, tree or quota: how positions are dealt to sources."),
) -> None:
    """Preview a weighted mixture: each source's share, epoch length and repeats per epoch.

    Reads only the manifests. The numbers are those a ``guideloom.Mixture`` of the same sources,
    weights and stopping strategy gives the loader (see docs/mixing.md).
    """
    from guideloom.loading.mixture_plan import MixturePlan, check_same_schema, document_tokens, sample_weights

    names: list[str] = []
    sizes: list[int] = []
    weights: list[float] = []
    documents: list[int] = []  # weight_by tokens: each document source's documents and tokens
    tokens: list[int] = []
    try:
        if weight_by not in ("samples", "tokens"):
            raise ValueError(f"--weight-by must be samples or tokens, got {weight_by!r}")
        options = parse_options(option)
        classes: dict[str, str] = {}  # storage class -> the first source of it
        schemas: list[tuple[str, str, str, dict[str, Any]]] = []
        from guideloom.loading.blend import is_weighted_list, open_data, url_weight_pairs, weighted_pairs

        opened: dict[str, Any] = {}
        if is_weighted_list(
            sources
        ):  # Megatron's W1 PREFIX1 W2 PREFIX2 ...: open them as guideloom.open does
            storages = open_data(list(sources), options).storages
            opened = {s.url: s for s in storages}
            sources = [f"{s.url}={w}" for s, (_, w) in zip(storages, weighted_pairs(sources))]
        for url, weight in url_weight_pairs(sources):
            weights.append(weight)
            if url in opened:
                location, manifest = opened[url].location, opened[url].manifest
            else:
                location, manifest = read_manifest(url, options)
            classes.setdefault(manifest.storage_class, location.display_url)
            schemas.append((url, location.display_url, manifest.format.name, manifest.format.config))
            if manifest.storage_class == "DocumentStorage":
                sizes.append(manifest.total_records)
                if weight_by == "tokens":
                    total = document_tokens(manifest, History(location).snapshots)
                    if not total or manifest.total_records < 1:
                        raise ValueError(
                            f"{url}: --weight-by tokens needs its number of tokens, and its manifest "
                            "records none (write it with storage.writer(metadata={'tokens': N}))"
                        )
                    documents.append(manifest.total_records)
                    tokens.append(total)
            elif sequence_length is None:
                raise ValueError(f"{url} is a stream: pass --sequence-length")
            else:
                sizes.append(manifest.total_tokens // sequence_length)
            names.append(url if url in opened else location.display_url)
        if len(classes) > 1:
            which = ", ".join(f"{src} is a {cls}" for cls, src in classes.items())
            raise ValueError(
                f"the sources mix storage classes ({which}): a mixture reads one layout; "
                "preview (and mix) only sources of one class, e.g. only the "
                f"{next(iter(classes))} sources"
            )
        layout = DOCUMENTS if "DocumentStorage" in classes else STREAM
        check_same_schema(layout, schemas)  # the check Mixture makes: same fields and dtypes
        # the Mixture's own arithmetic (weight_by="tokens": shares of tokens -> of documents)
        sample, means = sample_weights(weights, documents, tokens)
        plan = MixturePlan(
            tuple(names),
            tuple(sizes),
            sample,
            stopping_strategy,
            mean_tokens=means,
            schedule=schedule,
        )
        lines = plan.lines(preview)
    except (GuideLoomError, ValueError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    typer.echo("\n".join(lines))


def _step_range(text: str) -> range:
    first, sep, last = text.partition("-")
    try:
        a = int(first)
        b = int(last) if sep else a
    except ValueError:
        raise ValueError(
            f"--steps takes A-B (first and last step, inclusive) or one step, got {text!r}"
        ) from None
    if a < 0 or b < a:
        raise ValueError(f"--steps {text!r}: the first step must be >= 0 and not after the last")
    return range(a, b + 1)


@app.command(short_help="Which samples (shards, byte ranges) steps of a training run read.")
def trace(
    state_file: str = typer.Argument(..., metavar="STATE.json", help="A loader state_dict() saved as JSON."),
    sources: list[str] = typer.Argument(
        ...,
        metavar="URL...",
        help="The dataset URL, URL=WEIGHT for each source of a mixture, or W1 PREFIX1 W2 PREFIX2 (Megatron's list).",
    ),
    steps: str = typer.Option(
        ..., "--steps", help="Steps A-B (inclusive), numbered from the start of training."
    ),
    option: list[str] = typer.Option(None, "--option", "-o", metavar="KEY=VALUE", help=OPTION_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print JSON Lines (every field) instead of a table."),
    wide: bool = typer.Option(
        False, "--wide", help="A table with every field in full (the default fits 120 columns)."
    ),
    first_step: int = typer.Option(0, "--first-step", help="The step number of epoch 0's first step."),
    decode: int = typer.Option(
        0,
        "--decode",
        metavar="N",
        help="Also read each row and print its first N tokens decoded (0: read nothing).",
    ),
    tokenizer: str = typer.Option(
        None,
        "--tokenizer",
        metavar="SPEC",
        help="--decode: the tokenizer (default: the ingestion's, from the manifest).",
    ),
) -> None:
    """Print, for every row of every step in --steps on every rank, the sample it read and
    where its bytes are (shard and byte range), from the state and the manifests alone: no data
    is read and the loader is not replayed (see "Debugging a loss spike" in docs/training.md).
    With --decode N each row's sample is read and its first N tokens are printed as text.
    The table fits 120 columns (shards as p<part>/s<shard>, byte offsets and sizes abbreviated);
    --wide prints every field in full, --json every field as JSON Lines."""
    import json as _json

    from guideloom.loading.mixture import Mixture
    from guideloom.loading.trace import trace as trace_rows

    try:
        options = parse_options(option)
        with open(state_file, encoding="utf-8") as f:
            state = _json.load(f)
        from guideloom.loading.blend import is_weighted_list, open_data, url_weight_pairs

        if len(sources) == 1 and "=" not in sources[0] or is_weighted_list(sources):
            data: Any = open_data(sources if len(sources) > 1 else sources[0], options)
        else:
            data = Mixture([(open_url(url, options), weight) for url, weight in url_weight_pairs(sources)])
        if decode < 0:
            raise ValueError(f"--decode takes a number of tokens >= 0, got {decode}")
        rows = trace_rows(state, data, _step_range(steps), first_step=first_step)
        if decode:
            rows = _decoded(rows, data, state, decode, tokenizer, options)
        if as_json:
            for row in rows:
                typer.echo(_json.dumps(row))
            return
        from guideloom.terminal import trace_table

        for line in trace_table(rows, wide=wide, text=bool(decode)):
            typer.echo(line)
    except BrokenPipeError:  # the reader went away (`| head`): not an error of the command
        raise
    except (GuideLoomError, ValueError, OSError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None


def _decoded(
    rows: Any, data: Any, state: dict[str, Any], n: int, spec: str | None, options: dict[str, Any]
) -> Any:
    """``trace --decode N``: each row with ``tokens`` (its first ``n`` ids) and ``text`` (them
    decoded), read through the views the loader read (one read per row)."""
    from guideloom.loading.mixture import Mixture
    from guideloom.loading.state import LoaderState
    from guideloom.storage.openview import open_view

    length = LoaderState.from_dict(state).identity.sequence_length
    views: dict[Any, Any]
    storages: dict[Any, Any]
    if isinstance(data, Mixture):
        mixed = data.dataset(length)
        views = dict(zip(data.names, mixed.views))
        storages = dict(zip(data.names, data.storages))
    else:
        views = {None: open_view(data, length)}
        storages = {None: data}
    decoders: dict[Any, Any] = {}
    for row in rows:
        key = row["source"] if isinstance(data, Mixture) else None
        if key not in decoders:
            decoders[key] = _decoder(storages[key], spec, options)
        sample = views[key][row["sample_index"]]
        ids = sample.get("tokens") if isinstance(sample, dict) else None
        if ids is None:
            raise ValueError(
                f"--decode: the samples of {storages[key].url} hold no 'tokens' field to decode; "
                "leave out --decode"
            )
        first = [int(t) for t in list(ids)[:n]]
        yield {**row, "tokens": first, "text": decoders[key].decode(first)}


def _decoder(storage: Any, spec: str | None, options: dict[str, Any]) -> Any:
    """The tokenizer that decodes ``storage``'s tokens: ``spec``, else the ingestion's."""
    from guideloom.workers.tokenizer import load_tokenizer

    if spec is None:
        meta = (storage.manifest.metadata or {}).get(_INGEST) or {}
        spec = (meta.get("tokenizer") or {}).get("spec") if isinstance(meta, dict) else None
        if not spec:
            raise ValueError(
                f"--decode: {storage.url} records no ingestion tokenizer (it was not written by "
                "guideloom ingest); name the one that made its tokens: --tokenizer SPEC (e.g. "
                "bytes, hf:PATH, tiktoken:NAME)"
            )
    try:
        return load_tokenizer(spec, storage_options=options)
    except GuideLoomError as err:
        raise ValueError(
            f"--decode: the tokenizer {spec} of {storage.url} cannot be loaded here ({err}); "
            "name one that can: --tokenizer SPEC"
        ) from None


def _prices_file(path: str) -> dict[str, dict[str, float]]:
    """``--prices FILE``: JSON or YAML ``{provider: {get_per_1000: $, egress_per_gb: $}}``."""
    import json as _json

    text = Path(path).read_text(encoding="utf-8")
    try:
        data = _json.loads(text)
    except ValueError:
        try:
            import yaml
        except ImportError:
            raise ValueError(
                f"--prices {path}: not JSON, and YAML needs pyyaml (pip install pyyaml)"
            ) from None
        data = yaml.safe_load(text)
    keys = {"get_per_1000", "egress_per_gb"}
    if not isinstance(data, dict) or not all(
        isinstance(v, dict) and set(v) == keys and all(isinstance(x, (int, float)) for x in v.values())
        for v in data.values()
    ):
        raise ValueError(
            f"--prices {path}: expected {{provider: {{get_per_1000: DOLLARS, egress_per_gb: DOLLARS}}}}, "
            'for example {"s3": {"get_per_1000": 0.0004, "egress_per_gb": 0}}'
        )
    for name, values in data.items():
        bad = {k: x for k, x in values.items() if x < 0}
        if bad:
            raise ValueError(
                f"--prices {path}: provider {name!r} has a negative price ({', '.join(f'{k}: {x}' for k, x in bad.items())}); "
                "prices are dollars >= 0 (0 for what your provider does not charge)"
            )
    return {str(k): {n: float(x) for n, x in v.items()} for k, v in data.items()}


@app.command(short_help="Requests, bytes and price of planned epochs, from the manifest alone.")
def estimate(
    url: str = typer.Argument(
        ..., help="The dataset (a stream, annotated stream or documents), local or in a bucket."
    ),
    sequence_length: int = typer.Option(
        None, "--sequence-length", help="Tokens per window (streams need it; documents do not)."
    ),
    batch_size: int = typer.Option(1, "--batch-size", help="Windows per batch, per rank."),
    shuffle: str = typer.Option("off", "--shuffle", help="off, block or full."),
    seed: int = typer.Option(0, "--seed"),
    world_size: int = typer.Option(1, "--world-size", help="Ranks reading the dataset."),
    num_workers: int = typer.Option(
        0, "--num-workers", help="Loader workers per rank (documents cache index pages per worker)."
    ),
    epochs: int = typer.Option(1, "--epochs"),
    provider: str = typer.Option("s3", "--provider", help="Whose list prices: s3, gcs or azure."),
    prices: str = typer.Option(None, "--prices", metavar="FILE", help="Your own prices (JSON or YAML)."),
    option: list[str] = typer.Option(None, "--option", "-o", metavar="KEY=VALUE", help=OPTION_HELP),
) -> None:
    """Print the ranged GETs and the bytes the loaders of every rank would send over the planned
    epochs, and their price, computed from the manifest and the loader's own order without
    reading any data (see "Counting requests and bytes" in docs/remote-buckets.md)."""
    from guideloom.loading.estimate import PRICES, PRICES_TAKEN
    from guideloom.loading.estimate import estimate as plan

    modes = {"off": False, "block": "block", "full": True}
    try:
        if shuffle not in modes:
            raise ValueError(f"--shuffle {shuffle!r}: one of off, block, full")
        own = _prices_file(prices) if prices else None
        unknown = sorted(set(own or {}) - set(PRICES) - {provider})
        if unknown:
            raise ValueError(
                f"--prices {prices} names provider {unknown[0]!r}, which is neither a known one "
                f"({', '.join(sorted(PRICES))}) nor the --provider priced ({provider}); fix its "
                f"name, or price it: --provider {unknown[0]}"
            )
        storage = open_url(url, parse_options(option))
        result = plan(
            storage, sequence_length=sequence_length, batch_size=batch_size, shuffle=modes[shuffle],
            seed=seed, world_size=world_size, epochs=epochs, num_workers=num_workers,
        )  # fmt: skip
        cost = result.price(provider, own)
    except (GuideLoomError, ValueError, OSError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    unit = "documents" if storage.layout == DOCUMENTS else "windows"
    typer.echo(f"{'epoch':>5}  {unit:>12}  {'GETs':>12}  {'bytes':>16}")
    for k, e in enumerate(result.epochs):
        typer.echo(f"{k:>5}  {e['windows']:>12,}  {e['requests']:>12,}  {e['bytes']:>16,}")
    typer.echo(f"{'all':>5}  {result.windows:>12,}  {result.requests:>12,}  {result.bytes:>16,}")
    table = {**PRICES, **(own or {})}[provider]
    source = f"--prices {prices}" if own and provider in own else f"{provider} list prices of {PRICES_TAKEN}"
    typer.echo(
        f"price: ${cost:,.2f} ({source}: ${table['get_per_1000']:g} per 1,000 GETs, "
        f"${table['egress_per_gb']:g} per GB out; reading in the bucket's region usually moves "
        "bytes for free: give egress_per_gb 0 in --prices)"
    )


@app.command(short_help="Write other projects' token files (Megatron, ...) as a GuideLoom dataset.")
def convert(
    sources: list[str] = typer.Argument(
        ..., metavar="SRC...", help="Token files: files, a Megatron prefix, globs."
    ),
    format: str = typer.Option(
        None, "--format", help="megatron, datatrove, nanogpt, llmc or olmo (default: from the files)."
    ),  # noqa: A002
    output: str = typer.Option(..., "--output", help="The new dataset's URL or local directory."),
    dtype: str = typer.Option(
        None, "--dtype", help="Token dtype where the files do not record it (uint16, uint32)."
    ),
    eos_id: int = typer.Option(
        None, "--eos-id", help="End-of-text id: documents of files without an index end after it."
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a dataset committed at --output."),
    use_ray: bool = typer.Option(
        False, "--ray", help="Write one part per file as Ray tasks (needs guideloom[ray])."
    ),
    option: list[str] = typer.Option(None, "--option", "-o", metavar="KEY=VALUE", help=OPTION_HELP),
) -> None:
    """Write token files another project wrote as a GuideLoom stream dataset (manifest,
    checksums, record starts, a snapshot): one part per file, the files' documents as records
    (see "Convert and export" in docs/datasets-you-have.md)."""
    from guideloom.storage.foreign import open_foreign
    from guideloom.storage.foreign.convert import convert_foreign

    try:
        options = parse_options(option)
        source = open_foreign(sources, format, dtype=dtype, eos_id=eos_id, storage_options=options)
        run_parts = None
        if use_ray:
            from guideloom.workers.convert import ray_parts

            run_parts = ray_parts
        manifest = convert_foreign(
            source, output, storage_options=options, overwrite=overwrite, run_parts=run_parts
        )
    except (GuideLoomError, ValueError, TypeError, OSError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    typer.echo(
        f"wrote {output}: {manifest.total_records:,} documents, {manifest.total_tokens:,} tokens "
        f"in {manifest.num_shards} shards, from {len(source.files)} {source.kind} files"
    )


@app.command("export", short_help="Write a GuideLoom dataset as a Megatron .bin/.idx pair.")
def export(
    url: str = typer.Argument(..., help="The dataset (a stream or documents), local or in a bucket."),
    output_prefix: str = typer.Argument(
        ..., metavar="OUTPUT_PREFIX", help="Writes OUTPUT_PREFIX.bin and .idx."
    ),
    format: str = typer.Option("megatron", "--format", help="The layout to write: megatron."),  # noqa: A002
    field: str = typer.Option(
        "tokens", "--field", help="The stream field (or document key) of the token ids."
    ),
    dtype: str = typer.Option(None, "--dtype", help="Megatron token dtype (default: the field's)."),
    eos_id: int = typer.Option(
        None, "--eos-id", help="A stream without record starts: documents end after it."
    ),
    option: list[str] = typer.Option(None, "--option", "-o", metavar="KEY=VALUE", help=OPTION_HELP),
) -> None:
    """Write a GuideLoom dataset as a Megatron pair that megatron-core's IndexedDataset opens:
    one Megatron document per record (a stream's records, or documents)."""
    from guideloom.storage.foreign.export import export_megatron

    try:
        if format != "megatron":
            raise ValueError(f"--format {format!r}: export writes megatron (.bin/.idx) only")
        options = parse_options(option)
        storage = open_url(url, options)
        documents, tokens = export_megatron(
            storage, output_prefix, field=field, dtype=dtype, eos_id=eos_id, storage_options=options
        )
    except (GuideLoomError, ValueError, TypeError, OSError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"wrote {output_prefix}.bin and .idx: {documents:,} documents, {tokens:,} tokens")


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
_register_report(app, parse_options, OPTION_HELP)


def _register_shuffle_report() -> None:
    from guideloom.loading.shuffle_report import register  # NumPy only: no torch

    register(app, OPTION_HELP, parse_options)


_register_shuffle_report()


def _summary_line() -> None:
    """The root help names every registered command (added by any module, ingest included)."""
    names = [c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands]
    listed = ", ".join(n.replace("_", "-") for n in names if n)
    app.info.help = f"Tokenized training data in object storage: {listed}."


_summary_line()


def main() -> None:
    from guideloom.terminal import quiet_broken_pipe, stdout_closed

    try:
        app()
    except BrokenPipeError:  # `guideloom ... | head`: the reader has all it wanted
        quiet_broken_pipe()
    except SystemExit as done:
        if done.code == 1 and stdout_closed():  # click's own quiet exit on a closed pipe
            quiet_broken_pipe()
        raise
    except GuideLoomError as err:  # pragma: no cover - commands handle their own
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
