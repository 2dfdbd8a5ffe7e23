"""Row ``scale``: how reading and planning costs grow with the dataset, at three sizes spanning
two orders of magnitude or more, with the growth exponent ``log(cost_L / cost_S) / log(n_L / n_S)``
(0: flat, 1: linear).

- ``documents``: peak RSS of a fresh process that opens a one-shard document dataset of ``n``
  documents and reads 200 random batches of 8, and the index bytes it read per batch. The shards
  are synthetic: a real offset index of ``n + 1`` entries (``8 n`` bytes on disk) and a sparse
  data file of one-byte documents, under a manifest patched from a real one-record dataset.
- ``spans``: the same for a stream with metadata of ``n`` spans (a real ``32 n``-byte span
  table; sparse tokens and annotations), 200 random batches of 8 windows of 2048 tokens.
- ``planning``: seconds per input file for ``expand_inputs`` over an explicit list of ``n``
  files on the S3 server (only when the run has one).
- ``driver``: what the ingestion driver and ``commit``/``verify`` cost against the number of
  input files (the bytes each Ray task receives, the manifest's ingest metadata) and of parts
  (seconds of ``commit`` and of ``verify`` on the S3 server), and ``inspect`` against reading
  the manifest alone at as many shards (synthetic manifests).
- ``remote``: on that S3 server, through the counting proxy, random batches of documents (and of
  windows with spans) from a real dataset: data bytes fetched against the payload delivered
  (target <= 1.1), and the index bytes (offset pages, span pages) fetched per batch against the
  index entries the batch needs.

Each reading runs in a child (``python -m benchmarks.scale``), so peak RSS is its own.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.corpus import stream_format
from benchmarks.harness import Config, Row, stats
from benchmarks.memory import status_kib
from guideloom import StreamWithMetaStorageFormat

__all__ = ["exponent", "scale_rows"]

DOC_SIZES = (100_000, 3_000_000, 100_000_000)
SPAN_SIZES = (100_000, 1_000_000, 10_000_000)
PLAN_SIZES = (30, 300, 3000)
QUICK_DOC_SIZES = (1_000, 10_000, 100_000)
QUICK_SPAN_SIZES = (1_000, 10_000, 100_000)
QUICK_PLAN_SIZES = (4, 40, 400)
BATCHES = 200
SEQUENCE_LENGTH = 2048
TOKENS_PER_SPAN = 4  # spans [4i, 4i + 2): a span every 4 tokens


def exponent(sizes: Sequence[float], costs: Sequence[float]) -> float:
    """Growth exponent between the smallest and the largest size."""
    if costs[0] <= 0 or costs[-1] <= 0:
        return float("nan")
    return math.log(costs[-1] / costs[0]) / math.log(sizes[-1] / sizes[0])


def _fill(path: Path, header: bytes, body: np.ndarray | None, body_bytes: int) -> None:
    """``header`` then either ``body`` or ``body_bytes`` of zeros (a hole: sparse on disk)."""
    with open(path, "r+b" if path.exists() else "wb") as f:
        f.truncate(0)
        f.write(header)
        if body is not None:
            body.tofile(f)
        else:
            f.truncate(len(header) + body_bytes)


def _plain_doc(root: Path) -> dict[str, Any]:
    """The dataset's current manifest as a whole JSON document, made its plain manifest.json
    (its snapshot history dropped), for the synthetic datasets below to edit."""
    import shutil

    from guideloom.io import Location
    from guideloom.storage.checks import load_manifest

    manifest = load_manifest(Location(str(root)))
    shutil.rmtree(root / "snapshots", ignore_errors=True)
    doc: dict[str, Any] = json.loads(manifest.to_json())
    return doc


def _patch_manifest(root: Path, records: int, tokens: int, spans: int, sizes: dict[str, int]) -> None:
    path = root / "manifest.json"
    doc = _plain_doc(root)
    table = doc["shard_table"]
    table["records"], table["tokens"], table["spans"] = [records], [tokens], [spans]
    for name, size in sizes.items():
        table["files"][name]["size"] = [size]
    doc.update(
        total_records=records,
        total_tokens=tokens,
        total_spans=spans,
        total_bytes=sum(sum(column["size"]) for column in table["files"].values()),  # record starts too
    )
    path.write_text(json.dumps(doc))


def synthetic_documents(root: Path, n: int) -> str:
    """A one-shard document dataset of ``n`` one-byte documents (msgpack ``0``)."""
    from guideloom import DocumentMsgpackFormat, DocumentStorage, layout

    storage = DocumentStorage(root, DocumentMsgpackFormat())
    with storage.writer(overwrite=True) as w:
        w.append(0)
    table = storage.manifest.shard_table
    data, index = root / table.path(0, "data"), root / table.path(0, "index")
    _fill(data, layout.ShardHeader("docs", 1, n).pack(), None, n)
    with open(index, "wb") as f:
        f.write(layout.ShardHeader("docs.idx", 8, n + 1).pack())
        step = 1 << 22
        for a in range(0, n + 1, step):
            np.arange(a, min(n + 1, a + step), dtype="<u8").tofile(f)
    _patch_manifest(
        root, n, 0, 0, {"data": layout.HEADER_SIZE + n, "index": layout.HEADER_SIZE + 8 * (n + 1)}
    )
    return str(root)


def synthetic_spans(root: Path, n: int) -> str:
    """A one-shard stream with metadata: ``n`` spans, a span every 4 tokens, 1-byte annotations."""
    from guideloom import StreamWithMetaStorage, layout

    fmt = ByteMetaFormat()
    storage = StreamWithMetaStorage(root, fmt)
    with storage.writer(overwrite=True) as w:
        w.append({"tokens": np.zeros(4, np.uint16)}, spans=[(0, 2, 0)])
    table = storage.manifest.shard_table
    tokens = n * TOKENS_PER_SPAN
    isz = stream_format().itemsize
    _fill(root / table.path(0, "data"), layout.ShardHeader("tokens", isz, tokens).pack(), None, tokens * isz)
    _fill(root / table.path(0, "meta"), layout.ShardHeader("meta", 1, n).pack(), None, n)
    with open(root / table.path(0, "spans"), "wb") as f:
        f.write(layout.ShardHeader("spans", 32, n).pack())
        step = 1 << 20
        for a in range(0, n, step):
            i = np.arange(a, min(n, a + step), dtype="<u8")
            np.stack([i * TOKENS_PER_SPAN, i * TOKENS_PER_SPAN + 2, i, i + 1], axis=1).tofile(f)
    directory = _span_directory(n)
    with open(root / table.path(0, "span_dir"), "wb") as f:
        f.write(layout.ShardHeader("spans.dir", 32, len(directory)).pack())
        directory.tofile(f)
    sizes = {
        "data": layout.HEADER_SIZE + tokens * isz,
        "meta": layout.HEADER_SIZE + n,
        "spans": layout.HEADER_SIZE + 32 * n,
        "span_dir": layout.HEADER_SIZE + 32 * len(directory),
    }
    _patch_manifest(root, 1, tokens, n, sizes)
    return str(root)


def _span_directory(n: int) -> np.ndarray:
    """The span directory of `synthetic_spans`'s table (span ``i`` is tokens ``[4i, 4i + 2)``,
    meta byte ``i``), worked out per block instead of from the whole table in memory."""
    import guideloom.layout as layout

    tokens = n * TOKENS_PER_SPAN
    block = int(layout.span_block_tokens(tokens, n))
    bounds = np.arange(int(layout.span_dir_entries(tokens, n)), dtype=np.int64) * block
    out = np.empty(len(bounds), layout.SPAN_DIR_DTYPE)
    # first row stopping after x: 4i + 2 > x; first row starting at or after x: 4i >= x
    out["first"] = out["meta_first"] = np.minimum(n, np.maximum(0, (bounds - 2) // TOKENS_PER_SPAN + 1))
    out["after"] = out["meta_after"] = np.minimum(n, -(-bounds // TOKENS_PER_SPAN))
    return out


class ByteMetaFormat(StreamWithMetaStorageFormat):
    """Annotation = one byte (an int 0-255); tokens are the benchmark's uint16 stream."""

    def __init__(self) -> None:
        super().__init__(stream_format())

    def encode_meta(self, annotation: Any) -> bytes:
        return bytes([int(annotation)])

    def decode_meta(self, data: bytes | memoryview) -> Any:
        return data[0]


