"""`guideloom trace`'s table fits 120 columns (``--wide`` keeps every field, ``--json`` is as
before), and commands whose reader closes the pipe (``| head``) end quietly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import guideloom
from guideloom import (
    DocumentJsonFormat,
    DocumentStorage,
    StatefulDataLoader,
    StreamNumpyFormat,
    StreamStorage,
)
from guideloom.cli import app
from guideloom.terminal import COMPACT_WIDTH, short_bytes, short_records

FMT = StreamNumpyFormat({"tokens": np.uint32})


def _stream(root: Path, name: str, tokens: int) -> StreamStorage:
    storage = StreamStorage(str(root / name), FMT)
    with storage.writer(shard_size=400) as writer:
        for start in range(0, tokens, 37):
            writer.append({"tokens": np.arange(start, min(tokens, start + 37), dtype=np.uint32)})
    return storage


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    # a deep folder: long URLs are what overflowed the old table
    root = tmp_path_factory.mktemp("trace") / "a-rather-long-folder-name" / "and-another-level-of-it"
    root.mkdir(parents=True)
    a, b = _stream(root, "web-corpus-2026-12", 3000), _stream(root, "code-corpus-2026-12", 2000)
    docs = DocumentStorage(str(root / "documents"), DocumentJsonFormat())
    with docs.writer(shard_size=300) as writer:
        for k in range(60):
            writer.append({"text": f"document {k}"})
    states = {}
    for name, loader in (
        ("stream", StatefulDataLoader.from_storage(a, sequence_length=64, batch_size=8, shuffle=True, seed=3)),
        ("mixture", StatefulDataLoader.from_storage(
            guideloom.Mixture([(a, 0.7), (b, 0.3)]), sequence_length=64, batch_size=8, shuffle=True)),
        ("documents", StatefulDataLoader.from_storage(docs, batch_size=4, shuffle=True)),
    ):  # fmt: skip
        path = root / f"{name}.json"
        path.write_text(json.dumps(loader.state_dict()))
        states[name] = str(path)
    many = StreamStorage(str(root / "many"), FMT)
    with many.writer(shard_size=32) as writer:  # one 8-token record a shard: 1,500 shards
        for k in range(1500):
            writer.append({"tokens": np.full(8, k, dtype=np.uint32)})
    return {"a": a, "b": b, "docs": docs, "many": many, "states": states}


def _args(data: dict[str, Any], kind: str) -> list[str]:
    if kind == "mixture":
        return ["trace", data["states"][kind], f"{data['a'].url}=0.7", f"{data['b'].url}=0.3"]
    return ["trace", data["states"][kind], data["a" if kind == "stream" else "docs"].url]


@pytest.mark.parametrize("kind", ["stream", "mixture", "documents"])
def test_compact_table_fits_120_columns_and_abbreviates(data: dict[str, Any], kind: str) -> None:
    args = [*_args(data, kind), "--steps", "0-4"]
    table = CliRunner().invoke(app, args)
    assert table.exit_code == 0, table.output
    rows = [json.loads(line) for line in CliRunner().invoke(app, [*args, "--json"]).output.splitlines()]
    lines = table.output.splitlines()
    assert len(lines) == 1 + len(rows)
    assert max(len(line) for line in lines) <= COMPACT_WIDTH
    assert lines[0].split() == ["step", "rank", "sample", "records", "shard", "bytes", "source"]
    for line, row in zip(lines[1:], rows):
        cells = line.split()
        assert [int(c) for c in cells[:3]] == [row["step"], row["rank"], row["sample_index"]]
        assert cells[3] == short_records(row["records"])
        part, shard = row["shard"].split()[1], row["shard"].split()[3]
        assert cells[4].startswith(f"p{part}/s{shard}")
        if row["byte_range"]:
            assert cells[5] == f"@{short_bytes(row['byte_range'][0])}"
        else:
            assert cells[5:7] == ["rec", str(row["record_in_shard"])]
        source = line[69:]  # after the fixed columns
        if "…" in source:
            head, tail = source.split("…")
            assert row["source"].startswith(head) and row["source"].endswith(tail)
        else:
            assert source == row["source"]


def test_wide_table_has_every_field(data: dict[str, Any]) -> None:
    args = [*_args(data, "stream"), "--steps", "0-1"]
    rows = [json.loads(line) for line in CliRunner().invoke(app, [*args, "--json"]).output.splitlines()]
    wide = CliRunner().invoke(app, [*args, "--wide"])
    assert wide.exit_code == 0, wide.output
    for line, row in zip(wide.output.splitlines()[1:], rows):
        rng = row["byte_range"]
        assert row["shard"] in line and f"{rng[0]}-{rng[1]}" in line and row["source"] in line
        assert ",".join(map(str, row["records"])) in line
        for piece in row["pieces"][1:]:
            assert piece["shard"] in line
    assert max(len(line) for line in wide.output.splitlines()) > COMPACT_WIDTH  # nothing cut


def test_json_rows_are_the_trace_rows(data: dict[str, Any]) -> None:
    state = json.loads(Path(data["states"]["stream"]).read_text())
    expected = list(guideloom.trace(state, data["a"], steps=range(3)))
    out = CliRunner().invoke(app, [*_args(data, "stream"), "--steps", "0-2", "--json"]).output
    assert [json.loads(line) for line in out.splitlines()] == json.loads(json.dumps(expected))


def test_short_forms() -> None:
    assert [short_bytes(n) for n in (0, 1023, 1536, 10 * 2**20, 300 * 2**30)] == [
        "0",
        "1023",
        "1.5K",
        "10.0M",
        "300G",
    ]
    assert (
        short_records([7]) == "7" and short_records([7, 8, 9]) == "7-9" and short_records([7, 12]) == "7,12"
    )
    assert short_records([]) == "-" and short_records(None) == "?"
    many = short_records(list(range(3, 6)) + list(range(9, 60, 2)))
    assert len(many) <= 16 and many.startswith("3-5,") and many.endswith(f"({3 + 26})")


def _piped(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``guideloom COMMAND | head -n 2`` in a shell; the status is guideloom's own."""
    cli = Path(sys.executable).parent / "guideloom"
    line = " ".join(f"'{c}'" for c in [str(cli), *command]) + " | head -n 2; exit ${PIPESTATUS[0]}"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run(["bash", "-c", line], capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


@pytest.mark.parametrize("flag", ["--json", "--wide", None])
def test_a_closed_pipe_ends_trace_quietly(data: dict[str, Any], flag: str | None, tmp_path: Path) -> None:
    args = [*_args(data, "stream")[1:], "--steps", "0-3000"] + ([flag] if flag else [])
    done = _piped(["trace", *args], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "" and len(done.stdout.splitlines()) == 2


def test_a_closed_pipe_ends_other_commands_quietly(data: dict[str, Any], tmp_path: Path) -> None:
    url = data["many"].url  # more lines than a pipe holds
    for command in (["inspect", url, "--shards", "-1"], ["inspect", url, "--json", "--shards", "-1"]):
        done = _piped(command, tmp_path)
        assert done.returncode == 0 and done.stderr == "", (command, done.stderr)
