"""Other projects' token files read in place (`guideloom.storage.foreign`): the same windows, record
starts, loader and exact resume as a native stream; local and S3; bad files named."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from foreign_files import documents, write_datatrove, write_llmc, write_megatron, write_nanogpt

import guideloom
from guideloom import StatefulDataLoader, StreamDataset
from guideloom.storage.foreign import ForeignFormatError, ForeignStorage
from guideloom.testing import assert_exact_resume, batch_keys

L = 64  # tokens per window


def _expected_starts(docs: list[np.ndarray], window: int, offset: int = 0) -> list[int]:
    starts = np.cumsum([0] + [len(d) + offset for d in docs])[:-1]
    inside = starts[(starts >= window * L) & (starts < (window + 1) * L)]
    return (inside - window * L).tolist()


def _check_windows(ds: Any, flat: np.ndarray) -> None:
    assert len(ds) == len(flat) // L
    got = ds.read_windows(list(range(len(ds))))["tokens"]
    assert np.array_equal(got, flat[: len(ds) * L].reshape(-1, L))
    shuffled = np.random.default_rng(1).permutation(len(ds))
    assert np.array_equal(ds.read_windows(shuffled)["tokens"], got[shuffled])


def test_megatron_pair_reads_as_a_stream_with_record_starts(megatron_pair) -> None:
    prefix, docs = megatron_pair()
    for url in (prefix + ".idx", prefix + ".bin", prefix):
        storage = guideloom.open(url, format="megatron" if url == prefix else None)
        assert isinstance(storage, ForeignStorage) and storage.kind == "megatron"
        ds = StreamDataset(storage, L)
        assert type(ds).__name__ == "ForeignStreamDataset"
        _check_windows(ds, np.concatenate(docs))
        for w in range(len(ds)):
            assert ds.record_starts(w).tolist() == _expected_starts(docs, w)
        positions, counts = ds.record_starts_batch([3, 0, 3])
        assert counts.tolist() == [len(_expected_starts(docs, w)) for w in (3, 0, 3)]


def test_many_files_are_one_stream_in_order(tmp_path) -> None:
    parts = [documents(20, seed=s) for s in range(3)]
    for k, docs in enumerate(parts):
        write_megatron(str(tmp_path / f"part{k}"), docs)
    storage = guideloom.open(str(tmp_path / "part*.idx"))
    assert storage.manifest.num_shards == 3
    every = [d for docs in parts for d in docs]
    ds = StreamDataset(storage, L)
    _check_windows(ds, np.concatenate(every))
    for w in range(len(ds)):  # windows across files: starts from each file's own index
        assert ds.record_starts(w).tolist() == _expected_starts(every, w)
    listed = guideloom.open([str(tmp_path / "part2.bin"), str(tmp_path / "part0.bin")], format="megatron")
    assert StreamDataset(listed, L)[0]["tokens"].tolist() == np.concatenate(parts[2])[:L].tolist()


def test_datatrove_nanogpt_and_llmc(tmp_path) -> None:
    docs = documents(50, seed=3)
    write_datatrove(str(tmp_path / "000.ds"), docs)
    write_datatrove(str(tmp_path / "wide.ds"), docs, dtype=np.uint32)
    write_nanogpt(str(tmp_path / "train.bin"), docs)
    write_llmc(str(tmp_path / "fineweb_train_000001.bin"), docs)
    flat = np.concatenate(docs)

    dt = guideloom.open(str(tmp_path / "000.ds"))
    assert dt.kind == "datatrove" and dt.format.fields["tokens"] == np.uint16
    ds = StreamDataset(dt, L)
    _check_windows(ds, flat)
    for w in range(len(ds)):
        assert ds.record_starts(w).tolist() == _expected_starts(docs, w)
    wide = guideloom.open(str(tmp_path / "wide.ds"))
    assert wide.format.fields["tokens"] == np.uint32
    _check_windows(StreamDataset(wide, L), flat)

    nano = guideloom.open(str(tmp_path / "train.bin"), eos_id=50256)
    assert nano.kind == "nanogpt"
    _check_windows(StreamDataset(nano, L), np.concatenate([np.append(d, 50256) for d in docs]))
    llmc = guideloom.open(str(tmp_path / "fineweb_train_000001.bin"))
    assert llmc.kind == "llmc"
    _check_windows(StreamDataset(llmc, L), np.concatenate([np.insert(d, 0, 50256) for d in docs]))
    with pytest.raises(ValueError, match="boundaries='eos'"):
        StreamDataset(nano, L).record_starts(0)


def test_loader_boundaries_from_the_index_and_from_eos(megatron_pair, tmp_path) -> None:
    prefix, docs = megatron_pair()
    storage = guideloom.open(prefix + ".idx")
    loader = StatefulDataLoader.from_storage(
        storage, sequence_length=L, batch_size=4, boundaries="records", labels=True
    )
    batch = next(iter(loader))
    first = _expected_starts(docs, 0)
    zeros = np.flatnonzero(batch["position_ids"][0].numpy() == 0).tolist()
    assert zeros == sorted(set([0, *first]))
    write_nanogpt(str(tmp_path / "train.bin"), docs)
    nano = guideloom.open(str(tmp_path / "train.bin"), eos_id=50256)
    batch = next(
        iter(StatefulDataLoader.from_storage(nano, sequence_length=L, batch_size=2, boundaries="eos"))
    )
    assert batch["position_ids"].shape == (2, L)


@pytest.mark.parametrize("kind", ["megatron", "datatrove"])
def test_exact_elastic_resume(kind: str, tmp_path) -> None:
    docs = documents(40, seed=5)
    if kind == "megatron":
        write_megatron(str(tmp_path / "m"), docs)
        storage = guideloom.open(str(tmp_path / "m.idx"))
    else:
        write_datatrove(str(tmp_path / "d.ds"), docs)
        storage = guideloom.open(str(tmp_path / "d.ds"))

    def make_loader(**kwargs: Any) -> Any:
        return StatefulDataLoader.from_storage(
            storage, sequence_length=16, batch_size=4, shuffle=True, seed=7, boundaries="records", **kwargs
        )

    def key(batch: Any) -> Any:  # the windows and their document marks (not the batch-wide max_seqlen)
        return batch_keys({name: batch[name] for name in ("tokens", "position_ids")})

    assert_exact_resume(make_loader, world_sizes=(1, 2), elastic=((2, 1),), sample_key=key)


def test_a_file_changed_under_a_state_is_named(megatron_pair) -> None:
    prefix, docs = megatron_pair()
    loader = StatefulDataLoader.from_storage(guideloom.open(prefix + ".idx"), sequence_length=L, batch_size=2)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    assert ["text_document.bin", "text_document.idx"] == [p for p, _ in state["guideloom_loader"]["files"]]
    size = os.path.getsize(prefix + ".bin")
    times = {p: os.stat(prefix + p).st_mtime_ns for p in (".bin", ".idx")}
    write_megatron(prefix, docs[:-1] + [docs[-1][:1]])  # replaced: another size
    other = StatefulDataLoader.from_storage(guideloom.open(prefix + ".idx"), sequence_length=L, batch_size=2)
    with pytest.raises(
        guideloom.GuideLoomError,
        match=rf"The file text_document.bin has changed since the state was saved \({size} bytes, "
        r"modified .* then, \d+ bytes, modified .* now\).*put back the version the run read",
    ):
        other.load_state_dict(state)
    # the same files put back: it resumes; the .idx touched (the state cannot see content): named
    write_megatron(prefix, docs)
    for p, t in times.items():
        os.utime(prefix + p, ns=(t, t))
    StatefulDataLoader.from_storage(
        guideloom.open(prefix + ".idx"), sequence_length=L, batch_size=2
    ).load_state_dict(state)
    os.utime(prefix + ".idx", (1, 1))
    again = StatefulDataLoader.from_storage(guideloom.open(prefix + ".idx"), sequence_length=L, batch_size=2)
    with pytest.raises(guideloom.GuideLoomError, match=r"The file text_document.idx has changed"):
        again.load_state_dict(state)


# -- bad files: each named, with its fix ------------------------------------------------------------


def _corrupt(path: str, data: bytes | None = None, *, at: int = 0, size: int | None = None) -> None:
    with open(path, "r+b") as f:
        if data is not None:
            f.seek(at)
            f.write(data)
        if size is not None:
            f.truncate(size)


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda p: _corrupt(p + ".idx", b"NOTMEGA!!"), "does not start with the Megatron index magic"),
        (lambda p: _corrupt(p + ".idx", bytes([9]), at=17), "dtype code 9"),
        (lambda p: _corrupt(p + ".idx", (2).to_bytes(8, "little"), at=9), "version 2"),
        (lambda p: _corrupt(p + ".idx", size=os.path.getsize(p + ".idx") - 5), "index is truncated"),
        (lambda p: _corrupt(p + ".idx", size=20), "fewer than the 34-byte header"),
        (lambda p: _corrupt(p + ".bin", size=os.path.getsize(p + ".bin") - 2), "the .bin is truncated"),
        (lambda p: _corrupt(p + ".bin", b"\0\0", at=os.path.getsize(p + ".bin")), "two datasets"),
        (
            lambda p: _corrupt(p + ".idx", (5).to_bytes(8, "little"), at=os.path.getsize(p + ".idx") - 8),
            "document indices",
        ),
        (lambda p: os.remove(p + ".bin"), "is missing: the tokens of the Megatron dataset"),
    ],
    ids=[
        "magic",
        "dtype",
        "version",
        "truncated-idx",
        "no-header",
        "short-bin",
        "long-bin",
        "doc-index",
        "no-bin",
    ],
)
def test_bad_megatron_files_are_named(megatron_pair, damage, message) -> None:
    prefix, _ = megatron_pair()
    damage(prefix)
    with pytest.raises((ForeignFormatError, FileNotFoundError), match=message) as err:
        guideloom.open(prefix + ".idx")
    assert os.path.basename(prefix) in str(err.value)


def test_other_bad_inputs_are_named(tmp_path) -> None:
    docs = documents(10)
    write_datatrove(str(tmp_path / "a.ds"), docs)
    os.remove(tmp_path / "a.ds.index")
    with pytest.raises(ForeignFormatError, match=r"a.ds.index is missing: the document index"):
        guideloom.open(str(tmp_path / "a.ds"))
    write_datatrove(str(tmp_path / "b.ds"), docs)
    _corrupt(str(tmp_path / "b.ds"), size=os.path.getsize(tmp_path / "b.ds") - 3)
    with pytest.raises(ForeignFormatError, match="b.ds has .* bytes, but .* says it holds"):
        guideloom.open(str(tmp_path / "b.ds"))
    write_llmc(str(tmp_path / "s.bin"), docs)
    _corrupt(str(tmp_path / "s.bin"), size=os.path.getsize(tmp_path / "s.bin") - 4)
    with pytest.raises(ForeignFormatError, match="s.bin has .* need .*the shard is truncated"):
        guideloom.open(str(tmp_path / "s.bin"))
    write_nanogpt(str(tmp_path / "odd.bin"), docs)
    _corrupt(str(tmp_path / "odd.bin"), size=os.path.getsize(tmp_path / "odd.bin") - 1)
    with pytest.raises(ForeignFormatError, match="odd.bin has .* not a whole number of uint16"):
        guideloom.open(str(tmp_path / "odd.bin"))
    with pytest.raises(FileNotFoundError, match="matches no file"):
        guideloom.open(str(tmp_path / "none-*.idx"))
    with pytest.raises(ValueError, match="pick one of megatron"):
        guideloom.open(str(tmp_path / "odd.bin"), format="mds")


def test_a_file_shortened_after_open_is_named_at_read(megatron_pair) -> None:
    prefix, _ = megatron_pair()
    ds = StreamDataset(guideloom.open(prefix + ".idx"), L)
    _corrupt(prefix + ".bin", size=100)
    with pytest.raises(guideloom.GuideLoomError, match=r"text_document.bin has 100 bytes"):
        ds[len(ds) - 1]


def test_read_only(megatron_pair) -> None:
    prefix, _ = megatron_pair()
    storage = guideloom.open(prefix + ".idx")
    with pytest.raises(TypeError, match="read in place"):
        storage.writer()


def test_foreign_files_mix_with_weights(megatron_pair, tmp_path) -> None:
    prefix, _ = megatron_pair()
    write_datatrove(str(tmp_path / "d.ds"), documents(40, seed=8))
    mixture = guideloom.Mixture(
        {
            "megatron": (guideloom.open(prefix + ".idx"), 1.0),
            "datatrove": (guideloom.open(str(tmp_path / "d.ds")), 2.0),
        }
    )
    loader = StatefulDataLoader.from_storage(
        mixture, sequence_length=32, batch_size=4, shuffle=True, sources=True
    )
    counts = np.bincount(np.concatenate([b["source"].numpy() for b in loader]), minlength=2)
    assert counts[0] > 0 and counts[1] > counts[0]


def test_trace_and_estimate_name_the_real_files(megatron_pair) -> None:
    prefix, _ = megatron_pair()
    storage = guideloom.open(prefix + ".idx")
    loader = StatefulDataLoader.from_storage(storage, sequence_length=32, batch_size=4, shuffle=True)
    next(iter(loader))
    rows = list(guideloom.trace(loader.state_dict(), storage, range(1)))
    assert len(rows) == 4 and all(r["pieces"][0]["path"] == "text_document.bin" for r in rows)
    estimate = guideloom.estimate(storage, sequence_length=32, batch_size=4)
    assert estimate.epochs[0]["windows"] == len(StreamDataset(storage, 32))


def test_trace_byte_ranges_are_where_the_tokens_are_in_the_real_files(megatron_pair, tmp_path) -> None:
    prefix, docs = megatron_pair()
    write_llmc(str(tmp_path / "shard_000.bin"), docs)
    write_datatrove(str(tmp_path / "000.ds"), docs[:30])
    write_datatrove(str(tmp_path / "001.ds"), docs[30:])
    opened = {
        "megatron": guideloom.open(prefix + ".idx"),
        "llmc": guideloom.open(str(tmp_path / "shard_000.bin")),
        "datatrove": guideloom.open(str(tmp_path / "0*.ds")),
    }
    for kind, storage in opened.items():
        loader = StatefulDataLoader.from_storage(storage, sequence_length=L, batch_size=4, shuffle=True)
        it = iter(loader)
        batches = [next(it) for _ in range(3)]
        rows = list(guideloom.trace(loader.state_dict(), storage, range(3)))
        assert len(rows) == 12
        isz = storage.format.fields["tokens"].itemsize
        for row in rows:
            tokens = batches[row["step"]]["tokens"][row["row"]].numpy()
            got = []
            for piece in row["pieces"]:
                a, b = piece["byte_range"]
                with open(os.path.join(storage.location.path(""), piece["path"]), "rb") as f:
                    f.seek(a)
                    got.append(np.frombuffer(f.read(b - a), storage.format.fields["tokens"]))
            assert np.concatenate(got).tolist() == tokens.tolist(), kind
            if kind == "llmc":
                assert row["byte_range"][0] >= 1024 and (row["byte_range"][0] - 1024) % isz == 0
            else:  # the documents the window's tokens belong to (Megatron's starts are byte pointers)
                w, ends = row["sample_index"], np.cumsum([len(d) for d in docs])
                first = int(np.searchsorted(ends, w * L, side="right"))
                last = int(np.searchsorted(ends, (w + 1) * L - 1, side="right"))
                assert row["records"] == list(range(first, last + 1)), kind
