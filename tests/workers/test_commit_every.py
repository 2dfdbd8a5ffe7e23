"""`guideloom ingest --commit-every` (IngestConfig.commit_every) on the session's local Ray: a
snapshot each time the next parts are complete, a final shard table equal to a one-shot
ingestion's, a crashed job that re-runs landing every record once, and a loader with
``follow=True`` that starts on the first snapshot while the job runs."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from guideloom import StatefulDataLoader, StreamDataset
from guideloom.errors import IngestError
from guideloom.workers.driver import COMMITTED_PARTS, commit_points
from guideloom.workers.ingest import run_ingest
from guideloom.workers.output import open_storage
from guideloom.workers.planning import plan_parts
from guideloom.workers.sources import expand_inputs
from guideloom.workers.tokenizer import load_tokenizer

OPTS = {"part_size": 640, "shard_size": 300, "num_workers": 1}  # 24 documents: 6 parts


def _table(manifest) -> dict:
    """The shard table without the attempts' random prefix names (same bytes: same checksums)."""
    t = manifest.shard_table
    files = {name: (col.kind, list(col.size), list(col.checksum)) for name, col in t.files.items()}
    return {
        "part": list(t.part),
        "index": list(t.index),
        "records": list(t.records),
        "tokens": list(t.tokens),
        "prefix_id": list(t.prefix_id),
        "prefixes": len(t.prefix),
        "part_base": list(t.part_base),
        "files": files,
        "num_parts": manifest.num_parts,
    }


def _storage(config):
    return open_storage(config, load_tokenizer("bytes"))


def _tokens(storage) -> list[int]:
    n = storage.manifest.total_tokens
    return StreamDataset(storage, n)[0]["tokens"].tolist()


@pytest.mark.ray
def test_commit_every_two_parts_makes_three_snapshots_ending_as_one_shot(
    ray_local, ingest_config, write_jsonl, doc_rows, tmp_path
):
    source = write_jsonl("a.jsonl", doc_rows(24))
    one_shot = run_ingest(ingest_config([source], tmp_path / "once", **OPTS))
    assert one_shot.num_parts == 6
    config = ingest_config([source], tmp_path / "steps", commit_every=2, **OPTS)
    final = run_ingest(config)
    storage = _storage(config)
    snaps = storage.snapshots()
    assert [s.operation for s in snaps] == ["write", "append", "append"]
    assert [s.num_parts for s in snaps] == [2, 4, 6]
    assert _table(final) == _table(one_shot)
    assert final.metadata == one_shot.metadata  # the job's whole metadata, as one commit gives
    whole = _tokens(_storage(ingest_config([source], tmp_path / "once", **OPTS)))
    assert _tokens(storage) == whole
    for snap in snaps[:-1]:  # every step is a prefix of the stream, and says how far it got
        pinned = storage.at_snapshot(snap.id)
        assert pinned.manifest.metadata["ingest"][COMMITTED_PARTS] == snap.num_parts
        assert _tokens(pinned) == whole[: pinned.manifest.total_tokens]
    again = run_ingest(config)  # committed: nothing runs, no new snapshot
    assert _table(again) == _table(one_shot) and len(_storage(config).snapshots()) == 3


@pytest.mark.ray
def test_commit_every_appends_on_top_of_a_dataset_as_one_append(
    ray_local, ingest_config, write_jsonl, doc_rows, tmp_path
):
    base = write_jsonl("base.jsonl", doc_rows(5, start=500))
    more = write_jsonl("more.jsonl", doc_rows(24))
    for name, extra in (("once", {}), ("steps", {"commit_every": 2})):
        run_ingest(ingest_config([base], tmp_path / name, **OPTS))
        run_ingest(ingest_config([more], tmp_path / name, append=True, **OPTS, **extra))
    once = _storage(ingest_config([base], tmp_path / "once", **OPTS))
    steps = _storage(ingest_config([base], tmp_path / "steps", **OPTS))
    assert [s.operation for s in steps.snapshots()] == ["write", "append", "append", "append"]
    assert _table(steps.manifest) == _table(once.manifest)
    assert _tokens(steps) == _tokens(once)


