"""Command-line paths run in-process (typer's CliRunner): option parsing, inspect's metadata
layout, log --json, age and step syntax, and the errors each command gives for bad input."""

from __future__ import annotations

import json
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
from guideloom._version import __version__
from guideloom.cli import WIDTH, app, parse_options
from guideloom.storage import open_view

FMT = StreamNumpyFormat({"tokens": np.uint32})


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def _stream(root: Path, name: str = "s", records: int = 12, **writer: Any) -> StreamStorage:
    storage = StreamStorage(str(root / name), FMT)
    with storage.writer(**writer) as w:
        for k in range(records):
            w.append({"tokens": np.arange(k * 10, k * 10 + 10, dtype=np.uint32)})
    return StreamStorage(str(root / name), FMT)


def test_options_nest_on_dots_and_parse_json_values() -> None:
    opts = parse_options(["client_kwargs.endpoint_url=http://127.0.0.1:9", "anon=false", "n=3", "name=x"])
    assert opts == {
        "client_kwargs": {"endpoint_url": "http://127.0.0.1:9"},
        "anon": False,
        "n": 3,
        "name": "x",
    }
    assert parse_options(None) == {}


def test_an_option_without_a_value_is_a_usage_error(tmp_path: Path) -> None:
    out = _invoke("inspect", str(tmp_path), "-o", "novalue")
    assert out.exit_code == 2
    assert "'novalue' is not KEY=VALUE" in out.output


def test_version_prints_the_package_version() -> None:
    out = _invoke("--version")
    assert out.exit_code == 0 and out.output.strip() == f"guideloom {__version__}"


def test_inspect_lays_out_nested_metadata_and_counts_long_lists(tmp_path: Path) -> None:
    meta = {
        "source": {"name": "web", "year": 2026},
        "ids": list(range(7)),
        "short": [1, 2],
        "note": "y" * 200,
    }
    storage = _stream(tmp_path, metadata=meta)
    out = _invoke("inspect", storage.url)
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert "  source:" in lines and "    name: web" in lines and "    year: 2026" in lines
    assert "  ids: [7 items; --json shows them]" in lines and "  short: [1, 2]" in lines
    note = next(line for line in lines if line.startswith("  note: "))
    assert len(note) == WIDTH and note.endswith("…")
    manifest = json.loads(_invoke("inspect", "--manifest", storage.url).output)
    assert manifest["total_tokens"] == 120 and manifest["metadata"]["ids"] == list(range(7))


def test_inspect_of_documents_counts_documents_not_tokens(tmp_path: Path) -> None:
    docs = DocumentStorage(str(tmp_path / "d"), DocumentJsonFormat())
    with docs.writer() as w:
        for k in range(1234):
            w.append({"text": f"doc {k}"})
    out = _invoke("inspect", docs.url)
    assert out.exit_code == 0, out.output
    assert "documents      1,234" in out.output and "\ntokens " not in out.output


def test_log_json_is_one_snapshot_per_line_without_pieces(tmp_path: Path) -> None:
    storage = _stream(tmp_path)
    with storage.writer(append=True) as w:
        w.append({"tokens": np.arange(4, dtype=np.uint32)})
    rows = [json.loads(line) for line in _invoke("log", "--json", storage.url).output.splitlines()]
    assert [r["id"] for r in rows] == [s.id for s in storage.snapshots()]
    assert all("pieces" not in r for r in rows) and rows[1]["parent"] == rows[0]["id"]


@pytest.mark.parametrize("age", ["12", "3w", "h", "1.2.3h", "-1d"])
def test_expire_names_the_age_syntax(tmp_path: Path, age: str) -> None:
    storage = _stream(tmp_path)
    for flag in ("--older-than", "--grace"):
        out = _invoke("expire", storage.url, flag, age)
        assert out.exit_code == 2
        assert f"an age is a number and a unit (s, m, h or d), like 12h or 7d; got {age!r}" in out.output


