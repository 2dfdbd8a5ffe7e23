"""Row ``report``: `guideloom.report` of a 100,000-shard dataset, to HTML (issue 35: <= 10 s).

The dataset is synthetic: a real two-part stream's manifest is made one of 100,000 one-record
shards in 1,000 parts of 100 (as `benchmarks.scale._synthetic_manifest` does; record starts
kept, the snapshot log dropped: the manifest is its one snapshot), and the first
shard's data and record-start files are hard-linked at every shard's paths, so every file the
report may read exists with the size and checksum the manifest records. Building it is not
timed. The row times the whole report (manifest, snapshot log, shard columns, the sampled
index and data files, three windows, the predicted requests of an epoch, the HTML) against
reading the manifest alone.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np

from benchmarks.corpus import stream_format
from benchmarks.harness import Config, Row, stats

__all__ = ["report_rows"]

SHARDS = 100_000
QUICK_SHARDS = 2_000
LIMIT_S = 10.0
PER_PART = 100  # shards per part (ingestion writes parts of many shards)


def synthetic_dataset(root: Path, n: int) -> str:
    """A stream of ``n`` one-record shards whose files all exist (hard links of one shard's)."""
    from benchmarks.scale import _plain_doc
    from guideloom import StreamStorage
    from guideloom.manifest.models import version_for
    from guideloom.storage.checks import read_manifest

    storage = StreamStorage(root, stream_format())
    for k in range(2):
        with storage.writer(part=k, overwrite=True) as w:
            w.append({"tokens": np.arange(10, dtype=np.uint16)})
    storage.commit(num_parts=2)
    old = _plain_paths(root)
    doc = _plain_doc(root)
    table = doc["shard_table"]
    doc["version"] = version_for(table["files"])
    parts = -(-n // PER_PART)
    table.update(
        part=[i // PER_PART for i in range(n)], index=[i % PER_PART for i in range(n)],
        records=[1] * n, tokens=[10] * n, spans=[0] * n,
        prefix=[f"shards/r-default/a-{p:012x}" for p in range(parts)],  # an attempt prefix per part
        prefix_id=[i // PER_PART for i in range(n)],
    )  # fmt: skip
    first = {name: (column["size"][0], column["checksum"][0]) for name, column in table["files"].items()}
    for name, column in table["files"].items():
        column.update(size=[first[name][0]] * n, checksum=[first[name][1]] * n)
    doc.update(num_parts=parts, total_records=n, total_tokens=10 * n,
               total_bytes=sum(size for size, _ in first.values()) * n)  # fmt: skip
    (root / "manifest.json").write_text(json.dumps(doc))
    _, manifest = read_manifest(str(root), {})
    shard_table = manifest.shard_table
    for name, source in old.items():
        for i in range(n):
            target = root / shard_table.path(i, name)
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists():
                continue
            try:
                os.link(source, target)
            except OSError as err:  # a file system's limit of links per file (ext4: 65,000)
                if err.errno != errno.EMLINK:
                    raise
                shutil.copyfile(source, target)
                source = target  # the next links go to the copy
    return str(root)


def _plain_paths(root: Path) -> dict[str, Path]:
    """Part 0's files (data, starts) of the real two-part dataset, by name."""
    from guideloom.storage.checks import read_manifest

    _, manifest = read_manifest(str(root), {})
    table = manifest.shard_table
    return {name: root / table.path(0, name) for name in table.files}


def report_rows(cfg: Config) -> list[Row]:
    import guideloom
    from guideloom.storage.checks import read_manifest

    n = QUICK_SHARDS if cfg.quick else SHARDS
    url = synthetic_dataset(cfg.workdir / f"report-{n}", n)
    html = cfg.workdir / f"report-{n}.html"
    report_s, read_s = [], []
    for _ in range(1 if cfg.quick else 3):
        t0 = time.perf_counter()
        read_manifest(url, {})
        read_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        data = guideloom.report(url, html)
        report_s.append(time.perf_counter() - t0)
    shards = data["datasets"][0]["totals"]["shards"]
    return [
        Row(
            "report",
            f"guideloom report --html of {shards:,} shards",
            "s",
            stats(report_s),
            stats(read_s),
            "read the manifest",
            higher_is_better=False,
            checks={f"<= {LIMIT_S:g} s": min(report_s) <= LIMIT_S},
            extra={"shards": shards, "html_bytes": html.stat().st_size, "report_s": report_s},
        )
    ]