def _break_line(path: Path, number: int) -> bytes:
    """Make line ``number`` invalid JSON of the same length (so the job's plan is the same);
    return the file's original bytes."""
    original = path.read_bytes()
    lines = original.split(b"\n")
    lines[number] = b"X" + lines[number][1:]
    path.write_bytes(b"\n".join(lines))
    return original


@pytest.mark.ray
def test_a_crashed_commit_every_job_reruns_landing_every_record_once(
    ray_local, ingest_config, write_jsonl, doc_rows, tmp_path
):
    source = write_jsonl("a.jsonl", doc_rows(24))
    one_shot = run_ingest(ingest_config([source], tmp_path / "once", **OPTS))
    config = ingest_config([source], tmp_path / "steps", commit_every=2, **OPTS)
    plan = plan_parts(expand_inputs([str(source)], "auto", {}), part_size=640, text_per_line=False)
    start_of_part_4 = plan.parts[4][0].start
    # the line after the one that crosses into part 4 starts inside it: part 4 reads it
    line = source.read_bytes()[:start_of_part_4].count(b"\n") + 1
    original = _break_line(source, line)
    with pytest.raises(IngestError, match="line"):
        run_ingest(config)  # parts 0..3 are committed (two snapshots), then part 4 fails
    storage = _storage(config)
    assert [s.num_parts for s in storage.snapshots()] == [2, 4]
    source.write_bytes(original)  # fixed, same size: the same job
    final = run_ingest(ingest_config([source], tmp_path / "steps", commit_every=3, **OPTS))
    snaps = _storage(config).snapshots()
    assert [s.num_parts for s in snaps] == [2, 4, 6]  # parts 0..3 were not committed again
    assert _table(final) == _table(one_shot)
    assert final.total_tokens == one_shot.total_tokens
    assert _tokens(_storage(config)) == _tokens(_storage(ingest_config([source], tmp_path / "once", **OPTS)))


@pytest.mark.ray
def test_a_following_loader_starts_on_the_first_snapshot_while_ingestion_runs(
    ray_local, ingest_config, write_jsonl, doc_rows, tmp_path, monkeypatch
):
    from ingest_hooks import hooks_env

    for key, value in hooks_env(part_delay_s=1.0).items():  # parts slow enough to train between
        monkeypatch.setenv(key, value)
    source = write_jsonl("a.jsonl", doc_rows(24))
    config = ingest_config([source], tmp_path / "steps", commit_every=2, **OPTS)
    errors: list[BaseException] = []

    def ingest() -> None:
        try:
            run_ingest(config)
        except BaseException as err:  # reported by the test below
            errors.append(err)

    job = threading.Thread(target=ingest)
    job.start()
    storage = _storage(config)
    deadline = time.monotonic() + 120
    while not storage.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    storage.refresh()
    assert storage.current_snapshot.num_parts < 6  # training starts before ingestion ends
    loader = StatefulDataLoader.from_storage(storage, sequence_length=16, batch_size=4, follow=True)
    epochs: list[tuple[str, int, list[int]]] = []
    while time.monotonic() < deadline:
        windows = [int(x) for b in loader for x in b["tokens"][:, 0]]
        state = loader.state_dict()["guideloom_loader"]  # the epoch just read: its snapshot
        epochs.append((state["snapshot"], state["num_samples"], windows))
        if not job.is_alive() and epochs[-1][1] == len(StreamDataset(_storage(config), 16)):
            break
        time.sleep(0.2)
    job.join()
    assert not errors
    assert len({snap for snap, _, _ in epochs}) >= 2  # it moved to later snapshots
    for snap, num_samples, windows in epochs:  # each epoch: its snapshot's windows, exactly once
        pinned = storage.at_snapshot(snap)
        expected = [int(w["tokens"][0]) for w in StreamDataset(pinned, 16)]
        assert len(windows) == num_samples and windows == expected


