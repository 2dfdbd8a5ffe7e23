"""``from_storage(..., pack="whole")``: every record lands whole in exactly one window per epoch
(or is split / dropped as `Packing.too_long` says, and counted), padding is masked, position ids
and labels restart at every record, and a packed loader resumes exactly and elastically."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guideloom import (
    DocumentJsonFormat,
    DocumentStorage,
    Mixture,
    StatefulDataLoader,
    StreamNumpyFormat,
    StreamStorage,
)
from guideloom.loading.packing import Packing, best_fit_decreasing, packing_efficiency
from guideloom.testing import assert_exact_resume

FORMAT = StreamNumpyFormat({"tokens": np.uint32, "doc_index": np.uint32})
MASKED = StreamNumpyFormat({"tokens": np.uint32, "loss_mask": np.uint8})


def _write(root, lengths, fmt=FORMAT, shard_size=257) -> StreamStorage:
    """Records of ``lengths`` tokens; token ids count up from 1 over the stream (0 is the pad
    id, never a real token), ``doc_index`` (or a loss mask of alternating 1, 0) per record."""
    storage = StreamStorage(root, fmt)
    at = 1
    with storage.writer(shard_size=shard_size) as w:
        for k, n in enumerate(lengths):
            tokens = np.arange(at, at + n, dtype=np.uint32)
            other = {"doc_index": np.full(n, k)} if "doc_index" in fmt.fields else {"loss_mask": tokens % 2}
            w.append({"tokens": tokens, **other})
            at += n
    return StreamStorage(root, fmt)


def _segments(batch) -> list[tuple[list[int], list[int]]]:
    """Each row's real records as (tokens, labels), split where position_ids restart; checks
    the padding (pad id, loss_mask 0, labels -100) and cu_seqlens on the way."""
    out = []
    tokens, pos, labels, mask = (batch[k].tolist() for k in ("tokens", "position_ids", "labels", "loss_mask"))
    flat = [p for row in pos for p in row]
    assert batch["cu_seqlens"].tolist() == [i for i, p in enumerate(flat) if p == 0] + [len(flat)]
    for t_row, p_row, l_row, m_row in zip(tokens, pos, labels, mask):
        real = [t != 0 for t in t_row]
        used = real.count(True)
        assert real == [True] * used + [False] * (len(t_row) - used), "padding only at the end"
        assert m_row[used:] == [0] * (len(t_row) - used) and l_row[used:] == [-100] * (len(t_row) - used)
        if used < len(t_row):
            assert p_row[used] == 0, "the padding is a segment of its own"
        heads = [i for i in range(used) if p_row[i] == 0] + [used]
        for a, b in zip(heads[:-1], heads[1:]):
            assert p_row[a:b] == list(range(b - a))
            assert m_row[a:b] == [1] * (b - a)
            out.append((t_row[a:b], l_row[a:b]))
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lengths=st.lists(st.integers(1, 40), min_size=1, max_size=40),
    length=st.integers(4, 32),
    buffer=st.integers(1, 12),
    batch_size=st.integers(1, 4),
    shuffle=st.sampled_from([False, True, "block"]),
    too_long=st.sampled_from(["split", "drop"]),
)
def test_every_record_appears_whole_exactly_once_per_epoch(
    tmp_path_factory, lengths, length, buffer, batch_size, shuffle, too_long
) -> None:
    storage = _write(tmp_path_factory.mktemp("p"), lengths)
    if too_long == "drop" and all(n > length for n in lengths):
        return  # nothing to pack: an empty dataset for the loader
    if sum(lengths) < length:
        return  # from_storage refuses a stream shorter than one window, packed or not
    kwargs = {"shuffle_block_size": 2} if shuffle == "block" else {}
    loader = StatefulDataLoader.from_storage(
        storage,
        sequence_length=length,
        batch_size=batch_size,
        shuffle=shuffle,
        seed=7,
        pack=Packing(buffer=buffer, too_long=too_long),
        **kwargs,
    )
    starts = np.cumsum([1, *lengths]).tolist()
    expected: Counter = Counter()
    for k, n in enumerate(lengths):
        if n <= length:
            expected[(k, 0, n)] += 1
        elif too_long == "split":
            for off in range(0, n, length):
                expected[(k, off, min(length, n - off))] += 1
    for epoch in range(2):
        seen: Counter = Counter()
        for batch in loader:
            assert batch["tokens"].shape[1] == length
            for tokens, labels in _segments(batch):
                k = int(np.searchsorted(starts, tokens[0], side="right")) - 1
                off = tokens[0] - starts[k]
                assert tokens == list(range(tokens[0], tokens[0] + len(tokens))), "a record read whole"
                assert labels == tokens[1:] + [-100]
                seen[(k, off, len(tokens))] += 1
        assert seen == expected, f"epoch {epoch}"
    stats = loader.view.stats
    assert stats.split == (sum(n > length for n in lengths) if too_long == "split" else 0)
    assert stats.dropped == (sum(n > length for n in lengths) if too_long == "drop" else 0)
    assert stats.tokens == sum(n for (_, _, n) in expected.elements())
    assert stats.windows == len(loader.view) and 0 < stats.efficiency <= 1


def test_exact_and_elastic_resume(tmp_path) -> None:
    rng = np.random.default_rng(1)
    storage = _write(tmp_path / "s", rng.integers(1, 30, 120).tolist())

    def make_loader(**kw):
        return StatefulDataLoader.from_storage(
            storage,
            sequence_length=32,
            batch_size=2,
            shuffle=True,
            seed=3,
            pack="whole",
            parallel_method="thread",
            **kw,
        )

    def rows(batch):  # every packed window holds other records: its tokens name it
        return [tuple(row) for row in batch["tokens"].tolist()]

    assert_exact_resume(
        make_loader, worker_counts=(0, 2), world_sizes=(1, 2), elastic=((4, 2),), sample_key=rows
    )


def test_a_stored_loss_mask_is_kept_and_labels_honour_it(tmp_path) -> None:
    storage = _write(tmp_path / "m", [5, 3, 9, 2, 7], fmt=MASKED)
    loader = StatefulDataLoader.from_storage(storage, sequence_length=10, batch_size=8, pack="whole")
    (batch,) = list(loader)
    for t_row, m_row, l_row in zip(*(batch[k].tolist() for k in ("tokens", "loss_mask", "labels"))):
        for i, t in enumerate(t_row):
            if t == 0:
                assert m_row[i] == 0 and l_row[i] == -100
            else:
                assert m_row[i] == t % 2  # the stored mask
    # labels: the next token, -100 where that token has no loss (mask 0) or ends a record
    segs = loader.view
    assert segs.stats.records == 5 and segs.stats.efficiency == pytest.approx(26 / (10 * len(segs)))
    for row, w in enumerate(range(len(segs))):
        at = 0
        for start, n in segs.records_of(w):
            for i in range(n):
                target = start + i + 2  # token ids are stream positions + 1
                want = -100 if i == n - 1 or target % 2 == 0 else target
                assert batch["labels"][row, at + i].item() == want
            at += n


def test_best_fit_decreasing_fills_the_fullest_window() -> None:
    bins = best_fit_decreasing([6, 5, 4, 3, 2], 10)
    # 6 opens a window (4 free), 5 does not fit it (a second, 5 free), 4 fills the first, 3 and
    # 2 fill the second
    assert bins == [[0, 2], [1, 3, 4]]
    lengths = np.random.default_rng(0).integers(1, 100, 500).tolist()
    assert packing_efficiency(lengths, 128) >= packing_efficiency(lengths, 128, buffer=8) > 0.5


def test_bad_settings_are_named(tmp_path) -> None:
    storage = _write(tmp_path / "s", [3, 4, 5])
    with pytest.raises(ValueError, match="pack='whole'"):
        StatefulDataLoader.from_storage(storage, sequence_length=8, pack="tight")
    with pytest.raises(ValueError, match="leave out boundaries="):
        StatefulDataLoader.from_storage(storage, sequence_length=8, pack="whole", labels=True)
    with pytest.raises(ValueError, match="too_long"):
        Packing(too_long="truncate")
    with pytest.raises(ValueError, match="every record .* is longer than the window"):
        StatefulDataLoader.from_storage(storage, sequence_length=2, pack=Packing(too_long="drop"))
    with pytest.raises(ValueError, match="buffer"):
        Packing(buffer=0)
    docs = DocumentStorage(str(tmp_path / "d"), DocumentJsonFormat())
    with docs.writer() as w:
        w.append({"text": "x"})
    with pytest.raises(ValueError, match="plain streams"):
        StatefulDataLoader.from_storage(
            DocumentStorage(str(tmp_path / "d"), DocumentJsonFormat()), pack="whole"
        )
    mixture = Mixture({"a": (storage, 1.0), "b": (_write(tmp_path / "t", [6, 2]), 1.0)})
    with pytest.raises(ValueError, match="Mixture"):
        StatefulDataLoader.from_storage(mixture, sequence_length=4, pack="whole")


def test_a_packed_state_is_refused_by_an_unpacked_loader(tmp_path) -> None:
    storage = _write(tmp_path / "s", [3, 4, 5, 6, 7, 2, 1])
    packed = StatefulDataLoader.from_storage(storage, sequence_length=8, pack="whole")
    next(iter(packed))
    plain = StatefulDataLoader.from_storage(storage, sequence_length=8)
    from guideloom.errors import ResumeStateError

    with pytest.raises(ResumeStateError):
        plain.load_state_dict(packed.state_dict())
    assert torch.is_tensor(next(iter(packed))["tokens"])
