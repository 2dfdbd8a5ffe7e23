"""`guideloom.trace`: the rows of any step, from a state and the manifests, equal what a loader
actually yielded at those steps (1 and 2 ranks, shuffle modes, a mixture, documents)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import guideloom
from guideloom import (
    DocumentJsonFormat,
    DocumentStorage,
    Mixture,
    StatefulDataLoader,
    StreamNumpyFormat,
    StreamStorage,
)
from guideloom.errors import ResumeStateError
from guideloom.layout import HEADER_SIZE

FMT = StreamNumpyFormat({"tokens": np.uint32})


def _stream(url: str, tokens: int, base: int = 0) -> StreamStorage:
    storage = StreamStorage(url, FMT)
    with storage.writer(shard_size=400) as writer:  # many small shards: windows cross them
        for start in range(0, tokens, 37):
            writer.append(
                {"tokens": np.arange(base + start, base + min(tokens, start + 37), dtype=np.uint32)}
            )
    return StreamStorage(url, FMT)


def _epochs(make: Any, epochs: int) -> list[list[Any]]:
    """Per rank, every batch of ``epochs`` epochs, in step order."""
    out = []
    for loader in make():
        batches = []
        for _ in range(epochs):
            batches += [b for b in loader]
        out.append(batches)
    return out


@pytest.mark.parametrize("world_size", [1, 2])
@pytest.mark.parametrize("shuffle", [False, True, "block"])
def test_trace_equals_what_the_loader_yielded(tmp_path: Any, world_size: int, shuffle: Any) -> None:
    storage = _stream(str(tmp_path / "s"), 3000)
    kwargs: dict[str, Any] = {"sequence_length": 16, "batch_size": 5, "shuffle": shuffle, "seed": 11}
    if shuffle == "block":
        kwargs.update(shuffle_block_size=8, shuffle_buffer_blocks=2)

    def make() -> list[Any]:
        return [
            StatefulDataLoader.from_storage(storage, rank=r, world_size=world_size, **kwargs)
            for r in range(world_size)
        ]

    loaders = make()
    state = loaders[0].state_dict()
    per_epoch = len(loaders[0])
    yielded = _epochs(make, 2)
    steps = range(per_epoch - 3, per_epoch + 2)  # across the epoch boundary and its short step
    rows = list(guideloom.trace(state, storage, steps=steps))
    assert len(rows) == sum(len(yielded[r][s]["tokens"]) for r in range(world_size) for s in steps)
    data_of: dict[str, bytes] = {}
    for row in rows:
        got = yielded[row["rank"]][row["step"]]["tokens"][row["row"]].numpy()
        # the index: the window's tokens are its tokens
        assert got.tolist() == list(range(row["sample_index"] * 16, row["sample_index"] * 16 + 16))
        # and the byte ranges hold exactly those tokens
        parts = []
        for piece in row["pieces"]:
            path = piece["path"]
            if path not in data_of:
                with open(f"{storage.url}/{path}", "rb") as f:
                    data_of[path] = f.read()
            a, b = piece["byte_range"]
            parts.append(np.frombuffer(data_of[path][a:b], np.uint32))
        assert np.concatenate(parts).tolist() == got.tolist()
        assert row["byte_range"] == row["pieces"][0]["byte_range"] and row["url"] == storage.url
        assert row["byte_range"][0] >= HEADER_SIZE
        # records: the writer's appends (37 tokens each) the window's tokens belong to
        assert row["records"] == sorted({t // 37 for t in got.tolist()})
    assert {(r["step"], r["rank"]) for r in rows} == {(s, k) for s in steps for k in range(world_size)}
    arrays = guideloom.trace_arrays(state, storage, steps)
    assert arrays.sample_index.tolist() == [r["sample_index"] for r in rows]
    json.dumps(rows)  # plain values: JSON Lines as they are


def test_trace_of_a_mixture_names_each_row_s_source(tmp_path: Any) -> None:
    a = _stream(str(tmp_path / "a"), 2000)
    b = _stream(str(tmp_path / "b"), 900, base=10**6)
    mixture = Mixture([(a, 0.7), (b, 0.3)])

    def make() -> list[Any]:
        return [
            StatefulDataLoader.from_storage(mixture, sequence_length=8, batch_size=4, shuffle=True, seed=2)
        ]

    state = make()[0].state_dict()
    yielded = _epochs(make, 1)[0]
    rows = list(guideloom.trace(state, mixture, steps=range(len(yielded))))
    assert {r["source"] for r in rows} == set(mixture.names)
    for row in rows:
        got = yielded[row["step"]]["tokens"][row["row"]].tolist()
        base = 0 if row["url"] == a.url else 10**6
        start = base + row["sample_index"] * 8
        assert got == list(range(start, start + 8))
        assert row["source"] == mixture.names[0 if base == 0 else 1]


def test_trace_of_documents(tmp_path: Any) -> None:
    storage = DocumentStorage(str(tmp_path / "d"), DocumentJsonFormat())
    with storage.writer(shard_size=300) as writer:
        for i in range(60):
            writer.append({"tokens": [i] * (1 + i % 5)})
    storage = DocumentStorage(storage.url, DocumentJsonFormat())
    loader = StatefulDataLoader.from_storage(storage, batch_size=4, shuffle=True, seed=5, collate_fn=list)
    state = loader.state_dict()
    yielded = list(loader)
    rows = list(guideloom.trace(state, storage, steps=range(len(yielded))))
    shards = storage.manifest.shard_table
    for row in rows:
        assert yielded[row["step"]][row["row"]]["tokens"][0] == row["sample_index"]
        assert row["records"] == [row["sample_index"]]
        i = [shards.shard_name(k) for k in range(len(shards))].index(row["shard"])
        assert 0 <= row["record_in_shard"] < shards.records[i]


def test_trace_refuses_a_state_of_other_data_and_steps_before_its_numbering(tmp_path: Any) -> None:
    one = _stream(str(tmp_path / "one"), 1000)
    other = _stream(str(tmp_path / "other"), 1200)
    state = StatefulDataLoader.from_storage(one, sequence_length=16, batch_size=2).state_dict()
    with pytest.raises(ResumeStateError, match="fingerprint|other data|another"):
        list(guideloom.trace(state, other, steps=range(2)))
    with pytest.raises(ValueError, match="first_step"):
        guideloom.trace_arrays(state, one, steps=range(3), first_step=5)
    with pytest.raises(TypeError, match="range"):
        guideloom.trace_arrays(state, one, steps=[1, 2])


def test_many_steps_are_traced_without_replaying(tmp_path: Any) -> None:
    storage = _stream(str(tmp_path / "s"), 5000)
    loader = StatefulDataLoader.from_storage(storage, sequence_length=4, batch_size=8, shuffle=True)
    state, per_epoch, windows = loader.state_dict(), len(loader), 5000 // 4
    arrays = guideloom.trace_arrays(state, storage, steps=range(2 * 10**5))
    epochs, rest = divmod(2 * 10**5, per_epoch)  # 157 steps an epoch: 156 of 8 windows, one of 2
    assert len(arrays) == epochs * windows + rest * 8
    assert arrays.step[-1] == 2 * 10**5 - 1 and arrays.epoch[-1] == epochs
    # each whole epoch reads every window once
    first = arrays.sample_index[arrays.epoch == 3]
    assert np.array_equal(np.sort(first), np.arange(windows))


def test_guideloom_trace_on_the_command_line(tmp_path: Any) -> None:
    from typer.testing import CliRunner

    from guideloom.cli import app

    storage = _stream(str(tmp_path / "s"), 3000)
    loader = StatefulDataLoader.from_storage(storage, sequence_length=16, batch_size=4, shuffle=True, seed=9)
    state_file = tmp_path / "state.json"
    state_file.write_text(json.dumps(loader.state_dict()))
    yielded = list(loader)
    result = CliRunner().invoke(app, ["trace", str(state_file), storage.url, "--steps", "3-5", "--json"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert [(r["step"], r["row"]) for r in rows] == [(s, k) for s in (3, 4, 5) for k in range(4)]
    for row in rows:
        start = row["sample_index"] * 16
        assert yielded[row["step"]]["tokens"][row["row"]].tolist() == list(range(start, start + 16))
    table = CliRunner().invoke(app, ["trace", str(state_file), storage.url, "--steps", "3"])
    assert table.exit_code == 0 and table.output.count("\n") == 1 + 4, table.output
    bad = CliRunner().invoke(app, ["trace", str(state_file), storage.url, "--steps", "5-3"])
    assert bad.exit_code == 2 and "--steps" in bad.output


def test_trace_records_through_a_remote_reader(tmp_path: Any) -> None:
    """The record-start files are read through the view's reader: the same on a remote store."""
    storage = _stream(f"memory://{tmp_path.name}/trace", 2000)
    loader = StatefulDataLoader.from_storage(storage, sequence_length=16, batch_size=4, shuffle=True)
    rows = list(guideloom.trace(loader.state_dict(), storage, steps=range(len(loader))))
    assert len(rows) == 2000 // 16
    for row in rows:
        start = row["sample_index"] * 16
        assert row["records"] == sorted({t // 37 for t in range(start, start + 16)})


def test_trace_decode_prints_each_rows_first_tokens_with_the_ingestion_tokenizer(tmp_path: Any) -> None:
    from typer.testing import CliRunner

    from guideloom.cli import app
    from guideloom.workers.tokenizer import load_tokenizer

    tok = load_tokenizer("bytes")
    texts = [f"document {i}: the quick brown fox, number {i}." for i in range(40)]
    fmt = StreamNumpyFormat({"tokens": np.uint16})
    storage = StreamStorage(str(tmp_path / "s"), fmt)
    with storage.writer(metadata={"ingest": {"tokenizer": tok.describe()}}) as writer:
        for ids in tok.encode_batch(texts):
            writer.append({"tokens": np.append(ids, tok.eos_id).astype(np.uint16)})
    bare = StreamStorage(str(tmp_path / "bare"), fmt)
    with bare.writer() as writer:
        writer.append({"tokens": np.arange(200, dtype=np.uint16)})

    loader = StatefulDataLoader.from_storage(storage, sequence_length=24, batch_size=2, shuffle=True, seed=1)
    state_file = tmp_path / "state.json"
    state_file.write_text(json.dumps(loader.state_dict()))
    yielded = list(loader)
    args = ["trace", str(state_file), storage.url, "--steps", "2-3", "--decode", "10"]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert len(rows) == 4
    for row in rows:
        ids = yielded[row["step"]]["tokens"][row["row"]][:10].tolist()
        assert row["tokens"] == ids and row["text"] == tok.decode(ids)
    table = CliRunner().invoke(app, args)
    assert table.exit_code == 0 and repr(rows[0]["text"]) in table.output, table.output

    bare_loader = StatefulDataLoader.from_storage(bare, sequence_length=24, batch_size=2)
    bare_state = tmp_path / "bare.json"
    bare_state.write_text(json.dumps(bare_loader.state_dict()))
    missing = CliRunner().invoke(app, ["trace", str(bare_state), bare.url, "--steps", "0", "--decode", "5"])
    assert missing.exit_code == 2 and "records no ingestion tokenizer" in missing.output
    assert "--tokenizer SPEC" in missing.output
    given = CliRunner().invoke(
        app,
        [
            "trace",
            str(bare_state),
            bare.url,
            "--steps",
            "0",
            "--decode",
            "5",
            "--tokenizer",
            "bytes",
            "--json",
        ],
    )
    assert given.exit_code == 0, given.output
    first = json.loads(given.output.splitlines()[0])
    assert first["text"] == tok.decode(first["tokens"]) and len(first["tokens"]) == 5
