"""Round trips against the other projects' own code: files datatrove's tokenizer wrote (checked
in, see data/datatrove/README.md), and megatron-core's `IndexedDatasetBuilder` / `IndexedDataset`
(the ``megatron-core`` wheel is in the dev extra on Linux x86_64; elsewhere these tests skip)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from foreign_files import documents

import guideloom
from guideloom import StatefulDataLoader, StreamDataset
from guideloom.storage.foreign.convert import convert_foreign
from guideloom.storage.foreign.export import export_megatron, write_megatron

DATA = Path(__file__).parent / "data" / "datatrove"


def _documents_of(ds: StreamDataset, length: int) -> list[list[int]]:
    """The documents of a view with one window per token run: cut at its record starts."""
    tokens = ds.read_windows(list(range(len(ds))))["tokens"].reshape(-1)
    positions, counts = ds.record_starts_batch(list(range(len(ds))))
    owner = np.repeat(np.arange(len(ds)), counts)
    cuts = (positions + owner * length).tolist()
    return [tokens[a:b].tolist() for a, b in zip(cuts, cuts[1:] + [len(tokens)])]


def test_datatrove_written_files_read_as_the_tokenizer_encoded_them() -> None:
    expected = json.loads((DATA / "expected.json").read_text())
    storage = guideloom.open(str(DATA / "00000_unshuffled.ds"), eos_id=expected["eos_id"])
    total = sum(len(d) for d in expected["documents"])
    assert storage.manifest.total_tokens == total and storage.format.fields["tokens"] == np.uint16
    ds = StreamDataset(storage, 1)  # one token per window: every token, every document start
    assert _documents_of(ds, 1) == expected["documents"]
    batch = next(iter(StatefulDataLoader.from_storage(storage, sequence_length=total // 2, boundaries="eos")))
    starts = np.cumsum([0] + [len(d) for d in expected["documents"]])[1:-1]
    zeros = np.flatnonzero(batch["position_ids"][0].numpy() == 0)
    assert zeros.tolist() == [0, *[s for s in starts.tolist() if s < total // 2]]


def _megatron_core() -> Any:
    """megatron-core's indexed_dataset module, or a skip (it warns on import that NVIDIA's Apex and
    Transformer Engine are absent: it falls back to plain torch, which is all these tests use)."""
    pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pytest.importorskip("megatron.core.datasets.indexed_dataset")


def test_megatron_core_builder_files_read_the_same(tmp_path) -> None:
    import torch

    indexed = _megatron_core()
    docs = documents(80, seed=9)
    builder = indexed.IndexedDatasetBuilder(str(tmp_path / "mc.bin"), dtype=np.uint16)
    for doc in docs:
        builder.add_item(torch.from_numpy(doc))
        builder.end_document()
    builder.finalize(str(tmp_path / "mc.idx"))
    ds = StreamDataset(guideloom.open(str(tmp_path / "mc.idx")), 1)
    assert _documents_of(ds, 1) == [d.tolist() for d in docs]


def test_megatron_core_reads_what_guideloom_writes(tmp_path) -> None:
    indexed = _megatron_core()
    docs = documents(80, seed=10)
    for dtype in (np.uint16, np.int32):
        prefix = str(tmp_path / np.dtype(dtype).name)
        write_megatron(prefix, docs, dtype)
        theirs = indexed.IndexedDataset(prefix)
        assert len(theirs) == len(docs)
        assert all(np.array_equal(theirs[i], d) and theirs[i].dtype == dtype for i, d in enumerate(docs))
        assert theirs.document_indices.tolist() == list(range(len(docs) + 1))


def test_megatron_core_files_convert_and_export_back_to_what_megatron_core_reads(tmp_path) -> None:
    """megatron-core writes -> `guideloom convert` -> a GuideLoom dataset -> `guideloom export`
    -> megatron-core reads the same documents, tokens and dtype."""
    import torch

    indexed = _megatron_core()
    docs = documents(120, seed=11)
    builder = indexed.IndexedDatasetBuilder(str(tmp_path / "mc.bin"), dtype=np.int32)
    for doc in docs:
        builder.add_item(torch.from_numpy(doc))
        builder.end_document()
    builder.finalize(str(tmp_path / "mc.idx"))
    convert_foreign(guideloom.open(str(tmp_path / "mc.idx")), str(tmp_path / "native"), shard_size=2048)
    native = guideloom.open(str(tmp_path / "native"))
    assert native.manifest.num_shards > 1 and native.manifest.total_records == len(docs)
    assert export_megatron(native, str(tmp_path / "back")) == (len(docs), sum(len(d) for d in docs))
    theirs = indexed.IndexedDataset(str(tmp_path / "back"))
    assert len(theirs) == len(docs) and theirs[0].dtype == np.int32
    assert all(np.array_equal(theirs[i], d) for i, d in enumerate(docs))
    assert np.array_equal(theirs.sequence_lengths, [len(d) for d in docs])