def _child() -> None:
    request = json.loads(sys.stdin.read())
    from guideloom import (
        DocumentDataset,
        DocumentMsgpackFormat,
        DocumentStorage,
        StreamWithMetaDataset,
        StreamWithMetaStorage,
    )

    t0 = time.perf_counter()
    if request["kind"] == "documents":
        ds: Any = DocumentDataset(DocumentStorage(request["url"], DocumentMsgpackFormat()))
    else:
        ds = StreamWithMetaDataset(StreamWithMetaStorage(request["url"], ByteMetaFormat()), SEQUENCE_LENGTH)
    open_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for _ in range(request["batches"]):
        got = ds.__getitems__(rng.integers(0, len(ds), 8).tolist())
        assert len(got) == 8
    read_s = time.perf_counter() - t0
    access = ds._access
    cache = getattr(access, "cache", None)  # absent before paged index reads
    index_bytes = cache.misses * access.page_bytes if cache is not None else None
    print(
        json.dumps(
            {
                "peak_rss_kib": status_kib("VmHWM"),
                "rss_anon_kib": status_kib("RssAnon"),
                "open_s": open_s,
                "batch_ms": 1000 * read_s / request["batches"],
                "index_bytes_per_batch": None if index_bytes is None else index_bytes / request["batches"],
                "cache_bytes": None if cache is None else cache.nbytes,
            }
        )
    )


