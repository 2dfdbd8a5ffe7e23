"""One self-contained HTML page about a dataset, a snapshot or a mixture: ``guideloom report``.

`report` gathers what the manifest, the snapshot log and the index files say (counts, shard
sizes, record lengths, the history as a timeline), reads a few real windows and, for chat data
and streams with metadata, the loss masks and annotations of a sample of shards, and plays the
loader's order to predict the requests of an epoch (`guideloom.loading.estimate`). `render_html`
writes the result into one HTML file whose script and styles are inline: it opens from disk,
with no server and no network.

Cost is bounded whatever the number of shards: the shard columns are read as arrays, and index
and data files are read only for an evenly spread sample of at most ``sample_shards`` shards
(all of them when the dataset has fewer). Each figure says whether it covers every shard or a
sample.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import typer

import guideloom.layout as layout
from guideloom._version import __version__
from guideloom.errors import GuideLoomError
from guideloom.formats import StreamNumpyFormat, StreamWithMetaStorageFormat
from guideloom.io.shards import open_shard_reader
from guideloom.storage.base import Storage
from guideloom.storage.byurl import open_url
from guideloom.storage.history import History
from guideloom.storage.openview import open_view
from guideloom.types import DOCUMENTS, STREAM_WITH_META, stream_view

__all__ = ["DEFAULT_SEQUENCE_LENGTH", "register", "render_html", "report", "sample_shards"]

DEFAULT_SEQUENCE_LENGTH = 2048  # window length when none is given (clipped to the stream)
BINS = 20  # bars of a histogram
TOKENS_SHOWN = 512  # tokens of a window drawn at most
_INGEST = "ingest"  # the metadata key guideloom ingest writes
_READ_BUDGET = 64 * 2**20  # bytes of data files read for loss masks, at most
_SPAN_BUDGET = 20_000  # annotations decoded for the span counts, at most


def sample_shards(n: int, k: int) -> np.ndarray:
    """Indexes of ``k`` shards spread evenly over ``n`` (all of them when ``n <= k``).

    Args:
        n: Shards in the dataset.
        k: Shards to pick at most.

    Returns:
        Sorted, distinct shard indexes.
    """
    if n <= k:
        return np.arange(n, dtype=np.int64)
    return np.unique(np.linspace(0, n - 1, k).round().astype(np.int64))


def _histogram(values: np.ndarray, bins: int = BINS) -> dict[str, Any]:
    values = np.asarray(values, dtype=np.int64)
    if not len(values):
        return {"edges": [], "counts": [], "n": 0, "min": None, "max": None, "mean": None, "sum": 0}
    lo, hi = int(values.min()), int(values.max())
    if lo == hi:
        edges = np.array([lo, hi + 1], dtype=np.float64)
        counts = np.array([len(values)])
    else:
        counts, edges = np.histogram(values, bins=min(bins, hi - lo + 1), range=(lo, hi))
    return {
        "edges": [float(e) for e in edges],
        "counts": [int(c) for c in counts],
        "n": int(len(values)),
        "min": lo,
        "max": hi,
        "mean": float(values.mean()),
        "sum": int(values.sum()),
    }


def _tokenizer_spec(metadata: Mapping[str, Any]) -> str | None:
    meta = metadata.get(_INGEST) if isinstance(metadata, Mapping) else None
    tok = meta.get("tokenizer") if isinstance(meta, Mapping) else None
    spec = tok.get("spec") if isinstance(tok, Mapping) else None
    return str(spec) if spec else None


def _history(snaps: Sequence[Any], current_id: str) -> dict[str, Any]:
    entries = [
        {
            "id": s.id,
            "sequence": s.sequence,
            "time": s.time,
            "operation": s.operation,
            "source": s.source,
            "records": s.summary.records,
            "tokens": s.summary.tokens,
            "shards": s.summary.shards,
            "bytes": s.summary.bytes,
            "added_shards": s.summary.added_shards,
            "removed_shards": s.summary.removed_shards,
            "added_records": s.summary.added_records,
            "added_tokens": s.summary.added_tokens,
            "current": s.id == current_id,
        }
        for s in snaps
    ]
    first = snaps[0].sequence if snaps else 0
    return {"snapshots": entries, "expired": max(first - 1, 0)}


def _snapshots(storage: Storage) -> list[Any]:
    """The kept snapshots, oldest first, from the log (read once); a dataset written before
    snapshots has none logged: its one snapshot is the one the storage opened (its manifest is
    not parsed again)."""
    if not storage.location.list(f"{layout.SNAPSHOTS_DIR}/log"):
        return [storage.current_snapshot]
    return History(storage.location).snapshots()


def _stream_dtype(fmt: Any) -> np.dtype | None:
    stream_fmt = fmt.stream_format if isinstance(fmt, StreamWithMetaStorageFormat) else fmt
    if not isinstance(stream_fmt, StreamNumpyFormat):
        return None
    return stream_fmt.dtype if stream_fmt.dtype.names else None


class _Dataset:
    """What the report shows of one dataset (see `report`)."""

    def __init__(self, storage: Storage, sample: int, options: dict[str, Any]) -> None:
        self.storage = storage
        self.manifest = storage.manifest
        self.table = self.manifest.shard_table
        self.reader = open_shard_reader(storage.location, self.table)
        self.sample = sample_shards(len(self.table.part), sample)
        self.options = options
        self.notes: list[str] = []
        self.tokens = np.asarray(self.table.tokens, dtype=np.int64)
        self.records = np.asarray(self.table.records, dtype=np.int64)

    def _coverage(self) -> dict[str, Any]:
        return {"shards_read": int(len(self.sample)), "shards": len(self.table.part),
                "exact": len(self.sample) == len(self.table.part)}  # fmt: skip

    def _runs(self, shards: list[int]) -> list[list[int]]:
        """``shards`` (sorted) cut into runs of consecutive shard numbers."""
        runs: list[list[int]] = []
        for sh in shards:
            if runs and runs[-1][-1] == sh - 1:
                runs[-1].append(sh)
            else:
                runs.append([sh])
        return runs

    def _read_items(self, file: str, shards: list[int], dtype: np.dtype) -> dict[int, np.ndarray]:
        """The items of index file ``file`` of each of ``shards`` (one round of reads)."""
        requests = [(sh, file, layout.HEADER_SIZE, self.table.files[file].size[sh]) for sh in shards]
        blobs = self.reader.read(requests) if requests else []
        return {sh: np.frombuffer(blob, dtype) for sh, blob in zip(shards, blobs)}

    def _run_starts(self, run: list[int], starts: dict[int, np.ndarray]) -> tuple[np.ndarray, int]:
        """The record starts of a run of consecutive shards, in tokens from the run's first
        token, and the run's tokens."""
        base = np.cumsum([0] + [int(self.tokens[sh]) for sh in run])
        joined = [starts[sh].astype(np.int64) + base[k] for k, sh in enumerate(run)]
        return (np.concatenate(joined) if joined else np.empty(0, np.int64)), int(base[-1])

    def record_lengths(self) -> dict[str, Any] | None:
        """Lengths of the records of the sampled shards: tokens (streams, from the record
        starts) or encoded bytes (documents, from the offsets index). Where consecutive shards
        are read, a record that crosses from one into the next counts whole; a record cut by an
        unread shard counts up to the end of the shards read."""
        layout_name = self.storage.layout
        kind = "starts" if layout_name != DOCUMENTS else "index"
        if kind not in self.table.files:
            self.notes.append(
                "record lengths: this dataset stores no record starts (written before manifest "
                "version 3), so its record boundaries are not known"
            )
            return None
        shards = [int(sh) for sh in self.sample]
        items = self._read_items(kind, shards, layout.OFFSET_DTYPE)
        pieces = []
        if layout_name == DOCUMENTS:  # the offsets index: records + 1 offsets into the data
            pieces = [np.diff(items[sh].astype(np.int64)) for sh in shards]
        else:
            for run in self._runs(shards):
                starts, total = self._run_starts(run, items)
                pieces.append(np.diff(np.append(starts, total)))
        lengths = np.concatenate(pieces) if pieces else np.empty(0, np.int64)
        unit = "bytes" if layout_name == DOCUMENTS else "tokens"
        if layout_name == DOCUMENTS:
            self.notes.append(
                "record lengths of documents are in encoded bytes, not tokens: a document "
                "dataset's index files hold only each record's byte offsets (the writer counts "
                "no tokens per document), so tokens would need every record decoded"
            )
        return {"unit": unit, **_histogram(lengths), **self._coverage()}

    def shard_sizes(self) -> dict[str, Any]:
        sizes = np.zeros(len(self.table.part), dtype=np.int64)
        for column in self.table.files.values():
            sizes += np.asarray(column.size, dtype=np.int64)
        return {"unit": "bytes", **_histogram(sizes), "shards": len(sizes), "exact": True}

    def fields(self) -> list[dict[str, Any]]:
        dtype = _stream_dtype(self.storage.format)
        if dtype is None or self.storage.layout == DOCUMENTS:
            return []
        total = int(self.tokens.sum())
        out = []
        for name in dtype.names or ():
            sub = dtype.fields[name][0]  # type: ignore[index]
            out.append({"name": name, "dtype": str(sub), "values": total, "bytes": total * sub.itemsize})
        return out

    def files(self) -> list[dict[str, Any]]:
        return [
            {"name": name, "kind": column.kind, "bytes": int(np.asarray(column.size, dtype=np.int64).sum())}
            for name, column in self.table.files.items()
        ]

    def _data_of(self, shards: list[int]) -> list[np.ndarray]:
        dtype = _stream_dtype(self.storage.format)
        assert dtype is not None
        requests = [(s, "data", layout.HEADER_SIZE, self.table.files["data"].size[s]) for s in shards]
        return [np.frombuffer(b, dtype) for b in self.reader.read(requests)] if requests else []

    def loss_mask(self) -> dict[str, Any] | None:
        """Share of tokens with ``loss_mask`` 1 in the sampled shards, and per record."""
        dtype = _stream_dtype(self.storage.format)
        if dtype is None or "loss_mask" not in (dtype.names or ()) or self.storage.layout == DOCUMENTS:
            return None
        sizes = np.asarray(self.table.files["data"].size, dtype=np.int64)
        picked = self.sample
        while len(picked) > 1 and int(sizes[picked].sum()) > _READ_BUDGET:  # fewer, still spread
            picked = sample_shards(len(sizes), len(picked) // 2)
        shards = [int(sh) for sh in picked]
        ones = total = 0
        per_record: list[np.ndarray] = []
        data = dict(zip(shards, self._data_of(shards)))
        starts = (
            self._read_items("starts", shards, layout.OFFSET_DTYPE) if "starts" in self.table.files else {}
        )
        for run in self._runs(shards):
            mask = np.concatenate([(data[sh]["loss_mask"] != 0).astype(np.int64) for sh in run])
            ones += int(mask.sum())
            total += len(mask)
            if starts and len(mask):
                at, _ = self._run_starts(run, starts)
                if len(at):
                    lengths = np.diff(np.append(at, len(mask)))
                    sums = np.add.reduceat(mask, at)
                    keep = lengths > 0
                    per_record.append(sums[keep] / lengths[keep])
        shares = np.concatenate(per_record) if per_record else np.empty(0)
        counts, edges = np.histogram(shares, bins=10, range=(0.0, 1.0))
        return {
            "ones": ones,
            "tokens": total,
            "share": ones / total if total else 0.0,
            "per_record": {
                "edges": [float(e) for e in edges],
                "counts": [int(c) for c in counts],
                "n": int(len(shares)),
            },  # fmt: skip
            "shards_read": len(shards),
            "shards": len(self.table.part),
            "exact": len(shards) == len(self.table.part),
        }

    def span_keys(self) -> dict[str, Any] | None:
        """Spans per annotation key in the sampled shards (a dict annotation counts once under
        each of its keys; other annotations under their type's name)."""
        if self.storage.layout != STREAM_WITH_META:
            return None
        fmt = self.storage.format
        meta = fmt.decode_meta if isinstance(fmt, StreamWithMetaStorageFormat) else None
        spans = np.asarray(self.table.spans, dtype=np.int64)
        shards: list[int] = []
        taken = 0
        for s in self.sample.tolist():
            if spans[s] == 0:
                continue
            if shards and taken + spans[s] > _SPAN_BUDGET:
                break
            shards.append(s)
            taken += int(spans[s])
        requests = []
        for s in shards:
            requests.append((s, "spans", layout.HEADER_SIZE, self.table.files["spans"].size[s]))
            requests.append((s, "meta", layout.HEADER_SIZE, self.table.files["meta"].size[s]))
        blobs = self.reader.read(requests) if requests else []
        keys: dict[str, int] = {}
        counted = 0
        for k in range(len(shards)):
            rows = np.frombuffer(blobs[2 * k], layout.SPAN_DTYPE)
            data = blobs[2 * k + 1]
            for a, b in zip(rows["meta_start"].tolist(), rows["meta_stop"].tolist()):
                note = meta(data[a:b]) if meta else None
                counted += 1
                names = [str(key) for key in note] if isinstance(note, Mapping) else [type(note).__name__]
                for name in names:
                    keys[name] = keys.get(name, 0) + 1
        ordered = dict(sorted(keys.items(), key=lambda kv: (-kv[1], kv[0])))
        with_spans = int((spans > 0).sum())
        return {"spans": counted, "keys": ordered, "shards_read": len(shards), "shards": with_spans,
                "exact": len(shards) == with_spans, "total_spans": int(spans.sum())}  # fmt: skip

    def windows(self, sequence_length: int | None, count: int, tokenizer: Any) -> list[dict[str, Any]]:
        """``count`` samples spread over the dataset, as tokens (and their text, where a
        tokenizer is given), with loss masks, record boundaries and spans."""
        view: Any = open_view(self.storage, sequence_length)
        n = len(view)
        if not n or count <= 0:
            return []
        picks = sorted(set(np.linspace(0, n - 1, min(count, n)).round().astype(int).tolist()))
        out = []
        for i in picks:
            if self.storage.layout == DOCUMENTS:
                doc = view[i]
                out.append({"index": i, "document": _short_repr(doc)})
                continue
            spans: list[Any] = []
            if self.storage.layout == STREAM_WITH_META:
                fields, row_spans = view._windows_and_spans([i])
                window = {name: values[0] for name, values in fields.items()}
                spans = [[int(a), int(b), _short_repr(note, 80)] for a, b, note in row_spans[0]]
            else:
                window = view[i]
            ids = [int(t) for t in np.asarray(window["tokens"])[:TOKENS_SHOWN].tolist()]
            mask = window.get("loss_mask")
            stream = stream_view(view)
            starts = (
                stream.record_starts_batch([i])[0].tolist()
                if stream is not None and stream.has_record_starts
                else []
            )
            out.append({
                "index": i,
                "tokens": ids,
                "length": int(len(window["tokens"])),
                "text": _pieces(tokenizer, ids) if tokenizer is not None else None,
                "loss_mask": [int(m) for m in np.asarray(mask)[:TOKENS_SHOWN].tolist()] if mask is not None else None,
                "record_starts": [int(s) for s in starts],
                "spans": spans,
            })  # fmt: skip
        return out


def _short_repr(value: Any, room: int = 600) -> str:
    if isinstance(value, np.ndarray):
        value = value.tolist()
    try:
        text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= room else text[: room - 1] + "…"


def _pieces(tokenizer: Any, ids: list[int]) -> list[str]:
    """Each token's text: what decoding the prefix through it adds to the prefix before it, so
    that word pieces keep their spaces and the pieces join into the decoded text. A token that
    only begins a character (a byte of a multi-byte UTF-8 sequence) gets ``""``, the token that
    completes it the whole character."""
    out: list[str] = []
    before = ""
    pending = 0
    for k in range(len(ids)):
        now = tokenizer.decode(ids[: k + 1])
        if now.endswith("\ufffd") and pending < 3 and k + 1 < len(ids):
            out.append("")  # an incomplete character: the next token may complete it
            pending += 1
            continue
        pending = 0
        out.append(now[len(before) :] if now.startswith(before) else tokenizer.decode([ids[k]]))
        before = now
    return out


def _load_tokenizer(spec: str | None, options: dict[str, Any], notes: list[str]) -> Any:
    if not spec:
        notes.append("tokens are shown as ids: the manifest records no tokenizer (pass --tokenizer SPEC)")
        return None
    try:
        from guideloom.workers.tokenizer import load_tokenizer

        return load_tokenizer(spec, storage_options=options)
    except (GuideLoomError, ImportError, OSError, ValueError) as err:
        notes.append(f"tokens are shown as ids: the tokenizer {spec} cannot be loaded here ({err})")
        return None


def _requests(
    storage: Storage, sequence_length: int | None, loader: Mapping[str, Any], notes: list[str]
) -> dict[str, Any] | None:
    """The estimate of one epoch's ranged GETs and bytes (`guideloom.loading.estimate`: for a
    stream with metadata, the token windows plus the span directory, span rows and annotation
    bytes each batch reads)."""
    try:
        from guideloom.loading.estimate import estimate
    except ImportError as err:  # torch is not installed: the loader cannot be played
        notes.append(f"predicted requests: need torch to play the loader's order ({err.name} missing)")
        return None
    shuffle = {"off": False, "block": "block", "full": True}.get(str(loader.get("shuffle", "block")), "block")
    settings: dict[str, Any] = {
        "batch_size": int(loader.get("batch_size", 8)),
        "shuffle": shuffle,
        "seed": int(loader.get("seed", 0)),
        "world_size": int(loader.get("world_size", 1)),
        "num_workers": int(loader.get("num_workers", 0)),
    }
    length = sequence_length if storage.layout != DOCUMENTS else None
    try:
        result = estimate(storage, sequence_length=length, epochs=1, **settings)
    except (GuideLoomError, ValueError) as err:
        notes.append(f"predicted requests: {err}")
        return None
    epoch = result.epochs[0]
    shown = {**settings, "shuffle": str(loader.get("shuffle", "block")), "sequence_length": length}
    return {"settings": shown, "requests": epoch["requests"], "bytes": epoch["bytes"],
            "samples": epoch["windows"],
            "bytes_per_request": epoch["bytes"] / epoch["requests"] if epoch["requests"] else 0}  # fmt: skip


def _window_length(storage: Storage, wanted: int | None) -> int | None:
    if storage.layout == DOCUMENTS:
        return None
    total = int(storage.manifest.total_tokens)
    if wanted is not None:
        return wanted
    return max(1, min(DEFAULT_SEQUENCE_LENGTH, total))


def _dataset(
    storage: Storage,
    *,
    sequence_length: int | None,
    windows: int,
    tokenizer: str | None,
    options: dict[str, Any],
    sample: int,
    loader: Mapping[str, Any],
    requests: bool = True,
) -> dict[str, Any]:
    m = storage.manifest
    part = _Dataset(storage, sample, options)
    snaps = _snapshots(storage)
    opened = storage.current_snapshot.id
    spec = tokenizer or _tokenizer_spec(m.metadata)
    length = _window_length(storage, sequence_length)
    tok = _load_tokenizer(spec, options, part.notes) if storage.layout != DOCUMENTS else None
    from guideloom.manifest.totals import ingest_totals

    out: dict[str, Any] = {
        "url": storage.url,
        "snapshot": opened,
        "current_snapshot": snaps[-1].id if snaps else opened,  # the newest is the current one
        "storage_class": m.storage_class,
        "layout": storage.layout,
        "format": {"name": m.format.name, "module": m.format.module, "config": m.format.config},
        "tokenizer": spec,
        "created_at": m.created_at,
        "fingerprint": m.fingerprint,
        "totals": {
            "documents": ingest_totals(m, lambda: snaps).documents,
            "records": m.total_records,
            "tokens": m.total_tokens,
            "spans": m.total_spans,
            "bytes": m.total_bytes,
            "shards": len(part.table.part),
            "parts": m.num_parts,
        },
        "history": _history(snaps, opened),
        "fields": part.fields(),
        "files": part.files(),
        "shard_sizes": part.shard_sizes(),
        "record_lengths": part.record_lengths(),
        "loss_mask": part.loss_mask(),
        "span_keys": part.span_keys(),
        "sequence_length": length,
        "windows": part.windows(length, windows, tok),
        "requests": _requests(storage, length, loader, part.notes) if requests else None,
    }
    out["notes"] = part.notes
    return out


def _open(source: Any, options: dict[str, Any], snapshot: str | int | None) -> Storage:
    if isinstance(source, Storage):
        return source
    extra = {"snapshot": snapshot} if snapshot is not None else {}
    return open_url(os.fspath(source), options, **extra)


def report(
    source: Any,
    html: str | os.PathLike[str] | None = None,
    *,
    snapshot: str | int | None = None,
    sequence_length: int | None = None,
    windows: int = 3,
    tokenizer: str | None = None,
    storage_options: dict[str, Any] | None = None,
    sample_shards: int = 64,
    batch_size: int = 8,
    shuffle: str = "block",
    seed: int = 0,
    world_size: int = 1,
    num_workers: int = 0,
    stopping_strategy: str = "all_exhausted",
) -> dict[str, Any]:
    """A report on a dataset, one of its snapshots, or a weighted mixture; written as one
    self-contained HTML file when ``html`` is given.

    Args:
        source: A dataset URL (or path, or a GuideLoom storage), or for a mixture a mapping or
            a list of pairs of URL (or storage) and weight, as ``guideloom mix`` takes them.
        html: Where to write the HTML page (None: write nothing, return the data).
        snapshot: A snapshot id (or number) to report on instead of the current one.
        sequence_length: Tokens per window of a stream (default: 2048, or the stream's length
            when shorter); the mixture's epoch is counted in windows of it.
        windows: How many real windows (documents) to show per dataset.
        tokenizer: The tokenizer spec that decodes the tokens (default: the ingestion's, from
            the manifest; without one the windows show token ids).
        storage_options: fsspec options for every URL.
        sample_shards: How many shards (spread evenly) have their index and data files read
            for record lengths, loss masks and span counts (all when there are fewer).
        batch_size: Loader setting of the predicted requests: samples per batch, per rank.
        shuffle: Loader setting: ``off``, ``block`` or ``full``.
        seed: Loader setting: the order's seed.
        world_size: Loader setting: ranks reading the dataset.
        num_workers: Loader setting: worker processes per rank.
        stopping_strategy: A mixture's, as for `guideloom.Mixture`.

    Returns:
        The report's data (what the page shows, as JSON values): ``kind`` (``dataset`` or
        ``mixture``), ``datasets`` (one entry per dataset) and ``mixture`` (or None).

    Raises:
        ValueError: A bad weight, mixed storage classes, or a setting the loader refuses.
        DatasetNotFoundError: No dataset at a URL.
    """
    options = dict(storage_options or {})
    loader: dict[str, Any] = {"batch_size": batch_size, "shuffle": shuffle, "seed": seed,
              "world_size": world_size, "num_workers": num_workers}  # fmt: skip
    if shuffle not in ("off", "block", "full"):
        raise ValueError(f"shuffle {shuffle!r}: one of off, block, full")
    pairs = _pairs(source)
    common: dict[str, Any] = {"windows": windows, "tokenizer": tokenizer, "options": options,
              "sample": sample_shards, "loader": loader}  # fmt: skip
    if pairs is None:
        storage = _open(source, options, snapshot)
        data: dict[str, Any] = {"kind": "dataset", "mixture": None,
                "datasets": [_dataset(storage, sequence_length=sequence_length, **common)]}  # fmt: skip
    else:
        storages = [_open(url, options, None) for url, _ in pairs]
        mixture = _mixture(storages, [w for _, w in pairs], sequence_length, stopping_strategy)
        data = {"kind": "mixture", "mixture": mixture,
                "datasets": [_dataset(s, sequence_length=mixture["sequence_length"], **common)
                             for s in storages]}  # fmt: skip
    data["generated"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    data["guideloom_version"] = __version__
    if html is not None:
        Path(html).write_text(render_html(data), encoding="utf-8")
    return data


def _pairs(source: Any) -> list[tuple[Any, float]] | None:
    if isinstance(source, Mapping):
        return [(k, float(v)) for k, v in source.items()]
    if isinstance(source, Sequence) and not isinstance(source, (str, bytes)):
        return [(k, float(v)) for k, v in source]
    return None


def _mixture(
    storages: list[Storage], weights: list[float], sequence_length: int | None, stopping: str
) -> dict[str, Any]:
    """Shares, epoch length and repeats of the mixture (the numbers ``guideloom mix`` prints)."""
    from guideloom.loading.mixture_plan import MixturePlan, check_same_schema, sample_weights

    if not storages:
        raise ValueError("a mixture needs at least one source")
    for w, s in zip(weights, storages):
        if not w > 0 or w == float("inf"):
            raise ValueError(f"{s.url}: weight {w!r} is not a positive, finite number")
    classes = {s.manifest.storage_class for s in storages}
    if len(classes) > 1:
        raise ValueError(
            f"the sources mix storage classes ({', '.join(sorted(classes))}): a mixture reads one "
            "layout; report a mixture of sources of one class"
        )
    layout_name = storages[0].layout
    check_same_schema(
        layout_name,
        [(s.url, s.url, s.manifest.format.name, s.manifest.format.config) for s in storages],
    )
    length = None
    if layout_name != DOCUMENTS:
        shortest = min(int(s.manifest.total_tokens) for s in storages)
        length = sequence_length or max(1, min(DEFAULT_SEQUENCE_LENGTH, shortest))
        sizes = [int(s.manifest.total_tokens) // length for s in storages]
    else:
        sizes = [int(s.manifest.total_records) for s in storages]
    sample, means = sample_weights(weights, [], [])
    plan = MixturePlan(tuple(s.url for s in storages), tuple(sizes), sample, stopping, mean_tokens=means)
    sources = [
        {"url": s.url, "weight": w, "share": share, "samples": size, "per_epoch": draws, "repeats": rep}
        for s, w, share, size, draws, rep in zip(
            storages, weights, plan.shares, plan.sizes, plan.draws, plan.repeats
        )
    ]
    return {"sources": sources, "epoch_length": plan.epoch_length, "stopping_strategy": stopping,
            "sequence_length": length, "unit": "documents" if length is None else "windows"}  # fmt: skip


# -- the page ---------------------------------------------------------------------------------------

_ASSETS = Path(__file__).resolve().parent / "report_assets"


def render_html(data: Mapping[str, Any]) -> str:
    """The report page: ``data`` (what `report` returns) as inline JSON, drawn by an inline
    script with inline styles; nothing is fetched.

    Args:
        data: The report's data.

    Returns:
        The HTML text of one self-contained page.
    """
    script = (_ASSETS / "report.js").read_text(encoding="utf-8")
    styles = (_ASSETS / "report.css").read_text(encoding="utf-8")
    payload = json.dumps(data, ensure_ascii=True, allow_nan=False).replace("</", "<\\/")
    names = [d["url"] for d in data.get("datasets", [])]
    title = "GuideLoom report: " + (
        "mixture of " + ", ".join(names) if data.get("mixture") else ", ".join(names)
    )
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(title)}</title>\n<style>\n{styles}</style>\n</head>\n<body>\n"
        '<main id="gl-report" aria-live="polite"><noscript>This report draws its figures with '
        "JavaScript; the data is in the script element gl-report-data.</noscript></main>\n"
        f'<script type="application/json" id="gl-report-data">{payload}</script>\n'
        f"<script>\n{script}</script>\n</body>\n</html>\n"
    )


# -- the command ------------------------------------------------------------------------------------

build_report = report


def register(
    app: typer.Typer, parse_options: Callable[[list[str] | None], dict[str, Any]], option_help: str
) -> None:
    """Add the ``report`` command to ``app``.

    Args:
        app: The ``guideloom`` command's Typer app.
        parse_options: How ``--option KEY=VALUE`` pairs become storage options.
        option_help: The help text of ``--option``.
    """

    @app.command(short_help="One self-contained HTML page about a dataset, a snapshot or a mixture.")
    def report(
        sources: list[str] = typer.Argument(
            ..., metavar="URL...", help="A dataset URL, or URL=WEIGHT for each source of a mixture."
        ),
        html: str = typer.Option(None, "--html", metavar="FILE", help="Write the page here."),
        as_json: bool = typer.Option(False, "--json", help="Print the report's data as JSON."),
        snapshot: str = typer.Option(None, "--snapshot", metavar="ID", help="Report on this snapshot."),
        sequence_length: int = typer.Option(
            None, "--sequence-length", "-L", help="Tokens per window (default 2048, or the stream's length)."
        ),
        windows: int = typer.Option(3, "--windows", metavar="N", help="Real windows to show per dataset."),
        tokenizer: str = typer.Option(
            None, "--tokenizer", metavar="SPEC", help="Decode with this tokenizer (default: the ingestion's)."
        ),
        sample_shards: int = typer.Option(
            64,
            "--sample-shards",
            metavar="N",
            help="Shards whose index and data files are read (spread evenly).",
        ),
        batch_size: int = typer.Option(
            8, "--batch-size", help="Predicted requests: samples per batch, per rank."
        ),
        shuffle: str = typer.Option("block", "--shuffle", help="Predicted requests: off, block or full."),
        world_size: int = typer.Option(1, "--world-size", help="Predicted requests: ranks."),
        num_workers: int = typer.Option(0, "--num-workers", help="Predicted requests: workers per rank."),
        option: list[str] = typer.Option(None, "--option", "-o", metavar="KEY=VALUE", help=option_help),
    ) -> None:
        """Write one HTML file (script and styles inline: it opens offline) showing a dataset's
        size, layout, format, tokenizer, snapshot history, record-length and shard-size
        histograms, per-field totals, loss-mask share, span counts, a few real windows and the
        predicted requests per epoch; for URL=WEIGHT sources, the mixture's shares, epoch length
        and repeats too (see docs/report.md). Exits 0, or 2 naming the problem."""
        try:
            if html is None and not as_json:
                raise ValueError("say where the page goes: --html FILE (or --json to print the data)")
            options = parse_options(option)
            source: Any
            if len(sources) == 1 and "=" not in sources[0]:
                source = sources[0]
            else:
                from guideloom.loading.blend import url_weight_pairs

                source = url_weight_pairs(sources)
                if snapshot is not None:
                    raise ValueError("--snapshot applies to one dataset, not to a mixture")
            data = build_report(
                source, html, snapshot=snapshot, sequence_length=sequence_length, windows=windows,
                tokenizer=tokenizer, storage_options=options, sample_shards=sample_shards,
                batch_size=batch_size, shuffle=shuffle, world_size=world_size, num_workers=num_workers,
            )  # fmt: skip
        except (GuideLoomError, ValueError, OSError) as err:
            typer.echo(f"error: {err}", err=True)
            raise typer.Exit(2) from None
        if as_json:
            typer.echo(json.dumps(data, indent=2))
        if html is not None:
            size = Path(html).stat().st_size
            typer.echo(f"wrote {html} ({size:,} bytes): open it in a browser", err=as_json)