def test_commit_points_by_parts_and_by_input_size(write_jsonl, doc_rows, ingest_config, tmp_path):
    source = write_jsonl("a.jsonl", doc_rows(24))
    plan = plan_parts(expand_inputs([str(source)], "auto", {}), part_size=640, text_per_line=False)
    assert plan.part_bytes[:5] == (640,) * 5
    rule = ingest_config([source], tmp_path / "o", commit_every="4").commit_rule
    assert rule == ("parts", 4) and commit_points(plan, rule) == [4, 6]
    assert commit_points(plan, None) == [6]
    by_size = ingest_config([source], tmp_path / "o", commit_every="1KiB").commit_rule
    assert by_size == ("bytes", 1024) and commit_points(plan, by_size) == [2, 4, 6]
    for bad in ("0", "2 parsecs", -1):
        with pytest.raises(ValueError, match="commit_every") as info:
            ingest_config([source], tmp_path / "o", commit_every=bad)
        assert "2GiB" in str(info.value) or "positive" in str(info.value)
    assert json.dumps(plan.part_bytes)  # plain ints


def test_cli_flag_and_job_file_take_commit_every(tmp_path):
    import typer
    from typer.testing import CliRunner

    from guideloom.workers.cli import register
    from guideloom.workers.config import load_job_file

    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """GuideLoom."""

    register(app)
    source = tmp_path / "a.jsonl"
    source.write_text('{"text": "x"}\n')
    result = CliRunner().invoke(
        app, ["ingest", str(source), "--output", str(tmp_path / "o"), "--commit-every", "2 parsecs"]
    )
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "commit_every" in result.output and "2GiB" in result.output
    job = tmp_path / "job.yaml"
    job.write_text(f"inputs: [{source}]\noutput: {tmp_path / 'o'}\ncommit_every: 2GiB\n")
    config = load_job_file(job)
    assert config.commit_rule == ("bytes", 2 * 2**30)
    assert "commit_every" not in config.identity()  # the same job whenever it commits


def test_a_deduplicated_append_whose_first_steps_hold_only_duplicates_commits_them_as_empty(
    ingest_config, write_jsonl, doc_rows, tmp_path
):
    """An append with ``dedup="exact"`` and ``commit_every=1`` whose first parts hold only
    documents the dataset has: those steps fold into the first step with a new document (before,
    the first step's commit failed with pydantic's "shard table has no 'data' column"), and the
    dataset ends with every document once, as the same append in one commit gives. The same
    append run again adds nothing: one snapshot that appends no shard, with the counts of what
    it dropped."""
    held = doc_rows(12)
    base = write_jsonl("base.jsonl", held)
    again = write_jsonl("again.jsonl", held)  # parts 0..2 of the append: all already held
    new = write_jsonl("new.jsonl", doc_rows(8, start=100))
    inline = {"dedup": "exact", "runner": "inline", **OPTS}  # the commits are the same on Ray
    for name, extra in (("once", {}), ("steps", {"commit_every": 1})):
        run_ingest(ingest_config([base], tmp_path / name, **inline))
        run_ingest(ingest_config([again, new], tmp_path / name, append=True, **inline, **extra))
    once = _storage(ingest_config([base], tmp_path / "once", **OPTS))
    steps = _storage(ingest_config([base], tmp_path / "steps", **OPTS))
    added = [s.summary.added_records for s in steps.snapshots()[1:]]
    # no step before the last adds nothing (the last commits the job's remaining parts whatever
    # they hold: it records the job's whole metadata)
    assert 0 not in added[:-1] and sum(added) == 8 and len(added) < steps.manifest.num_parts - 3
    assert _table(steps.manifest) == _table(once.manifest)
    assert _tokens(steps) == _tokens(once)
    assert steps.manifest.total_records == once.manifest.total_records == 20
    run_ingest(ingest_config([again], tmp_path / "steps", append=True, **inline, commit_every=1))
    last = steps.current_snapshot
    assert last.operation == "append" and last.summary.added_shards == 0
    assert last.metadata["ingest"]["dedup"]["already_held"] == 12
    assert _tokens(steps) == _tokens(once)