def _measure(kind: str, url: str, batches: int) -> dict[str, Any]:
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), root]))}
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.scale"],
        input=json.dumps({"kind": kind, "url": url, "batches": batches}),
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the scale child failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _reading_row(kind: str, sizes: tuple[int, ...], cfg: Config) -> Row:
    make = synthetic_documents if kind == "documents" else synthetic_spans
    reports = []
    for n in sizes:
        url = make(cfg.workdir / f"scale-{kind}-{n}", n)
        reports.append(_measure(kind, url, BATCHES))
        for path in Path(url).rglob("shard-*"):
            path.unlink()  # free the disk before the next size
    rss = [r["peak_rss_kib"] / 1024 for r in reports]
    extra: dict[str, Any] = {"sizes": list(sizes), "peak_rss_mib": rss}
    extra["rss_exponent"] = exponent(list(sizes), rss)
    extra["batch_ms"] = [r["batch_ms"] for r in reports]
    extra["batch_ms_exponent"] = exponent(list(sizes), extra["batch_ms"])
    extra["open_s"] = [r["open_s"] for r in reports]
    extra["index_bytes_per_batch"] = [r["index_bytes_per_batch"] for r in reports]
    extra["cache_bytes"] = [r["cache_bytes"] for r in reports]
    unit = "documents" if kind == "documents" else "spans"
    return Row(
        "scale",
        f"{kind}: peak RSS at {sizes[-1]:.0e} {unit} vs {sizes[0]:.0e}",
        "MiB peak RSS",
        stats([rss[-1]]),
        stats([rss[0]]),
        f"{sizes[0]:.0e} {unit}",
        higher_is_better=False,
        target=1.1,
        extra=extra,
    )


