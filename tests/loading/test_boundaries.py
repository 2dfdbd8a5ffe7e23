"""Document boundaries in stream batches (``boundaries=``, ``labels=``): ``position_ids``,
``cu_seqlens``, ``max_seqlen`` and ``labels`` equal a brute-force per-token construction, in
every worker mode, shuffle mode and across a resume; bad settings are named."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guideloom import (
    DocumentMsgpackFormat,
    DocumentStorage,
    StatefulDataLoader,
    StreamNumpyFormat,
    StreamStorage,
)

EOS = 0
FORMAT = StreamNumpyFormat({"tokens": np.uint16, "loss_mask": np.uint8, "doc_index": np.uint32})


def _write(root, lengths, seed=0) -> tuple[StreamStorage, np.ndarray, np.ndarray, np.ndarray]:
    """Records of ``lengths`` tokens (ids 1.., the last one EOS), a random loss mask, and the
    document number; returns the storage and the joined tokens, mask and record-start flags."""
    rng = np.random.default_rng(seed)
    storage = StreamStorage(root, FORMAT)
    tokens, masks, flags = [], [], []
    with storage.writer(shard_size=97) as w:
        for k, n in enumerate(lengths):
            t = (np.arange(n) + sum(lengths[:k]) + 1 + rng.integers(0, 2)).astype(np.uint16)
            t[-1] = EOS
            m = rng.integers(0, 2, n).astype(np.uint8)
            w.append({"tokens": t, "loss_mask": m, "doc_index": np.full(n, k)})
            tokens.append(t)
            masks.append(m)
            f = np.zeros(n, bool)
            f[0] = True
            flags.append(f)
    return storage, np.concatenate(tokens), np.concatenate(masks), np.concatenate(flags)


def _brute_force(windows, length, tokens, masks, flags):
    """Per token in Python: what each batch of these windows must hold."""
    pos, lab = [], []
    for w in windows:
        row_p, row_l = [], []
        for i in range(length):
            g = w * length + i
            start = i == 0 or bool(flags[g])
            row_p.append(0 if start else row_p[-1] + 1)
        for i in range(length):
            g = w * length + i
            last = i == length - 1 or bool(flags[g + 1])
            row_l.append(-100 if last or masks[g + 1] == 0 else int(tokens[g + 1]))
        pos.append(row_p)
        lab.append(row_l)
    flat = [p for row in pos for p in row]
    cu = [i for i, p in enumerate(flat) if p == 0] + [len(flat)]
    return pos, lab, cu, max(b - a for a, b in zip(cu[:-1], cu[1:]))


def _check(batches, order_rows, length, data) -> None:
    for batch, rows in zip(batches, order_rows):
        pos, lab, cu, mx = _brute_force(rows, length, *data)
        assert batch["position_ids"].dtype == torch.int64 and batch["position_ids"].tolist() == pos
        assert batch["labels"].dtype == torch.int64 and batch["labels"].tolist() == lab
        assert batch["cu_seqlens"].dtype == torch.int32 and batch["cu_seqlens"].tolist() == cu
        assert batch["max_seqlen"] == mx
        tokens = data[0]
        assert batch["tokens"].tolist() == [tokens[w * length : (w + 1) * length].tolist() for w in rows]


def _rows_of(loader_batches, length, tokens) -> list[list[int]]:
    """Which windows each batch holds: a window's tokens start at global position
    ``w * length``, and ``doc_index`` plus the tokens identify it (tokens are unique per
    position apart from EOS, see `_write`)."""
    del tokens
    out = []
    for b in loader_batches:
        rows = []
        for t, d in zip(b["tokens"].tolist(), b["doc_index"].tolist()):
            rows.append(_WINDOW_OF[(tuple(t), tuple(d), length)])
        out.append(rows)
    return out


_WINDOW_OF: dict = {}


def _index_windows(storage, length) -> None:
    from guideloom import StreamDataset

    view = StreamDataset(storage, length)
    data = view.read_windows(range(len(view)))
    _WINDOW_OF.clear()
    for w, (t, d) in enumerate(zip(data["tokens"].tolist(), data["doc_index"].tolist())):
        assert (tuple(t), tuple(d), length) not in _WINDOW_OF
        _WINDOW_OF[(tuple(t), tuple(d), length)] = w


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lengths=st.lists(st.integers(1, 30), min_size=2, max_size=30),
    length=st.integers(2, 24),
    batch_size=st.integers(1, 4),
    shuffle=st.sampled_from([False, "full", "block"]),
    boundaries=st.sampled_from(["records", "eos", "doc_index"]),
)
def test_batches_equal_a_brute_force_construction(
    tmp_path_factory, lengths, length, batch_size, shuffle, boundaries
) -> None:
    storage, *data = _write(tmp_path_factory.mktemp("b"), lengths)
    tokens, masks, flags = data
    if boundaries == "eos":  # documents end at their EOS: here exactly the record ends
        assert (np.flatnonzero(tokens == EOS) + 1).tolist()[:-1] == np.flatnonzero(flags).tolist()[1:]
    if len(tokens) < length:
        return
    kwargs = {"shuffle_block_size": 2} if shuffle == "block" else {}
    loader = StatefulDataLoader.from_storage(
        storage,
        sequence_length=length,
        batch_size=batch_size,
        shuffle=shuffle,
        seed=3,
        boundaries=boundaries,
        eos_id=EOS if boundaries == "eos" else None,
        labels=True,
        **kwargs,
    )
    batches = list(loader)
    _index_windows(storage, length)
    flat = np.concatenate([tokens, [1]])  # a token past the end, never a label of a last token
    data_ext = (flat, np.concatenate([masks, [1]]), np.concatenate([flags, [True]]))
    _check(batches, _rows_of(batches, length, tokens), length, data_ext)


@pytest.mark.parametrize(
    ("workers", "method", "read_ahead"),
    [(0, "process", 0), (2, "thread", 2), (2, "process", 3), (1, "process", 0)],
)
def test_every_worker_mode_and_resume(tmp_path, workers, method, read_ahead) -> None:
    lengths = [5, 1, 12, 7, 3, 30, 2, 9, 4, 11, 6, 8, 1, 1, 20]
    storage, tokens, masks, flags = _write(tmp_path / "s", lengths, seed=1)
    data = (np.concatenate([tokens, [1]]), np.concatenate([masks, [1]]), np.concatenate([flags, [True]]))

    def loader() -> StatefulDataLoader:
        return StatefulDataLoader.from_storage(
            storage,
            sequence_length=8,
            batch_size=3,
            shuffle="full",
            seed=5,
            boundaries="records",
            labels=True,
            num_workers=workers,
            parallel_method=method,
            read_ahead=read_ahead,
        )

    reference = list(loader())
    _index_windows(storage, 8)
    _check(reference, _rows_of(reference, 8, tokens), 8, data)
    first = loader()
    it = iter(first)
    head = [next(it) for _ in range(2)]
    state = first.state_dict()
    resumed = loader()
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert len(head) + len(rest) == len(reference)
    for got, want in zip(head + rest, reference):
        for key in ("tokens", "position_ids", "labels", "cu_seqlens"):
            assert torch.equal(got[key], want[key]), key
        assert got["max_seqlen"] == want["max_seqlen"]


@pytest.mark.parametrize("boundaries", ["records", "eos", "doc_index"])
def test_a_group_marked_batch_by_batch_equals_each_batch_read_alone(tmp_path, boundaries) -> None:
    """`BoundaryView.read_batches` (one read of a read-ahead group, marked per batch, the
    faster path) gives what `read_batch` gives for each batch, with uneven batch sizes."""
    from guideloom import StreamDataset
    from guideloom.loading.boundaries import BoundaryView

    rng = np.random.default_rng(3)
    storage, *_ = _write(tmp_path / "s", rng.integers(1, 30, 80).tolist())
    view = BoundaryView(StreamDataset(storage, 16), boundaries, labels=True, eos_id=EOS)
    batches = [rng.integers(0, len(view), n).tolist() for n in (5, 1, 7, 3)]
    for got, batch in zip(view.read_batches(batches), batches):
        alone = view.read_batch(batch)
        assert sorted(got) == sorted(alone)
        for key in alone:
            np.testing.assert_array_equal(got[key], alone[key], err_msg=key)


def test_without_labels_there_are_no_labels(tmp_path) -> None:
    storage, *_ = _write(tmp_path / "s", [4, 4, 4])
    (batch,) = list(StatefulDataLoader.from_storage(storage, sequence_length=12, boundaries="records"))
    assert "labels" not in batch and batch["position_ids"].tolist() == [[0, 1, 2, 3] * 3]
    assert batch["cu_seqlens"].tolist() == [0, 4, 8, 12] and batch["max_seqlen"] == 4


def test_bad_settings_are_named(tmp_path) -> None:
    storage, *_ = _write(tmp_path / "s", [4, 4, 4])
    with pytest.raises(
        ValueError, match=r"eos_id=70000 is outside the ids a uint16 tokens field holds \(0 \.\. 65535\)"
    ):
        StatefulDataLoader.from_storage(storage, sequence_length=4, boundaries="eos", eos_id=70_000)
    with pytest.raises(ValueError, match="records no end-of-document id.*pass eos_id=<id>"):
        StatefulDataLoader.from_storage(storage, sequence_length=4, boundaries="eos")
    with pytest.raises(
        ValueError,
        match=r"boundaries='doc': not 'records', 'eos' or a field of .*\['loss_mask', 'doc_index'\]",
    ):
        StatefulDataLoader.from_storage(storage, sequence_length=4, boundaries="doc")
    docs = DocumentStorage(tmp_path / "d", DocumentMsgpackFormat())
    with docs.writer() as w:
        w.append({"a": 1})
    with pytest.raises(ValueError, match="is a documents dataset .*load it without them"):
        StatefulDataLoader.from_storage(docs, labels=True)


def test_records_on_a_stream_without_record_starts(tmp_path) -> None:
    """An old stream (the v0.1.0 fixture, manifest version 1): the error names the dataset
    and the alternatives, which work as written."""
    import shutil
    from pathlib import Path

    legacy = Path(__file__).resolve().parents[1] / "manifest" / "data" / "v0.1.0" / "stream"
    shutil.copytree(legacy, tmp_path / "old")
    storage = StreamStorage(tmp_path / "old", StreamNumpyFormat({"tokens": np.uint32, "loss_mask": np.uint8}))
    with pytest.raises(ValueError) as info:
        StatefulDataLoader.from_storage(storage, sequence_length=4, boundaries="records", labels=True)
    message = str(info.value)
    assert str(tmp_path / "old") in message and "has no record starts" in message
    assert "boundaries='eos' with eos_id=" in message and "'doc_index'" in message
    batch = next(
        iter(
            StatefulDataLoader.from_storage(
                storage, sequence_length=4, boundaries="eos", eos_id=0, labels=True
            )
        )
    )
    assert batch["position_ids"].shape == (1, 4) and "labels" in batch


def test_device_placement_keeps_the_boundary_keys(tmp_path) -> None:
    storage, tokens, masks, flags = _write(tmp_path / "s", [5, 3, 9, 2, 7])
    loader = StatefulDataLoader.from_storage(
        storage,
        sequence_length=6,
        batch_size=2,
        boundaries="records",
        labels=True,
        device="cpu",
        pin_memory=True,
    )
    batch = next(iter(loader))
    for key in ("tokens", "position_ids", "labels", "cu_seqlens"):
        assert batch[key].device.type == "cpu"
    assert isinstance(batch["max_seqlen"], int) and batch["cu_seqlens"][-1] == 12