def test_expire_takes_fractional_ages_and_keeps_younger_snapshots(tmp_path: Path) -> None:
    storage = _stream(tmp_path)
    with storage.writer(append=True) as w:
        w.append({"tokens": np.arange(4, dtype=np.uint32)})
    out = _invoke("expire", storage.url, "--older-than", "1.5h", "--grace", "0.5s")
    assert out.exit_code == 0, out.output
    assert out.output.splitlines()[-1] == f"0 snapshots expired at {storage.location.display_url}"
    assert len(storage.snapshots()) == 2


def test_rollback_of_an_unknown_dataset_exits_2(tmp_path: Path) -> None:
    out = _invoke("rollback", str(tmp_path / "nothing"), "1")
    assert out.exit_code == 2 and out.output.startswith("error: ")


def test_mix_names_a_bad_weight_by(tmp_path: Path) -> None:
    storage = _stream(tmp_path)
    out = _invoke("mix", f"{storage.url}=1", "-L", "8", "--weight-by", "bytes")
    assert out.exit_code == 2
    assert "--weight-by must be samples or tokens, got 'bytes'" in out.output
    out = _invoke("mix", f"{storage.url}=1")
    assert out.exit_code == 2 and "is a stream: pass --sequence-length" in out.output


@pytest.fixture
def traced(tmp_path: Path) -> dict[str, Any]:
    a, b = _stream(tmp_path, "a", 30), _stream(tmp_path, "b", 30)
    loader = StatefulDataLoader.from_storage(
        guideloom.Mixture([(a, 0.5), (b, 0.5)]), sequence_length=8, batch_size=2
    )
    state = tmp_path / "state.json"
    state.write_text(json.dumps(loader.state_dict()))
    return {"a": a, "b": b, "state": str(state)}


@pytest.mark.parametrize(
    "steps, message",
    [
        ("one-two", "--steps takes A-B (first and last step, inclusive) or one step, got 'one-two'"),
        ("5-2", "--steps '5-2': the first step must be >= 0 and not after the last"),
    ],
)
def test_trace_names_bad_steps(traced: dict[str, Any], steps: str, message: str) -> None:
    args = [traced["state"], f"{traced['a'].url}=0.5", f"{traced['b'].url}=0.5"]
    out = _invoke("trace", *args, "--steps", steps)
    assert out.exit_code == 2 and message in out.output


def test_trace_decodes_each_source_of_a_mixture(traced: dict[str, Any]) -> None:
    args = [traced["state"], f"{traced['a'].url}=0.5", f"{traced['b'].url}=0.5", "--steps", "0-1"]
    out = _invoke("trace", *args, "--decode", "-1")
    assert out.exit_code == 2 and "--decode takes a number of tokens >= 0, got -1" in out.output
    out = _invoke("trace", *args, "--decode", "3", "--tokenizer", "bytes", "--json")
    assert out.exit_code == 0, out.output
    rows = [json.loads(line) for line in out.output.splitlines()]
    assert len(rows) == 4 and {r["source"] for r in rows} <= {traced["a"].url, traced["b"].url}
    storages = {traced["a"].url: traced["a"], traced["b"].url: traced["b"]}
    for row in rows:  # the first 3 tokens of the window the row names, read from its source
        window = open_view(storages[row["source"]], 8)[row["sample_index"]]
        assert row["tokens"] == [int(t) for t in window["tokens"][:3]]
        assert row["text"] == bytes(row["tokens"]).decode("utf-8", errors="replace")


def test_trace_names_a_tokenizer_that_cannot_load(traced: dict[str, Any]) -> None:
    args = [traced["state"], f"{traced['a'].url}=0.5", f"{traced['b'].url}=0.5", "--steps", "0"]
    out = _invoke(
        "trace", *args, "--decode", "3", "--tokenizer", "hf:" + str(Path(traced["state"]).parent / "no-such")
    )
    assert out.exit_code == 2
    assert "cannot be loaded here" in out.output and "name one that can: --tokenizer SPEC" in out.output


def test_export_names_the_one_format_it_writes(tmp_path: Path) -> None:
    storage = _stream(tmp_path)
    out = _invoke("export", storage.url, str(tmp_path / "out"), "--format", "arrow")
    assert out.exit_code == 2 and "--format 'arrow': export writes megatron (.bin/.idx) only" in out.output