def _planning_row(sizes: tuple[int, ...], s3_endpoint: Any) -> Row:
    import fsspec

    from benchmarks.s3env import fresh_bucket, running_endpoint
    from guideloom.workers.sources import expand_inputs

    per_file_ms = []
    glob_ms = []
    with running_endpoint(s3_endpoint) as (ep, _note), fresh_bucket(ep.storage_options()) as bucket:
        options = ep.storage_options()
        fs = fsspec.filesystem("s3", **options)
        for n in sizes:
            fs.pipe({f"{bucket}/plan{n}/f{i:06d}.jsonl": b'{"text": "x"}\n' for i in range(n)})
            urls = [f"s3://{bucket}/plan{n}/f{i:06d}.jsonl" for i in range(n)]
            t0 = time.perf_counter()
            assert len(expand_inputs(urls, "auto", options)) == n
            per_file_ms.append(1000 * (time.perf_counter() - t0) / n)
            t0 = time.perf_counter()
            got = expand_inputs([f"s3://{bucket}/plan{n}/*.jsonl"], "auto", options)
            assert len(got) == n
            glob_ms.append(1000 * (time.perf_counter() - t0) / n)
    totals = [ms * n for ms, n in zip(per_file_ms, sizes)]
    return Row(
        "scale",
        f"planning: ms per explicit input file at {sizes[-1]} files vs {sizes[0]} (S3)",
        "ms per file",
        stats([per_file_ms[-1]]),
        stats([per_file_ms[0]]),
        f"{sizes[0]} files",
        higher_is_better=False,
        extra={
            "sizes": list(sizes),
            "explicit_ms_per_file": per_file_ms,
            "explicit_total_exponent": exponent(list(sizes), totals),
            "glob_ms_per_file": glob_ms,
            "glob_total_exponent": exponent(list(sizes), [m * n for m, n in zip(glob_ms, sizes)]),
        },
    )


DRIVER_FILES = (1_000, 10_000, 100_000)
QUICK_DRIVER_FILES = (10, 100, 1_000)
COMMIT_PARTS = (30, 300, 3_000)
QUICK_COMMIT_PARTS = (3, 10, 30)


def _driver_rows(cfg: Config, s3_endpoint: Any) -> list[Row]:
    import pickle

    from benchmarks.commit_verify_scale import commit_and_verify
    from guideloom.workers.config import IngestConfig
    from guideloom.workers.ingest import METADATA_KEY, _metadata, task_config
    from guideloom.workers.part import part_spec
    from guideloom.workers.planning import plan_parts
    from guideloom.workers.sources import InputFile
    from guideloom.workers.tokenizer import load_tokenizer

    files = QUICK_DRIVER_FILES if cfg.quick else DRIVER_FILES
    task_bytes, meta_bytes = [], []
    tokenizer = load_tokenizer("bytes")
    for n in files:
        inputs = [InputFile(f"s3://bucket/raw/file-{i:07d}.jsonl", 1000, "jsonl", None) for i in range(n)]
        plan = plan_parts(inputs, part_size=1000, text_per_line=False)
        config = IngestConfig(inputs=[f.url for f in inputs], output="s3://bucket/out")
        task_bytes.append(len(pickle.dumps((task_config(config), part_spec(plan, 0), "0" * 64))))
        meta = _metadata(config, plan, "0" * 64, tokenizer, [])[METADATA_KEY]
        meta_bytes.append(len(json.dumps(meta)))
    rows = [
        Row(
            "scale",
            f"driver: bytes a Ray task receives at {files[-1]:,} input files vs {files[0]:,}",
            "bytes",
            stats([float(task_bytes[-1])]),
            stats([float(task_bytes[0])]),
            f"{files[0]:,} files",
            higher_is_better=False,
            target=1.1,
            extra={
                "sizes": list(files),
                "task_bytes": task_bytes,
                "task_bytes_exponent": exponent(list(files), task_bytes),
                "ingest_metadata_bytes": meta_bytes,
                "ingest_metadata_exponent": exponent(list(files), meta_bytes),
            },
        )
    ]
    rows.append(_inspect_row(cfg, files))
    parts = QUICK_COMMIT_PARTS if cfg.quick else COMMIT_PARTS
    runs = [commit_and_verify(s3_endpoint.storage_options(), n) for n in parts]
    for what in ("commit", "verify"):
        seconds = [r[f"{what}_s"] for r in runs]
        rows.append(
            Row(
                "scale",
                f"driver: {what} seconds per part at {parts[-1]:,} parts vs {parts[0]:,} (S3)",
                "ms per part",
                stats([1000 * seconds[-1] / parts[-1]]),
                stats([1000 * seconds[0] / parts[0]]),
                f"{parts[0]:,} parts",
                higher_is_better=False,
                extra={
                    "sizes": list(parts),
                    f"{what}_s": seconds,
                    f"{what}_total_exponent": exponent(list(parts), seconds),
                    "commit_peak_rss_growth_mib": [r["commit_peak_rss_growth_mib"] for r in runs],
                },
            )
        )
    return rows


