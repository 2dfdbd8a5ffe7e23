"""Property tests: windows equal slices of np.concatenate of all records, whatever the record
and shard sizes, for all three layouts."""

from __future__ import annotations

import uuid

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from storage_helpers import ConceptsFormat

from guideloom import (
    DocumentDataset,
    DocumentPickleFormat,
    DocumentStorage,
    StreamDataset,
    StreamNumpyFormat,
    StreamStorage,
    StreamWithMetaDataset,
    StreamWithMetaStorage,
)

SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

record_lengths = st.lists(st.integers(0, 50), min_size=1, max_size=25)


def fresh_url(kind: str, tmp_path) -> str:
    name = uuid.uuid4().hex[:12]
    return str(tmp_path / name) if kind == "file" else f"memory://prop-{name}"


@SETTINGS
@given(
    lengths=record_lengths,
    shard_size=st.integers(1, 300),
    seq=st.integers(1, 40),
    kind=st.sampled_from(["file", "memory"]),
    parts=st.integers(1, 3),
)
def test_stream_windows_match_concatenation(tmp_path, lengths, shard_size, seq, kind, parts):
    fmt = StreamNumpyFormat({"tokens": np.uint32, "doc": np.uint16})
    storage = StreamStorage(fresh_url(kind, tmp_path), fmt)
    rng = np.random.default_rng(len(lengths) * 1000 + shard_size)
    records = [
        {"tokens": rng.integers(0, 2**32, n, dtype=np.uint64), "doc": np.full(n, i)}
        for i, n in enumerate(lengths)
    ]
    chunks = np.array_split(np.arange(len(records)), parts)
    for k, chunk in enumerate(chunks):
        with storage.writer(part=k, shard_size=shard_size) as w:
            for i in chunk:
                w.append(records[i])
    storage.commit(num_parts=parts)
    tokens = np.concatenate([r["tokens"] for r in records])
    docs = np.concatenate([r["doc"] for r in records])
    ds = StreamDataset(storage, seq)
    assert len(ds) == len(tokens) // seq
    if len(ds):
        order = rng.permutation(len(ds))
        batch = ds.read_windows(order)
        for row, i in enumerate(order):
            assert batch["tokens"][row].tolist() == tokens[i * seq : (i + 1) * seq].tolist()
            assert batch["doc"][row].tolist() == docs[i * seq : (i + 1) * seq].tolist()


@SETTINGS
@given(lengths=record_lengths, shard_size=st.integers(1, 500), kind=st.sampled_from(["file", "memory"]))
def test_documents_match_records(tmp_path, lengths, shard_size, kind):
    storage = DocumentStorage(fresh_url(kind, tmp_path), DocumentPickleFormat())
    docs = [{"i": i, "body": "x" * n} for i, n in enumerate(lengths)]
    with storage.writer(shard_size=shard_size) as w:
        for d in docs:
            w.append(d)
    ds = DocumentDataset(storage)
    assert len(ds) == len(docs)
    order = list(np.random.default_rng(shard_size).permutation(len(docs)))
    assert ds.__getitems__(order) == [docs[i] for i in order]


@st.composite
def meta_records(draw):
    records = []
    for n in draw(record_lengths):
        cuts = sorted(set(draw(st.lists(st.integers(0, n), max_size=6))))
        spans = []
        for a, b in zip(cuts, cuts[1:]):
            if draw(st.booleans()):
                spans.append((a, b, [f"s{len(records)}-{a}"]))
        records.append((n, spans))
    return records


@SETTINGS
@given(
    records=meta_records(),
    shard_size=st.integers(1, 300),
    seq=st.integers(1, 30),
    kind=st.sampled_from(["file", "memory"]),
)
def test_meta_spans_match_a_per_token_reference(tmp_path, records, shard_size, seq, kind):
    fmt = ConceptsFormat(StreamNumpyFormat({"tokens": np.uint32}))
    storage = StreamWithMetaStorage(fresh_url(kind, tmp_path), fmt)
    labels: list[object] = []  # per token: the annotation covering it, and the span's identity
    offset = 0
    with storage.writer(shard_size=shard_size) as w:
        for n, spans in records:
            w.append({"tokens": np.arange(offset, offset + n)}, spans=spans)
            token_labels: list[object] = [None] * n
            for a, b, ann in spans:
                for t in range(a, b):
                    token_labels[t] = (offset + a, tuple(ann))
            labels.extend(token_labels)
            offset += n
    ds = StreamWithMetaDataset(storage, seq)
    assert len(ds) == offset // seq
    for i, sample in enumerate(ds.__getitems__(list(range(len(ds))))):
        assert sample["tokens"].tolist() == list(range(i * seq, (i + 1) * seq))
        got: list[object] = [None] * seq
        prev_stop = 0
        for start, stop, ann in sample["spans"]:
            assert 0 <= start < stop <= seq and start >= prev_stop
            prev_stop = stop
            for t in range(start, stop):
                got[t] = tuple(ann)
        expected = [lab[1] if lab else None for lab in labels[i * seq : (i + 1) * seq]]
        assert got == expected
