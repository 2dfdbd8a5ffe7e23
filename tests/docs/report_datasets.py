"""The five kinds of dataset `guideloom report` is tested (and the docs' screenshots are taken) on.

A plain module, imported by tests/docs/test_report_browser.py and scripts/docs/report_screenshots.py:

- ``demo``: the README's demo dataset (the shipped corpus ingested on Ray, ``bytes`` tokens),
  ingested in a subprocess with a Ray of its own;
- ``chat``: chat turns as UTF-8 bytes with ``loss_mask`` 1 on the assistant's replies only;
- ``meta``: a stream with metadata whose spans carry JSON annotations with various keys;
- ``grown``: written, appended to twice, rolled back, its first snapshot expired;
- ``other``: a second plain stream of the same fields as ``grown``, for a mixture of the two.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]

TURNS = [
    ("What is a shard?", "One data file of a dataset, with its small index."),
    ("Why a manifest?", "It says which shards make the dataset, and it is written last."),
    ("How do I resume?", "Save the loader's state_dict and load it into a new loader."),
    ("Can I mix sources?", "Yes: give each a weight; the epoch is planned from the manifests (déjà vu)."),
]
SPAN_NOTES = [
    {"label": "term"},
    {"label": "name", "lang": "en"},
    {"lang": "en"},
    {"label": "term", "score": 0.5},
]


def _bytes(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-8"), np.uint8).astype(np.uint32)


def demo(root: Path) -> str:
    """The demo dataset (`guideloom.demo.ingest_config`), ingested by a subprocess on its own Ray."""
    url = str(root / "kjv")
    code = (
        "import sys; from guideloom.demo import ingest_config; "
        "from guideloom.workers.ingest import run_ingest; "
        "cfg = ingest_config(sys.argv[1]); cfg['progress'] = 'none'; run_ingest(cfg)"
    )
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    done = subprocess.run(
        [sys.executable, "-c", code, url], env=env, capture_output=True, text=True, timeout=300, cwd=REPO
    )
    if done.returncode:
        raise RuntimeError(f"ingesting the demo dataset failed:\n{done.stdout}\n{done.stderr}")
    return url


def chat(root: Path) -> tuple[str, dict[str, Any]]:
    """Chat records; returns the URL and what was written (tokens, ones, per-record shares)."""
    from guideloom import StreamNumpyFormat, StreamStorage

    fmt = StreamNumpyFormat({"tokens": np.uint32, "loss_mask": np.uint8})
    storage = StreamStorage(str(root / "chat"), fmt)
    ones = tokens = 0
    shares = []
    with storage.writer(shard_size=600) as w:
        for k in range(3):
            for q, a in TURNS:
                user, reply = _bytes(f"<user> {q}\n"), _bytes(f"<assistant> {a}{'!' * k}\n")
                ids = np.concatenate([user, reply])
                mask = np.concatenate([np.zeros(len(user), np.uint8), np.ones(len(reply), np.uint8)])
                w.append({"tokens": ids, "loss_mask": mask})
                ones += int(mask.sum())
                tokens += len(ids)
                shares.append(mask.mean())
    return storage.url, {"tokens": tokens, "ones": ones, "shares": shares}


def meta(root: Path) -> tuple[str, dict[str, int]]:
    """A stream with metadata; returns the URL and the spans written per annotation key."""
    from guideloom import StreamNumpyFormat, StreamWithMetaJsonFormat, StreamWithMetaStorage

    fmt = StreamWithMetaJsonFormat(StreamNumpyFormat({"tokens": np.uint32}))
    storage = StreamWithMetaStorage(str(root / "meta"), fmt)
    keys: dict[str, int] = {}
    with storage.writer(shard_size=500) as w:
        for k in range(10):
            ids = _bytes(f"Record {k}: GuideLoom stores tokens and their annotations side by side.\n")
            spans = []
            for j in range(k % 4 + 1):
                note = SPAN_NOTES[(k + j) % len(SPAN_NOTES)]
                spans.append((j * 10, j * 10 + 6, note))
                for key in note:
                    keys[key] = keys.get(key, 0) + 1
            w.append({"tokens": ids}, spans=spans)
    return storage.url, keys


def _plain(root: Path, name: str, texts: list[str], **writer: Any) -> Any:
    from guideloom import StreamNumpyFormat, StreamStorage

    storage = StreamStorage(str(root / name), StreamNumpyFormat({"tokens": np.uint32}))
    with storage.writer(shard_size=400, **writer) as w:
        for text in texts:
            w.append({"tokens": _bytes(text)})
    return storage


def grown(root: Path) -> str:
    """Written, appended to twice, rolled back to the first append, first snapshot expired."""
    lines = [f"Line {k} of the grown dataset, appended in batches.\n" for k in range(30)]
    storage = _plain(root, "grown", lines[:10])
    _plain(root, "grown", lines[10:20], append=True)
    storage.refresh()
    _plain(root, "grown", lines[20:], append=True)
    storage.refresh()
    second = storage.snapshots()[1].id
    storage.rollback(second)
    storage.expire(keep_last=3, grace=dt.timedelta(0))
    return storage.url


def other(root: Path) -> str:
    """A second stream with `grown`'s fields (a mixture's other source)."""
    return _plain(root, "other", [f"Another source, record {k}.\n" for k in range(40)]).url
