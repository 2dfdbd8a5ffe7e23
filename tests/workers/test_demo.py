"""The README's main job, `python -m guideloom.demo`, on the session's local Ray."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[2] / "workers" / "data"


def test_shipped_corpus_is_real_text():
    rows = [json.loads(line) for line in (CORPUS / "kjv.jsonl").read_text().splitlines()]
    assert len(rows) > 100 and sum(len(r["text"]) for r in rows) > 300_000
    assert rows[0]["text"].startswith("In the beginning God created the heaven and the earth.")


@pytest.mark.ray
def test_demo_ingests_and_reads_back(ray_local, tmp_path, capsys):
    from guideloom.demo import main

    assert main(["--output", str(tmp_path / "kjv")]) == 0
    out = capsys.readouterr().out
    assert "manifest.json + 4 shards" in out and "total 397,277 tokens" in out
    samples = [line for line in out.splitlines() if line.startswith("  [")]
    assert len(samples) == 3 and all(len(s) > 100 for s in samples)
    assert "next batch identical: True" in out
