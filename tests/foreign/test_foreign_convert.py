"""`guideloom convert` (token files in place -> a GuideLoom dataset) and `guideloom export`
(a GuideLoom dataset -> a Megatron pair): the same tokens, documents and windows both ways, on
the command line and in Python; and Megatron-style weighted lists opened as a `Mixture`."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from foreign_files import documents, masks_of, write_datatrove, write_megatron, write_nanogpt
from typer.testing import CliRunner

import guideloom
from guideloom import (
    DocumentJsonFormat,
    DocumentStorage,
    StatefulDataLoader,
    StreamDataset,
    StreamNumpyFormat,
)
from guideloom.cli import app
from guideloom.storage.foreign.convert import convert_foreign
from guideloom.storage.foreign.export import export_megatron

L = 64


def _same_stream(a: Any, b: Any, length: int = L) -> None:
    """Two stream storages hold the same tokens (every field) and record starts."""
    x, y = StreamDataset(a, length), StreamDataset(b, length)
    assert len(x) == len(y) and x.total_tokens == y.total_tokens
    every = list(range(len(x)))
    wx, wy = x.read_windows(every), y.read_windows(every)
    assert wx.keys() == wy.keys() and all(np.array_equal(wx[k], wy[k]) for k in wx)
    px, cx = x.record_starts_batch(every)
    py, cy = y.record_starts_batch(every)
    assert np.array_equal(px, py) and np.array_equal(cx, cy)


def test_convert_megatron_files_to_a_native_dataset(tmp_path: Any) -> None:
    parts = [documents(30, seed=s) for s in range(3)]
    for k, docs in enumerate(parts):
        write_megatron(str(tmp_path / f"part{k}"), docs)
    source = guideloom.open(str(tmp_path / "part*.idx"))
    out = str(tmp_path / "native")
    manifest = convert_foreign(source, out, shard_size=4096)  # small shards: records never split
    native = guideloom.open(out)
    assert type(native).__name__ == "StreamStorage" and native.format == source.format
    assert manifest.total_records == 90 and manifest.total_tokens == sum(len(d) for p in parts for d in p)
    assert manifest.num_shards > 3 and len(native.snapshots()) == 1
    assert manifest.metadata["converted_from"]["format"] == "megatron"
    assert all(err is None for _, err in native.verify())  # sizes and checksums of every shard
    _same_stream(source, native)
    _same_stream(source, native, 1)  # one token per window: every record start, exactly
    with pytest.raises(guideloom.GuideLoomError, match="overwrite"):
        convert_foreign(source, out)
    convert_foreign(source, out, overwrite=True)
    assert len(guideloom.open(out).snapshots()) == 2


def test_convert_keeps_loss_masks_and_cuts_eos_files_into_documents(tmp_path: Any) -> None:
    docs = documents(40, seed=3)
    write_datatrove(str(tmp_path / "sft.ds"), docs, masks=masks_of(docs))
    source = guideloom.open(str(tmp_path / "sft.ds"))
    convert_foreign(source, str(tmp_path / "sft"))
    native = guideloom.open(str(tmp_path / "sft"))
    assert list(native.format.fields) == ["tokens", "loss_mask"]
    _same_stream(source, native, 1)

    write_nanogpt(str(tmp_path / "train.bin"), docs, eos=50256)
    plain = guideloom.open(str(tmp_path / "train.bin"))
    with pytest.raises(ValueError, match="eos_id="):
        convert_foreign(plain, str(tmp_path / "nano"))
    convert_foreign(guideloom.open(str(tmp_path / "train.bin"), eos_id=50256), str(tmp_path / "nano"))
    nano = guideloom.open(str(tmp_path / "nano"))
    assert nano.manifest.total_records == len(docs)  # each document, its end-of-text id included
    ds = StreamDataset(nano, 1)
    starts = np.cumsum([0] + [len(d) + 1 for d in docs])[:-1]
    positions, counts = ds.record_starts_batch(list(range(len(ds))))
    assert np.flatnonzero(counts).tolist() == starts.tolist()
    assert nano.manifest.metadata["ingest"]["tokenizer"]["eos_id"] == 50256
    settings: dict[str, Any] = {"sequence_length": 32, "batch_size": 4, "shuffle": True, "seed": 1}
    by_records = list(StatefulDataLoader.from_storage(nano, boundaries="records", **settings))
    by_eos = list(StatefulDataLoader.from_storage(nano, boundaries="eos", **settings))
    assert all(np.array_equal(a["position_ids"], b["position_ids"]) for a, b in zip(by_records, by_eos))


def test_export_streams_and_documents_to_megatron(tmp_path: Any) -> None:
    docs = documents(50, seed=5)
    stream = guideloom.StreamStorage(str(tmp_path / "s"), StreamNumpyFormat({"tokens": np.uint32}))
    with stream.writer(shard_size=2048) as w:
        for d in docs:
            w.append({"tokens": d})
    assert export_megatron(stream, str(tmp_path / "from_stream")) == (len(docs), sum(len(d) for d in docs))
    back = guideloom.open(str(tmp_path / "from_stream.idx"))
    assert back.format.fields["tokens"] == np.int32  # megatron-core has no uint32: int32, values checked
    _same_stream(stream, back, 1)

    jsonl = DocumentStorage(str(tmp_path / "d"), DocumentJsonFormat())
    with jsonl.writer() as w:
        for d in docs:
            w.append({"tokens": d.tolist(), "id": "x"})
    export_megatron(jsonl, str(tmp_path / "from_docs"), dtype=np.uint16)
    again = guideloom.open(str(tmp_path / "from_docs.idx"))
    _same_stream(stream, again, 1)
    with pytest.raises(ValueError, match="do not fit uint8"):
        export_megatron(stream, str(tmp_path / "narrow"), dtype=np.uint8)
    with pytest.raises(ValueError, match="no stream field 'ids'"):
        export_megatron(stream, str(tmp_path / "nofield"), field="ids")


def test_convert_and_export_on_the_command_line(tmp_path: Any) -> None:
    docs = documents(40, seed=6)
    write_datatrove(str(tmp_path / "a.ds"), docs[:20])
    write_datatrove(str(tmp_path / "b.ds"), docs[20:])
    out = str(tmp_path / "native")
    runner = CliRunner()
    result = runner.invoke(app, ["convert", str(tmp_path / "a.ds"), str(tmp_path / "b.ds"), "--output", out])
    assert result.exit_code == 0, result.output
    assert "40 documents" in result.output and "2 datatrove files" in result.output
    result = runner.invoke(app, ["export", out, "--format", "megatron", str(tmp_path / "mega")])
    assert result.exit_code == 0, result.output
    _same_stream(guideloom.open(str(tmp_path / "*.ds")), guideloom.open(str(tmp_path / "mega.idx")), 1)
    bad = runner.invoke(app, ["convert", str(tmp_path / "none*.ds"), "--output", out + "2"])
    assert bad.exit_code == 2 and "matches no file" in bad.output
    bad = runner.invoke(app, ["export", out, "--format", "arrow", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "megatron" in bad.output


@pytest.mark.ray
def test_convert_on_ray_writes_the_same_dataset(tmp_path: Any, ray_local: Any) -> None:
    from guideloom.workers.convert import ray_parts

    for k in range(3):
        write_megatron(str(tmp_path / f"p{k}"), documents(20, seed=10 + k))
    source = guideloom.open(str(tmp_path / "p*.idx"))
    here = convert_foreign(source, str(tmp_path / "here"))
    there = convert_foreign(source, str(tmp_path / "there"), run_parts=ray_parts)
    assert [s.files["data"].checksum for s in here.shards] == [s.files["data"].checksum for s in there.shards]


def _shares(mixture: Any) -> list[float]:
    return [round(w / sum(mixture.weights), 3) for w in mixture.weights]


def test_a_megatron_weighted_list_is_a_mixture(tmp_path: Any) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    write_megatron(a, documents(60, seed=1))
    write_megatron(b, documents(60, seed=2))
    mixture = guideloom.open([0.3, a, 0.7, b])
    assert isinstance(mixture, guideloom.Mixture) and mixture.names == (a, b)
    assert _shares(mixture) == [0.3, 0.7]
    same = guideloom.open(["3", a + ".idx", "7", b])  # numeric strings, as a command line gives them
    assert _shares(same) == [0.3, 0.7]
    loader = StatefulDataLoader.from_storage(mixture, sequence_length=L, batch_size=4, shuffle=True, seed=0)
    it = iter(loader)
    head = [next(it) for _ in range(3)]
    state = loader.state_dict()
    rest = list(it)
    again = StatefulDataLoader.from_storage(
        guideloom.open([0.3, a, 0.7, b]), sequence_length=L, batch_size=4, shuffle=True, seed=0
    )
    again.load_state_dict(state)
    assert all(np.array_equal(x["tokens"], y["tokens"]) for x, y in zip(rest, again, strict=True))
    assert head
    for bad, words in (
        ([0.3, a, 0.7], "3 items"),
        ([0.3, a, -1, b], "not a positive weight"),
        ([0.5, 0.5], "not a dataset"),
    ):
        with pytest.raises(ValueError, match=words):
            guideloom.open(bad)
    state_file = tmp_path / "state.json"
    state_file.write_text(json.dumps(state))
    result = CliRunner().invoke(app, ["trace", str(state_file), "0.3", a, "0.7", b, "--steps", "3", "--json"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert len(rows) == 4 and {r["source"] for r in rows} <= {a, b}
    preview = CliRunner().invoke(app, ["mix", "0.3", a, "0.7", b, "-L", str(L)])
    assert preview.exit_code == 0 and "30.0000%" in preview.output and "70.0000%" in preview.output, (
        preview.output
    )