def _synthetic_manifest(root: Path, n: int) -> str:
    """A stream dataset's manifest of ``n`` one-part shards (files not written: ``inspect`` and
    opening read the manifest only), built from a real two-part dataset's manifest."""
    from guideloom import StreamStorage

    storage = StreamStorage(root, stream_format())
    for k in range(2):
        with storage.writer(part=k, overwrite=True) as w:
            w.append({"tokens": np.arange(10, dtype=np.uint16)})
    storage.commit(num_parts=2)
    from guideloom.manifest.models import version_for

    doc = _plain_doc(root)
    table = doc["shard_table"]
    table["files"].pop("starts", None)  # only the data files are made up (n copies of one)
    doc["version"] = version_for(table["files"])
    data = table["files"]["data"]
    table.update(
        part=list(range(n)),
        index=[0] * n,
        records=[1] * n,
        tokens=[10] * n,
        spans=[0] * n,
        prefix=[f"shards/r-default/a-{i:012x}" for i in range(n)],  # an attempt prefix per part
        prefix_id=list(range(n)),
    )
    data.update(size=data["size"][:1] * n, checksum=data["checksum"][:1] * n)
    doc.update(num_parts=n, total_records=n, total_tokens=10 * n, total_bytes=data["size"][0] * n)
    (root / "manifest.json").write_text(json.dumps(doc))
    return str(root)


def _inspect_row(cfg: Config, sizes: tuple[int, ...]) -> Row:
    """``guideloom inspect``'s work (read the manifest, summarize, render) against reading the
    manifest alone, at ``sizes`` shards."""
    from guideloom.cli import render, summarize
    from guideloom.storage.checks import read_manifest

    inspect_s, parse_s = [], []
    for n in sizes:
        url = _synthetic_manifest(cfg.workdir / f"scale-inspect-{n}", n)
        t0 = time.perf_counter()
        read_manifest(url, {})
        parse_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        location, manifest = read_manifest(url, {})
        render(summarize(location.display_url, manifest))
        inspect_s.append(time.perf_counter() - t0)
    return Row(
        "scale",
        f"driver: inspect at {sizes[-1]:,} shards vs reading that manifest",
        "s",
        stats([inspect_s[-1]]),
        stats([parse_s[-1]]),
        "read the manifest",
        higher_is_better=False,
        target=1.2,
        extra={
            "sizes": list(sizes),
            "inspect_s": inspect_s,
            "manifest_read_s": parse_s,
            "inspect_exponent": exponent(list(sizes), inspect_s),
        },
    )


REMOTE_DOCUMENTS = 20_000  # real documents of 100-1000 bytes (about 11 MB), one shard
REMOTE_WINDOWS = 64  # windows of 2048 tokens with a span every 4 tokens (32k spans, 1 MiB table)
REMOTE_BATCHES = 32


def _fetched(log: list[Any]) -> dict[str, int]:
    """GET response bytes by shard file kind (the part of the path after ``shard-NNNNN.``)."""
    out: dict[str, int] = {}
    for entry in log:
        if entry.method == "GET" and "/shard-" in entry.path:
            kind = entry.path.split("?")[0].rsplit("/shard-", 1)[1].split(".", 1)[1]
            out[kind] = out.get(kind, 0) + entry.bytes
    return out


