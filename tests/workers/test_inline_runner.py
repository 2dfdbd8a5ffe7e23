"""``runner=``: parts run on Ray or in the driver's process, with the same bytes either way.

A small job (or a one-worker job) with no cluster named runs inline by default, so a newcomer's
``guideloom ingest`` of a few files does not wait 4-8 s for a local Ray to start.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from guideloom.workers.config import IngestConfig
from guideloom.workers.driver import INLINE_MAX_BYTES, runs_inline
from guideloom.workers.ingest import run_ingest
from guideloom.workers.planning import plan_parts
from guideloom.workers.sources import expand_inputs


def _inputs(folder: Path) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for f in range(3):
        path = folder / f"in-{f}.jsonl"
        rows = [{"text": f"file {f} doc {i} " + "abc é " * (i % 9 + 1)} for i in range(120)]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        paths.append(str(path))
    return paths


def _contents(manifest: Any) -> list[tuple[Any, ...]]:
    """Every shard's part, index, counts and file checksums (not the attempt folders' random
    names, which differ between any two runs)."""
    return sorted(
        (s.part, s.index, s.records, s.tokens, sorted((n, f.size, f.checksum) for n, f in s.files.items()))
        for s in manifest.shards
    )


OPTIONS = {"part_size": 2048, "shard_size": 3000, "progress": "none", "tokenizer": "bytes"}


@pytest.mark.ray
def test_inline_and_ray_write_the_same_bytes(ray_local: Any, tmp_path: Path) -> None:
    inputs = _inputs(tmp_path / "in")
    on_ray = run_ingest({"inputs": inputs, "output": str(tmp_path / "ray"), "num_workers": 2, **OPTIONS})
    inline = run_ingest({"inputs": inputs, "output": str(tmp_path / "inline"), "runner": "inline", **OPTIONS})
    assert len(on_ray.shards) > 4  # several parts, so the order of writing could have mattered
    assert _contents(inline) == _contents(on_ray)
    assert inline.metadata == on_ray.metadata
    again = run_ingest({"inputs": inputs, "output": str(tmp_path / "inline"), "runner": "inline", **OPTIONS})
    assert _contents(again) == _contents(inline)  # a re-run lands once


def _plan(config: IngestConfig) -> Any:
    files = expand_inputs(config.inputs, config.reader_format, {})
    return plan_parts(files, part_size=config.part_size, text_per_line=False, storage_options={})


def test_auto_runs_small_and_one_worker_jobs_inline(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    # whether this process already runs Ray depends on which tests ran before in it: decide both
    monkeypatch.setattr("guideloom.workers.driver.ray.is_initialized", lambda: True)
    config = IngestConfig(inputs=_inputs(tmp_path / "in"), output=str(tmp_path / "o"), **OPTIONS)
    assert runs_inline(config, _plan(config)) == (False, "Ray is running in this process")
    monkeypatch.setattr("guideloom.workers.driver.ray.is_initialized", lambda: False)
    plan = _plan(config)
    assert sum(plan.part_bytes) < INLINE_MAX_BYTES
    inline, why = runs_inline(config, plan)
    assert inline and why.startswith("a small job (")
    named = config.model_copy(update={"ray_address": "127.0.0.1:6379"})
    assert runs_inline(named, plan) == (False, "a Ray cluster is named")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    assert runs_inline(config, plan)[0] is False
    monkeypatch.delenv("RAY_ADDRESS")
    assert runs_inline(config.model_copy(update={"runner": "ray"}), plan) == (False, "--runner ray")
    # a large plan: Ray, unless the job has one worker (one part at a time either way)
    monkeypatch.setattr("guideloom.workers.driver.INLINE_MAX_BYTES", 100)
    assert runs_inline(config, plan)[0] is False
    assert runs_inline(config.model_copy(update={"num_workers": 1}), plan) == (True, "one worker")


def test_the_command_line_runs_a_small_job_without_starting_ray(tmp_path: Path) -> None:
    inputs = _inputs(tmp_path / "in")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    command = [sys.executable, "-m", "guideloom.cli", "ingest", *inputs, "--output", str(tmp_path / "o")]
    command += ["--tokenizer", "bytes", "--part-size", "2KiB", "--quiet"]
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "in this process, no Ray (a small job" in run.stderr
    assert "started a local Ray" not in run.stderr
    read = subprocess.run(
        [sys.executable, "-m", "guideloom.cli", "inspect", str(tmp_path / "o")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert read.returncode == 0, read.stderr
    assert "\ndocuments      360\n" in read.stdout, read.stdout


def test_an_inline_job_killed_mid_way_resumes_to_the_same_bytes(tmp_path: Path) -> None:
    from ingest_hooks import hooks_env

    inputs = _inputs(tmp_path / "in")
    clean = run_ingest({"inputs": inputs, "output": str(tmp_path / "clean"), "runner": "inline", **OPTIONS})
    marker = tmp_path / "crashed"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(hooks_env(crash_once={"part": 3, "marker": str(marker)}))
    command = [sys.executable, "-m", "guideloom.cli", "ingest", *inputs, "--output", str(tmp_path / "o")]
    command += ["--tokenizer", "bytes", "--part-size", "2KiB", "--shard-size", "3000", "--quiet"]
    killed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert killed.returncode == 1 and marker.exists()  # the process died inside part 3, no cleanup
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "reused 3 of" in again.stderr  # parts 0-2 were kept; 3 and on were written again
    from guideloom import open as open_dataset

    assert _contents(open_dataset(str(tmp_path / "o")).manifest) == _contents(clean)


@pytest.mark.ray
def test_an_inline_deduplicated_job_drops_what_ray_drops(ray_local: Any, tmp_path: Path) -> None:
    inputs = _inputs(tmp_path / "in")
    copy = Path(inputs[0]).with_name("in-copy.jsonl")  # every document of in-0 again, and 3 new
    copy.write_text(
        Path(inputs[0]).read_text() + "".join(json.dumps({"text": f"new {i}"}) + "\n" for i in range(3))
    )
    inputs.append(str(copy))
    settings = {"dedup": "exact", **OPTIONS}
    on_ray = run_ingest({"inputs": inputs, "output": str(tmp_path / "ray"), "num_workers": 2, **settings})
    inline = run_ingest(
        {"inputs": inputs, "output": str(tmp_path / "inline"), "runner": "inline", **settings}
    )
    assert _contents(inline) == _contents(on_ray)
    assert inline.metadata == on_ray.metadata
    meta = inline.metadata["ingest"]
    assert meta["documents"] == 3 * 120 + 3  # the copy's 120 repeats were dropped, its 3 new kept


def _kind_rows(kind: str) -> list[dict[str, Any]]:
    """Documents of a chat or annotated job, with repeats inside a part and across parts."""
    if kind == "chat":
        rows = [
            {
                "messages": [
                    {"role": "user", "content": f"question {i % 7}"},
                    {"role": "assistant", "content": "answer " + "a" * (i % 5)},
                ]
            }
            for i in range(60)  # 35 distinct conversations
        ]
    else:
        rows = []
        for i in range(60):
            text = f"visit city {i % 9} in spring"  # 9 distinct texts (the source is not compared)
            rows.append(
                {"text": text, "source": f"s{i % 2}", "spans": [{"start": 6, "end": 10, "type": "city"}]}
            )
    return rows


@pytest.mark.ray
@pytest.mark.parametrize("kind", ["chat", "spans"])
def test_a_deduplicated_chat_or_annotated_job_on_ray_writes_what_the_inline_runner_writes(
    ray_local: Any, tmp_path: Path, kind: str
) -> None:
    """Deduplication of conversations (the rendered chat is compared) and of annotated text (the
    text is compared, not its annotations) keeps the same documents, loss masks and spans on Ray
    as in one process."""
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _kind_rows(kind)))
    settings: dict[str, Any] = {"dedup": "exact", "part_size": 700, "shard_size": 1500, "progress": "none"}
    if kind == "chat":
        settings.update(input_format="chat", chat_template="chatml", tokenizer="bytes")
    else:
        settings.update(
            layout="stream-with-meta", meta_fields=["source"], spans_field="spans", tokenizer="bytes"
        )
    job = {"inputs": [str(path)], **settings}
    on_ray = run_ingest({**job, "output": str(tmp_path / "ray"), "num_workers": 2})
    inline = run_ingest({**job, "output": str(tmp_path / "inline"), "runner": "inline"})
    assert on_ray.metadata["ingest"]["parts"] >= 5  # several parts, later ones repeats only
    assert _contents(inline) == _contents(on_ray)
    assert inline.metadata == on_ray.metadata
    distinct = 35 if kind == "chat" else 9
    assert on_ray.metadata["ingest"]["documents"] == distinct
    assert on_ray.metadata["ingest"]["dedup"]["duplicates"] == 60 - distinct
