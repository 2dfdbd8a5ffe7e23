"""Datasets written before record starts (manifest versions 1 and 2, the fixtures in
``data/v0.1.0``) open, read and verify; their views say they have no record starts, and asking
for them names the dataset and the alternatives."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from legacy_datasets import open_storage, stream_records

from guideloom import StreamDataset, StreamWithMetaDataset

LEGACY = Path(__file__).resolve().parent / "data" / "v0.1.0"


@pytest.fixture(scope="module")
def legacy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("legacy")
    shutil.copytree(LEGACY, root, dirs_exist_ok=True)
    return root


@pytest.mark.parametrize("name", ["stream", "parts_named_run", "stream_with_meta"])
def test_streams_without_record_starts_open_read_and_verify(legacy: Path, name: str) -> None:
    assert json.loads((legacy / name / "manifest.json").read_text())["version"] in (1, 2)
    storage = open_storage(legacy, name)
    assert "starts" not in storage.manifest.shard_table.files
    assert [err for _, err in storage.verify()] == [None] * storage.manifest.num_shards
    view = (StreamWithMetaDataset if name == "stream_with_meta" else StreamDataset)(storage, 2)
    assert not view.has_record_starts
    assert len(view) > 0 and view.read_windows([0, len(view) - 1])["tokens"].shape == (2, 2)
    with pytest.raises(ValueError) as info:
        view.record_starts(0)
    message = str(info.value)
    assert str(legacy / name) in message and "has no record starts" in message
    assert "rewrite it with this GuideLoom" in message and "end-of-document token id" in message


def test_a_stream_rewritten_now_has_them(legacy: Path, tmp_path: Path) -> None:
    """The same records written by this GuideLoom: version 3, and one start per record."""
    from legacy_datasets import stream_format

    from guideloom import StreamStorage

    storage = StreamStorage(tmp_path / "s", stream_format())
    with storage.writer(shard_size=40) as w:
        for record in stream_records():
            w.append(record)
    assert storage.manifest.version == 3
    lengths = [len(r["tokens"]) for r in stream_records()]
    view = StreamDataset(storage, sum(lengths))
    assert view.record_starts(0).tolist() == sorted(set(np.cumsum([0, *lengths[:-1]]).tolist()))
    old = StreamDataset(open_storage(legacy, "stream"), 4)
    new = StreamDataset(storage, 4)
    assert (
        old.read_windows(range(len(old)))["tokens"].tolist()
        == new.read_windows(range(len(new)))["tokens"].tolist()
    )