def _remote_rows(cfg: Config, s3_endpoint: Any) -> list[Row]:
    from benchmarks.s3env import CountingProxy, fresh_bucket
    from guideloom import (
        DocumentDataset,
        DocumentStorage,
        DocumentStorageFormat,
        StreamWithMetaDataset,
        StreamWithMetaStorage,
    )

    class RawBytes(DocumentStorageFormat):
        def encode(self, record: Any) -> bytes:
            return bytes(record)

        def decode(self, data: bytes | memoryview) -> Any:
            return bytes(data)

    rng = np.random.default_rng(cfg.seed)  # batches of distinct samples: payload = what is delivered
    documents = 2_000 if cfg.quick else REMOTE_DOCUMENTS
    windows = 8 if cfg.quick else REMOTE_WINDOWS
    batches = 4 if cfg.quick else REMOTE_BATCHES
    ep = s3_endpoint
    rows = []
    with fresh_bucket(ep.storage_options()) as bucket:
        options = ep.storage_options()
        docs_url, meta_url = f"s3://{bucket}/docs", f"s3://{bucket}/meta"
        sizes = rng.integers(100, 1001, documents)
        with DocumentStorage(docs_url, RawBytes(), storage_options=options).writer(shard_size=1 << 40) as w:
            for n in sizes:
                w.append(b"x" * int(n))
        tokens_per_window = SEQUENCE_LENGTH
        with StreamWithMetaStorage(meta_url, ByteMetaFormat(), storage_options=options).writer(
            shard_size=1 << 40
        ) as w:
            total = windows * tokens_per_window
            starts = np.arange(0, total, TOKENS_PER_SPAN)
            w.append(
                {"tokens": np.zeros(total, np.uint16)},
                spans=[(int(a), int(a) + 2, int(i % 256)) for i, a in enumerate(starts)],
            )
        with CountingProxy(ep.url) as proxy:
            proxied = {**ep.storage_options(proxy.url), "skip_instance_cache": True}
            docs = DocumentDataset(DocumentStorage(docs_url, RawBytes(), storage_options=proxied))
            proxy.reset()
            payload = 0
            for _ in range(batches):
                got = docs.__getitems__(rng.choice(documents, cfg.batch_size, replace=False).tolist())
                payload += sum(len(d) for d in got)
            fetched, requests = _fetched(proxy.log), proxy.request_count
            rows.append(
                Row(
                    "scale",
                    f"remote documents: data bytes fetched per payload byte ({documents:,} documents, S3)",
                    "bytes",
                    stats([float(fetched.get("docs", 0))]),
                    stats([float(payload)]),
                    "payload delivered",
                    higher_is_better=False,
                    target=1.1,
                    extra={
                        "index_bytes_per_batch": fetched.get("docs.idx", 0) / batches,
                        "index_entries_needed_bytes_per_batch": 2 * 8 * cfg.batch_size,
                        "requests_per_batch": requests / batches,
                        "index_table_bytes": 8 * (documents + 1),
                    },
                )
            )
            meta = StreamWithMetaDataset(
                StreamWithMetaStorage(meta_url, ByteMetaFormat(), storage_options=proxied), SEQUENCE_LENGTH
            )
            proxy.reset()
            for _ in range(batches):
                meta.__getitems__(rng.choice(windows, cfg.batch_size, replace=False).tolist())
            fetched, requests = _fetched(proxy.log), proxy.request_count
            spans_per_window = SEQUENCE_LENGTH // TOKENS_PER_SPAN
            token_payload = batches * cfg.batch_size * SEQUENCE_LENGTH * stream_format().itemsize
            meta_payload = batches * cfg.batch_size * spans_per_window  # one byte per annotation
            rows.append(
                Row(
                    "scale",
                    f"remote spans: token + annotation bytes fetched per payload byte ({windows} windows, S3)",
                    "bytes",
                    stats([float(fetched.get("tokens", 0) + fetched.get("meta", 0))]),
                    stats([float(token_payload + meta_payload)]),
                    "payload delivered",
                    higher_is_better=False,
                    target=1.1,
                    extra={
                        "span_bytes_per_batch": fetched.get("spans", 0) / batches,
                        "span_rows_needed_bytes_per_batch": 32 * spans_per_window * cfg.batch_size,
                        "requests_per_batch": requests / batches,
                        "span_table_bytes": 32 * len(starts),
                    },
                )
            )
    return rows


def scale_rows(cfg: Config, s3_endpoint: Any = None) -> list[Row]:
    rows = [
        _reading_row("documents", QUICK_DOC_SIZES if cfg.quick else DOC_SIZES, cfg),
        _reading_row("spans", QUICK_SPAN_SIZES if cfg.quick else SPAN_SIZES, cfg),
    ]
    if s3_endpoint is not None:
        rows.append(_planning_row(QUICK_PLAN_SIZES if cfg.quick else PLAN_SIZES, s3_endpoint))
        rows += _remote_rows(cfg, s3_endpoint)
        rows += _driver_rows(cfg, s3_endpoint)
    return rows


if __name__ == "__main__":
    _child()
